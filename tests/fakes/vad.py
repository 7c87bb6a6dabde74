"""A batched VAD stand-in (slots like SileroBatch's, `BatchVad` in
workers/worker/vad_tick.py). The consumer ring it reads from is tests.fakes.ring.ListRing."""

from __future__ import annotations

from typing import Any

import numpy as np


class FakeBatch:
    """Speech probability `prob` for every window; with `prob=None`, the window's mean +
    slot/1000 (so rows cannot be mixed up). Records each run's batch size in `runs`."""

    def __init__(self, prob: float | None = None, window: int = 256,
                 capacity: int = 8) -> None:
        self.prob = prob
        self.window, self.capacity = window, capacity
        self.free = list(range(capacity))
        self.runs: list[int] = []

    def open(self) -> int:
        return self.free.pop(0)

    def close(self, slot: int) -> None:
        self.free.append(slot)

    def run(self, slots: Any, windows: np.ndarray) -> np.ndarray:
        self.runs.append(len(slots))
        if self.prob is None:
            return windows.mean(axis=1) + np.asarray(slots) / 1000
        return np.full(len(slots), self.prob, np.float32)
