"""Bad samples on the worker listen path: NaN/inf/huge values are made harmless where
they enter the worker (the VAD state and the log-mel never see them), without allocating
on clean audio; a NaN burst in a real worker's capture ring leaves later speech heard
and transcribed."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator

import numpy as np
import pytest
from tools.bench.npalloc import counting
from tools.bench.prompts import load_wav, prompts, wer

from cosyvoiced.audio.ring import Ring
from cosyvoiced.config.schema import AsrConfig
from cosyvoiced.listen.events import Transcript, VoiceStarted, VoiceStopped
from cosyvoiced.listen.vad import SileroBatch
from cosyvoiced.workers import messages as m
from cosyvoiced.workers.worker.vad_tick import SampleGuard, VadGroup
from tests.fixtures.workers import TEST_WORKERS, PoolRunner

RATE_HZ = 8000


def bad_burst(n: int) -> np.ndarray:
    x = np.full(n, np.nan, dtype=np.float32)
    x[::3] = np.inf
    x[1::5] = -np.inf
    x[2::7] = 3e38
    return x


def test_guard_clips_and_zeroes_nan_in_place():
    g = SampleGuard()
    x = np.array([0.5, np.nan, np.inf, -np.inf, 3e38, -2.0, np.nan], dtype=np.float32)
    assert g.clean(x) == 2
    assert x.tolist() == [0.5, 0.0, 1.0, -1.0, 1.0, -1.0, 0.0]
    assert g.nan == 2 and g.bad_windows == 1
    y = np.array([[0.25, -0.5], [1.5, -1.5]], dtype=np.float32)  # a tick's matrix
    assert g.clean(y) == 0 and y.tolist() == [[0.25, -0.5], [1.0, -1.0]]


def test_guard_allocates_nothing_on_clean_audio():
    g = SampleGuard()
    win = (np.random.default_rng(0).standard_normal((32, 256)) * 0.3).astype(np.float32)
    g.clean(win)
    with counting() as c:
        for i in range(200):
            g.clean(win[i % 32])
            g.clean(win)
    assert c.calls == 0


def test_a_nan_burst_does_not_poison_the_batched_vad_state():
    speech = load_wav(prompts()[3].path)
    silence = np.zeros(RATE_HZ // 2, dtype=np.float32)
    dirty = np.concatenate([silence, bad_burst(RATE_HZ // 4), silence, speech, silence])
    clean = np.concatenate([silence, np.zeros(RATE_HZ // 4, np.float32), silence, speech,
                            silence])
    group = VadGroup(SileroBatch(RATE_HZ, 4))
    probs: dict[str, list[float]] = {"dirty": [], "clean": []}
    rings = {k: Ring.create(dirty.shape[0] + 1024) for k in probs}
    try:
        for k, ring in rings.items():
            group.add(k, ring, probs[k].append)
        rings["dirty"].write(dirty)
        rings["clean"].write(clean)
        while group.tick():
            pass
        got, ref = np.array(probs["dirty"]), np.array(probs["clean"])
        assert np.isfinite(got).all()
        assert got.max() > 0.9  # the speech after the burst is heard
        # From the burst on, the same decisions as without it (unguarded, the burst itself
        # reads as speech: ~10 windows at p > 0.5), give or take a few windows at its edges.
        start = (RATE_HZ // 2) // 256
        differ = int(np.sum((got[start:] > 0.5) != (ref[start:] > 0.5)))
        assert differ <= 5, differ
        assert group.guard.nan > 0
    finally:
        for ring in rings.values():
            ring.close()
            ring.unlink()


@pytest.fixture(scope="module")
def asr_runner(onnx_cache) -> Iterator[PoolRunner]:
    from dataclasses import replace

    runner = PoolRunner(replace(TEST_WORKERS, count=1), onnx_cache, asr=AsrConfig(),
                        warm_up=False)
    yield runner
    runner.close()


@pytest.mark.e2e
def test_nan_burst_in_a_worker_capture_ring_later_speech_is_transcribed(asr_runner):
    runner, pool = asr_runner, asr_runner.pool
    p = [p for p in prompts() if len(p.text.split()) >= 4][5]
    speech = load_wav(p.path)
    silence = np.zeros(RATE_HZ // 2, dtype=np.float32)
    audio = np.concatenate([silence, bad_burst(RATE_HZ // 2), silence,
                            (speech * 1e6).astype(np.float32)[:RATE_HZ // 10],  # clipping
                            silence, speech, silence, silence])
    h = runner.call(pool.open_listen_stream(RATE_HZ))
    try:
        async def feed_and_collect() -> list[object]:
            out: list[object] = []
            for i in range(0, audio.shape[0], 160):  # 20 ms frames, 10x real time
                while h.ring.write(audio[i:i + 160]) == 0:
                    await asyncio.sleep(0.005)
                if i % 1600 == 0:
                    await asyncio.sleep(0.01)
            while not any(isinstance(getattr(e, "event", None), Transcript)
                          and e.event.end_ms > 2000 for e in out):
                out.append(await asyncio.wait_for(h.events.get(), 30))
            return out

        got = runner.call(feed_and_collect(), 90)
        errors = [e for e in got if isinstance(e, m.StreamError)]
        assert not errors, errors
        events = [e.event for e in got if isinstance(e, m.ListenEvent)]
        assert any(isinstance(e, VoiceStarted) for e in events)
        assert any(isinstance(e, VoiceStopped) for e in events)
        texts = [e.text for e in events if isinstance(e, Transcript)]
        # unguarded, the burst's NaN log-mel decoded to a transcript of "!!!!!!!!"
        assert all(any(c.isalpha() for c in t) for t in texts), texts
        assert wer([p.text], [texts[-1]]) <= 25.0, (p.text, texts)
        assert pool.restarts == 0 and pool.status()["workers"][0]["alive"]
    finally:
        runner.call(h.close())


@pytest.mark.e2e
def test_dc_offset_passes_through_and_speech_is_still_heard_and_transcribed(asr_runner):
    """A capture with a DC offset (a cheap sound card, +0.25 full scale) is not filtered
    on the worker path: Silero and Whisper's log-mel tolerate it (measured: Silero's
    speech windows change by 2 of 144 at +-0.3), and this keeps it that way."""
    runner, pool = asr_runner, asr_runner.pool
    p = [p for p in prompts() if len(p.text.split()) >= 4][7]
    silence = np.zeros(RATE_HZ // 2, dtype=np.float32)
    audio = np.concatenate([silence, load_wav(p.path), silence, silence]) + 0.25
    h = runner.call(pool.open_listen_stream(RATE_HZ))
    try:
        async def feed_and_collect() -> list[object]:
            out: list[object] = []
            for i in range(0, audio.shape[0], 160):
                while h.ring.write(audio[i:i + 160]) == 0:
                    await asyncio.sleep(0.005)
                if i % 1600 == 0:
                    await asyncio.sleep(0.01)
            while not any(isinstance(getattr(e, "event", None), Transcript) for e in out):
                out.append(await asyncio.wait_for(h.events.get(), 30))
            return out

        got = runner.call(feed_and_collect(), 90)
        events = [e.event for e in got if isinstance(e, m.ListenEvent)]
        starts = [e for e in events if isinstance(e, VoiceStarted)]
        assert len(starts) == 1 and starts[0].start_ms < 1000, events  # no false start
        texts = [e.text for e in events if isinstance(e, Transcript)]
        assert wer([p.text], [" ".join(texts)]) <= 25.0, (p.text, texts)
    finally:
        runner.call(h.close())
