"""The live `[vad]` and `[asr]` keys reach running workers on SIGHUP: `[asr]` beam and
encoder window from the next Whisper batch, the `[vad]` thresholds at once, the other
`[vad]` keys for listen streams opened after."""

from __future__ import annotations

import signal
import time
from types import SimpleNamespace

import numpy as np
import pytest

from cosyvoiced.config.schema import AsrConfig, VadConfig
from cosyvoiced.workers.worker.listeners import WorkerListening
from cosyvoiced.workers.worker.utterances import MelPool
from cosyvoiced.workers.worker.vad_tick import VadTicker
from tests.fakes.vad import FakeBatch, ListRing


class Ring:
    def available(self) -> int:
        return 0

    def read_into(self, out: np.ndarray) -> int:
        return 0


def test_reconfigure_applies_live_asr_keys_thresholds_now_and_vad_for_new_streams():
    old_vad = VadConfig()
    wl = WorkerListening(SimpleNamespace(vad=old_vad, asr=None, cache_dir=None),
                         VadTicker(lambda rate: FakeBatch(0.0), 0.0), lambda msg: None)
    wl.decoder = SimpleNamespace(cfg=AsrConfig())
    wl.pool = MelPool(old_vad)
    wl.open("before", 8000, Ring())
    new_vad = VadConfig(stop_ms=800, threshold=0.6, neg_threshold=0.2, max_utterance_s=60.0)
    wl.reconfigure(new_vad, AsrConfig(beam_size=3, min_encoder_frames=1500, max_batch=2,
                                      threads=4))
    assert wl.decoder.cfg.beam_size == 3 and wl.decoder.cfg.min_encoder_frames == 1500
    assert wl.decoder.cfg.max_batch == 8 and wl.decoder.cfg.threads == 1  # restart-only
    wl.open("after", 8000, Ring())
    assert wl.taps["before"].endpointer.cfg.stop_ms == 500  # open streams keep theirs
    before = wl.taps["before"].endpointer.cfg  # ... but take the new thresholds
    assert (before.threshold, before.neg_threshold) == (0.6, 0.2)
    assert wl.taps["after"].endpointer.cfg.stop_ms == 800
    assert wl.pool.frames_cap == MelPool(new_vad).frames_cap  # room for 60 s utterances
    assert wl.taps["before"].pool.frames_cap == MelPool(old_vad).frames_cap


@pytest.mark.e2e
def test_sighup_sends_live_asr_and_vad_keys_to_the_workers(daemon_factory, tmp_path,
                                                          repo_root):
    cfg = tmp_path / "live.toml"
    base = (repo_root / "configs" / "dev.toml").read_text()
    cfg.write_text(base)
    d = daemon_factory(config=cfg).start()
    d.wait_ready()
    cfg.write_text(base + "\n[asr]\nbeam_size = 2\nmin_encoder_frames = 1500\n"
                   "\n[vad]\nstop_ms = 700\n")
    hup = time.monotonic()
    d.signal(signal.SIGHUP)
    d.notify.wait_for("READY", "1", after=hup, timeout_s=10)
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        got = [e for e in d.log_events() if e.get("event") == "listen_reconfigured"]
        if got:
            break
        time.sleep(0.1)
    assert got, "no worker applied the reload"
    assert got[-1]["beam_size"] == 2 and got[-1]["min_encoder_frames"] == 1500
    assert got[-1]["stop_ms"] == 700
    reloaded = [e for e in d.log_events() if e.get("event") == "reloaded"][-1]
    assert {"asr.beam_size", "asr.min_encoder_frames", "vad.stop_ms"} <= set(
        reloaded["applied"])
    d.signal(signal.SIGTERM)
    assert d.wait() == 0


def test_close_logs_how_many_nan_samples_the_stream_sent():
    from structlog.testing import capture_logs

    vad = VadConfig()
    wl = WorkerListening(SimpleNamespace(vad=vad, asr=None, cache_dir=None),
                         VadTicker(lambda rate: FakeBatch(0.0), 0.0), lambda msg: None)
    wl.pool = MelPool(vad)
    wl.open("clean", 8000, Ring())
    wl.open("bad", 8000, ListRing(np.full(256, np.nan, np.float32)))
    window = np.zeros(256, dtype=np.float32)
    assert wl.taps["bad"].read_into(window) == 256 and not np.isnan(window).any()
    with capture_logs() as logs:
        wl.close("clean")
        wl.close("bad")
    sanitized = [e for e in logs if e["event"] == "listen_input_sanitized"]
    assert [(e["stream"], e["nan_samples"]) for e in sanitized] == [("bad", 256)]
