"""One soak window: its load phase (honest load, the hostile mix, one worker killed with
SIGKILL) and what it measured; the quiet phase's read is the caller's (`tools.soak.run`)."""

from __future__ import annotations

import asyncio
import os
import random
import signal
import time
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from tools.bench.calls import Daemon
from tools.loadgen.stats import process_tree
from tools.loadgen.streams import Endpoints
from tools.soak.answers import LOGGED_AS, Outcome, is_bad
from tools.soak.honest import HonestResult, Mix, run_honest
from tools.soak.hostile import Hostile, Limits, hostile_loop
from tools.soak.probe import Snapshot, status

KILL_GRACE_S = 15.0
"""Underruns of a call that was up within this long after a worker was killed are the
kill's (its streams move to the spare; the new spare loads meanwhile)."""
LOGGED = ("audiosocket_no_call", "call_refused", "tts_client_gone", "wyoming_idle_timeout",
          "wyoming_write_timeout", "wyoming_protocol_error", "wyoming_client_gone",
          "listen_backlog_full", "http_connections_capped", "worker_died", "worker_hung",
          "worker_restarted", "watchdog_withheld")
"""Log events counted per window (call_ended is counted per reason)."""


@dataclass(frozen=True)
class Plan:
    windows: int
    window_s: float
    load_s: float
    kill_at_s: float
    """Offset into each load phase of the worker kill."""
    mix: Mix
    lanes: int
    """Hostile actions in flight at once."""
    pause_s: float
    limits: Limits


QUICK_WINDOW_S = 30.0


def plan(minutes: float, quick: bool, window_s: float | None = None) -> Plan:
    """The run's windows: 5 minutes each, or QUICK_WINDOW_S with `quick`, fewer clients.
    `window_s` (quick only) shortens them: the load two thirds of a window, the kill a
    quarter into the load, as at 30 s."""
    if quick:
        w = window_s or QUICK_WINDOW_S
        return Plan(windows=max(1, round(minutes * 60 / w)), window_s=w, load_s=w * 2 / 3,
                    kill_at_s=w / 6, mix=Mix(calls=2, call_s=9.0, http_tts=1, wyoming_tts=1,
                                           wyoming_asr=1),
                    lanes=2, pause_s=0.5, limits=Limits(http_timeout_s=4.0,
                                                        first_frame_timeout_s=3.0,
                                                        wyoming_idle_s=4.0, flood_s=2.0))
    return Plan(windows=max(1, round(minutes / 5)), window_s=300.0, load_s=270.0,
                kill_at_s=60.0, mix=Mix(calls=6, call_s=60.0, http_tts=2, wyoming_tts=1,
                                        wyoming_asr=1),
                lanes=3, pause_s=1.0, limits=Limits(http_timeout_s=10.0,
                                                    first_frame_timeout_s=5.0,
                                                    wyoming_idle_s=10.0, flood_s=5.0))


@dataclass
class Window:
    index: int
    honest: HonestResult = field(default_factory=HonestResult)
    hostile: list[Outcome] = field(default_factory=list)
    kills: list[tuple[float, int]] = field(default_factory=list)
    """(when, pid) of each worker killed."""
    slots_peak: int = 0
    after: Snapshot | None = None
    before: Snapshot | None = None
    settled: bool = True
    left_open: list[dict[str, Any]] = field(default_factory=list)
    """The streams still open when the daemon did not settle (/v1/status)."""
    events: list[dict[str, Any]] = field(default_factory=list)

    def logged(self) -> Counter[str]:
        out: Counter[str] = Counter()
        for e in self.events:
            name = e.get("event", "")
            if name == "call_ended":
                out[f"call_ended:{e.get('reason', '')}"] += 1
            elif name in LOGGED:
                out[name] += 1
        return out

    def mark_refused(self) -> None:
        """Flag the honest calls the daemon refused at admission (call_refused)."""
        ids = {e.get("call_id") for e in self.events if e.get("event") == "call_refused"}
        for c in self.honest.calls:
            c.refused = c.call_id in ids

    def near_kill(self, start_s: float, end_s: float) -> bool:
        return any(start_s <= k + KILL_GRACE_S and end_s >= k for k, _ in self.kills)

    def call_underruns(self) -> tuple[int, int]:
        """The daemon's underruns of the honest calls (its call_ended lines): (outside
        KILL_GRACE_S after a kill, within it)."""
        by_id = {e.get("call_id"): int(e.get("underruns") or 0) for e in self.events
                 if e.get("event") == "call_ended"}
        clean = near = 0
        for c in self.honest.calls:
            n = by_id.get(c.call_id, 0)
            if self.near_kill(c.started_s, c.ended_s):
                near += n
            else:
                clean += n
        return clean, near

    def peer_gaps(self) -> tuple[int, int]:
        """The honest calls' own clock gaps: (outside a kill's grace, within it)."""
        gaps = [t for c in self.honest.calls for t in c.gaps_at_s]
        near = sum(1 for t in gaps if self.near_kill(t, t))
        return len(gaps) - near, near

    def hostile_summary(self) -> str:
        c = Counter(o.outcome.split(":", 1)[0] if not is_bad(o.outcome) else o.outcome
                    for o in self.hostile)
        return " ".join(f"{k}:{v}" for k, v in sorted(c.items()))

    def row(self) -> list[Any]:
        a = self.after
        assert a is not None and self.before is not None
        calls = self.honest.calls
        replies = self.honest.replies
        under, under_kill = self.call_underruns()
        gaps, gaps_kill = self.peer_gaps()
        refused = int(a.counters.get("refused", 0) - self.before.counters.get("refused", 0))
        return [self.index + 1, round(a.rss_mb), round(a.pss_mb), a.fds, a.shm, a.slots,
                self.slots_peak, a.restarts,
                f"{sum(c.answered for c in calls)}/{len(calls)}",
                sum(c.refused for c in calls), under, under_kill,
                f"{gaps}/{gaps_kill}", refused,
                f"{sum(r.heard is not None for r in replies)}/{len(replies)}",
                f"{sum(not is_bad(o.outcome) for o in self.hostile)}/{len(self.hostile)}",
                self.hostile_summary()]


COLUMNS = ["window", "RSS MB", "PSS MB", "fds", "shm", "slots", "slots peak", "restarts",
           "calls answered", "calls refused", "underruns", "underruns (kill)", "peer gaps/(kill)", "refused",
           "TTS/ASR ok", "hostile ok", "hostile outcomes"]


def unlogged(windows: list[Window]) -> dict[str, tuple[int, int]]:
    """Hostile drops the daemon should have logged and did not, over the whole run (a
    line may land in the window after its action's): {events: (actions, lines)}, only
    where fewer lines than actions. call_refused lines of honest calls are left out."""
    expected: Counter[tuple[str, ...]] = Counter()
    logged: Counter[str] = Counter()
    for w in windows:
        for o in w.hostile:
            if o.name in LOGGED_AS and not is_bad(o.outcome) \
                    and o.outcome != "typed:overloaded":
                expected[LOGGED_AS[o.name]] += 1
        logged.update(w.logged())
        logged["call_refused"] -= sum(c.refused for c in w.honest.calls)
    out = {}
    for keys, n in expected.items():
        got = sum(logged[k] for k in keys)
        if got < n:
            out["|".join(keys)] = (n, got)
    return out


async def _kill_one(d: Daemon, w: Window, at_s: float) -> None:
    await asyncio.sleep(at_s)
    st = await asyncio.to_thread(status, d.http)
    workers = [x for x in (st["workers"] or {}).get("workers", []) if x["pid"] and x["alive"]]
    if not workers:
        return
    pid = int(workers[w.index % len(workers)]["pid"])
    if pid in process_tree(d.proc.pid):  # the daemon's own child, nothing else
        os.kill(pid, signal.SIGKILL)
        w.kills.append((time.monotonic(), pid))


async def _sample_slots(d: Daemon, w: Window) -> None:
    while True:
        st = await asyncio.to_thread(status, d.http)
        w.slots_peak = max(w.slots_peak, int(st["streams"]["active"]))
        await asyncio.sleep(2.0)


async def load_phase(d: Daemon, ends: Endpoints, corpus: list[np.ndarray], p: Plan,
                     w: Window, rng: random.Random) -> None:
    """The window's load: honest clients, hostile lanes, one kill; returns once every
    client and action has ended."""
    end_s = time.monotonic() + p.load_s
    h = Hostile(ends, p.limits, corpus, random.Random(rng.random()))
    hostile = asyncio.create_task(hostile_loop(h, end_s, p.lanes, p.pause_s, w.hostile))
    killer = asyncio.create_task(_kill_one(d, w, p.kill_at_s))
    sampler = asyncio.create_task(_sample_slots(d, w))
    try:
        await run_honest(d, ends, corpus, p.mix, p.load_s, random.Random(rng.random()),
                         w.honest)
        await hostile
        await killer
    finally:
        for t in (hostile, killer, sampler):
            t.cancel()
        await asyncio.gather(hostile, killer, sampler, return_exceptions=True)
