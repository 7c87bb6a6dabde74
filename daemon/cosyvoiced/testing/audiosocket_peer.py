"""An AudioSocket client that behaves like Asterisk: the test peer and load generator.

It sends the call's UUID, then caller audio in 20 ms frames of its `kind` (slin at 8 kHz
by default; any of slin12 ... slin192, as `Dial(AudioSocket/.../c(slin16))` makes
Asterisk send) on absolute deadlines (real-time pace), and records every frame it
receives with its arrival time and kind, so a test can measure pacing jitter,
first-audio latency, comfort silence and barge-in.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
import uuid
from dataclasses import dataclass, field

import numpy as np

from cosyvoiced.serve.audiosocket.frames import (
    AUDIO_RATES_HZ,
    MAX_FRAME_BYTES,
    Audio,
    CallId,
    Dtmf,
    FrameParser,
    Hangup,
    Kind,
    frame_samples,
)

FRAME_SAMPLES = 160
"""20 ms at 8 kHz (slin, the default kind)."""
FRAME_S = 0.02


@dataclass
class Received:
    at_s: float
    """time.monotonic() when the frame arrived."""
    pcm: bytes
    kind: int = Kind.SLIN

    @property
    def silent(self) -> bool:
        return not any(self.pcm)


@dataclass
class PeerCall:
    call_id: uuid.UUID = field(default_factory=uuid.uuid4)
    received: list[Received] = field(default_factory=list)
    hangup_at_s: float | None = None
    """When the daemon sent a hangup frame (None: it did not)."""
    closed_at_s: float | None = None
    sent_frames: int = 0
    started_s: float = 0.0

    def audio_times(self) -> np.ndarray:
        return np.array([r.at_s for r in self.received])

    def received_samples(self) -> np.ndarray:
        return np.frombuffer(b"".join(r.pcm for r in self.received), dtype=np.int16)

    def speech_frames(self) -> list[Received]:
        """Frames that are not all zero (comfort silence is)."""
        return [r for r in self.received if not r.silent]

    def speech_samples(self) -> int:
        """Samples in `speech_frames()` (what was said, comfort silence left out)."""
        return sum(len(r.pcm) for r in self.received if not r.silent) // 2

    def speech_times(self) -> np.ndarray:
        """Arrival times of `speech_frames()` (what first-audio and barge-in are timed on)."""
        return np.array([r.at_s for r in self.received if not r.silent])


class Peer:
    """One call to a daemon at host:port, sending audio of `kind`."""

    def __init__(self, host: str, port: int, call: PeerCall | None = None,
                 kind: int = Kind.SLIN) -> None:
        self.host = host
        self.port = port
        self.call = call or PeerCall()
        self.kind = kind
        self.rate_hz = AUDIO_RATES_HZ[kind]
        self.frame_samples = frame_samples(kind)
        self._reader: asyncio.StreamReader | None = None
        self._writer: asyncio.StreamWriter | None = None
        self._recv_task: asyncio.Task[None] | None = None

    async def connect(self) -> None:
        self._reader, self._writer = await asyncio.open_connection(self.host, self.port)
        self.call.started_s = time.monotonic()
        self._writer.write(CallId(self.call.call_id).encode())
        await self._writer.drain()
        self._recv_task = asyncio.create_task(self._receive())

    async def _receive(self) -> None:
        assert self._reader is not None
        parser = FrameParser(max_payload_bytes=MAX_FRAME_BYTES)
        while True:
            try:
                data = await self._reader.read(65536)
            except ConnectionError:  # reset (e.g. hung up with our frames unread): closed
                data = b""
            now = time.monotonic()
            if not data:
                self.call.closed_at_s = now
                return
            for frame in parser.feed(data):
                if isinstance(frame, Audio):
                    self.call.received.append(Received(now, frame.pcm, frame.kind))
                elif isinstance(frame, Hangup):
                    self.call.hangup_at_s = now
            if parser.error is not None:
                raise parser.error

    async def play(self, samples: np.ndarray) -> None:
        """Send int16 samples at the peer's rate (8 kHz for slin) as 20 ms frames at
        real-time pace."""
        assert self._writer is not None
        loop = asyncio.get_running_loop()
        start = loop.time()
        n = self.frame_samples
        for i in range(0, samples.shape[0] - n + 1, n):
            if self.closed:
                return
            self._writer.write(Audio(samples[i:i + n].astype("<i2").tobytes(), self.kind)
                               .encode())
            self.call.sent_frames += 1
            deadline = start + (i // n + 1) * FRAME_S
            await asyncio.sleep(max(0.0, deadline - loop.time()))

    async def send_raw(self, data: bytes) -> None:
        assert self._writer is not None
        self._writer.write(data)
        await self._writer.drain()

    async def dtmf(self, digit: str) -> None:
        await self.send_raw(Dtmf(digit).encode())

    @property
    def closed(self) -> bool:
        return self.call.closed_at_s is not None

    async def wait_closed(self, timeout_s: float) -> bool:
        assert self._recv_task is not None
        try:
            await asyncio.wait_for(asyncio.shield(self._recv_task), timeout_s)
        except TimeoutError:
            return False
        return True

    async def hangup(self) -> None:
        if self._writer is None:
            return
        with contextlib.suppress(ConnectionError):
            self._writer.write(Hangup().encode())
            await self._writer.drain()
        await self.wait_closed(5.0)
        await self.close()

    async def close(self) -> None:
        if self._recv_task is not None:
            self._recv_task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self._recv_task
        if self._writer is not None:
            self._writer.close()
            with contextlib.suppress(ConnectionError):
                await self._writer.wait_closed()


def inter_frame_gaps_ms(times: np.ndarray) -> np.ndarray:
    """Gaps between consecutive received frames, in ms (for pacing jitter)."""
    return np.diff(times) * 1000.0 if times.size > 1 else np.zeros(0)
