#!/usr/bin/env python3
"""Load ramp: how many concurrent real-time streams a box takes, side by side with Piper.

    python -m tools.loadgen --url http://127.0.0.1:8080 --mix tts=2,call=1,wyoming=1
    python -m tools.loadgen --start-daemon --profile medium --peers piper-http,wyoming-piper --docs
    python -m tools.loadgen --start-daemon --quick --peers none --out /tmp/ramp

It drives a running daemon (`--url`; or one it starts, `--start-daemon`) the way field
reports do: start with a few streams, add a step every interval (default +10 every
30 s; `--profile medium` is +2 every 20 s from 2, `--quick` +2 every 10 s for 3 steps at
most), until the knee. Stream kinds, mixed by ratio (`--mix`): `tts` (HTTP streaming
`/v1/tts`), `wyoming` (Wyoming synthesize), `call` (AudioSocket calls: real Asterisk
prompts in, TTS replies out).

Definitions (the same for every server; see `tools.loadgen.stats`): a listener plays each reply
at real-time pace from its first audio. *First audio* = request sent to first audio byte
received. *Underrun* = a gap the listener hears. *Latency ratio* of a reply = (time from
the request until the listener has heard it all) / (its audio length); 1.0 is real time.
The knee, the same rule for every server, is the first step whose p95 latency ratio is
above 2.0 ("latency above 2x real time"), a refused or failed request counting as a reply
never heard. *Sustained* = the streams of the last step before the knee. The stricter
bar: no gap heard, nothing refused or failed, first audio p95 within 1 s.

Side by side, in the same invocation: the same ramp with a TTS-only mix against
cosyvoiced (`tts`), cosyvoiced with admission out of the way (`cosyvoiced-noadmit`:
what its scheduler does past capacity), Piper's own HTTP server (`python -m piper.http_server`, whole WAV per
request) and wyoming-piper (Wyoming, one chunk burst per sentence), on the same voice
file, pinned to the same CPUs (`--cpus`). The servers take turns step by step (all up,
one loaded at a time: cosyvoiced's step 1, Piper's step 1, ..., then step 2), so the
background load of a shared machine falls on each alike; `--sequential` runs one whole
ramp after the other instead.

Per step: streams, first audio p50/p95/p99, latency ratio p95, transcript latency p95
(calls: end of the caller's prompt to its transcript event), underruns (listeners' and
the daemon's call counter), dropped frames, refusals, CPU % and PSS of the server and
its child processes (/proc/PID/smaps_rollup), per-worker busy fraction (/v1/status),
load average. Output under `--out`: loadgen.json, loadgen.md, latency.png,
resources.png, failures.png; `--docs` also writes the Markdown between the
`<!-- loadgen:FAMILY:begin -->` / `<!-- loadgen:FAMILY:end -->` markers of
docs/performance-history.md and the plots under docs/loadgen/FAMILY/ (which that page
shows), and replaces the run's row (`<!-- loadgen:FAMILY -->`) in the latest figures of
docs/performance.md, which stays short: one of each per CPU family (amx, avx512_bf16,
other). A TTS-only run (`--mix tts=1`) and the call-center script (`--text script`) have
their own (`loadgen-tts`, `loadgen-script`; docs/loadgen/tts/FAMILY/,
docs/loadgen/script/FAMILY/).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import dataclasses
import datetime
import json
import os
import shlex
import shutil
import signal
import sys
import tempfile
from collections.abc import Coroutine
from pathlib import Path
from typing import Any, TypeVar

import tools.loadgen.peers as peers
import tools.loadgen.report as report
from tools.loadgen.memory import idle_calls_pss
from tools.loadgen.ramp import RampResult, Server, in_turns, parse_mix, ramp
from tools.loadgen.stats import PROFILES, Profile, loadavg_1m
from tools.loadgen.streams import CallStream, Stream

T = TypeVar("T")

REPO = Path(__file__).resolve().parents[2]
DOCS = REPO / "docs"
CURRENT, HISTORY = "performance.md", "performance-history.md"
"""The latest figures (a row per ramp and CPU family) and the runs in full, in docs/."""
SECTIONS = {"tts": ("TTS-only ramp", "tts-only-ramp"), "": ("mixed ramp", "mixed-load"),
            "script": ("call-center script ramp", "call-center-script-mix")}
"""A run's kind (`section`): its label in the latest figures, its heading's anchor in the
history."""
PEERS = ("piper-http", "wyoming-piper", "cosyvoiced-noadmit")
PEER_KIND = {"piper-http": "piper", "wyoming-piper": "wyoming", "cosyvoiced-noadmit": "tts"}
NO_ADMISSION = ("workers.admit_busy_max=4.0", "workers.max_streams=100000")
SCRIPT_CACHE = ("tts.cache_mb=64.0",)
"""The script mix runs cosyvoiced with its prompt cache, as configs/callcenter.toml does."""
"""cosyvoiced with admission out of the way: what its scheduler does past capacity."""


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter,
                                epilog="\n".join(__doc__.splitlines()[1:]))
    src = p.add_mutually_exclusive_group(required=True)
    src.add_argument("--render", type=Path, metavar="JSON",
                     help="no ramp: write the Markdown, plots (and --docs) of a saved run")
    src.add_argument("--url", help="a running cosyvoiced's HTTP API, e.g. http://127.0.0.1:8080")
    src.add_argument("--start-daemon", action="store_true",
                     help="start cosyvoiced (dev config, free ports) for the run")
    p.add_argument("--mix", default="tts=1", help="stream kinds by ratio: tts, wyoming, call")
    p.add_argument("--text", choices=("ivr", "script"), default="ivr",
                   help="what the streams ask for: ivr (a few IVR replies; cosyvoiced's "
                        "prompt cache off: the engine is measured) or script (a call-center "
                        "script: a fixed prompt then a per-caller value; the cache on, as "
                        "configs/callcenter.toml has it)")
    p.add_argument("--profile", choices=tuple(PROFILES), default="full")
    p.add_argument("--quick", action="store_true", help="same as --profile quick (CI)")
    p.add_argument("--start", type=int, help="streams in the first step")
    p.add_argument("--step", type=int, help="streams added per step")
    p.add_argument("--interval-s", type=float, help="seconds per step")
    p.add_argument("--max-steps", type=int)
    p.add_argument("--after-knee", type=int, help="steps still run past the knee")
    p.add_argument("--confirm", type=int,
                   help="steps in a row past the knee criteria before the ramp ends")
    p.add_argument("--peers", default=",".join(PEERS),
                   help=f"peers for the TTS-only side by side: {', '.join(PEERS)}, or none")
    p.add_argument("--idle-calls", type=int, default=0, metavar="N",
                   help="first, PSS with 0..N silent calls held open (memory per stream)")
    p.add_argument("--nice", type=int, metavar="N",
                   help="run at this nice value, and so do the servers it starts (they "
                        "inherit it; the session's autogroup too): on a shared box, e.g. "
                        "-10 stands in for a dedicated one")
    p.add_argument("--sequential", action="store_true",
                   help="side by side one server after the other, not in turns step by step")
    p.add_argument("--peer-timeout-s", type=float, default=120.0,
                   help="a peer not answering this long after its start is left out")
    p.add_argument("--cpus", default="0-1", help="CPUs every server is pinned to")
    p.add_argument("--workers", type=int, default=2, help="--start-daemon: worker processes")
    p.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", dest="sets",
                   help="--start-daemon: a daemon setting (as `cosyvoiced run --set`), "
                   "e.g. asr.enabled=false for a TTS-only box; repeatable")
    p.add_argument("--out", type=Path, default=REPO / "var" / "loadgen")
    p.add_argument("--docs", action="store_true",
                   help="write the run into docs/performance-history.md, its row into "
                        "docs/performance.md and the plots under docs/loadgen")
    p.add_argument("--no-amx", action="store_true",
                   help="withhold AMX from the servers it starts (an AMX box runs the kernels "
                        "of a CPU without it; not with --docs: no family's figures)")
    args = p.parse_args(argv)
    if args.quick:
        args.profile = "quick"
    if args.no_amx and args.docs:
        p.error("--no-amx measures no CPU family's figures: not with --docs")
    return args


def profile_of(args: argparse.Namespace) -> Profile:
    base = PROFILES[args.profile]
    over = {k: v for k, v in (("start", args.start), ("step", args.step),
                              ("interval_s", args.interval_s), ("max_steps", args.max_steps),
                              ("after_knee", args.after_knee), ("confirm", args.confirm))
            if v is not None}
    return dataclasses.replace(base, **over)


def corpus() -> list:
    """Real caller speech: Asterisk prompts of 1-4 s, int16 8 kHz."""
    from cosyvoiced.testing.prompts import prompts

    out = []
    for pr in prompts():
        x = pr.samples()
        if 1.0 < x.shape[0] / 8000 < 4.0:
            out.append((x * 32767).astype("int16"))
        if len(out) >= 60:
            break
    return out


AUTOGROUP = Path("/proc/self/autogroup")


def commit() -> str:
    """The checkout's commit, "+dirty" when the daemon's sources have uncommitted changes."""
    import subprocess

    def git(*a: str) -> str:
        return subprocess.run(["git", "-C", str(REPO), *a], capture_output=True,
                              text=True).stdout.strip()

    head = git("rev-parse", "--short", "HEAD")
    return head + ("+dirty" if head and git("status", "--porcelain", "daemon") else "")


def set_nice(value: int) -> int | None:
    """This process (and what it starts) at `value`; with the kernel's session autogroups
    on, nice only orders tasks within a session, so the session's autogroup gets it too.
    Returns the autogroup's nice before (None: no autogroups), for `restore_autogroup`."""
    try:
        os.setpriority(os.PRIO_PROCESS, 0, value)
        if not AUTOGROUP.exists():
            return None
        before = int(AUTOGROUP.read_text().split()[-1])
        AUTOGROUP.write_text(str(value))
    except PermissionError:  # a negative nice needs root (CAP_SYS_NICE): run as we are
        print(f"loadgen: not allowed to set nice {value}; running at "
              f"{os.getpriority(os.PRIO_PROCESS, 0)}", file=sys.stderr)
        return None
    return before


AHEAD = 5
"""How much less nice than the servers the load generator's loop runs while it measures
(`--nice`): it stands for clients on other machines, and waiting for a CPU behind the
servers it stamped their audio late (the loop 109-160 ms late at 26-30 streams of the mixed
ramp, every call gap it heard there one the daemon's own clock did not have)."""


def measure(args: argparse.Namespace, coro: Coroutine[Any, Any, T]) -> T:
    """Run `coro` with this thread `AHEAD` of the servers' nice (servers are started from
    this thread outside it, so they keep `--nice`)."""
    before = os.getpriority(os.PRIO_PROCESS, 0)
    if args.nice is not None:
        with contextlib.suppress(PermissionError):  # set_nice has said so already
            os.setpriority(os.PRIO_PROCESS, 0, args.nice - AHEAD)  # Linux: this thread only
    try:
        return asyncio.run(coro)
    finally:
        os.setpriority(os.PRIO_PROCESS, 0, before)


def restore_autogroup(before: int | None) -> None:
    """The autogroup outlives this process (the whole session shares it): put it back."""
    if before is not None:
        AUTOGROUP.write_text(str(before))


def run(args: argparse.Namespace, argv: list[str]) -> int:
    mix = parse_mix(args.mix)
    prof = profile_of(args)
    wanted = [] if args.peers in ("", "none") else [x.strip() for x in args.peers.split(",")]
    for w in wanted:
        if w not in PEERS:
            raise SystemExit(f"unknown peer {w!r}; peers: {', '.join(PEERS)}")
    if "call" in mix:
        CallStream.corpus = corpus()
    Stream.script = args.text == "script"
    args.out.mkdir(parents=True, exist_ok=True)
    meta = {"date": datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M UTC"),
            "machine": report.machine(), "loadavg_before": loadavg_1m(),
            "command": shlex.join([".venv/bin/python", "-m", "tools.loadgen", *argv]),
            "profile_name": args.profile, "profile": dataclasses.asdict(prof),
            "cpus": args.cpus, "text": args.text}
    meta["turns"] = not args.sequential
    meta["commit"] = commit()
    autogroup_before = None
    if args.nice is not None:
        autogroup_before = set_nice(args.nice)
        meta["nice"] = os.getpriority(os.PRIO_PROCESS, 0)
        meta["loadgen_nice"] = meta["nice"] - AHEAD
    try:
        return ramps_and_report(args, meta, mix, prof, wanted)
    finally:
        restore_autogroup(autogroup_before)


def ramps_and_report(args: argparse.Namespace, meta: dict, mix: dict[str, float],
                     prof: Profile, wanted: list[str]) -> int:
    ramps: list[RampResult] = []
    with tempfile.TemporaryDirectory(prefix="loadgen-") as tmp_name:
        tmp = Path(tmp_name)
        managed: list[peers.Managed] = []
        try:
            if args.start_daemon:
                daemon, server = peers.start_cosyvoiced(tmp, args.cpus, args.workers,
                                                        daemon_sets(args), has_spare(args))
                managed.append(daemon)
            else:
                server = peers.attach(args.url.rstrip("/"))
            if args.idle_calls and server.ends.audiosocket:
                counts = list(range(0, args.idle_calls + 1, max(1, args.idle_calls // 4)))
                pts = measure(args, idle_calls_pss(server, counts))
                meta["idle_calls"] = {"calls": [n for n, _, _ in pts],
                                      "pss_mb": [round(m, 2) for _, m, _ in pts],
                                      "main_pss_mb": [round(m, 2) for _, _, m in pts]}
            if list(mix) != ["tts"] or not wanted:
                ramps.append(measure(args, ramp(server, mix, prof)))
            if wanted:
                ramps += side_by_side(args, server, wanted, prof, tmp, managed, meta)
        finally:
            for m in managed:
                m.stop()
    return finish(args, meta, ramps)


def daemon_sets(args: argparse.Namespace) -> tuple[str, ...]:
    """The settings of a started daemon: the prompt cache for the script text, then --set."""
    return (*(SCRIPT_CACHE if args.text == "script" else ()), *args.sets)


def has_spare(args: argparse.Namespace) -> bool:
    """Whether a started daemon has a warm spare to wait for (not when --set turns it off)."""
    sets = dict(map(str.strip, x.split("=", 1)) for x in args.sets if "=" in x)
    return sets.get("workers.spare", "true").lower() != "false"


def side_by_side(args: argparse.Namespace, server: Server, wanted: list[str], prof: Profile,
                 tmp: Path, managed: list[peers.Managed], meta: dict) -> list[RampResult]:
    """The TTS-only ramp on cosyvoiced and on each peer: in turns (all servers up, one
    loaded at a time, step by step), or one server after the other (--sequential)."""

    def start(name: str) -> Server | None:
        try:
            if name == "cosyvoiced-noadmit":
                (tmp / name).mkdir()
                m, peer = peers.start_cosyvoiced(tmp / name, args.cpus, args.workers,
                                                 (*NO_ADMISSION, *daemon_sets(args)), has_spare(args))
                peer.name = name
            else:
                fn = peers.start_piper_http if name == "piper-http" else \
                    peers.start_wyoming_piper
                m, peer = fn(tmp, args.cpus, args.peer_timeout_s)
        except peers.PeerError as exc:
            print(f"{name}: not run: {exc}", file=sys.stderr)
            meta.setdefault("peers_not_run", {})[name] = str(exc)[:500]
            return None
        managed.append(m)
        return peer

    ours = (server, {"tts": 1.0})
    if not args.sequential:
        plans = [ours] + [(p, {PEER_KIND[p.name]: 1.0}) for p in map(start, wanted) if p]
        return measure(args, in_turns(plans, prof))
    out = [measure(args, ramp(*ours, prof))]
    if managed:  # our daemon: stopped, so it takes no CPU while the peers run
        managed.pop(0).stop()
    for name in wanted:
        if (p := start(name)) is not None:
            out.append(measure(args, ramp(p, {PEER_KIND[name]: 1.0}, prof)))
            managed.pop().stop()
    return out


def finish(args: argparse.Namespace, meta: dict, ramps: list[RampResult]) -> int:
    meta["loadavg_after"] = loadavg_1m()
    doc = report.summarize(ramps, meta)
    report.write_json(doc, args.out / "loadgen.json")
    return publish(args, doc)


def publish(args: argparse.Namespace, doc: dict) -> int:
    args.out.mkdir(parents=True, exist_ok=True)
    report.plots(doc, args.out)
    (args.out / "loadgen.md").write_text(report.markdown(doc, "."))
    print(report.markdown(doc, None))
    if args.docs:
        kind = section(doc)  # its own section and plots, per CPU family
        plots = DOCS / plots_dir(kind, report.cpu_family(doc.get("machine", {})))
        plots.mkdir(parents=True, exist_ok=True)
        for n in report.PLOTS:
            shutil.copy(args.out / n, plots / n)
        publish_docs(doc, DOCS)
    return 0


def plots_dir(kind: str, family: str) -> str:
    """Where a kind's plots for a CPU family go, relative to docs/ (and to the pages that
    show them)."""
    return f"loadgen/{kind}/{family}" if kind else f"loadgen/{family}"


def publish_docs(doc: dict, docs: Path) -> None:
    """The run in full into its section of the history page and its row into the latest
    figures of the current page, both per kind and CPU family (the pages stay the same size
    however often the ramps run, and one family's run never hides the other's)."""
    kind = section(doc)
    name = f"loadgen-{kind}" if kind else "loadgen"
    family = report.cpu_family(doc.get("machine", {}))
    report.update_docs(docs / HISTORY, report.markdown(doc, plots_dir(kind, family)),
                       f"{name}:{family}", kin=name)
    label, anchor = SECTIONS[kind]
    report.update_row(docs / CURRENT, name, family, report.row(doc, label, f"{HISTORY}#{anchor}"))


def section(doc: dict) -> str:
    """Which section of docs/performance-history.md (and row of docs/performance.md) a run
    goes to: "script" (the call-center script mix), "tts" (unique-text TTS only), "" (any
    other mix)."""
    if doc.get("text") == "script":
        return "script"
    kinds = {tuple(sorted(r["mix"])) for r in doc["ramps"] if r["server"].startswith("cosyvoiced")}
    return "tts" if kinds == {("tts",)} else ""


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    args = parse_args(argv)
    if args.render:
        return publish(args, report.derive(json.loads(args.render.read_text())))
    if args.no_amx:  # inherited by every server started from here
        from tools.quantize.noamx import withhold_amx

        withhold_amx()
    # SIGTERM unwinds like ^C: the daemon and peers it started are stopped, not orphaned
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(128 + signal.SIGTERM))
    return run(args, argv)


if __name__ == "__main__":
    sys.exit(main())


__all__ = ["Server", "main"]
