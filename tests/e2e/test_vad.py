"""The VAD on real prompts: speech boundaries within 100 ms (p95) of the prompts' energy
bounds, and a listen stream in a real worker emitting voice events."""

from __future__ import annotations

import asyncio

import numpy as np
import pytest

from cosyvoiced.config.schema import VadConfig
from cosyvoiced.listen.events import VoiceStarted, VoiceStopped
from cosyvoiced.listen.vad import Endpointer, SileroBatch
from cosyvoiced.testing.prompts import prompt_samples
from cosyvoiced.workers import messages as m
from tests.unit.listen.test_vad import windows_of

BOUNDARY_PROMPTS = [
    "agent-pass", "vm-goodbye", "auth-thankyou", "all-circuits-busy-now",
    "cannot-complete-as-dialed", "call-forwarding", "check-number-dial-again",
    "agent-loginok", "activated", "calling", "vm-password", "vm-nomore", "pbx-invalid",
    "conf-onlyperson", "vm-message", "vm-youhave",
]


def energy_bounds_ms(y: np.ndarray, rate_hz: int) -> tuple[int, int]:
    """First/last 10 ms frame within 35 dB of the prompt's loudest frame."""
    f = rate_hz // 100
    n = y.shape[0] // f
    rms = np.sqrt((y[: n * f].reshape(n, f) ** 2).mean(axis=1) + 1e-12)
    idx = np.nonzero(rms > rms.max() * 10 ** (-35 / 20))[0]
    return idx[0] * 10, (idx[-1] + 1) * 10


@pytest.mark.parametrize("rate_hz", [8000, 16000])
def test_boundaries_within_100ms_p95_on_real_prompts(rate_hz):
    rng = np.random.default_rng(7)
    parts, truth, t = [], [], 0
    for name in BOUNDARY_PROMPTS:
        gap = int(rng.uniform(0.8, 2.0) * rate_hz)
        parts.append(np.zeros(gap, dtype=np.float32))
        t += gap
        y = prompt_samples(name, rate_hz)
        s, e = energy_bounds_ms(y, rate_hz)
        truth.append((t * 1000 // rate_hz + s, t * 1000 // rate_hz + e))
        parts.append(y)
        t += y.shape[0]
    parts.append(np.zeros(rate_hz, dtype=np.float32))
    x = np.concatenate(parts)
    x += (rng.standard_normal(x.shape[0]) * 10 ** (-50 / 20)).astype(np.float32)  # -50 dBFS

    batch = SileroBatch(rate_hz, 1)
    slot = batch.open()
    ep = Endpointer(VadConfig(stop_ms=300))
    found = []
    for w in windows_of(x, rate_hz):
        event = ep.update(float(batch.run([slot], w[None])[0]))
        if event is not None and event.type == "voice_stopped":
            found.append((event.start_ms, event.end_ms))
    assert len(found) == len(truth)
    errors = []
    for (ts, te), (fs, fe) in zip(truth, found, strict=True):
        errors += [abs(fs - ts), abs(fe - te)]
    assert np.percentile(errors, 95) <= 100, errors


def test_listen_stream_in_a_worker_emits_voice_events(pool_runner):
    runner, pool = pool_runner, pool_runner.pool
    h = runner.call(pool.open_listen_stream(8000))
    try:
        silence = np.zeros(4000, np.float32)
        audio = np.concatenate([silence, prompt_samples("vm-goodbye", 8000), silence, silence])
        for i in range(0, audio.shape[0], 160):  # 20 ms frames, as a call would send
            while h.ring.write(audio[i:i + 160]) == 0:
                pass
            if i % 3200 == 0:
                runner.call(asyncio.sleep(0.02))

        async def events() -> list[object]:
            out: list[object] = []
            while not any(isinstance(getattr(e, "event", None), VoiceStopped) for e in out):
                out.append(await asyncio.wait_for(h.events.get(), 10))
            return out

        got = [e.event for e in runner.call(events(), 30) if isinstance(e, m.ListenEvent)]
        assert isinstance(got[0], VoiceStarted) and got[0].stream == h.stream_id
        assert isinstance(got[-1], VoiceStopped)
        assert 300 <= got[0].start_ms <= 700  # 500 ms of silence first
    finally:
        runner.call(h.close())
