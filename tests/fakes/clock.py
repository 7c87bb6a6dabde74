"""A monotonic clock the test moves by hand (`clock.t += 0.5`)."""

from __future__ import annotations


class Clock:
    def __init__(self) -> None:
        self.t = 100.0

    def __call__(self) -> float:
        return self.t
