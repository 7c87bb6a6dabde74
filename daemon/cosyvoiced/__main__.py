"""`cosyvoiced`: run the daemon, check a config, speak text without a daemon, assemble
the multilingual Whisper base.

Exit codes are decided here only: 0 ok, 1 runtime failure, 2 usage, 78 bad config
(EX_CONFIG: also a model the config names missing at start), 128+N after a forced stop
by signal N.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys

import structlog

from cosyvoiced import __version__
from cosyvoiced.config import DEFAULT_CONFIG_PATH, ConfigError, dump_config, load_config
from cosyvoiced.listen.models import add_models_parser, run_models
from cosyvoiced.runtime.log import setup_logging
from cosyvoiced.tts.cli import add_say_parser, run_say

EX_CONFIG = 78


def _config_path(arg: str | None) -> str:
    return arg or os.environ.get("COSYVOICED_CONFIG") or DEFAULT_CONFIG_PATH


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="cosyvoiced", description=__doc__.splitlines()[0])
    parser.add_argument("--version", action="version", version=f"cosyvoiced {__version__}")
    sub = parser.add_subparsers(dest="command", required=True)

    run = sub.add_parser("run", help="run the daemon in the foreground")
    run.add_argument("--config", help=f"config file (env COSYVOICED_CONFIG; default "
                                      f"{DEFAULT_CONFIG_PATH})")
    run.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                     help="override a config key, e.g. --set log.level=debug (repeatable)")

    check = sub.add_parser("check-config", help="validate a config and print it as TOML, "
                                                "with the workers' CPU plan on this machine")
    check.add_argument("path")
    check.add_argument("--set", action="append", default=[], metavar="KEY=VALUE")
    add_say_parser(sub)
    add_models_parser(sub)
    return parser


def cmd_check_config(args: argparse.Namespace) -> int:
    try:
        config = load_config(args.path, args.set)
    except ConfigError as exc:
        for problem in exc.problems:
            print(problem, file=sys.stderr)
        return EX_CONFIG
    from cosyvoiced.tts.frontend.lexicon import LexiconError, load_lexicon

    try:
        load_lexicon(config.tts.lexicon)
    except LexiconError as exc:
        print(f"tts.lexicon: {exc}", file=sys.stderr)
        return EX_CONFIG
    sys.stdout.write(dump_config(config))
    sys.stdout.write(cpu_plan_comment(config.workers))
    return 0


def cpu_plan_comment(workers: object) -> str:
    """Where the workers would run on this machine, as TOML comments (a `workers.cpus`
    this machine cannot give is said there: the config may be meant for another box)."""
    from cosyvoiced.workers.errors import CpuConfigError
    from cosyvoiced.workers.pool.placement import CpuPlan

    try:
        lines = CpuPlan.for_config(workers).lines()
    except CpuConfigError as exc:
        lines = [f"none: {exc}"]
    return "\n# CPU plan on this machine:\n" + "".join(f"#   {line}\n" for line in lines)


def cmd_run(args: argparse.Namespace) -> int:
    path = _config_path(args.config)
    try:
        config = load_config(path, args.set)
    except ConfigError as exc:
        setup_logging()
        structlog.get_logger("cosyvoiced").error(
            "bad_config", config=path, errors=[str(p) for p in exc.problems])
        return EX_CONFIG
    setup_logging(config.log.level, config.log.sink, config.log.journal_socket)
    from cosyvoiced.service import Daemon

    log = structlog.get_logger("cosyvoiced")
    try:
        return asyncio.run(Daemon(config, path, args.set).run())
    except ConfigError as exc:  # a model the config names is missing: no restart loop
        log.error("bad_config", config=path, errors=[str(p) for p in exc.problems])
        return EX_CONFIG
    except Exception as exc:  # the daemon could not start or crashed: say why, exit 1
        log.exception("daemon_failed", error=str(exc), code=getattr(exc, "code", "internal"))
        return 1


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if args.command == "run":
        return cmd_run(args)
    if args.command == "check-config":
        return cmd_check_config(args)
    if args.command == "say":
        return run_say(args)
    if args.command == "whisper-base":
        return run_models(args)
    return 2


if __name__ == "__main__":
    sys.exit(main())
