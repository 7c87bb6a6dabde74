"""Tick-driven batched VAD: one Silero run per tick over every stream with a full window.

Streams at one rate share a `VadGroup`: one `SileroBatch` (each stream its own state
slot), one preallocated window matrix, and per stream a capture ring and a sink that
turns probabilities into events (the endpointer). A tick reads each ready stream's next
window straight into its row of the matrix (`read_into` a preallocated row view: no
allocation per stream), runs the model once over those rows, and hands each stream its
probability. Backlogged streams (the worker was busy with a TTS clause) are served by
repeating the tick until no stream has a full window.

Bad input: every window is cleaned where it enters the worker (`SampleGuard`): samples
beyond [-1, 1] (inf included) are clipped and NaN become 0, so one bad burst cannot
poison a stream's recurrent Silero state (or its log-mel) for the rest of the call.
Streams read through a `ListenTap` are cleaned by the tap (before its history and mel);
plain rings (ASR off) are cleaned here, once per tick over the gathered matrix.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np


class ConsumerRing(Protocol):
    def available(self) -> int: ...
    def read_into(self, out: np.ndarray) -> int: ...


class BatchVad(Protocol):
    """What `cosyvoiced.listen.vad.SileroBatch` offers (and test fakes imitate)."""

    window: int
    capacity: int

    def open(self) -> int: ...
    def close(self, slot: int) -> None: ...
    def run(self, slots: Any, windows: np.ndarray) -> np.ndarray: ...


ProbSink = Callable[[float], None]


class SampleGuard:
    """Makes NaN/inf/huge samples harmless, in place; allocation-free on clean audio.

    The clean path is three ufunc calls into preallocated operands (`np.minimum`/
    `np.maximum` against one-element bounds, then a sum into a 0-d buffer): clipping maps
    inf to +-1 and keeps NaN, so a non-finite sum means NaN is left. Only then (bad input)
    the slow path zeroes them with `nan_to_num` (which allocates) and counts them.
    `np.clip` and `np.nan_to_num` allocate on every call (measured: 2 and 14 numpy
    allocations per call), hence the hand-made fast path.
    """

    def __init__(self) -> None:
        self._hi = np.ones(1, dtype=np.float32)
        self._lo = -self._hi
        self._sum = np.zeros((), dtype=np.float32)
        self.nan = 0
        """NaN samples replaced by 0 so far."""
        self.bad_windows = 0
        """Calls that found a NaN."""

    def clean(self, x: np.ndarray) -> int:
        """Clip `x` (float32, any shape) to [-1, 1] and zero its NaN; returns NaN fixed."""
        np.minimum(x, self._hi, out=x)
        np.maximum(x, self._lo, out=x)
        np.add.reduce(x, axis=None, out=self._sum)
        if math.isfinite(self._sum[()]):
            return 0
        n = int(np.count_nonzero(np.isnan(x)))
        np.nan_to_num(x, copy=False, nan=0.0)
        self.nan += n
        self.bad_windows += 1
        return n


@dataclass
class _Member:
    stream_id: str
    slot: int
    ring: ConsumerRing
    sink: ProbSink
    raw: bool = True
    """The ring is read as is (the group cleans its window); False: it cleans itself."""
    windows: int = 0

    def __post_init__(self) -> None:
        # Bound once: the tick calls them for every stream every round.
        self.available = self.ring.available
        self.read_into = self.ring.read_into


class VadGroup:
    """Every listen stream of one rate in one worker."""

    def __init__(self, batch: BatchVad) -> None:
        self.batch = batch
        self.window = batch.window
        cap = batch.capacity
        self._win = np.zeros((cap, self.window), dtype=np.float32)
        self._rows = [self._win[i] for i in range(cap)]  # row views made once
        self._slots = np.zeros(cap, dtype=np.intp)
        self._ready: list[_Member] = [None] * cap  # type: ignore[list-item]
        self.members: dict[str, _Member] = {}
        self._order: list[_Member] = []
        self._raw = 0
        """Members whose windows the group cleans."""
        self.guard = SampleGuard()
        self.windows = 0
        self.runs = 0

    def __len__(self) -> int:
        return len(self._order)

    def add(self, stream_id: str, ring: ConsumerRing, sink: ProbSink, *,
            raw: bool = True) -> int:
        """Add a stream; `raw=False` when its ring cleans what it returns (`ListenTap`)."""
        slot = self.batch.open()
        member = _Member(stream_id, slot, ring, sink, raw)
        self.members[stream_id] = member
        self._order.append(member)
        self._raw += raw
        return slot

    def remove(self, stream_id: str) -> None:
        member = self.members.pop(stream_id, None)
        if member is None:
            return
        self._order.remove(member)
        self._raw -= member.raw
        self.batch.close(member.slot)

    def tick_once(self) -> int:
        """One batched run over the streams with a full window; returns windows done."""
        w = self.window
        rows, slots, ready = self._rows, self._slots, self._ready
        k = 0
        for m in self._order:
            if m.available() >= w:
                m.read_into(rows[k])
                slots[k] = m.slot
                ready[k] = m
                k += 1
        if not k:
            return 0
        win = self._win[:k]
        if self._raw:
            self.guard.clean(win)
        probs = self.batch.run(slots[:k], win)
        for m, p in zip(ready, probs.tolist(), strict=False):  # ready[:k] without a copy
            m.windows += 1
            m.sink(p)
        self.windows += k
        self.runs += 1
        return k

    def tick(self, max_rounds: int = 64) -> int:
        """Ticks until no stream has a full window (bounded); returns windows done."""
        total = 0
        for _ in range(max_rounds):
            n = self.tick_once()
            if not n:
                break
            total += n
        return total


class VadTicker:
    """The worker's VAD side: one group per rate, ticked on a fixed period."""

    def __init__(self, make_batch: Callable[[int], BatchVad], period_s: float) -> None:
        self.make_batch = make_batch
        self.period_s = period_s
        self.groups: dict[int, VadGroup] = {}
        self._where: dict[str, int] = {}
        self.next_tick_s = 0.0

    def __len__(self) -> int:
        return len(self._where)

    def add(self, stream_id: str, rate_hz: int, ring: ConsumerRing, sink: ProbSink, *,
            raw: bool = True) -> None:
        group = self.groups.get(rate_hz)
        if group is None:
            group = self.groups[rate_hz] = VadGroup(self.make_batch(rate_hz))
        group.add(stream_id, ring, sink, raw=raw)
        self._where[stream_id] = rate_hz

    def remove(self, stream_id: str) -> bool:
        rate = self._where.pop(stream_id, None)
        if rate is None:
            return False
        self.groups[rate].remove(stream_id)
        return True

    def due_in(self, now_s: float) -> float | None:
        if not self._where:
            return None
        return max(0.0, self.next_tick_s - now_s)

    def tick(self, now_s: float) -> int:
        """Run the groups if the tick is due; returns windows done."""
        if not self._where or now_s < self.next_tick_s:
            return 0
        nxt = self.next_tick_s + self.period_s
        self.next_tick_s = nxt if nxt > now_s else now_s + self.period_s
        return sum(group.tick() for group in self.groups.values())
