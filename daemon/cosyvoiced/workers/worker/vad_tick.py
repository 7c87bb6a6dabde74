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
Then each stream's DC offset (a cheap sound card's constant bias) is tracked and
subtracted (`DcRemover`), so the VAD and the log-mel hear the same zero-mean audio.
Streams read through a `ListenTap` are cleaned by the tap (before its history and mel);
plain rings (ASR off) are cleaned here, once per tick over the gathered matrix.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np

from cosyvoiced.listen.vad import WINDOW_MS, VadError

DC_TAU_S = 1.0
"""Time constant of the DC-offset tracker (seconds)."""


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

    The clean path is two read-only reductions into preallocated 0-d buffers (the max and
    the min; NaN propagates through both): in [-1, 1] means nothing to do. Only then (bad
    input) the slow path counts, clips (inf becomes +-1) and zeroes NaN with `nan_to_num`,
    which allocate. `np.clip` and `np.nan_to_num` allocate on every call (counts in
    docs/performance.md), hence the hand-made fast path.
    """

    def __init__(self) -> None:
        self._hi = np.ones(1, dtype=np.float32)
        self._lo = -self._hi
        self._max = np.zeros((), dtype=np.float32)
        self._min = np.zeros((), dtype=np.float32)
        self.nan = 0
        """NaN samples replaced by 0 so far."""
        self.bad_windows = 0
        """Calls that found a NaN."""
        self.clipped = 0
        """Samples beyond [-1, 1] (inf included) clipped so far."""
        self.dirty = False
        """The last call fixed something (then `bad_rows` says where)."""
        self.bad_rows: np.ndarray = np.zeros((), dtype=bool)
        """After a dirty call: per window (row of `x`; 0-d for 1-D `x`) whether it had a
        sample out of range or NaN."""

    def clean(self, x: np.ndarray) -> int:
        """Clip `x` (float32, any shape) to [-1, 1] and zero its NaN; returns NaN fixed."""
        np.maximum.reduce(x, axis=None, out=self._max)
        np.minimum.reduce(x, axis=None, out=self._min)
        if self._max[()] <= 1.0 and self._min[()] >= -1.0:  # False with a NaN
            self.dirty = False
            return 0
        bad = ~(np.abs(x) <= 1.0)  # NaN included
        self.dirty = True
        self.bad_rows = bad.any(axis=-1)
        self.clipped += int(np.count_nonzero(bad)) - int(np.count_nonzero(np.isnan(x)))
        np.minimum(x, self._hi, out=x)
        np.maximum(x, self._lo, out=x)
        n = int(np.count_nonzero(np.isnan(x)))
        if not n:
            return 0
        np.nan_to_num(x, copy=False, nan=0.0)
        self.nan += n
        self.bad_windows += 1
        return n


class DcRemover:
    """Tracks each stream's DC offset and subtracts it, in place; allocation-free.

    The estimate is an exponential average of window means with time constant `DC_TAU_S`
    (`keep = exp(-n / (rate * tau))` per window of n samples), updated with the window
    before it is subtracted from it (as the in-process pipeline did). A window that
    `SampleGuard` had to fix (`hold`) is not averaged in: a burst of clipped or NaN samples
    says nothing about the capture's bias, and would otherwise offset the next second of
    audio. State is per row id (a VAD slot; 0 for a single stream), so one call handles a
    tick's whole window matrix; a row that is not `on` is left as is (its reader removes
    the offset itself).
    """

    def __init__(self, rate_hz: int, rows: int = 1, tau_s: float = DC_TAU_S) -> None:
        self.rate_hz = rate_hz
        self.tau_s = tau_s
        self.dc = np.zeros(rows, dtype=np.float32)
        """Current estimate per row."""
        self._on = np.ones(rows, dtype=np.float32)
        self._cur = np.zeros(rows, dtype=np.float32)
        self._use = np.zeros(rows, dtype=np.float32)
        self._mean = np.zeros(rows, dtype=np.float32)
        self._row0 = np.zeros(1, dtype=np.intp)
        self._held = np.ones(1, dtype=bool)
        self._keep = np.zeros((), dtype=np.float32)
        self._gain = np.zeros((), dtype=np.float32)
        self._n = 0

    def reset(self, row: int = 0, *, on: bool = True) -> None:
        """A new stream in `row`: estimate 0; `on=False`: never touch its windows."""
        self.dc[row] = 0.0
        self._on[row] = 1.0 if on else 0.0

    def _coefficients(self, n: int) -> None:
        if n != self._n:  # the same window length every tick: computed once
            keep = math.exp(-n / (self.rate_hz * self.tau_s))
            self._keep[()] = keep
            self._gain[()] = (1.0 - keep) / n
            self._n = n

    def remove(self, win: np.ndarray, rows: np.ndarray, hold: np.ndarray | None = None) -> None:
        """Windows `win` (`[k, n]` float32), `rows[i]` the row id of `win[i]`; `hold[i]`
        True: subtract row i's estimate without updating it."""
        k, n = win.shape
        if not k or not n:
            return
        self._coefficients(n)
        cur, mean, use = self._cur[:k], self._mean[:k], self._use[:k]
        np.take(self.dc, rows, out=cur, mode="clip")  # "clip": no temporary copy
        old = None if hold is None else cur.copy()  # bad input only: may allocate
        np.add.reduce(win, axis=1, out=mean)
        np.multiply(cur, self._keep, out=cur)
        np.multiply(mean, self._gain, out=mean)
        np.add(cur, mean, out=cur)
        if old is not None:
            np.copyto(cur, old, where=np.asarray(hold, dtype=bool).reshape(k))
        np.take(self._on, rows, out=use, mode="clip")
        np.multiply(cur, use, out=cur)
        np.put(self.dc, rows, cur)
        np.subtract(win, cur[:, None], out=win)

    def remove_one(self, x: np.ndarray, hold: bool = False) -> None:
        """One stream's samples `x` (1-D float32), row 0."""
        self.remove(x[None], self._row0, self._held if hold else None)


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

    def __init__(self, batch: BatchVad, rate_hz: int | None = None) -> None:
        self.batch = batch
        self.window = batch.window
        cap = batch.capacity
        if rate_hz is None:  # a Silero window is WINDOW_MS long at every rate
            rate_hz = self.window * 1000 // WINDOW_MS
        self.rate_hz = rate_hz
        self._win = np.zeros((cap, self.window), dtype=np.float32)
        self._rows = [self._win[i] for i in range(cap)]  # row views made once
        self._slots = np.zeros(cap, dtype=np.intp)
        self._ready: list[_Member] = [None] * cap  # type: ignore[list-item]
        self.members: dict[str, _Member] = {}
        self._order: list[_Member] = []
        self._raw = 0
        """Members whose windows the group cleans."""
        self.guard = SampleGuard()
        self.dc = DcRemover(rate_hz, cap)
        """DC offset per VAD slot, removed from raw members' windows."""
        self.windows = 0
        self.runs = 0

    def __len__(self) -> int:
        return len(self._order)

    def add(self, stream_id: str, ring: ConsumerRing, sink: ProbSink, *,
            raw: bool = True) -> int:
        """Add a stream; `raw=False` when its ring cleans what it returns (`ListenTap`)."""
        if stream_id in self.members:
            raise VadError(f"stream {stream_id} is already listened to", code="stream_exists")
        slot = self.batch.open()
        self.dc.reset(slot, on=raw)
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
            guard = self.guard
            guard.clean(win)
            self.dc.remove(win, slots[:k], guard.bad_rows if guard.dirty else None)
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
        if stream_id in self._where:
            raise VadError(f"stream {stream_id} is already listened to", code="stream_exists")
        group = self.groups.get(rate_hz)
        if group is None:
            group = self.groups[rate_hz] = VadGroup(self.make_batch(rate_hz), rate_hz)
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
