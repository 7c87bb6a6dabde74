"""SIGHUP on the real daemon: the live `[asr]` and `[vad]` keys reach its workers."""

from __future__ import annotations

import signal
import time


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
