"""What the control plane holds for one stream: its ring, its events, say/cancel/close.

Handles live on the asyncio loop that opened them; the pool's supervisor thread hands
them worker events (`deliver`, `worker_lost`) with `call_soon_threadsafe`, so their
state is only touched on the loop. The ring is created (and finally unlinked) by the
handle's side: the I/O side consumes a TTS stream's playback ring and produces a listen
stream's capture ring. A handle reaches its worker only through `StreamHost` (the pool
implements it), so this module imports no other part of the pool.
"""

from __future__ import annotations

import asyncio
import itertools
from typing import Any, Protocol

from cosyvoiced.audio.ring import Ring
from cosyvoiced.workers import messages as m
from cosyvoiced.workers.errors import StreamClosed, WorkerError, WorkerLost

_request_ids = itertools.count(1)


def _died(worker: int, how: str) -> str:
    """The start of a worker_lost message: which worker died, and how if known."""
    return f"worker {worker} died" + (f" ({how})" if how else "")


class StreamHost(Protocol):
    """What a handle needs from the pool that opened it."""

    def say(self, handle: TtsHandle, request_id: int, text: str, options: Any,
            was_idle: bool) -> None:
        """Send a request to the handle's worker (Overloaded, WorkerLost)."""

    def speaking_changed(self, handle: TtsHandle) -> None:
        """The handle's last outstanding request settled."""

    def send_to(self, handle: StreamHandle, msg: object) -> None:
        """Send a control message to the handle's worker, if it has one."""

    def close_stream(self, handle: StreamHandle) -> None:
        """Forget the stream and close it in its worker."""


class StreamHandle:
    kind = "stream"

    def __init__(self, host: StreamHost, stream_id: str, worker: int, ring: Ring,
                 rate_hz: int) -> None:
        self.host = host
        self.stream_id = stream_id
        self.worker = worker
        self.ring = ring
        self.rate_hz = rate_hz
        self.loop = asyncio.get_running_loop()
        self.events: asyncio.Queue[Any] = asyncio.Queue()
        """Worker events for this stream, in order (FirstAudio, SayDone, StreamError,
        ListenEvent)."""
        self.closed = False
        self.lost = 0
        """Times the worker under this stream died (the stream was moved each time)."""

    def open_message(self) -> object:
        """What opens this stream in a worker (sent again to a worker that replaces one)."""
        raise NotImplementedError

    def _check_open(self) -> None:
        if self.closed:
            raise StreamClosed(f"stream {self.stream_id} is closed")

    def deliver(self, msg: object) -> None:
        """A worker event for this stream (on the loop; the supervisor schedules it)."""
        self.events.put_nowait(msg)

    def worker_lost(self, how: str = "") -> None:
        """The worker under this stream died, `how` (on the loop; the supervisor schedules
        it)."""
        self.lost += 1

    async def close(self) -> None:
        """Stop the stream in its worker and free its ring."""
        if self.closed:
            return
        self.closed = True
        self.host.close_stream(self)
        self.ring.close()
        try:
            self.ring.unlink()
        except FileNotFoundError:
            pass


class TtsHandle(StreamHandle):
    """A playback stream: `say()` queues text; audio arrives in `ring` (float32 mono)."""

    kind = "tts"

    def __init__(self, *args: Any, **kw: Any) -> None:
        super().__init__(*args, **kw)
        self.outstanding: set[int] = set()
        """Requests whose audio is not all in the ring yet."""
        self._futures: dict[int, asyncio.Future[m.SayDone]] = {}
        self.first_audio: dict[int, float] = {}
        """request id -> seconds from the worker receiving it to its first audio."""

    @property
    def speaking(self) -> bool:
        return bool(self.outstanding)

    async def say(self, text: str, options: Any = None) -> int:
        """Queue `text`; returns its request id. Overloaded if the worker cannot take it."""
        self._check_open()
        request_id = next(_request_ids)
        self.host.say(self, request_id, text, options, was_idle=not self.outstanding)
        self.outstanding.add(request_id)
        self._futures[request_id] = self.loop.create_future()
        return request_id

    async def wait(self, request_id: int) -> m.SayDone:
        """Until the request's audio is all in the ring (or it failed: typed error)."""
        fut = self._futures.get(request_id)
        if fut is None:
            raise WorkerError(f"no request {request_id} to wait for on {self.stream_id}",
                              code="unknown_request")
        try:
            return await asyncio.shield(fut)
        finally:
            if fut.done():
                self._futures.pop(request_id, None)

    async def cancel(self) -> None:
        """Drop everything queued for this stream at once (barge-in, hangup)."""
        if not self.closed:
            self.host.send_to(self, m.Cancel(self.stream_id))

    def open_message(self) -> m.OpenTts:
        return m.OpenTts(self.stream_id, self.ring.name, self.rate_hz)

    def deliver(self, msg: object) -> None:
        if isinstance(msg, m.FirstAudio):
            self.first_audio[msg.request_id] = msg.latency_s
        elif isinstance(msg, m.SayDone | m.StreamError):
            self._settle(msg.request_id, msg)
        super().deliver(msg)

    def _settle(self, request_id: int, msg: m.SayDone | m.StreamError) -> None:
        self.outstanding.discard(request_id)
        fut = self._futures.get(request_id)
        if fut is not None and not fut.done():
            if isinstance(msg, m.SayDone):
                fut.set_result(msg)
            else:
                fut.set_exception(WorkerError(msg.message, code=msg.code))
                fut.exception()  # retrieved here: a caller that never waits leaks nothing
        if not self.outstanding:
            self.host.speaking_changed(self)

    def worker_lost(self, how: str = "") -> None:
        super().worker_lost(how)
        if not self.closed:  # closed since the supervisor scheduled this: its ring is gone
            self.ring.set_playing(False)  # the producer is gone; the new one starts clean
        for request_id in list(self.outstanding):
            msg = m.StreamError(self.stream_id, request_id, WorkerLost.code,
                                f"{_died(self.worker, how)} while synthesizing")
            self.deliver(msg)


class ListenHandle(StreamHandle):
    """A capture stream: write float32 mono at `rate_hz` into `ring`; events arrive."""

    kind = "listen"

    def __init__(self, *args: Any, **kw: Any) -> None:
        super().__init__(*args, **kw)
        self._flushed: asyncio.Future[bool] | None = None
        self.language = ""
        """Language code its utterances are transcribed in ("": the model's choice)."""
        self.words = False
        """Its transcripts carry word times."""

    def open_message(self) -> m.OpenListen:
        return m.OpenListen(self.stream_id, self.ring.name, self.rate_hz, self.language,
                            self.words)

    def deliver(self, msg: object) -> None:
        if isinstance(msg, m.StreamClosed):
            if self._flushed is not None and not self._flushed.done():
                self._flushed.set_result(True)
            return
        super().deliver(msg)

    def worker_lost(self, how: str = "") -> None:
        super().worker_lost(how)
        self.deliver(m.StreamError(self.stream_id, -1, WorkerLost.code,
                                    f"{_died(self.worker, how)}; VAD state was reset"))
        if self._flushed is not None and not self._flushed.done():
            self._flushed.set_result(False)

    async def flush_close(self, timeout_s: float) -> bool:
        """Close after the worker has read the ring to its end, ended an open utterance
        and sent its transcript (events before the ack are in `events`); False if the
        ack did not come within `timeout_s` (or the worker died). Then `close()`."""
        if self.closed:
            return False
        self._flushed = fut = self.loop.create_future()
        try:
            self.host.send_to(self, m.CloseStream(self.stream_id))
            return await asyncio.wait_for(fut, timeout_s)
        except TimeoutError:
            return False
        finally:
            await self.close()
