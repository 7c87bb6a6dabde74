"""One load ramp against one server: add streams step by step until the knee.

Each step runs `interval_s` with its number of streams (new streams start spread over
the step's first second); the replies that finished during the step make its figures.
The daemon's own counters (calls' underruns and dropped frames, refusals) and worker
busy fractions come from `/metrics` and `/v1/status`; CPU and PSS from /proc, summed
over the server process and all its children (the inference workers).
"""

from __future__ import annotations

import asyncio
import contextlib
import math
import os
import random
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from aiohttp import ClientError, ClientSession, ClientTimeout

from tools.loadgen.stats import (
    PROFILES,
    RATIO_MAX,
    KneeTracker,
    LoopLag,
    Profile,
    StepStats,
    cpu_s,
    knee_reasons,
    loadavg_1m,
    machine_busy_s,
    percentile,
    process_tree,
    ratio_p95,
    runqueue_wait_s,
    tree_pss_mb,
)
from tools.loadgen.streams import KINDS, REPLIES, CallController, CallStream, Endpoints, Gate, Reply

BUSY_SAMPLE_S = 2.0
LAG = LoopLag()
"""This load generator's own event-loop lag, step by step (servers take turns)."""


@dataclass
class Server:
    """A server under test: where it answers and which process it is."""

    name: str
    pid: int
    ends: Endpoints
    cosyvoiced: bool = False
    """True: it has /metrics and /v1/status to read counters and busy fractions from."""


@dataclass
class RampResult:
    server: str
    mix: dict[str, float]
    profile: Profile
    steps: list[StepStats] = field(default_factory=list)
    knee_step: int | None = None
    """Index of the first step past the knee (None: the ramp ended clean)."""
    held_knee_step: int | None = None
    """Index of the first of `profile.confirm` steps in a row past the knee."""
    knee_reasons: list[str] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    """A few error messages, for the report."""

    @property
    def sustained(self) -> int:
        """Streams of the last step before the knee (0: the first step was past it)."""
        last = self.steps if self.knee_step is None else self.steps[:self.knee_step]
        return last[-1].streams if last else 0


def parse_mix(text: str) -> dict[str, float]:
    """"tts=2,call=1" -> {"tts": 2.0, "call": 1.0}; unknown kinds are an error."""
    out: dict[str, float] = {}
    for part in text.split(","):
        name, _, weight = part.strip().partition("=")
        if name not in KINDS:
            raise ValueError(f"unknown stream kind {name!r}; kinds: {', '.join(KINDS)}")
        w = float(weight) if weight else 1.0
        if w < 0:
            raise ValueError(f"negative weight for {name}")
        out[name] = w
    if not any(out.values()):
        raise ValueError("the mix has no stream kind with a positive weight")
    return out


def next_kind(have: list[str], mix: dict[str, float]) -> str:
    """The kind to add next: the one furthest below its share of len(have) + 1 streams."""
    total = sum(mix.values())
    n = len(have) + 1
    return max(mix, key=lambda k: (mix[k] * n / total - have.count(k), mix[k]))


def step_stats(index: int, streams: int, replies: list[Reply],
               counters: dict[str, float] | None = None) -> StepStats:
    """A step's latency and failure figures from the replies that finished in it."""
    heard = [r.heard for r in replies if r.heard is not None]
    ttfa_ms = [h.ttfa_s * 1000 for h in heard]
    tr_ms = [t * 1000 for r in replies for t in r.transcript_s]
    c = counters or {}
    by_kind: dict[str, int] = {}
    for r in replies:
        if r.heard is not None and r.heard.underruns:
            by_kind[r.kind] = by_kind.get(r.kind, 0) + r.heard.underruns
    if c.get("underruns"):
        by_kind["call (daemon)"] = int(c["underruns"])
    return StepStats(
        step=index, streams=streams, replies=len(heard),
        ttfa_p50_ms=percentile(ttfa_ms, 50), ttfa_p95_ms=percentile(ttfa_ms, 95),
        ttfa_p99_ms=percentile(ttfa_ms, 99),
        ratio_p95=ratio_p95([h.ratio for h in heard],
                            sum(1 for r in replies if r.refused or r.error)),
        transcript_p95_ms=percentile(tr_ms, 95),
        underruns=sum(h.underruns for h in heard) + int(c.get("underruns", 0)),
        underruns_by_kind=by_kind,
        dropped_frames=int(c.get("dropped_frames", 0)),
        refused=sum(r.refused for r in replies),
        errors=sum(1 for r in replies if r.error and not r.refused))


class Probe:
    """Reads a cosyvoiced daemon's counters and worker busy fractions."""

    def __init__(self, server: Server, session: ClientSession) -> None:
        self.server = server
        self.session = session

    async def counters(self) -> dict[str, float]:
        if not self.server.cosyvoiced or not self.server.ends.http:
            return {}
        async with self.session.get(f"{self.server.ends.http}/metrics") as r:
            text = await r.text()
        return parse_counters(text)

    async def busy(self) -> list[float]:
        if not self.server.cosyvoiced or not self.server.ends.http:
            return []
        async with self.session.get(f"{self.server.ends.http}/v1/status") as r:
            status = await r.json()
        return [float(w["busy"]) for w in (status.get("workers") or {}).get("workers", [])]


TICK_LATE = "cosyvoiced_audiosocket_tick_late_seconds"


def parse_counters(metrics_text: str) -> dict[str, float]:
    """Underruns and dropped frames of calls, all refusals, TTS steps made late, and the
    call clock's ticks woken more than a tick (20 ms) late, from /metrics text."""
    out: dict[str, float] = {}
    ticks = on_time = 0.0
    for line in metrics_text.splitlines():
        if line.startswith(f"{TICK_LATE}_count"):
            ticks = float(line.split()[-1])
        elif line.startswith(f'{TICK_LATE}_bucket{{le="0.02"}}'):
            on_time = float(line.split()[-1])
        elif line.startswith('cosyvoiced_underruns_total{kind="call"}'):
            out["underruns"] = float(line.split()[-1])
        elif line.startswith('cosyvoiced_dropped_frames_total{kind="call"}'):
            out["dropped_frames"] = float(line.split()[-1])
        elif line.startswith("cosyvoiced_admissions_refused_total{"):
            out["refused"] = out.get("refused", 0.0) + float(line.split()[-1])
        elif line.startswith(("cosyvoiced_tts_late_steps_total ",
                              "cosyvoiced_tts_late_steps_total{")):
            out["late_steps"] = out.get("late_steps", 0.0) + float(line.split()[-1])
    if ticks:
        out["clock_late"] = ticks - on_time
    return out


class ServerRamp:
    """One server's ramp, step by step; several can take turns (`in_turns`)."""

    def __init__(self, server: Server, mix: dict[str, float], profile: Profile,
                 session: ClientSession, log: Callable[[str], None], seed: int = 7) -> None:
        self.server = server
        self.mix = mix
        self.profile = profile
        self.session = session
        self.log = log
        self.result = RampResult(server.name, mix, profile)
        self.schedule = profile.schedule()
        self.replies: list[Reply] = []
        self.stop = asyncio.Event()
        self.gate = Gate()
        self.tasks: list[asyncio.Task[None]] = []
        self.kinds: list[str] = []
        self.rng = random.Random(seed)
        self.probe = Probe(server, session)
        self.knee = KneeTracker(profile)
        self._ctl: asyncio.Task[None] | None = None

    @property
    def done(self) -> bool:
        return self.knee.done

    async def open(self) -> None:
        await warm_up(self.server, self.mix, self.session)
        if "call" in self.mix and self.server.ends.http:
            CallStream.controller = CallController(self.server.ends.http, self.session)
            self._ctl = asyncio.create_task(CallStream.controller.run())

    async def step(self) -> StepStats:
        index = len(self.result.steps)
        n = self.schedule[index][1]
        t_step = time.monotonic()
        self.gate.resume()
        added = n - len(self.tasks)
        while len(self.tasks) < n:
            kind = next_kind(self.kinds, self.mix)
            self.kinds.append(kind)
            s = KINDS[kind](len(self.tasks), self.server.ends, self.session, self.replies,
                            self.rng)
            delay = (len(self.tasks) - (n - added)) / max(added, 1)
            self.tasks.append(asyncio.create_task(s.run(self.stop, delay, self.gate)))
        pids = process_tree(self.server.pid)
        LAG.ensure_running()
        LAG.take()
        cpu0, c0 = cpu_s(pids), await _safe(self.probe.counters(), {})
        done0, me0, all0 = len(self.replies), cpu_s([os.getpid()]), machine_busy_s()
        wait0 = runqueue_wait_s(pids)
        busy: list[list[float]] = []
        pss: list[float] = []
        end = t_step + self.profile.interval_s
        while (left := end - time.monotonic()) > 0:
            await asyncio.sleep(min(BUSY_SAMPLE_S, left))
            if b := await _safe(self.probe.busy(), []):
                busy.append(b)
            # off the loop: reading smaps_rollup walks the daemon's page tables (20-40 ms),
            # which on the loop would delay every listener's arrival stamps
            pss.append(await asyncio.to_thread(tree_pss_mb, self.server.pid))
        wall_s = time.monotonic() - t_step
        c1 = await _safe(self.probe.counters(), {})
        delta = {k: c1.get(k, 0.0) - c0.get(k, 0.0) for k in c1}
        mine = self.replies[done0:]
        st = step_stats(index, n, mine, delta)
        st.refused = max(st.refused, int(delta.get("refused", 0)))
        st.clock_late_ticks = int(delta.get("clock_late", 0))
        st.late_steps = int(delta.get("late_steps", 0))
        st.loadgen_lag_max_ms = 1000 * LAG.take()
        st.cpu_pct = 100 * (cpu_s(pids) - cpu0) / wall_s
        st.loadgen_cpu_pct = 100 * (cpu_s([os.getpid()]) - me0) / wall_s
        st.others_cpu_pct = max(0.0, 100 * (machine_busy_s() - all0) / wall_s
                                - st.cpu_pct - st.loadgen_cpu_pct)
        st.wait_pct = 100 * (runqueue_wait_s(pids) - wait0) / wall_s
        st.pss_mb = max(pss, default=math.nan)
        st.worker_busy = [sum(col) / len(col) for col in zip(*busy, strict=False)] \
            if busy else None
        st.loadavg_1m = loadavg_1m()
        r = self.result
        r.steps.append(st)
        seen = set(r.errors)  # each distinct message once (refusals say why)
        r.errors += [e for e in dict.fromkeys(x.error for x in mine if x.error)
                     if e not in seen][:3]
        reasons = knee_reasons(st)
        self.log(f"{self.server.name}: step {index} streams {n} replies {st.replies} "
                 f"ttfa p95 {st.ttfa_p95_ms:.0f} ms ratio p95 {st.ratio_p95:.2f} "
                 f"underruns {st.underruns} refused {st.refused} cpu {st.cpu_pct:.0f}% "
                 f"pss {st.pss_mb:.0f} MB others {st.others_cpu_pct:.0f}% "
                 f"waited {st.wait_pct:.0f}% late steps {st.late_steps} "
                 f"call clock late {st.clock_late_ticks} "
                 f"loadgen lag max {st.loadgen_lag_max_ms:.0f} ms"
                 + (f" KNEE: {'; '.join(reasons)}" if reasons else ""))
        k = self.knee
        k.update(reasons)
        r.knee_step, r.knee_reasons, r.held_knee_step = k.knee_step, k.knee_reasons, \
            k.held_knee_step
        return st

    async def pause(self) -> None:
        """No new requests until the next step; returns when none is in flight."""
        await self.gate.drain()

    async def close(self) -> RampResult:
        self.stop.set()
        self.gate.resume()
        tasks = self.tasks
        _, pending = await asyncio.wait(tasks, timeout=3) if tasks else (set(), set())
        for t in pending:
            t.cancel()
        if pending:  # their clean-up (a call's hangup) runs before the ramp's session ends
            await asyncio.wait(pending)
        if self._ctl is not None:
            self._ctl.cancel()
            with contextlib.suppress(asyncio.CancelledError, ClientError):
                await self._ctl
        for t in tasks:
            if t.done() and not t.cancelled() and t.exception() is not None:
                self.result.errors.append(f"stream task failed: {t.exception()!r}")
        return self.result


def _session() -> ClientSession:
    return ClientSession(timeout=ClientTimeout(total=None, sock_connect=30))


async def ramp(server: Server, mix: dict[str, float], profile: Profile,
               log: Callable[[str], None] = print, seed: int = 7) -> RampResult:
    """One server alone: its streams run on from step to step."""
    async with _session() as session:
        r = ServerRamp(server, mix, profile, session, log, seed)
        try:
            await r.open()
            while not r.done:
                await r.step()
        finally:
            await r.close()
    return r.result


async def in_turns(plans: list[tuple[Server, dict[str, float]]], profile: Profile,
                   log: Callable[[str], None] = print, seed: int = 7) -> list[RampResult]:
    """Several servers take turns step by step (A's step 1, B's step 1, A's step 2, ...):
    a shared machine's background load then falls on all of them alike. While one runs,
    the others' streams wait (their requests in flight finish first)."""
    async with _session() as session:
        ramps = [ServerRamp(s, mix, profile, session, log, seed) for s, mix in plans]
        try:
            for r in ramps:
                await r.open()
            while live := [r for r in ramps if not r.done]:
                for r in live:
                    await r.step()
                    await r.pause()
        finally:
            for r in ramps:
                await r.close()
    return [r.result for r in ramps]


async def warm_up(server: Server, mix: dict[str, float], session: ClientSession) -> None:
    """Two replies per TTS kind, one at a time and not counted: voices loaded lazily and
    first-run caches do not land in the first step."""
    for kind in mix:
        if kind == "call":
            await warm_up_call(server)
            continue
        s = KINDS[kind](-1, server.ends, session, [], random.Random(0))
        for text in REPLIES[:2]:
            s.text = lambda text=text: text  # type: ignore[method-assign]
            await s.once(time.monotonic())


async def warm_up_call(server: Server) -> None:
    """One call that says one prompt and waits for its transcript (the ASR's first decode
    allocates its buffers), then hangs up."""
    from cosyvoiced.testing.audiosocket_peer import Peer

    if not server.ends.audiosocket or not CallStream.corpus:
        return
    peer = Peer(*server.ends.audiosocket)
    await peer.connect()
    try:
        await peer.play(CallStream.corpus[0])
        await peer.play(np.zeros(8000 * 2, dtype=np.int16))
    finally:
        await peer.hangup()


async def _safe(coro: Any, default: Any) -> Any:
    """A probe that fails (daemon busy, restarting) gives `default`, never ends the ramp."""
    try:
        return await asyncio.wait_for(coro, 10)
    except (ClientError, OSError, TimeoutError, ValueError, KeyError):
        return default


__all__ = ["PROFILES", "RATIO_MAX", "RampResult", "Server", "in_turns", "next_kind", "parse_mix",
           "ramp"]
