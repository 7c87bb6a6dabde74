"""A worker's live figures in a small shared array: written by the worker, read by the pool.

One float64 per figure, each written with a single aligned store (never torn on x86-64),
so the pool and the watchdog read them without a message round trip or a lock. A
stopped or dead worker simply stops updating its heartbeat.
"""

from __future__ import annotations

import multiprocessing
import time
from multiprocessing.context import BaseContext
from typing import Any

FIELDS = ("heartbeat_s", "busy", "rtf", "vad_us", "tts_streams", "listen_streams",
          "clauses", "windows", "queued", "prompt_hits", "prompt_misses", "prompt_bytes")
_I = {name: i for i, name in enumerate(FIELDS)}


class WorkerStats:
    """View over a `RawArray('d')`; pass `.array` to the worker process at spawn."""

    __slots__ = ("array",)

    def __init__(self, array: Any) -> None:
        self.array = array

    @classmethod
    def create(cls, ctx: BaseContext | None = None) -> WorkerStats:
        ctx = ctx or multiprocessing.get_context("spawn")
        stats = cls(ctx.RawArray("d", len(FIELDS)))
        stats.array[_I["heartbeat_s"]] = time.monotonic()
        return stats

    def get(self, name: str) -> float:
        return float(self.array[_I[name]])

    def set(self, name: str, value: float) -> None:
        self.array[_I[name]] = value

    def beat(self, now_s: float) -> None:
        self.array[0] = now_s

    def heartbeat_s(self) -> float:
        """Monotonic time of the worker's last loop turn (a Health probe)."""
        return float(self.array[0])

    def snapshot(self) -> dict[str, float]:
        return {name: float(self.array[i]) for i, name in enumerate(FIELDS)}


class LoadMeter:
    """Busy fraction and RTF moving averages, measured in the worker itself."""

    RTF_DECAY = 0.1
    """Weight of each new TTS step in the RTF: ~10 steps (~10 s of speech) count."""

    def __init__(self, window_s: float = 1.0, alpha: float = 0.3) -> None:
        self.window_s = window_s
        self.alpha = alpha
        self.busy = 0.0
        self._busy_s = 0.0
        self._start_s = time.monotonic()
        self._synth_s = 0.0
        self._audio_s = 0.0

    @property
    def rtf(self) -> float:
        """Synthesis seconds per second of speech over the last steps (0 until measured).
        A ratio of decayed sums, not an average of ratios: a sentence's first step carries
        its text front with a small chunk, the rest are vocoder only."""
        return self._synth_s / self._audio_s if self._audio_s > 0 else 0.0

    @rtf.setter
    def rtf(self, value: float) -> None:
        """Start from a measured figure (the warm-up), worth one second of speech."""
        self._synth_s, self._audio_s = value, 1.0

    def add_busy(self, seconds: float) -> None:
        self._busy_s += seconds

    def add_clause(self, synth_s: float, audio_s: float) -> None:
        if audio_s <= 0:
            return
        keep = 1.0 - self.RTF_DECAY
        self._synth_s = self._synth_s * keep + synth_s
        self._audio_s = self._audio_s * keep + audio_s

    def roll(self, now_s: float) -> bool:
        """Close the busy window if it is over; True when `busy` was updated."""
        elapsed = now_s - self._start_s
        if elapsed < self.window_s:
            return False
        frac = min(1.0, self._busy_s / elapsed)
        self.busy = self.busy + self.alpha * (frac - self.busy)
        self._busy_s = 0.0
        self._start_s = now_s
        return True
