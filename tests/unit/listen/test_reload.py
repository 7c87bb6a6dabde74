"""The live `[vad]` and `[asr]` keys reach running workers on SIGHUP: `[asr]` beam and
encoder window from the next Whisper batch, the `[vad]` thresholds at once, the other
`[vad]` keys for listen streams opened after (on the real daemon: tests/e2e/test_reload.py)."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np

from cosyvoiced.config.schema import AsrConfig, VadConfig
from cosyvoiced.workers.worker.listeners import WorkerListening
from cosyvoiced.workers.worker.utterances import MelPool
from cosyvoiced.workers.worker.vad_tick import VadTicker
from tests.fakes.ring import ListRing
from tests.fakes.vad import FakeBatch


def test_reconfigure_applies_live_asr_keys_thresholds_now_and_vad_for_new_streams():
    old_vad = VadConfig()
    wl = WorkerListening(SimpleNamespace(vad=old_vad, asr=None, cache_dir=None),
                         VadTicker(lambda rate: FakeBatch(0.0), 0.0), lambda msg: None)
    wl.decoder = SimpleNamespace(cfg=AsrConfig())
    wl.pool = MelPool(old_vad)
    wl.open("before", 8000, ListRing())
    new_vad = VadConfig(stop_ms=800, threshold=0.6, neg_threshold=0.2, max_utterance_s=60.0)
    wl.reconfigure(new_vad, AsrConfig(beam_size=3, min_encoder_frames=1500, max_batch=2,
                                      threads=4))
    assert wl.decoder.cfg.beam_size == 3 and wl.decoder.cfg.min_encoder_frames == 1500
    assert wl.decoder.cfg.max_batch == 8 and wl.decoder.cfg.threads == 1  # restart-only
    wl.open("after", 8000, ListRing())
    assert wl.taps["before"].endpointer.cfg.stop_ms == 500  # open streams keep theirs
    before = wl.taps["before"].endpointer.cfg  # ... but take the new thresholds
    assert (before.threshold, before.neg_threshold) == (0.6, 0.2)
    assert wl.taps["after"].endpointer.cfg.stop_ms == 800
    assert wl.pool.frames_cap == MelPool(new_vad).frames_cap  # room for 60 s utterances
    assert wl.taps["before"].pool.frames_cap == MelPool(old_vad).frames_cap


def test_close_logs_how_many_nan_samples_the_stream_sent():
    from structlog.testing import capture_logs

    vad = VadConfig()
    wl = WorkerListening(SimpleNamespace(vad=vad, asr=None, cache_dir=None),
                         VadTicker(lambda rate: FakeBatch(0.0), 0.0), lambda msg: None)
    wl.pool = MelPool(vad)
    wl.open("clean", 8000, ListRing())
    wl.open("bad", 8000, ListRing(np.full(256, np.nan, np.float32)))
    window = np.zeros(256, dtype=np.float32)
    assert wl.taps["bad"].read_into(window) == 256 and not np.isnan(window).any()
    with capture_logs() as logs:
        wl.close("clean")
        wl.close("bad")
    sanitized = [e for e in logs if e["event"] == "listen_input_sanitized"]
    assert [(e["stream"], e["nan_samples"]) for e in sanitized] == [("bad", 256)]
