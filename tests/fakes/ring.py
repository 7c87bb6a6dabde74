"""Ring stand-ins, one per side: `ListRing` is what a capture ring offers its consumer (the
VAD tick, `ConsumerRing` in workers/worker/vad_tick.py); `PlaybackRing` is what a
playback ring offers its producer (the TTS scheduler, `ProducerRing` in
workers/worker/tts_sched.py)."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
from numpy.typing import ArrayLike

from tests.fakes.clock import Clock


class ListRing:
    """A consumer ring over a signal: given up front, and/or appended with `write` (the
    capture side), read once with `read_into`."""

    def __init__(self, samples: ArrayLike = ()) -> None:
        self.x = np.asarray(samples, dtype=np.float32)
        self.r = 0

    def write(self, samples: ArrayLike) -> int:
        more = np.asarray(samples, dtype=np.float32)
        self.x = np.concatenate([self.x[self.r:], more])
        self.r = 0
        return more.shape[0]

    def available(self) -> int:
        return self.x.shape[0] - self.r

    def read_into(self, out: np.ndarray) -> int:
        n = min(out.shape[0], self.available())
        out[:n] = self.x[self.r: self.r + n]
        self.r += n
        return n


class PlaybackRing:
    """A producer ring that takes up to `capacity` samples ahead of its listener.

    `fill` (the samples written and not yet heard) may be set by a test to say how far
    ahead the stream is. With a `clock`, `listen(now)` plays it as a listener that reads
    20 ms every 20 ms from the first sample on, counting an underrun per gap heard while
    the ring is playing."""

    def __init__(self, capacity: int = 1 << 20, *, clock: Callable[[], float] | None = None,
                 rate_hz: int = 1000) -> None:
        self.capacity = capacity
        self.clock = clock
        self.rate_hz = rate_hz
        self.written = self.read = 0
        self.flushes = self.underruns = 0
        self.playing = False
        self.start: float | None = None
        """When the listener started (moved on by each gap it heard)."""

    @property
    def fill(self) -> int:
        return self.written - self.read

    @fill.setter
    def fill(self, samples: int) -> None:
        self.read = self.written - samples

    def write(self, samples: np.ndarray) -> int:
        n = min(samples.shape[0], self.capacity - self.fill)
        if self.start is None and n and self.clock is not None:
            self.start = self.clock()
        self.written += n
        return n

    def available(self) -> int:
        return self.fill

    def room(self) -> int:
        return self.capacity - self.fill

    def set_playing(self, playing: bool) -> None:
        self.playing = playing

    def request_flush(self) -> None:
        self.flushes += 1
        self.fill = 0

    def listen(self, now: float) -> None:
        """The listener reads what it has heard by `now` (a gap if the ring ran dry)."""
        if self.start is None:
            return
        want = int((now - self.start) * self.rate_hz) + self.rate_hz // 50 - self.read
        if want <= 0:
            return
        have = self.fill
        if have < want:
            self.underruns += self.playing
            self.start += (want - have) / self.rate_hz  # the listener heard a gap: it is late
            want = have
        self.read += want


class Listeners:
    """The listeners of `rings` on the simulated `clock`, each reading its ring every
    20 ms: `advance(to_s)` lets time pass (while a clause is synthesized, they read what
    their ring held before it); `next_read_s` is when they read next."""

    def __init__(self, clock: Clock, rings: list[PlaybackRing]) -> None:
        self.clock, self.rings = clock, rings
        self.next_read_s = 0.0

    def advance(self, to_s: float) -> None:
        while self.next_read_s <= to_s:
            self.clock.t = self.next_read_s
            for ring in self.rings:
                ring.listen(self.next_read_s)
            self.next_read_s += 0.02
        self.clock.t = to_s
