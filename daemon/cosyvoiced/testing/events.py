"""Following a daemon's event feed (`GET /v1/events`, SSE) from tests, benches and tools."""

from __future__ import annotations

import asyncio
import contextlib
import json
import time

from aiohttp import ClientError, ClientSession, ClientTimeout


async def follow_events(http: str, sink: list, stop: asyncio.Event, *,
                        stamped: bool = False) -> None:
    """Append each event of the feed at `http` to `sink` as a dict (`(time.monotonic(),
    event)` with `stamped`) until `stop` is set, seen as the next line comes; a daemon
    stopped under us ends the feed."""
    with contextlib.suppress(ClientError, ConnectionError):
        async with ClientSession(timeout=ClientTimeout(total=None)) as s, \
                s.get(f"{http}/v1/events") as r:
            async for line in r.content:
                if line.startswith(b"data: "):
                    event = json.loads(line[6:])
                    sink.append((time.monotonic(), event) if stamped else event)
                if stop.is_set():
                    return
