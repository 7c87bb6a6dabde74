"""The load ramp's arithmetic: the listener model, percentiles, the step schedule, the
knee, and the daemon's CPU and memory as /proc shows them.

Everything here is pure (or reads /proc only), so tests/unit/tools/test_loadgen.py checks it with
made-up numbers.

The listener model, the same for every server: a stream's reply is read as it arrives
(each arrival: time, seconds of audio in it) and a listener plays it at real-time pace
from its first audio. When the listener has played everything that has arrived while
more is still to come, it hears a gap: an *underrun*, whose length adds to `stall_s`.
The *latency ratio* of a reply is

    (time from the request until the listener has heard the whole reply) / (its audio)
    = (time to first audio + stalls + audio) / audio

1.0 is ideal (real time, nothing to wait for); 2.0 means the listener spent as long
waiting (before the first sound and in gaps) as hearing speech. "Above 2x real time"
is a p95 latency ratio above 2.0.
"""

from __future__ import annotations

import asyncio
import math
import os
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np

UNDERRUN_MIN_S = 0.005
"""A gap shorter than this is timer noise of the client, not a gap anyone hears."""


@dataclass(frozen=True)
class Heard:
    """What the listener model makes of one reply."""

    ttfa_s: float
    """Request sent to first audio received."""
    audio_s: float
    stall_s: float
    """Silence heard after the first audio, while the rest was late."""
    underruns: int
    """Gaps heard (each at least UNDERRUN_MIN_S)."""

    @property
    def ratio(self) -> float:
        """Latency ratio: (ttfa + stalls + audio) / audio (inf for a reply with no audio)."""
        if self.audio_s <= 0:
            return math.inf
        return (self.ttfa_s + self.stall_s + self.audio_s) / self.audio_s


def listen(request_s: float, arrivals: list[tuple[float, float]],
           jitter_s: float = 0.0) -> Heard:
    """Play `arrivals` ((time received, seconds of audio), in order) at real-time pace
    from the first one (plus `jitter_s`, a jitter buffer); return what a listener hears."""
    if not arrivals:
        return Heard(math.inf, 0.0, 0.0, 0)
    first_s = arrivals[0][0]
    playhead_s = first_s + jitter_s  # when the audio so far will have finished playing
    stall_s = 0.0
    underruns = 0
    for at_s, audio_s in arrivals:
        if at_s > playhead_s:
            gap_s = at_s - playhead_s
            if gap_s >= UNDERRUN_MIN_S:
                underruns += 1
                stall_s += gap_s
            playhead_s = at_s
        playhead_s += audio_s
    total_s = sum(a for _, a in arrivals)
    return Heard(first_s - request_s, total_s, stall_s, underruns)


def percentile(values: list[float], q: float) -> float:
    """The q-th percentile (linear interpolation, as numpy's default); NaN when empty."""
    finite = [v for v in values if not math.isnan(v)]
    if not finite:
        return math.nan
    return float(np.percentile(np.asarray(finite, dtype=np.float64), q))


def ratio_p95(ratios: list[float], failed: int) -> float:
    """p95 latency ratio over a step's requests, each refused or failed one counted as a
    reply never heard (infinite): the same knee for a server that refuses and one that
    slows down. Nearest rank (no interpolation toward infinity): past 2 exactly when more
    than 5% of the requests took over 2x or were never heard. NaN with no request."""
    values = sorted([r for r in ratios if not math.isnan(r)] + [math.inf] * failed)
    if not values:
        return math.nan
    return values[math.ceil(0.95 * len(values)) - 1]


# --- the ramp ------------------------------------------------------------------------


@dataclass(frozen=True)
class Profile:
    start: int
    """Streams in the first step."""
    step: int
    """Streams added at each later step."""
    interval_s: float
    max_steps: int
    max_streams: int
    after_knee: int
    """Steps still run after the knee (to see whether more load is refused or degraded)."""
    confirm: int = 1
    """The ramp goes on until this many steps in a row are past the knee criteria (a
    lone failing step on a shared, noisy box is then a blip, not the end)."""

    def schedule(self) -> list[tuple[float, int]]:
        """(offset from the ramp's start in s, streams running from then on), per step."""
        out = []
        n = self.start
        for i in range(self.max_steps):
            if n > self.max_streams:
                break
            out.append((i * self.interval_s, n))
            n += self.step
        return out


PROFILES = {
    "full": Profile(start=10, step=10, interval_s=30.0, max_steps=40, max_streams=1000,
                    after_knee=1, confirm=2),
    "medium": Profile(start=2, step=2, interval_s=20.0, max_steps=30, max_streams=200,
                      after_knee=1, confirm=2),
    "quick": Profile(start=2, step=2, interval_s=10.0, max_steps=3, max_streams=20,
                     after_knee=0),
}
"""full: the defaults (field-report style); medium: finer steps for a small box;
quick: CI, at most 3 steps of 10 s."""

RATIO_MAX = 2.0
"""The knee's latency bound: p95 latency ratio above this is "above 2x real time"."""
TTFA_BOUND_MS = 1000.0
"""The stricter bar's first-audio bound (p95)."""


@dataclass
class StepStats:
    """What one step measured; the JSON, the table and the plots are made from these."""

    step: int
    streams: int
    replies: int = 0
    ttfa_p50_ms: float = math.nan
    ttfa_p95_ms: float = math.nan
    ttfa_p99_ms: float = math.nan
    ratio_p95: float = math.nan
    """Over every request of the step: a refused or failed one counts as never heard."""
    transcript_p95_ms: float = math.nan
    underruns: int = 0
    """Gaps heard by the listeners, plus the daemon's own underrun counter (calls)."""
    underruns_by_kind: dict[str, int] | None = None
    """Where the underruns were: per stream kind as heard, "call (daemon)" as counted."""
    dropped_frames: int = 0
    refused: int = 0
    errors: int = 0
    cpu_pct: float = math.nan
    """CPU of the server and its child processes, % of one core."""
    pss_mb: float = math.nan
    """The server's PSS (its process tree), the most of the samples taken through the step:
    a busy worker's heap holds tens of MB more than an idle one's, so a sample at the
    step's end would measure how busy the workers happened to be, not what each stream
    holds."""
    worker_busy: list[float] | None = None
    loadavg_1m: float = math.nan
    loadgen_cpu_pct: float = math.nan
    """CPU of this load generator (it runs on the same box)."""
    others_cpu_pct: float = math.nan
    """CPU of everything else on the box meanwhile (other jobs on a shared machine)."""
    wait_pct: float = math.nan
    """Time the server's threads were runnable but waited for a CPU, % of the step."""
    late_steps: int = 0
    """TTS steps the daemon made after a listener with no buffer would have run dry
    (`cosyvoiced_tts_late_steps`): the daemon's own count of the gaps it risked."""
    clock_late_ticks: int = 0
    """The daemon's 20 ms call clock: ticks it woke more than a tick late (it sends calls'
    frames; late here, a call's listener hears a gap the ring did not cause)."""
    loadgen_lag_max_ms: float = math.nan
    """How late this load generator's event loop ran a 10 ms timer at worst: its listeners
    stamp arrivals when it reads them, so its own lag looks like the server's gaps."""


def knee_reasons(s: StepStats, ratio_max: float = RATIO_MAX) -> list[str]:
    """Why this step is past the knee (empty: it is not). One rule for every server: p95
    latency ratio above `ratio_max`, refused and failed requests counted as never heard
    (`ratio_p95`). Underruns and refusals below that share are in the stricter figure
    (`strict_reasons`), not the knee."""
    if s.replies == 0 and s.streams > 0:
        return ["no reply finished"]
    if s.ratio_p95 > ratio_max:
        failed = f" ({s.refused} refused, {s.errors} failed)" if s.refused or s.errors else ""
        return [f"p95 latency ratio {s.ratio_p95:.2f} > {ratio_max:g}{failed}"]
    return []


def strict_reasons(s: StepStats, ttfa_ms: float = TTFA_BOUND_MS) -> list[str]:
    """Why this step fails the stricter bar: past the knee, or any gap heard, any request
    refused or failed, or first audio p95 above `ttfa_ms`."""
    out = knee_reasons(s)
    if s.underruns:
        out.append(f"{s.underruns} underruns")
    if s.refused:
        out.append(f"{s.refused} refusals")
    if s.errors:
        out.append(f"{s.errors} failed")
    if not s.ttfa_p95_ms <= ttfa_ms:
        out.append(f"first audio p95 {s.ttfa_p95_ms:.0f} ms > {ttfa_ms:g}")
    return out


class KneeTracker:
    """Follows a ramp's steps: the knee (first failing step), the held knee (first of
    `confirm` failing steps in a row) and when the ramp is over (`after_knee` steps past
    the held knee, or the schedule's end)."""

    def __init__(self, profile: Profile) -> None:
        self.profile = profile
        self.steps = 0
        self.knee_step: int | None = None
        self.knee_reasons: list[str] = []
        self.held_knee_step: int | None = None
        self._failing = 0
        self._left = math.inf

    def update(self, reasons: list[str]) -> None:
        """The next step's knee reasons (empty: it was clean)."""
        index = self.steps
        self.steps += 1
        if reasons and self.knee_step is None:
            self.knee_step, self.knee_reasons = index, reasons
        self._failing = self._failing + 1 if reasons else 0
        if self.held_knee_step is not None:
            self._left -= 1
        elif self._failing >= self.profile.confirm:
            self.held_knee_step = index - self._failing + 1
            self._left = self.profile.after_knee

    @property
    def done(self) -> bool:
        return self.steps >= len(self.profile.schedule()) or self._left <= 0


def slope_per_stream(streams: list[int], values: list[float]) -> float:
    """Least-squares slope of values against streams (NaN with fewer than 2 distinct)."""
    pts = [(x, y) for x, y in zip(streams, values, strict=True) if not math.isnan(y)]
    if len({x for x, _ in pts}) < 2:
        return math.nan
    xs = np.array([x for x, _ in pts], dtype=np.float64)
    ys = np.array([y for _, y in pts], dtype=np.float64)
    return float(np.polyfit(xs, ys, 1)[0])


# --- /proc ---------------------------------------------------------------------------


def parse_pss_kb(smaps_rollup: str) -> int:
    """The `Pss:` line of /proc/PID/smaps_rollup, in kB."""
    for line in smaps_rollup.splitlines():
        if line.startswith("Pss:"):
            parts = line.split()
            if len(parts) >= 3 and parts[2] == "kB":
                return int(parts[1])
            raise ValueError(f"unexpected Pss line: {line!r}")
    raise ValueError("no Pss line in smaps_rollup")


def process_tree(pid: int, proc: Path = Path("/proc")) -> list[int]:
    """pid and all its descendants (via /proc/PID/task/TID/children)."""
    out, todo = [], [pid]
    while todo:
        p = todo.pop()
        out.append(p)
        try:
            tasks = list((proc / str(p) / "task").iterdir())
        except OSError:
            continue
        for t in tasks:
            try:
                todo += [int(c) for c in (t / "children").read_text().split()]
            except OSError:
                continue
    return out


def tree_pss_mb(pid: int) -> float:
    """Summed PSS of a process and its descendants, in MB."""
    return pss_mb(process_tree(pid))


def pss_mb(pids: list[int], proc: Path = Path("/proc")) -> float:
    """Summed PSS of the processes, in MB (processes gone meanwhile count 0)."""
    total_kb = 0
    for pid in pids:
        try:
            total_kb += parse_pss_kb((proc / str(pid) / "smaps_rollup").read_text())
        except OSError:
            continue
    return total_kb / 1024.0


def cpu_s(pids: list[int], proc: Path = Path("/proc")) -> float:
    """User + system CPU seconds of the processes so far."""
    tick = os.sysconf("SC_CLK_TCK")
    total = 0.0
    for pid in pids:
        try:
            parts = (proc / str(pid) / "stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        total += (int(parts[11]) + int(parts[12])) / tick
    return total


def runqueue_wait_s(pids: list[int], proc: Path = Path("/proc")) -> float:
    """Seconds the processes' threads spent runnable but waiting for a CPU (schedstat):
    how much a busy machine held them back."""
    total_ns = 0
    for pid in pids:
        try:
            tasks = list((proc / str(pid) / "task").iterdir())
        except OSError:
            continue
        for t in tasks:
            try:
                total_ns += int((t / "schedstat").read_text().split()[1])
            except (OSError, IndexError, ValueError):
                continue
    return total_ns / 1e9


def machine_busy_s(proc: Path = Path("/proc")) -> float:
    """CPU seconds the whole machine has been busy (all CPUs; /proc/stat, not idle/iowait)."""
    for line in (proc / "stat").read_text().splitlines():
        if line.startswith("cpu "):
            v = [int(x) for x in line.split()[1:]]
            busy = sum(v[:8]) - v[3] - v[4]  # user nice system idle iowait irq softirq steal
            return busy / os.sysconf("SC_CLK_TCK")
    raise ValueError("no cpu line in /proc/stat")


def loadavg_1m(proc: Path = Path("/proc")) -> float:
    return float((proc / "loadavg").read_text().split()[0])


class LoopLag:
    """The worst lateness of a 10 ms timer on this process's event loop since `take`."""

    def __init__(self, period_s: float = 0.01) -> None:
        self.period_s = period_s
        self.worst_s = 0.0
        self._task: asyncio.Task[None] | None = None

    def ensure_running(self) -> None:
        if self._task is None or self._task.done():
            self._task = asyncio.get_running_loop().create_task(self._run())

    async def _run(self) -> None:
        while True:
            t = time.monotonic()
            await asyncio.sleep(self.period_s)
            self.worst_s = max(self.worst_s, time.monotonic() - t - self.period_s)

    def take(self) -> float:
        """The worst lateness (s) since the last take; starts over."""
        worst, self.worst_s = self.worst_s, 0.0
        return worst
