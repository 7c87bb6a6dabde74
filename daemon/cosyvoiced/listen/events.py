"""Listening events and the in-process event bus that carries them.

One dataclass per event, each with `to_dict()` (the wire form the API will expose). The
bus is publish/subscribe with a bounded queue per subscriber: a subscriber that falls
behind loses its own oldest events (and counts them); publishers never block or wait.
`publish` may be called from any thread; subscribers read with `await sub.get()` (or
`async for`) on their event loop, or poll with `get_nowait()`.
"""

from __future__ import annotations

import asyncio
import threading
from collections import deque
from collections.abc import AsyncIterator, Iterable
from dataclasses import asdict, dataclass
from typing import Any, ClassVar

__all__ = ["BargeIn", "CallEnded", "CallStarted", "DtmfPressed", "Event", "EventBus",
           "HeardWord", "PlaybackDone", "PlaybackStarted", "Subscription", "Transcript", "VoiceStarted",
           "VoiceStopped", "Word"]


@dataclass(frozen=True, slots=True)
class VoiceStarted:
    """Speech began at `start_ms` (stream-relative, start of the first speech window)."""

    type: ClassVar[str] = "voice_started"
    start_ms: int
    stream: str = ""

    def to_dict(self) -> dict[str, Any]:
        return {"type": self.type, **asdict(self)}


@dataclass(frozen=True, slots=True)
class VoiceStopped:
    """Speech from `start_ms` to `end_ms` ended (silence, the length cap, or stream end)."""

    type: ClassVar[str] = "voice_stopped"
    start_ms: int
    end_ms: int
    reason: str = "silence"
    """silence | max_length | closed"""
    stream: str = ""

    def to_dict(self) -> dict[str, Any]:
        return {"type": self.type, **asdict(self)}


@dataclass(frozen=True, slots=True)
class Word:
    """One transcribed word and when it was spoken (Whisper's alignment, listen/words.py)."""

    word: str
    start_s: float
    """Seconds from the start of the stream (an upload: from the start of the file)."""
    end_s: float
    probability: float
    """Mean probability of the word's tokens."""

    def to_dict(self) -> dict[str, Any]:
        """The wire form, OpenAI's word shape: `{"word", "start", "end"}` in seconds, plus
        `probability`."""
        return {"word": self.word, "start": self.start_s, "end": self.end_s,
                "probability": self.probability}


@dataclass(frozen=True, slots=True)
class Transcript:
    """Text of the utterance `start_ms`..`end_ms`; `latency_ms` from end of speech to text."""

    type: ClassVar[str] = "transcript"
    text: str
    start_ms: int
    end_ms: int
    latency_ms: float
    rtf: float
    """Decoding time / utterance duration."""
    stream: str = ""
    language: str = ""
    """Code of the language it was transcribed in (asked, or detected by a multilingual
    model)."""
    words: tuple[Word, ...] | None = None
    """Its words with their times, when the stream asked for them (None: not asked; the
    wire form then has no `words` key)."""

    def to_dict(self) -> dict[str, Any]:
        out = {"type": self.type, "text": self.text, "start_ms": self.start_ms,
               "end_ms": self.end_ms, "latency_ms": self.latency_ms, "rtf": self.rtf,
               "stream": self.stream, "language": self.language}
        if self.words is not None:
            out["words"] = [w.to_dict() for w in self.words]
        return out


@dataclass(frozen=True, slots=True)
class DtmfPressed:
    """A DTMF digit from a caller, `at_ms` into the call."""

    type: ClassVar[str] = "dtmf"
    digit: str
    at_ms: int
    stream: str = ""

    def to_dict(self) -> dict[str, Any]:
        return {"type": self.type, **asdict(self)}


@dataclass(frozen=True, slots=True)
class CallStarted:
    """A phone call (`stream`: its id) began; we reply in its `format` (`slin16`, ...)."""

    type: ClassVar[str] = "call_started"
    format: str
    rate_hz: int
    stream: str = ""

    def to_dict(self) -> dict[str, Any]:
        return {"type": self.type, **asdict(self)}


@dataclass(frozen=True, slots=True)
class CallEnded:
    """A call ended after `duration_s`; `reason`: hangup (the caller), hangup_requested
    (`POST .../hangup`), peer_closed, peer_gone, peer_silent, slow_peer, shutdown,
    protocol_error:CODE, asterisk_error:CODE."""

    type: ClassVar[str] = "call_ended"
    reason: str
    duration_s: float
    stream: str = ""

    def to_dict(self) -> dict[str, Any]:
        return {"type": self.type, **asdict(self)}


@dataclass(frozen=True, slots=True)
class PlaybackStarted:
    """The first audio of `say_id` is going out to the caller."""

    type: ClassVar[str] = "playback_started"
    say_id: str
    stream: str = ""

    def to_dict(self) -> dict[str, Any]:
        return {"type": self.type, **asdict(self)}


@dataclass(frozen=True, slots=True)
class HeardWord:
    """A word of a say whose audio reached the caller (`serve/audiosocket/heard.py`)."""

    text: str
    """As written in the say's text (`text[char_start:char_end]`)."""
    char_start: int
    char_end: int
    start_s: float
    """Seconds into the say's audio."""
    end_s: float
    partial: bool = False
    """Cut: its audio was still going out when the say stopped."""

    def to_dict(self) -> dict[str, Any]:
        return {"text": self.text, "char_start": self.char_start, "char_end": self.char_end,
                "start": round(self.start_s, 3), "end": round(self.end_s, 3),
                "partial": self.partial}


@dataclass(frozen=True, slots=True)
class PlaybackDone:
    """`say_id` stopped playing; `reason`: done (all of it was sent), barge_in, stopped,
    replaced (by a newer say), ended (the call ended), error. With what the caller heard
    of it: `heard_s` seconds of its audio went out, carrying `words`; `unspoken` is the
    say's text from where the caller stopped hearing it ("" when all of it was)."""

    type: ClassVar[str] = "playback_done"
    say_id: str
    reason: str
    stream: str = ""
    heard_s: float = 0.0
    words: tuple[HeardWord, ...] = ()
    unspoken: str = ""

    def to_dict(self) -> dict[str, Any]:
        return {"type": self.type, "say_id": self.say_id, "reason": self.reason,
                "stream": self.stream, "heard_s": round(self.heard_s, 3),
                "words": [w.to_dict() for w in self.words], "unspoken": self.unspoken}


@dataclass(frozen=True, slots=True)
class BargeIn:
    """The caller spoke over `say_id` (speech from `start_ms`, call-relative), which was cut."""

    type: ClassVar[str] = "barge_in"
    say_id: str
    start_ms: int
    stream: str = ""

    def to_dict(self) -> dict[str, Any]:
        return {"type": self.type, **asdict(self)}


Event = (VoiceStarted | VoiceStopped | Transcript | DtmfPressed | CallStarted | CallEnded
         | PlaybackStarted | PlaybackDone | BargeIn)


class Subscription:
    """One subscriber's bounded queue; oldest events are dropped (and counted) when full."""

    def __init__(self, bus: EventBus, maxsize: int, types: frozenset[str] | None) -> None:
        if maxsize < 1:
            raise ValueError(f"maxsize must be >= 1, got {maxsize}")
        self._bus = bus
        self._queue: deque[Any] = deque(maxlen=maxsize)
        self._types = types
        self._lock = threading.Lock()
        self._waiter: asyncio.Future[None] | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self.dropped = 0
        self._told = 0
        self.closed = False

    def wants(self, event: Any) -> bool:
        return self._types is None or event.type in self._types

    def _put(self, event: Any) -> None:
        with self._lock:
            if len(self._queue) == self._queue.maxlen:
                self.dropped += 1
            self._queue.append(event)
            waiter, loop = self._waiter, self._loop
            self._waiter = None
        if waiter is not None and loop is not None and not loop.is_closed():
            loop.call_soon_threadsafe(_wake, waiter)

    def get_nowait(self) -> Any | None:
        """The oldest queued event, or None."""
        with self._lock:
            return self._queue.popleft() if self._queue else None

    def dropped_notice(self) -> dict[str, Any] | None:
        """`{"type": "events_dropped", "count": n}` for the events dropped since the last
        notice (the subscriber fell behind by more than its queue), or None."""
        with self._lock:
            count, self._told = self.dropped - self._told, self.dropped
        return {"type": "events_dropped", "stream": None, "count": count} if count else None

    def drain(self) -> list[Any]:
        with self._lock:
            out = list(self._queue)
            self._queue.clear()
            return out

    async def get(self) -> Any:
        """Wait for the next event (raises `asyncio.CancelledError` if cancelled)."""
        while True:
            with self._lock:
                if self._queue:
                    return self._queue.popleft()
                if self.closed:
                    raise EOFError("subscription closed")
                self._loop = asyncio.get_running_loop()
                self._waiter = self._loop.create_future()
                waiter = self._waiter
            await waiter

    def __aiter__(self) -> AsyncIterator[Any]:
        return self._iterate()

    async def _iterate(self) -> AsyncIterator[Any]:
        while True:
            try:
                yield await self.get()
            except EOFError:
                return

    def close(self) -> None:
        self._bus._remove(self)
        with self._lock:
            self.closed = True
            waiter, loop = self._waiter, self._loop
            self._waiter = None
        if waiter is not None and loop is not None and not loop.is_closed():
            loop.call_soon_threadsafe(_wake, waiter)


def _wake(waiter: asyncio.Future[None]) -> None:
    if not waiter.done():
        waiter.set_result(None)


class EventBus:
    """Fan-out of events to subscribers; `publish` never blocks."""

    def __init__(self) -> None:
        self._subs: tuple[Subscription, ...] = ()
        self._lock = threading.Lock()
        self.published = 0

    def subscribe(self, maxsize: int = 256, types: Iterable[str] | None = None) -> Subscription:
        """A new subscriber, optionally only for the event `type`s listed."""
        sub = Subscription(self, maxsize, frozenset(types) if types is not None else None)
        with self._lock:
            self._subs = (*self._subs, sub)
        return sub

    def _remove(self, sub: Subscription) -> None:
        with self._lock:
            self._subs = tuple(s for s in self._subs if s is not sub)

    def publish(self, event: Any) -> None:
        self.published += 1
        for sub in self._subs:  # a snapshot: subscribe/close swap the tuple
            if sub.wants(event):
                sub._put(event)

    @property
    def dropped(self) -> int:
        """Events dropped over all current subscribers."""
        return sum(s.dropped for s in self._subs)
