"""A monotonic clock the test moves by hand (`clock.t += 0.5`); call it for the time."""

from __future__ import annotations


class Clock:
    def __init__(self, t: float = 100.0) -> None:
        self.t = t

    def __call__(self) -> float:
        return self.t
