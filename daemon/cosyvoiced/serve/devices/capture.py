"""A capture device: its audio, mixed down to mono and resampled to 16 kHz, feeds the
listening stream `device:<name>`; VoiceStarted events go to the manager (barge-in)."""

from __future__ import annotations

import asyncio
import contextlib
from typing import Any

import numpy as np

from cosyvoiced.audio.resample import StreamResampler
from cosyvoiced.listen.events import VoiceStarted
from cosyvoiced.serve.devices.base import PUMP_S, Device
from cosyvoiced.serve.speech import Listening

LISTEN_RATE_HZ = 16000
CLOSE_WAIT_S = 0.5


class CaptureDevice(Device):
    """Device -> ring -> 16 kHz mono -> listening stream `device:<name>`."""

    direction = "capture"
    policy = "drop"

    def __init__(self, *args: Any, **kw: Any) -> None:
        super().__init__(*args, **kw)
        self.stream_id = f"device:{self.name}"
        self.listening: Listening | None = None
        self.listen_retry_at_s = 0.0
        self.voice_starts = 0
        self.gated_s = 0.0
        """Seconds of captured audio replaced by silence (half duplex)."""
        shape = ((self.ring.capacity_frames,) if self.cfg.channels == 1
                 else (self.ring.capacity_frames, self.cfg.channels))
        self._buf = np.zeros(shape, dtype=np.float32)
        self._mono = np.zeros(self.ring.capacity_frames, dtype=np.float32)
        self._silence = np.zeros(self.ring.capacity_frames, dtype=np.float32)
        self._tasks: list[asyncio.Task[None]] = []

    def start_listening(self, listening: Listening, gate: Any, on_voice: Any) -> None:
        """Pump captured audio into `listening`; `gate()` true: feed silence instead;
        `on_voice(device, event)` for each VoiceStarted."""
        self.listening = listening
        self._tasks = [asyncio.create_task(self._pump(gate), name=f"mic-{self.name}"),
                       asyncio.create_task(self._watch(on_voice), name=f"mic-ev-{self.name}")]

    async def _pump(self, gate: Any) -> None:
        assert self.listening is not None
        ring, buf, mono, listening = self.ring, self._buf, self._mono, self.listening
        resampler: StreamResampler | None = None
        rate = 0
        ring.read_into(buf)  # what piled up before the listener existed is stale
        while True:
            await asyncio.sleep(PUMP_S)
            n = ring.read_into(buf)
            if n == 0:
                continue
            if self.rate_hz is not None and self.rate_hz != rate:
                rate = self.rate_hz
                resampler = None if rate == LISTEN_RATE_HZ else StreamResampler(
                    rate, LISTEN_RATE_HZ)
            if gate():
                x = self._silence[:n]
                self.gated_s += n / max(rate, 1)
            elif buf.ndim == 1:
                x = buf[:n]
            else:
                x = np.mean(buf[:n], axis=1, out=mono[:n])
            listening.feed(resampler.process(x) if resampler is not None else x)

    async def _watch(self, on_voice: Any) -> None:
        assert self.listening is not None
        async for ev in self.listening.events():
            if isinstance(ev, VoiceStarted):
                self.voice_starts += 1
                on_voice(self, ev)

    async def shutdown(self) -> None:
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        self._tasks = []
        if self.listening is not None:
            # close() waits for the worker to read the ring dry, and a part-window tail
            # may never be read: bounded, so shutdown does not hang on it.
            with contextlib.suppress(Exception):
                await asyncio.wait_for(self.listening.close(), CLOSE_WAIT_S)
            self.listening = None
        await super().shutdown()

    def status(self) -> dict[str, Any]:
        return {**super().status(), "stream": self.stream_id if self.listening else None,
                "voice_starts": self.voice_starts, "gated_s": round(self.gated_s, 3)}
