#!/usr/bin/env python3
"""Soak: the real daemon under honest load and a hostile mix, window after window.

    python -m tools.soak [--minutes 30] [--quick [--window-s 30]] [--json] [--keep DIR]

It starts the daemon (2 workers on CPUs 0-1, AudioSocket, HTTP and Wyoming on free
loopback ports, the limits of configs/callcenter.toml scaled to a 2-core box) and, for
each window (5 minutes; 30 s with --quick, which runs ~2 minutes with fewer clients),
runs at the same time: honest AudioSocket calls with real Asterisk prompts (~35% speech,
a TTS reply after each utterance), HTTP TTS streams, Wyoming synthesize and transcribe
clients; the hostile mix (slowloris on each listener, oversize frames and messages,
garbage peers, a faster-than-real-time AudioSocket feeder, SSML amplifiers, a plain GET
on the WebSocket route, clients vanishing mid-stream); and a SIGKILL of one inference
worker. Then a quiet phase: once the daemon has settled its memory, open files, ring
segments and stream slots are read again.

Per window: RSS and PSS of the process tree, open fds, /dev/shm rings, stream slots
(after, and the peak under load), worker restarts, honest calls answered, their
underruns (the daemon's count per call, apart from those near a kill) and the callers'
own clock gaps, refusals, honest TTS/ASR requests served, hostile actions by outcome.
Targets (ok/FAIL; exit status 1 on any FAIL): back to baseline within 5% after each
load, no underrun on honest calls outside a kill's grace, every honest call answered,
every hostile action answered (no hang past its deadline, no 5xx), the systemd watchdog
(played by the soak: WATCHDOG_USEC=20 s) never starved, the same main pid throughout,
every killed worker replaced. --keep DIR keeps the daemon's log (DIR/daemon.log), where
each reply that ran dry is a call_underrun line.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from tools.soak.run import render_json, run


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter,
                                epilog="\n".join(__doc__.splitlines()[1:]))
    p.add_argument("--minutes", type=float, default=None,
                   help="length of the run (default 30; 2 with --quick)")
    p.add_argument("--quick", action="store_true", help="30 s windows, fewer clients")
    p.add_argument("--window-s", type=float, default=None,
                   help="with --quick: windows of this length (default 30; the load two "
                        "thirds of it)")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.add_argument("--keep", type=Path, metavar="DIR", help="keep the daemon's log in DIR")
    args = p.parse_args(argv)
    minutes = args.minutes if args.minutes is not None else (2.0 if args.quick else 30.0)
    if args.window_s is not None and not args.quick:
        p.error("--window-s needs --quick")
    report = run(minutes, args.quick,
                 log=lambda line: print(line, file=sys.stderr, flush=True), keep=args.keep,
                 window_s=args.window_s)
    print(render_json(report) if args.json else report.render())
    return 0 if all(t.ok for t in report.targets) else 1
