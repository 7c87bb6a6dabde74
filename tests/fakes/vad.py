"""VAD-side stand-ins: a batched VAD with a fixed speech probability (slots like
SileroBatch's) and a consumer ring over a fixed signal."""

from __future__ import annotations

import numpy as np


class FakeBatch:
    window = 256
    capacity = 8

    def __init__(self, prob: float) -> None:
        self.prob = prob
        self.free = list(range(self.capacity))

    def open(self) -> int:
        return self.free.pop(0)

    def close(self, slot: int) -> None:
        self.free.append(slot)

    def run(self, slots, windows):
        return np.full(len(slots), self.prob, np.float32)


class ListRing:
    """A consumer ring over a fixed signal (what the capture ring offers the tick)."""

    def __init__(self, samples: np.ndarray) -> None:
        self.x = np.asarray(samples, dtype=np.float32)
        self.r = 0

    def available(self) -> int:
        return self.x.shape[0] - self.r

    def read_into(self, out: np.ndarray) -> int:
        n = min(out.shape[0], self.available())
        out[:n] = self.x[self.r: self.r + n]
        self.r += n
        return n
