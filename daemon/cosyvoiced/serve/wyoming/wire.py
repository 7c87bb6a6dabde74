"""Reading Wyoming events with limits and typed errors.

The `wyoming` package's own reader treats malformed input as end-of-stream and reads
whatever length a peer announces; this one bounds every length and says what was wrong.
Messages themselves are the package's Eventable dataclasses.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

from wyoming.event import Event

from cosyvoiced.errors import CosyvoicedError

MAX_LINE_BYTES = 64 * 1024
MAX_DATA_BYTES = 1024 * 1024
MAX_PAYLOAD_BYTES = 1024 * 1024


class WyomingProtocolError(CosyvoicedError):
    """The peer sent something that is not a well-formed Wyoming event."""

    def __init__(self, code: str, message: str) -> None:
        self.code = code
        super().__init__(message)


def _length(header: dict[str, Any], key: str, limit: int) -> int:
    value = header.get(key)
    if value is None:
        return 0
    if not isinstance(value, int) or isinstance(value, bool) or value < 0:
        raise WyomingProtocolError("bad_header", f"{key} must be a non-negative integer")
    if value > limit:
        raise WyomingProtocolError("too_large", f"{key} {value} exceeds {limit} bytes")
    return value


def parse_header(line: bytes) -> tuple[dict[str, Any], int, int]:
    """The JSON header line -> (header, data_length, payload_length)."""
    try:
        header = json.loads(line)
    except (UnicodeDecodeError, json.JSONDecodeError, RecursionError) as exc:
        raise WyomingProtocolError("bad_json", f"header is not JSON: {exc}") from None
    if not isinstance(header, dict) or not isinstance(header.get("type"), str):
        raise WyomingProtocolError("bad_header", 'header must be an object with a "type"')
    if not isinstance(header.get("data", {}), dict):
        raise WyomingProtocolError("bad_header", '"data" must be an object')
    return (header, _length(header, "data_length", MAX_DATA_BYTES),
            _length(header, "payload_length", MAX_PAYLOAD_BYTES))


async def read_event(reader: asyncio.StreamReader) -> Event | None:
    """Next event, or None at a clean end of stream (EOF between events)."""
    try:
        line = await reader.readuntil(b"\n")
    except asyncio.IncompleteReadError as exc:
        if not exc.partial.strip():
            return None
        raise WyomingProtocolError("truncated", "connection ended inside a header") from None
    except asyncio.LimitOverrunError:
        raise WyomingProtocolError("too_large", "header line too long") from None
    if not line.strip():
        raise WyomingProtocolError("bad_json", "empty header line")
    header, data_length, payload_length = parse_header(line)
    data = dict(header.get("data") or {})
    try:
        if data_length:
            extra = json.loads(await reader.readexactly(data_length))
            if not isinstance(extra, dict):
                raise WyomingProtocolError("bad_header", "data block must be an object")
            data.update(extra)
        payload = await reader.readexactly(payload_length) if payload_length else None
    except asyncio.IncompleteReadError:
        raise WyomingProtocolError("truncated", "connection ended inside an event") from None
    except (UnicodeDecodeError, json.JSONDecodeError, RecursionError) as exc:
        raise WyomingProtocolError("bad_json", f"data block is not JSON: {exc}") from None
    return Event(type=header["type"], data=data, payload=payload)
