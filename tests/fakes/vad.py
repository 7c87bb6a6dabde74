"""A batched-VAD stand-in: fixed speech probability, slots like SileroBatch's."""

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
