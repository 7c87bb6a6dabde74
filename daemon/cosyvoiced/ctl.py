"""`cosyvoicectl`: talk to a running daemon over its control socket."""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
from typing import Any

import aiohttp

from .config import ConfigError, load_config

DEFAULT_SOCKET = "/run/cosyvoiced/control.sock"


class CtlError(Exception):
    """The daemon could not be reached or answered with an error."""


def socket_path(args: argparse.Namespace) -> str:
    if args.socket:
        return args.socket
    if args.config:
        try:
            return load_config(args.config).service.control_socket
        except ConfigError as exc:
            raise CtlError(f"cannot read {args.config}:\n{exc}") from None
    return os.environ.get("COSYVOICED_SOCKET", DEFAULT_SOCKET)


async def request(sock: str, method: str, path: str, body: Any = None) -> Any:
    try:
        async with aiohttp.ClientSession(connector=aiohttp.UnixConnector(path=sock)) as s:
            async with s.request(method, f"http://cosyvoiced{path}", json=body) as resp:
                data = await resp.json(content_type=None)
                if resp.status >= 400:
                    err = data.get("error", {}) if isinstance(data, dict) else {}
                    raise CtlError(f"{err.get('code', resp.status)}: {err.get('message', data)}")
                return data
    except (aiohttp.ClientConnectionError, FileNotFoundError) as exc:
        raise CtlError(f"cannot reach the daemon at {sock}: {exc}") from None


def format_status(st: dict[str, Any]) -> str:
    streams = st["streams"]
    lines = [
        f"state:    {st['state']}",
        f"version:  {st['version']}",
        f"pid:      {st['pid']}",
        f"uptime:   {st['uptime_s']:.1f} s",
        f"streams:  {streams['active']} active (max {streams['max']})",
    ]
    lines += [f"  {s['id']}  {s['kind']}  {s['age_s']:.1f} s" for s in streams["list"]]
    stalled = st.get("health", {}).get("stalled", [])
    lines.append(f"health:   {'ok' if not stalled else 'stalled: ' + ', '.join(stalled)}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="cosyvoicectl", description=__doc__)
    parser.add_argument("--socket", help=f"control socket (env COSYVOICED_SOCKET; "
                                         f"default {DEFAULT_SOCKET})")
    parser.add_argument("--config", help="take the control socket from this config file")
    parser.add_argument("--json", action="store_true", help="print the raw JSON answer")
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("status", help="state, uptime, version, active streams")
    args = parser.parse_args(argv)
    try:
        sock = socket_path(args)
        if args.command == "status":
            st = asyncio.run(request(sock, "GET", "/v1/status"))
            print(json.dumps(st, indent=2) if args.json else format_status(st))
    except CtlError as exc:
        print(f"cosyvoicectl: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
