"""The soak: a real daemon for the whole run, window after window of load and quiet, the
report and its targets."""

from __future__ import annotations

import asyncio
import json
import random
import shutil
import tempfile
import time
from collections import Counter
from pathlib import Path

import numpy as np

from cosyvoiced.testing.prompts import prompts
from tools.bench.calls import Daemon
from tools.bench.report import Report
from tools.loadgen.peers import attach
from tools.soak.answers import is_bad
from tools.soak.probe import (
    WATCHDOG_USEC,
    LogTail,
    NotifyListener,
    Snapshot,
    settle,
    snapshot,
    status,
)
from tools.soak.windows import (
    COLUMNS,
    KILL_GRACE_S,
    Plan,
    Window,
    load_phase,
    plan,
    unlogged,
)

QUIET_S = 3.0
"""The quiet phase lasts at least this long after the daemon has settled."""
SETTLE_S = 90.0
TOLERANCE = 0.05
"""RSS, open files and ring segments back within 5% of the baseline after each load."""


def overrides(p: Plan) -> tuple[str, ...]:
    """configs/callcenter.toml's shape scaled to a 2-core box (`Daemon` pins 2 workers
    to CPUs 0-1), every listener on, the soak's timeouts short enough for its windows."""
    lim = p.limits
    return ("wyoming.enabled=true", 'wyoming.listen="tcp://127.0.0.1:0"',
            "workers.max_streams=40", "workers.streams_reserved_for_calls=8",
            "api.max_connections=128", "service.debug=false", 'log.level="info"',
            f"api.request_timeout_s={lim.http_timeout_s}",
            f"audiosocket.first_frame_timeout_s={lim.first_frame_timeout_s}",
            f"wyoming.idle_timeout_s={lim.wyoming_idle_s}")


def corpus() -> list[np.ndarray]:
    return [(p.samples() * 32767).astype(np.int16) for p in prompts()
            if 1.0 < p.samples().shape[0] / 8000 < 4.0][:60]


def run(minutes: float, quick: bool, log=print,  # noqa: ANN001
        keep: Path | None = None, window_s: float | None = None) -> Report:
    p = plan(minutes, quick, window_s)
    rng = random.Random(11)
    voices = corpus()
    report = Report("soak", COLUMNS)
    windows: list[Window] = []
    with tempfile.TemporaryDirectory() as tmp:
        d = Daemon(Path(tmp), overrides(p), env={"WATCHDOG_USEC": str(WATCHDOG_USEC)})
        notify = NotifyListener(d.sock)
        notify.start()
        try:
            ends = attach(d.http).ends
            tail = LogTail(d.log_path)
            settle(d.http, SETTLE_S)
            start = snapshot(d)
            report.rows.append(["start", round(start.rss_mb), round(start.pss_mb), start.fds,
                                start.shm, start.slots, "", start.restarts] + [""] * 9)
            before = start
            for i in range(p.windows):
                w = Window(i, before=before)
                t0 = time.monotonic()
                asyncio.run(load_phase(d, ends, voices, p, w, rng))
                w.settled = settle(d.http, SETTLE_S)
                if not w.settled:
                    w.left_open = status(d.http)["streams"]["list"]
                time.sleep(max(QUIET_S, p.window_s - (time.monotonic() - t0)))
                w.after = before = snapshot(d)
                w.events = tail.read()
                w.mark_refused()
                windows.append(w)
                report.rows.append(w.row())
                log(f"window {i + 1}/{p.windows}: " + "  ".join(
                    f"{c}={v}" for c, v in zip(COLUMNS[1:], w.row()[1:], strict=True)))
            time.sleep(QUIET_S)  # lines of the last actions the daemon is still writing
            windows[-1].events += tail.read()
            alive = d.proc.poll() is None
            gap_s, pings = notify.pings.gap_now_s(), notify.pings.pings
        finally:
            notify.stop()
            d.stop()
            if keep is not None:
                keep.mkdir(parents=True, exist_ok=True)
                shutil.copy(d.log_path, keep / "daemon.log")
    _targets(report, p, start, windows, gap_s, pings, alive)
    return report


def _by_action(windows: list[Window]) -> dict[str, dict[str, int]]:
    """Each hostile action's outcomes over the run (e.g. {"as_garbage": {"hangup": 4}})."""
    out: dict[str, Counter[str]] = {}
    for o in (o for w in windows for o in w.hostile):
        out.setdefault(o.name, Counter())[o.outcome] += 1
    return {k: dict(v) for k, v in sorted(out.items())}


def _pct(now: float, base: float) -> float:
    return 100.0 * (now - base) / base if base else (0.0 if now == base else 100.0)


def _targets(report: Report, p: Plan, start: Snapshot, windows: list[Window],
             gap_s: float, pings: int, alive: bool) -> None:
    """Baseline: the quiet read after the first window (the daemon warmed up: arenas,
    caches, the first spare); each later window's quiet read is held to it."""
    base = windows[0].after if len(windows) > 1 else start
    judged = windows[1:] if len(windows) > 1 else windows
    assert base is not None
    rss = max((_pct(w.after.rss_mb, base.rss_mb) for w in judged if w.after), default=0.0)
    fds = max((abs(_pct(w.after.fds, base.fds)) for w in judged if w.after), default=0.0)
    shm = max((abs(_pct(w.after.shm, base.shm)) for w in judged if w.after), default=0.0)
    slots = max((w.after.slots for w in windows if w.after), default=0)
    kills = sum(len(w.kills) for w in windows)
    restarts = windows[-1].after.restarts - start.restarts if windows[-1].after else 0
    under = sum(w.call_underruns()[0] for w in windows)
    calls = [c for w in windows for c in w.honest.calls]
    unanswered = sum(not c.answered and not c.refused for c in calls)
    refused = sum(c.refused for c in calls)
    bad = [o for w in windows for o in w.hostile if is_bad(o.outcome)]
    hung = sum(r.error.startswith("TimeoutError") for w in windows for r in w.honest.replies)
    missing = unlogged(windows)
    unlogged_n = sum(n - got for n, got in missing.values())
    events = [e for w in windows for e in w.events]
    withheld = sum(e.get("event") == "watchdog_withheld" for e in events)
    pids = {w.after.main_pid for w in windows if w.after} | {start.main_pid}
    report.figures = {
        "windows": [{"index": w.index + 1, "logged": dict(w.logged()),
                     "kills": len(w.kills), "settled": w.settled,
                     "left_open": w.left_open,
                     "hostile": [o.__dict__ for o in w.hostile if is_bad(o.outcome)],
                     "honest_errors": sorted({r.error[:80] for r in w.honest.replies
                                              if r.error})}
                    for w in windows],
        "watchdog_pings": pings, "watchdog_max_gap_s": round(gap_s, 2),
        "honest_calls": len(calls), "hostile_actions": sum(len(w.hostile) for w in windows),
        "kills": kills, "restarts": restarts,
        "workers_hung": len({e.get("pid") for e in events if e.get("event") == "worker_hung"}),
        "hostile_by_action": _by_action(windows), "unlogged": missing,
    }
    report.notes.append(f"{p.windows} windows of {p.window_s:.0f} s ({p.load_s:.0f} s load, "
                        "then quiet until settled); one worker SIGKILLed per window "
                        f"{p.kill_at_s:.0f} s into the load; baseline = "
                        + ("quiet read after window 1" if len(windows) > 1 else
                           "the read before any load")
                        + "; 2 workers on CPUs 0-1, the clients on the same box")
    report.notes.append(f"underruns: the daemon's count per honest call (call_ended); "
                        f"'(kill)' = calls up within {KILL_GRACE_S:.0f} s after a kill; "
                        "peer gaps: no frame for 100 ms at the caller (the client's own "
                        "event loop on a loaded box included)")
    report.notes.append("fds: the process tree's open descriptors, the model cache's files "
                        "left out (OpenVINO's own cache keeps a compiled model's blob open)")
    report.target("RSS after load vs baseline (max %, growth)", rss, "<= +5", rss <= 5)
    report.target("open fds after load vs baseline (max |%|)", fds, "<= 5", fds <= 5)
    report.target("/dev/shm rings after load vs baseline (max |%|)", shm, "<= 5", shm <= 5)
    report.target("stream slots in use after load", slots, f"== {base.slots}",
                  slots == base.slots)
    report.target("honest call underruns outside a kill's grace", under, "== 0", under == 0)
    report.target("honest calls dropped or unanswered (admitted)", unanswered,
                  f"== 0 (of {len(calls)}; {refused} refused at admission)",
                  unanswered == 0 and len(calls) > refused)
    report.target("honest requests hung (no end within 60 s)", hung, "== 0", hung == 0)
    report.target("hostile actions hung, 5xx or unexpected", len(bad), "== 0", not bad)
    report.target("hostile drops without their log line", unlogged_n, "== 0",
                  unlogged_n == 0)
    report.target("watchdog: longest gap between pings (s)", gap_s,
                  f"<= {WATCHDOG_USEC / 1e6:g}, none withheld ({withheld})",
                  gap_s <= WATCHDOG_USEC / 1e6 and withheld == 0)
    report.target("main pid unchanged, daemon alive", len(pids), "== 1", len(pids) == 1
                  and alive)
    report.target("workers killed and replaced (restarts)", restarts, f">= {kills} kills",
                  restarts >= kills > 0)


def render_json(report: Report) -> str:
    return json.dumps(report.to_json(), indent=2, default=str)
