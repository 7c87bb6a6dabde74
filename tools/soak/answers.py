"""How the soak's hostile clients classify what the daemon answered them, the log lines
it writes when it drops them, and the small wire helpers the actions share."""

from __future__ import annotations

import asyncio
import contextlib
import json
from dataclasses import dataclass

BAD = ("hung", "5xx", "unexpected")
_CALL_ENDED = ("call_ended:protocol_error:oversize_frame", "call_ended:peer_gone",
               "call_ended:peer_closed", "call_refused")
LOGGED_AS = {
    "as_slowloris": ("audiosocket_no_call",), "as_garbage": ("audiosocket_no_call",),
    "as_oversize_frame": _CALL_ENDED, "as_vanish": _CALL_ENDED,
    "wy_slowloris": ("wyoming_idle_timeout",), "wy_garbage": ("wyoming_protocol_error",),
    "wy_oversize": ("wyoming_protocol_error",),
}
"""The log events (call_ended by reason) the daemon writes when it drops each kind of
hostile client (a call refused at admission is logged call_refused instead). A TTS
client leaving mid-reply is logged tts_client_gone / wyoming_client_gone only when the
daemon still had audio to write: with spare worker time the whole reply may already sit
in the socket buffers (counted per window, not held to a line each). The other actions
are answered on the wire (a typed error or an HTTP status) or, for the HTTP slowloris,
closed by aiohttp's timer without a line."""


def is_bad(outcome: str) -> bool:
    return outcome.split(":", 1)[0] in BAD


@dataclass(frozen=True)
class Outcome:
    name: str
    outcome: str
    started_s: float
    took_s: float


def http_outcome(head: bytes, body: bytes) -> str:
    if not head:
        return "closed"
    try:
        code = int(head.split(b" ", 2)[1])
    except (IndexError, ValueError):
        return f"unexpected:{head[:40]!r}"
    typed = ""
    with contextlib.suppress(ValueError, KeyError, TypeError):
        typed = json.loads(body)["error"]["code"]
    if typed and 400 <= code < 600:
        return f"typed:{typed}"
    if 400 <= code < 500:
        return f"http:{code}"
    if code >= 500:
        return f"5xx:{code}"
    return f"unexpected:{code}"


async def read_all(reader: asyncio.StreamReader) -> bytes:
    out = b""
    with contextlib.suppress(ConnectionError):
        while data := await reader.read(65536):
            out += data
    return out


def split_response(data: bytes) -> tuple[bytes, bytes]:
    head, _, body = data.partition(b"\r\n\r\n")
    return head.split(b"\r\n", 1)[0], body


async def trickle(writer: asyncio.StreamWriter, data: bytes,
                   answer: asyncio.Task[str]) -> str:
    """Send `data` a byte a second until the daemon answers (`answer` ends); then (or
    once all is sent) the answer."""
    try:
        for ch in data:
            if answer.done():
                break
            try:
                writer.write(bytes([ch]))
                await writer.drain()
            except ConnectionError:
                break
            await asyncio.wait([answer], timeout=1.0)
        return await answer
    finally:
        answer.cancel()
