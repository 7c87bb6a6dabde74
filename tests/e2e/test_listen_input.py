"""Bad input in a real worker's capture ring: after a NaN burst (and clipping) later speech
is heard and transcribed; a DC offset passes through and speech is still transcribed."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator

import numpy as np
import pytest

from cosyvoiced.config.schema import AsrConfig
from cosyvoiced.listen.events import Transcript, VoiceStarted, VoiceStopped
from cosyvoiced.testing.prompts import load_wav, prompts, wer
from cosyvoiced.workers import messages as m
from tests.fixtures.workers import TEST_WORKERS, PoolRunner
from tests.unit.workers.test_listen_input import RATE_HZ, bad_burst


@pytest.fixture(scope="module")
def asr_runner(onnx_cache) -> Iterator[PoolRunner]:
    from dataclasses import replace

    runner = PoolRunner(replace(TEST_WORKERS, count=1), onnx_cache, asr=AsrConfig(),
                        warm_up=False)
    yield runner
    runner.close()


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


def test_dc_offset_passes_through_and_speech_is_still_heard_and_transcribed(asr_runner):
    """A capture with a DC offset (a cheap sound card, +0.25 full scale): the worker path
    takes out each stream's running mean before the VAD and the log-mel, and the speech
    is heard once and transcribed as without the offset."""
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
