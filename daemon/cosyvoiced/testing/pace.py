"""A real-time listener for many playback rings at once (benches, tests, load tools).

One thread reads every registered ring on a fixed clock, the way a sound card or a
20 ms telephony writer would: from the stream's first audio on, each period takes
what real time says is due. Short reads while the producer says it is playing are
counted by the ring itself as underruns.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field

import numpy as np

from cosyvoiced.audio.ring import Ring


@dataclass
class Listener:
    ring: Ring
    rate_hz: int
    opened_s: float = field(default_factory=time.monotonic)
    first_audio_s: float | None = None
    started_s: float = 0.0
    consumed: int = 0
    received: int = 0
    """Samples actually read out of the ring."""


class PacedReader(threading.Thread):
    def __init__(self, period_s: float = 0.02) -> None:
        super().__init__(name="paced-reader", daemon=True)
        self.period_s = period_s
        self._listeners: dict[str, Listener] = {}
        self._lock = threading.Lock()
        self._stop_evt = threading.Event()
        self._scratch = np.zeros(1 << 16, dtype=np.float32)

    def add(self, name: str, ring: Ring, rate_hz: int) -> Listener:
        listener = Listener(ring, rate_hz)
        with self._lock:
            self._listeners[name] = listener
        return listener

    def remove(self, name: str) -> Listener | None:
        with self._lock:
            return self._listeners.pop(name, None)

    def run(self) -> None:
        next_s = time.monotonic()
        while not self._stop_evt.is_set():
            now = time.monotonic()
            with self._lock:
                listeners = list(self._listeners.values())
            for ls in listeners:
                try:
                    self._serve(ls, now)
                except ValueError:  # the stream was closed under us: stop listening to it
                    with self._lock:
                        self._listeners = {k: v for k, v in self._listeners.items()
                                           if v is not ls}
            next_s += self.period_s
            delay = next_s - time.monotonic()
            if delay > 0:
                self._stop_evt.wait(delay)
            else:
                next_s = time.monotonic()

    def _serve(self, ls: Listener, now: float) -> None:
        ring = ls.ring
        if ls.first_audio_s is None:
            if ring.available() == 0:
                return
            ls.first_audio_s = now
            ls.started_s = now
        due = int((now - ls.started_s) * ls.rate_hz) + int(self.period_s * ls.rate_hz)
        want = min(due - ls.consumed, self._scratch.shape[0])
        if want <= 0:
            return
        ls.received += ring.read_into(self._scratch[:want])
        ls.consumed += want

    def stop(self) -> None:
        self._stop_evt.set()
        if self.is_alive():
            self.join(2.0)
