"""AudioSocket server: accepts calls, keeps the registry, owns the shared 20 ms clock.

One clock for all calls (not a timer per call, `clock.py`): each tick sends at most one
frame per call, scheduled on absolute deadlines so it does not drift.
"""

from __future__ import annotations

import asyncio
import contextlib

import structlog

from cosyvoiced.config.addr import AUDIOSOCKET_FORMS, ListenAddress, parse_allow_from, peer_allowed
from cosyvoiced.config.listeners import AudioSocketConfig
from cosyvoiced.errors import CosyvoicedError
from cosyvoiced.listen.events import EventBus
from cosyvoiced.runtime.metrics import Metrics
from cosyvoiced.serve.audiosocket.call import Call, listen_rate_for
from cosyvoiced.serve.audiosocket.clock import TICK_S, CallClock
from cosyvoiced.serve.audiosocket.frames import (
    AUDIO_KINDS,
    MAX_FRAME_BYTES,
    Audio,
    CallId,
    Error,
    Frame,
    FrameParser,
    Hangup,
    Kind,
)
from cosyvoiced.serve.peers import refuse_peer
from cosyvoiced.serve.speech import Speech, Unavailable
from cosyvoiced.serve.streams import Refused, Streams

log = structlog.get_logger(__name__)

ACCEPTED_KINDS = frozenset({Kind.HANGUP, Kind.UUID, Kind.DTMF, Kind.ERROR, *AUDIO_KINDS})
MAX_PENDING = 64
"""Connections that have not sent their call id and first audio yet (each waits at most
`first_frame_timeout_s` + `first_frame_wait_ms`); more are closed at once, so a flood of
idle connections cannot pile up. Asterisk sends the id first thing, audio ~0.3 s after."""
DEFAULT_KIND = Kind.SLIN
"""The format a call begins in when its caller sends no audio within `first_frame_wait_ms`
(what the `AudioSocket()` application uses)."""
CALL_BACKLOG_S = 2.0
"""Caller audio a call may hold beyond its capture ring: Asterisk sends 20 ms every 20 ms,
so more is a peer sending faster than real time (dropped, counted, logged)."""


class UnknownCall(CosyvoicedError):
    code = "unknown_call"


class AudioSocketServer:
    def __init__(self, speech: Speech, streams: Streams, bus: EventBus, metrics: Metrics,
                 config: AudioSocketConfig) -> None:
        self.speech = speech
        self.streams = streams
        self.bus = bus
        self.metrics = metrics
        self.config = config
        self.calls: dict[str, Call] = {}
        self.bound = ""
        self.clock = CallClock(TICK_S, metrics, config.rt_priority)
        self._server: asyncio.base_events.Server | None = None
        self._handlers: set[asyncio.Task[None]] = set()
        self._pending = 0
        """Connections waiting for their first frame (`MAX_PENDING` at most)."""

    def call(self, call_id: str) -> Call:
        try:
            return self.calls[call_id]
        except KeyError:
            raise UnknownCall(f"no active call {call_id!r}") from None

    async def start(self) -> None:
        addr = ListenAddress.parse(self.config.listen, AUDIOSOCKET_FORMS)
        self._server = await asyncio.start_server(self._accept, addr.host, addr.port)
        self.bound = f"{addr.bracketed_host}:{self._server.sockets[0].getsockname()[1]}"
        self.clock.start()
        log.info("audiosocket_listening", listen=self.bound)

    async def stop(self) -> None:
        if self._server is None:
            return
        self._server.close()
        for call in list(self.calls.values()):
            call.end("shutdown")
        await asyncio.gather(*self._handlers, return_exceptions=True)
        self.clock.stop()
        await self._server.wait_closed()

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._handlers.add(task)
        try:
            await self._serve(reader, writer)
        except asyncio.CancelledError:
            pass  # server stopping: end quietly (asyncio logs a cancelled client task)
        finally:
            self._handlers.discard(task)

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        peer = writer.get_extra_info("peername")
        if not peer_allowed(peer, parse_allow_from(self.config.allow_from)):
            refuse_peer(writer, "audiosocket", peer)
            return
        if self._pending >= MAX_PENDING:  # connected, no UUID yet: cheap to open, bounded
            refuse_peer(writer, "audiosocket", peer, reason="too many connections without "
                        "a call id yet")
            return
        parser = FrameParser(max_payload_bytes=MAX_FRAME_BYTES, accepted_kinds=ACCEPTED_KINDS)
        self._pending += 1
        try:
            call_id, early = await self._first_frame(reader, parser, peer)
            first = None if call_id is None else await self._caller_kind(reader, parser, early)
        finally:
            self._pending -= 1
        if call_id is None:
            with contextlib.suppress(ConnectionError, RuntimeError):
                writer.write(Hangup().encode())
            writer.close()
            return
        kind = DEFAULT_KIND if first is None else first
        try:
            self.streams.open("call", call_id)
            try:
                listening = await self.speech.listen(listen_rate_for(kind), call_id,
                                                     CALL_BACKLOG_S)
            except BaseException:
                self.streams.close(call_id)
                raise
        except (Refused, Unavailable) as exc:
            self.metrics.refused.labels(exc.code).inc()
            log.warning("call_refused", call_id=call_id, code=exc.code, reason=str(exc))
            writer.write(Hangup().encode())
            writer.close()
            return
        try:
            try:
                call = Call(call_id, reader, writer, parser, self.speech, listening,
                            self.config, self.bus, self.metrics, kind, first is not None)
            except Exception as exc:  # e.g. EMFILE creating its ring: release, hang up
                log.warning("call_setup_failed", call_id=call_id, error=type(exc).__name__)
                try:
                    await listening.close()
                finally:
                    with contextlib.suppress(ConnectionError, RuntimeError):
                        writer.write(Hangup().encode())
                    writer.close()
                return
            self.calls[call_id] = call
            self.clock.add(call)
            try:
                await call.run(early)
            finally:
                self.clock.remove(call)
                self.calls.pop(call_id, None)
        finally:
            self.streams.close(call_id)

    async def _first_frame(self, reader: asyncio.StreamReader, parser: FrameParser,
                           peer: object) -> tuple[str | None, list[Frame]]:
        """The call's UUID and any frames read with it; None (logged) if the peer does not
        start with a UUID frame."""
        try:
            async with asyncio.timeout(self.config.first_frame_timeout_s):
                while True:
                    data = await reader.read(4096)
                    if not data:
                        log.info("audiosocket_no_call", peer=str(peer), reason="closed")
                        return None, []
                    frames = parser.feed(data)
                    if frames:
                        break
                    if parser.error is not None:
                        break
        except TimeoutError:
            log.warning("audiosocket_no_call", peer=str(peer), reason="no_uuid_frame")
            return None, []
        except ConnectionError:
            return None, []
        if not frames or not isinstance(frames[0], CallId):
            reason = parser.error.code if parser.error else f"first frame {frames[0]!r}"
            log.warning("audiosocket_no_call", peer=str(peer), reason=reason)
            return None, []
        return str(frames[0].id), frames[1:]

    async def _caller_kind(self, reader: asyncio.StreamReader, parser: FrameParser,
                           early: list[Frame]) -> int | None:
        """The kind of the caller's first audio frame, which sets the call's format: read
        (into `early`) for up to `first_frame_wait_ms`, nothing sent meanwhile. None: no
        audio by then (the call begins in `DEFAULT_KIND` until it comes), or the call
        ending first (a hangup, an error, a broken frame: the call's reader ends it)."""

        def found(frames: list[Frame]) -> tuple[bool, int | None]:
            for f in frames:
                if isinstance(f, Audio):
                    return True, f.kind
                if isinstance(f, Hangup | Error):
                    return True, None
            return parser.error is not None, None

        done, kind = found(early)
        if done:
            return kind
        try:
            async with asyncio.timeout(self.config.first_frame_wait_ms / 1000):
                while True:
                    data = await reader.read(65536)
                    if not data:
                        return None  # the call's reader sees the end too
                    frames = parser.feed(data)
                    early.extend(frames)
                    done, kind = found(frames)
                    if done:
                        return kind
        except (TimeoutError, ConnectionError):
            pass
        return None
