#!/usr/bin/env python3
"""Benchmarks an operator runs by hand: `python -m tools.bench SUITE [--json] [--quick]
[--no-amx]`.

Each suite is a module `tools/bench/SUITE.py` with `run(quick: bool) -> Report`.
The table is printed first, then the suite's targets, one per line:
name, measured value, goal, ok/FAIL. `--json` prints one JSON object instead.
"""

from __future__ import annotations

import argparse
import importlib
import json
import sys

from tools.bench.report import Report

SUITES = ("tts", "download", "prompts", "io", "streams", "sched", "features", "asr", "listen",
          "calls", "encode", "scaleout", "language",
          "memory", "tn", "words", "ttswords", "judge", "tncost", "bargein", "console")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("suite", choices=SUITES)
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    parser.add_argument("--quick", action="store_true", help="short run (smoke test)")
    parser.add_argument("--no-amx", action="store_true",
                        help="withhold AMX from the suite and what it starts: an AMX box "
                             "measures the kernels of a CPU without it")
    args = parser.parse_args(argv)
    if args.no_amx:
        from tools.quantize.noamx import withhold_amx

        withhold_amx()
    try:
        module = importlib.import_module(f"tools.bench.{args.suite}")
    except ModuleNotFoundError as exc:
        if exc.name != f"tools.bench.{args.suite}":
            raise
        print(f"suite {args.suite!r} is not built yet", file=sys.stderr)
        return 2
    report: Report = module.run(quick=args.quick)
    if args.no_amx:
        report.notes.append("AMX withheld from this run (--no-amx)")
    print(json.dumps(report.to_json(), indent=2) if args.json else report.render())
    return 0 if all(t.ok for t in report.targets) else 1


if __name__ == "__main__":
    sys.exit(main())
