"""Liveness of the daemon's parts, read by the watchdog thread.

Each part registers a probe returning the monotonic time of its last progress
(`time.monotonic()`); a part silent for longer than the stall limit is unhealthy and
the systemd watchdog pings stop. Probes are read from another thread, so they must only
read an attribute, never take a lock the part holds while working.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass


@dataclass(frozen=True)
class Verdict:
    healthy: bool
    stalled: tuple[str, ...]
    """Names of the parts that made no progress within the limit."""


class Health:
    def __init__(self, stall_s: float) -> None:
        self.stall_s = stall_s
        self._probes: dict[str, Callable[[], float]] = {}
        self._lock = threading.Lock()  # guards registration only, never a hot path

    def register(self, name: str, last_progress_s: Callable[[], float]) -> None:
        with self._lock:
            self._probes[name] = last_progress_s

    def unregister(self, name: str) -> None:
        with self._lock:
            self._probes.pop(name, None)

    def names(self) -> list[str]:
        with self._lock:
            return sorted(self._probes)

    def check(self, now_s: float | None = None) -> Verdict:
        now_s = time.monotonic() if now_s is None else now_s
        with self._lock:
            probes = list(self._probes.items())
        stalled = tuple(name for name, probe in probes if now_s - probe() > self.stall_s)
        return Verdict(not stalled, stalled)


class Heartbeat:
    """A progress stamp for parts that beat explicitly (the event loop, workers)."""

    __slots__ = ("last_s",)

    def __init__(self) -> None:
        self.last_s = time.monotonic()

    def beat(self) -> None:
        self.last_s = time.monotonic()

    def __call__(self) -> float:
        return self.last_s
