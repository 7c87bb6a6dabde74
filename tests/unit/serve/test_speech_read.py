"""Reading a request's audio from its playback ring (`speech.PoolSynthesis`): every
sample arrives once and in order, in chunks of at most `READ_CHUNK_S` (the read buffer is
that size, not the ring's)."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace

import numpy as np

from cosyvoiced.audio.ring import Ring
from cosyvoiced.serve import speech
from cosyvoiced.workers import messages as m


def test_a_full_ring_is_read_in_bounded_chunks_and_ends_after_say_done():
    rate_hz = 16000
    ring = Ring.create(4 * rate_hz, policy="refuse")
    try:
        audio = np.arange(3 * rate_hz, dtype=np.float32) / (3 * rate_hz)
        assert ring.write(audio) == len(audio)
        closed = []

        async def close() -> None:
            closed.append(True)

        async def run() -> list[np.ndarray]:
            events: asyncio.Queue = asyncio.Queue()
            events.put_nowait(m.SayDone("s", 7, len(audio)))
            handle = SimpleNamespace(ring=ring, events=events, rate_hz=rate_hz, close=close)
            synthesis = speech.PoolSynthesis(handle, 7, "f32le")
            return [c async for c in synthesis]

        chunks = asyncio.run(run())
        assert max(len(c.audio) for c in chunks) == int(speech.READ_CHUNK_S * rate_hz)
        np.testing.assert_array_equal(np.concatenate([c.audio for c in chunks]), audio)
        assert [c.index for c in chunks] == list(range(len(chunks)))
        assert chunks[-1].is_last and not any(c.is_last for c in chunks[:-1])
        assert closed == [True]
    finally:
        ring.close()
        ring.unlink()
