"""The VAD tick: batched runs over ragged real streams equal each stream run alone."""

from __future__ import annotations

import asyncio
import wave
from pathlib import Path

import numpy as np
import pytest
import soxr

from cosyvoiced.audio.ring import Ring
from cosyvoiced.listen.events import VoiceStarted, VoiceStopped
from cosyvoiced.listen.vad import SileroBatch
from cosyvoiced.workers import messages as m
from cosyvoiced.workers.worker.vad_tick import VadGroup

PROMPTS = Path("/usr/share/asterisk/sounds/en_US_f_Allison")
NAMES = ["activated", "agent-loggedoff", "auth-thankyou", "conf-getpin", "vm-goodbye",
         "queue-thankyou", "vm-intro", "pbx-invalid"]


def prompt(name: str, rate_hz: int) -> np.ndarray:
    with wave.open(str(PROMPTS / f"{name}.wav"), "rb") as w:
        assert w.getframerate() == 8000 and w.getsampwidth() == 2
        pcm = np.frombuffer(w.readframes(w.getnframes()), dtype="<i2")
    audio = (pcm.astype(np.float32) / 32768.0)
    if rate_hz != 8000:
        audio = soxr.resample(audio, 8000, rate_hz).astype(np.float32)
    return audio


def alone(audio: np.ndarray, rate_hz: int) -> list[float]:
    vad = SileroBatch(rate_hz, 1)
    slot = vad.open()
    w = vad.window
    return [float(vad.run([slot], audio[i:i + w][None, :])[0])
            for i in range(0, audio.shape[0] - w + 1, w)]


@pytest.mark.parametrize("rate_hz", [8000, 16000])
def test_batched_tick_equals_each_stream_alone(rate_hz):
    rng = np.random.default_rng(5)
    streams = {name: prompt(name, rate_hz) for name in NAMES}
    streams["noise"] = (rng.standard_normal(rate_hz * 2) * 0.05).astype(np.float32)
    group = VadGroup(SileroBatch(rate_hz, 16))
    got: dict[str, list[float]] = {name: [] for name in streams}
    rings = {name: Ring.create(rate_hz * 2) for name in streams}
    try:
        for name, ring in rings.items():
            group.add(name, ring, got[name].append)
        pos = dict.fromkeys(streams, 0)
        # ragged feeding: each stream its own chunk size and start delay (in rounds)
        chunk = {name: 80 * (i + 1) for i, name in enumerate(streams)}
        start = {name: i % 4 for i, name in enumerate(streams)}
        for rnd in range(2000):
            for name, audio in streams.items():
                if rnd >= start[name] and pos[name] < audio.shape[0]:
                    piece = audio[pos[name]:pos[name] + chunk[name]]
                    assert rings[name].write(piece) == piece.shape[0]
                    pos[name] += piece.shape[0]
            group.tick()
            if all(pos[n] >= a.shape[0] for n, a in streams.items()) and not group.tick():
                break
        assert group.runs < group.windows  # windows really were batched
        for name, audio in streams.items():
            ref = alone(audio, rate_hz)
            assert len(got[name]) == len(ref), name
            np.testing.assert_allclose(got[name], ref, atol=1e-4, rtol=0, err_msg=name)
        assert max(max(p) for p in got.values()) > 0.9  # real speech was found
    finally:
        for ring in rings.values():
            ring.close()
            ring.unlink()


@pytest.mark.e2e
def test_listen_stream_in_a_worker_emits_voice_events(pool_runner):
    runner, pool = pool_runner, pool_runner.pool
    h = runner.call(pool.open_listen_stream(8000))
    try:
        silence = np.zeros(4000, np.float32)
        audio = np.concatenate([silence, prompt("vm-goodbye", 8000), silence, silence])
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
