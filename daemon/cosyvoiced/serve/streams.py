"""Registry of active streams (calls, HTTP syntheses, Wyoming sessions, devices).

It owns admission at the top level (draining, the `max_streams` cap) and lets shutdown
wait for active streams to finish. Per-worker load-based admission is the workers' own.
"""

from __future__ import annotations

import asyncio
import itertools
import time
from dataclasses import dataclass, field

from cosyvoiced.errors import CosyvoicedError


class Refused(CosyvoicedError):
    """A new stream was not admitted; `code` says why."""

    def __init__(self, code: str, message: str) -> None:
        self.code = code
        super().__init__(message)


@dataclass
class StreamInfo:
    id: str
    kind: str
    """"call", "tts", "transcribe", "wyoming", "device", ..."""
    started_s: float = field(default_factory=time.monotonic)


RESERVED_KIND = "call"
"""The kind the reserve is kept for: a phone call cannot retry later as an HTTP client can."""


class Streams:
    def __init__(self, max_streams: int, reserved_for_calls: int = 0) -> None:
        self.max_streams = max_streams
        self.reserved_for_calls = reserved_for_calls
        """The last this many of `max_streams` admit only calls (counted in streams)."""
        self.accepting = True
        self._active: dict[str, StreamInfo] = {}
        self._ids = itertools.count(1)
        self._empty = asyncio.Event()
        self._empty.set()

    def __len__(self) -> int:
        return len(self._active)

    def open(self, kind: str, stream_id: str | None = None) -> StreamInfo:
        if not self.accepting:
            raise Refused("draining", "the daemon is shutting down and takes no new streams")
        if len(self._active) >= self.max_streams:
            raise Refused("overloaded", f"at the max_streams cap ({self.max_streams})")
        if kind != RESERVED_KIND and \
                len(self._active) >= self.max_streams - min(self.reserved_for_calls,
                                                            self.max_streams - 1):
            raise Refused("overloaded", f"the last {self.reserved_for_calls} of "
                          f"{self.max_streams} streams are kept for calls")
        sid = stream_id or f"{kind}-{next(self._ids)}"
        if sid in self._active:
            raise Refused("duplicate_stream", f"stream {sid!r} is already active")
        info = StreamInfo(sid, kind)
        self._active[sid] = info
        self._empty.clear()
        return info

    def close(self, stream_id: str) -> None:
        self._active.pop(stream_id, None)
        if not self._active:
            self._empty.set()

    def snapshot(self) -> list[StreamInfo]:
        return list(self._active.values())

    async def wait_empty(self, timeout_s: float) -> bool:
        """True if every stream finished within the timeout."""
        try:
            await asyncio.wait_for(self._empty.wait(), timeout_s)
            return True
        except TimeoutError:
            return False
