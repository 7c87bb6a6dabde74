"""`cosyvoicectl`: talk to a running daemon over its control socket."""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any
from urllib.parse import urlencode

import aiohttp

from cosyvoiced.config import ConfigError, load_config
from cosyvoiced.errors import CosyvoicedError

DEFAULT_SOCKET = "/run/cosyvoiced/control.sock"


class CtlError(CosyvoicedError):
    """The daemon could not be reached or answered with an error."""

    code = "ctl_error"


def socket_path(args: argparse.Namespace) -> str:
    if args.socket:
        return args.socket
    if args.config:
        try:
            return load_config(args.config).service.control_socket
        except ConfigError as exc:
            raise CtlError(f"cannot read {args.config}:\n{exc}") from None
    return os.environ.get("COSYVOICED_SOCKET", DEFAULT_SOCKET)


class Client:
    """HTTP over the daemon's Unix socket."""

    def __init__(self, sock: str) -> None:
        self.sock = sock

    def _session(self) -> aiohttp.ClientSession:
        return aiohttp.ClientSession(connector=aiohttp.UnixConnector(path=self.sock),
                                     timeout=aiohttp.ClientTimeout(total=None, connect=10))

    async def request(self, method: str, path: str, **kw: Any) -> Any:
        try:
            async with self._session() as s, s.request(method, f"http://cosyvoiced{path}",
                                                       **kw) as resp:
                data = await resp.json(content_type=None)
                _raise_for(resp.status, data)
                return data
        except (aiohttp.ClientConnectionError, FileNotFoundError) as exc:
            raise CtlError(f"cannot reach the daemon at {self.sock}: {exc}") from None

    async def stream(self, method: str, path: str, sink: Callable[[bytes], None],
                     **kw: Any) -> dict[str, str]:
        """Stream a response body into `sink`; returns the response headers."""
        try:
            async with self._session() as s, s.request(method, f"http://cosyvoiced{path}",
                                                       **kw) as resp:
                if resp.status >= 400:
                    _raise_for(resp.status, await resp.json(content_type=None))
                async for block in resp.content.iter_any():
                    sink(block)
                return dict(resp.headers)
        except (aiohttp.ClientConnectionError, FileNotFoundError) as exc:
            raise CtlError(f"cannot reach the daemon at {self.sock}: {exc}") from None


def _raise_for(status: int, data: Any) -> None:
    if status >= 400:
        err = data.get("error", {}) if isinstance(data, dict) else {}
        raise CtlError(f"{err.get('code', status)}: {err.get('message', data)}")


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
    if "workers" in st:
        lines.append(f"workers:  {st['workers'].get('summary', '')}")
        engines = sorted({w["engine"] for w in st["workers"].get("workers", []) if w.get("engine")})
        lines.append(f"engine:   {', '.join(engines) or 'not reported'}")
    stalled = st.get("health", {}).get("stalled", [])
    lines.append(f"health:   {'ok' if not stalled else 'stalled: ' + ', '.join(stalled)}")
    return "\n".join(lines)


def _print_json(data: Any) -> None:
    print(json.dumps(data, indent=2))


async def run(args: argparse.Namespace) -> int:
    c = Client(socket_path(args))
    cmd = args.command
    if cmd == "status":
        st = await c.request("GET", "/v1/status")
        print(json.dumps(st, indent=2) if args.json else format_status(st))
    elif cmd in ("voices", "streams"):
        data = await c.request("GET", f"/v1/{cmd}")
        if args.json:
            _print_json(data)
        elif cmd == "voices":
            for v in data["voices"]:
                print(f"{v['name']}  {v['language']}  {v['sample_rate_hz']} Hz")
        else:
            for s in data["streams"]:
                print(f"{s['id']}  {s['kind']}  {s['age_s']:.1f} s")
    elif cmd == "say":
        body = {"text": args.text, "voice": args.voice, "rate_hz": args.rate,
                "format": args.format, "ssml": args.ssml}
        body = {k: v for k, v in body.items() if v is not None}
        out = sys.stdout.buffer if args.output == "-" else open(args.output, "wb")  # noqa: SIM115
        try:
            headers = await c.stream("POST", "/v1/tts", lambda b: (out.write(b), out.flush()),
                                     json=body)
        finally:
            if out is not sys.stdout.buffer:
                out.close()
        if args.output != "-":
            print(f"wrote {args.output} ({headers.get('X-Sample-Rate')} Hz, first audio after "
                  f"{headers.get('X-Time-To-First-Audio-Ms')} ms)", file=sys.stderr)
    elif cmd == "play":
        body = {"text": args.text, "device": args.device, "voice": args.voice}
        _print_json(await c.request("POST", "/v1/play",
                                    json={k: v for k, v in body.items() if v is not None}))
    elif cmd == "transcribe":
        data = Path(args.file).read_bytes()
        ctype = "audio/wav" if data[:4] == b"RIFF" else "application/octet-stream"
        query = urlencode({"rate_hz": args.rate, **({"language": args.language}
                                                     if args.language else {}),
                           **({"words": "true"} if args.words else {})})
        res = await c.request("POST", f"/v1/transcribe?{query}", data=data,
                              headers={"Content-Type": ctype})
        if args.json:
            _print_json(res)
        elif args.words:  # one word a line: start and end in seconds, then the word
            for w in (w for s in res["segments"] for w in s.get("words", ())):
                print(f"{w['start']:8.3f} {w['end']:8.3f}  {w['word']}")
        else:
            print(res["text"])
    elif cmd == "events":
        query = f"?stream={args.stream}" if args.stream else ""

        def show(block: bytes) -> None:
            for line in block.decode(errors="replace").splitlines():
                if line.startswith("data: "):
                    print(line.removeprefix("data: "), flush=True)
        await c.stream("GET", f"/v1/events{query}", show)
    elif cmd == "calls":
        if args.action == "list":
            _print_json(await c.request("GET", "/v1/calls"))
        elif args.action == "say":
            _print_json(await c.request("POST", f"/v1/calls/{args.id}/say",
                                        json={"text": args.text}))
        else:  # stop, hangup
            _print_json(await c.request("POST", f"/v1/calls/{args.id}/{args.action}"))
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="cosyvoicectl", description=__doc__)
    parser.add_argument("--socket", help=f"control socket (env COSYVOICED_SOCKET; "
                                         f"default {DEFAULT_SOCKET})")
    parser.add_argument("--config", help="take the control socket from this config file")
    parser.add_argument("--json", action="store_true", help="print the raw JSON answer")
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("status", help="state, uptime, version, active streams")
    sub.add_parser("voices", help="installed voices")
    sub.add_parser("streams", help="active streams")
    say = sub.add_parser("say", help="synthesize text to a file (or - for stdout)")
    say.add_argument("text")
    say.add_argument("-o", "--output", default="-")
    say.add_argument("--voice")
    say.add_argument("--rate", type=int)
    say.add_argument("--format", choices=["wav", "s16le", "float32", "mulaw"], default="wav")
    say.add_argument("--ssml", action="store_true", default=None)
    play = sub.add_parser("play", help="speak on a local playback device")
    play.add_argument("text")
    play.add_argument("--device")
    play.add_argument("--voice")
    tr = sub.add_parser("transcribe", help="transcribe a WAV file (or raw s16le PCM)")
    tr.add_argument("file")
    tr.add_argument("--rate", type=int, default=16000, help="rate of raw PCM input")
    tr.add_argument("--language", help="language spoken (default: asr.language, else detected "
                                       "by a multilingual model)")
    tr.add_argument("--words", action="store_true",
                    help="each word with its start and end (seconds into the file)")
    ev = sub.add_parser("events", help="follow voice and transcript events")
    ev.add_argument("--stream", help="only this stream or call id")
    calls = sub.add_parser("calls", help="live AudioSocket calls")
    csub = calls.add_subparsers(dest="action", required=True)
    csub.add_parser("list")
    cs = csub.add_parser("say")
    cs.add_argument("id")
    cs.add_argument("text")
    cst = csub.add_parser("stop")
    cst.add_argument("id")
    chg = csub.add_parser("hangup")
    chg.add_argument("id")
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return asyncio.run(run(args))
    except CtlError as exc:
        print(f"cosyvoicectl: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
