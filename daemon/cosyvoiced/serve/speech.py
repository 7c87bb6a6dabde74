"""What the servers (HTTP, AudioSocket, Wyoming) may ask of the inference side, and
`PoolSpeech`, which answers it with the worker pool.

Errors are typed: `TtsError` subclasses for bad requests (checked here, before any
audio, so a server can still answer 400), `Unavailable` (the workers' error base:
`Overloaded`, a lost worker, a stopped pool) when it cannot be served now.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections import deque
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Protocol

import numpy as np
import structlog

from cosyvoiced.config.schema import Config
from cosyvoiced.listen.asr import bundled_model_dir
from cosyvoiced.listen.events import Transcript, VoiceStarted, VoiceStopped
from cosyvoiced.listen.languages import model_languages
from cosyvoiced.tts.frontend.ssml import parse_ssml
from cosyvoiced.tts.request import AudioChunk, SynthesisOptions, WordTime, check_text
from cosyvoiced.tts.streaming.synthesis import encode
from cosyvoiced.tts.voice.catalog import VoiceMeta, describe, discover, find_voice
from cosyvoiced.workers import messages as m
from cosyvoiced.workers.errors import Overloaded, WorkerError
from cosyvoiced.workers.pool.handles import ListenHandle, TtsHandle
from cosyvoiced.workers.pool.pool import WorkerPool

log = structlog.get_logger(__name__)

Unavailable = WorkerError
__all__ = ["Listening", "Overloaded", "PoolSpeech", "Speech", "Synthesis", "Unavailable",
           "VoiceMeta"]

ListenEvent = VoiceStarted | VoiceStopped | Transcript
POLL_S = 0.01
"""How often a consumer looks at its ring while audio is still coming."""
READ_CHUNK_S = 0.25
"""Most audio one read of a playback ring takes: a buffer this size per request, not the
ring's (several seconds, touched page by page as it fills: memory per stream)."""
CLOSE_TIMEOUT_S = 30.0
BACKLOG_S = 30.0
"""Audio a real-time listen stream may hold beyond its capture ring (a client sending a
recording faster than real time, a worker behind): ~1.9 MB at 16 kHz."""


class Synthesis(Protocol):
    """One admitted synthesis: iterate for its chunks; cancel to drop what is queued."""

    rate_hz: int

    def __aiter__(self) -> AsyncIterator[AudioChunk]: ...

    def cancel(self) -> None: ...


class Listening(Protocol):
    """One admitted listening stream: feed audio, read events, close to flush."""

    rate_hz: int
    dropped: int
    """Samples dropped because the stream's capture ring was full."""

    def feed(self, samples: np.ndarray) -> None:
        """Queue float32 mono samples at `rate_hz`; never blocks."""

    def events(self) -> AsyncIterator[ListenEvent]: ...

    async def close(self) -> list[Transcript]:
        """End the stream; a pending utterance is transcribed and returned."""


class Speech(Protocol):
    def voices(self) -> list[VoiceMeta]: ...

    def asr_model(self) -> str | None:
        """Name of the ASR model, or None when ASR is off."""

    def asr_languages(self) -> tuple[str, ...]:
        """Language codes the ASR model transcribes (English-only: `("en",)`)."""

    async def synthesize(self, text: str | bytes, options: SynthesisOptions,
                         stream_id: str) -> Synthesis:
        """Check and admit a request (typed errors here), then stream its audio."""

    async def listen(self, rate_hz: int, stream_id: str,
                     backlog_s: float | None = BACKLOG_S, language: str = "",
                     words: bool = False) -> Listening:
        """Admit a listening stream at `rate_hz` (8000 or 16000). `backlog_s`: audio it
        may hold beyond its capture ring before more is dropped (None: an upload, whose
        size its request already bounds, kept whole). `language`: a code of
        `asr_languages()` its speech is transcribed in ("": the model's choice).
        `words`: its transcripts carry their words' times (stream-relative)."""


# --- the worker pool behind the interface -----------------------------------------


class PoolSynthesis:
    """Reads one request's audio from its stream's playback ring as the worker writes it."""

    def __init__(self, handle: TtsHandle, request_id: int, fmt: str, words: bool = False
                 ) -> None:
        self.handle = handle
        self.words = words
        """Word times asked: audio is handed on only as far as its words are known."""
        self._told: deque[WordTime] = deque()
        self._known = 0
        """Samples of this request whose words have been told."""
        self.request_id = request_id
        self.rate_hz = handle.rate_hz
        self.format = fmt
        self._cancelled = False
        self._buf = np.empty(min(handle.ring.capacity_frames, int(READ_CHUNK_S * self.rate_hz)),
                             dtype=np.float32)

    def cancel(self) -> None:
        self._cancelled = True
        with contextlib.suppress(WorkerError):
            asyncio.get_running_loop().create_task(self.handle.cancel())

    async def __aiter__(self) -> AsyncIterator[AudioChunk]:
        handle, ring = self.handle, self.handle.ring
        done: m.SayDone | None = None
        index = made = 0
        try:
            while not self._cancelled:
                while done is None and not handle.events.empty():
                    done = self._take(handle.events.get_nowait())
                room = self._buf.shape[0] if done is not None or not self.words \
                    else min(self._buf.shape[0], max(0, self._known - made))
                n = ring.read_into(self._buf[:room]) if room else 0
                if n:
                    audio = self._buf[:n].copy()
                    last = done is not None and ring.available() == 0
                    made += n
                    yield AudioChunk(audio, encode(audio, self.format), self.rate_hz,
                                     self.format, index, "", last,
                                     words=self._due(made / self.rate_hz, last))
                    index += 1
                    if last:
                        return
                elif done is not None:
                    return
                elif index == 0:  # woken by the worker's FirstAudio, not the next poll
                    with contextlib.suppress(TimeoutError):
                        done = self._take(await asyncio.wait_for(handle.events.get(), POLL_S))
                else:
                    await asyncio.sleep(POLL_S)
        finally:
            await handle.close()

    def _take(self, msg: object) -> m.SayDone | None:
        """One worker event for this stream: this request's end (SayDone), else None."""
        if isinstance(msg, m.StreamError) and msg.request_id in (self.request_id, -1):
            raise WorkerError(msg.message, code=msg.code)
        if isinstance(msg, m.SayWords) and msg.request_id == self.request_id:
            self._told.extend(msg.words)
            self._known = max(self._known, msg.until_samples)
        if isinstance(msg, m.SayDone) and msg.request_id == self.request_id:
            return msg
        return None


    def _due(self, until_s: float, last: bool) -> tuple[WordTime, ...]:
        due = []
        while self._told and (last or self._told[0].start_s < until_s):
            due.append(self._told.popleft())
        return tuple(due)


class PoolListening:
    """Feeds a listen stream's capture ring and relays its events (the pool itself
    publishes them on the daemon's event bus).

    Audio that does not fit in the ring now (an upload, a client sending faster than
    real time, a worker behind) is kept in order and pumped in as the worker reads, up to
    `backlog_s` of it: a feed that would go beyond is dropped (counted in `dropped`,
    logged once per stream), so a peer sending faster than real time holds a bounded
    amount of memory. Uploads (`backlog_s` None) are kept whole."""

    def __init__(self, handle: ListenHandle, backlog_s: float | None = BACKLOG_S) -> None:
        self.handle = handle
        self.rate_hz = handle.rate_hz
        self.dropped = 0
        self._backlog_max = None if backlog_s is None else int(backlog_s * self.rate_hz)
        self._events: asyncio.Queue[ListenEvent | None] = asyncio.Queue()
        self._finals: list[Transcript] = []
        self._returned = 0
        self._backlog: deque[np.ndarray] = deque()
        self._backlog_n = 0
        self._pump: asyncio.Task[None] | None = None
        self._relay = asyncio.create_task(self._run_relay())

    def feed(self, samples: np.ndarray) -> None:
        if samples.dtype != np.float32:
            samples = samples.astype(np.float32)
        n = samples.shape[0]
        if not n:
            return
        if not self._backlog and self.handle.ring.write(samples):
            return
        if self._backlog_max is not None and self._backlog_n + n > self._backlog_max:
            if not self.dropped:
                log.warning("listen_backlog_full", stream_id=self.handle.stream_id,
                            backlog_s=self._backlog_max / self.rate_hz)
            self.dropped += n
            return
        self._backlog.append(samples)
        self._backlog_n += n
        if self._pump is None or self._pump.done():
            self._pump = asyncio.create_task(self._run_pump())

    async def _run_pump(self) -> None:
        ring = self.handle.ring
        while self._backlog:
            head = self._backlog[0]
            take = min(head.shape[0], ring.room())
            if take and ring.write(head[:take]):
                self._backlog_n -= take
                if take == head.shape[0]:
                    self._backlog.popleft()
                else:
                    self._backlog[0] = head[take:]
            else:
                await asyncio.sleep(POLL_S)

    def _relay_one(self, msg: object) -> None:
        if isinstance(msg, m.ListenEvent):
            ev = msg.event
            if isinstance(ev, Transcript):
                self._finals.append(ev)
            self._events.put_nowait(ev)
        elif isinstance(msg, m.StreamError):
            log.warning("listen_stream_error", stream_id=self.handle.stream_id,
                        code=msg.code, error=msg.message)

    async def _run_relay(self) -> None:
        while True:
            self._relay_one(await self.handle.events.get())

    async def events(self) -> AsyncIterator[ListenEvent]:
        while (ev := await self._events.get()) is not None:
            yield ev

    async def close(self) -> list[Transcript]:
        """End the stream: the worker reads what is left (an upload still being pumped
        included), ends an open utterance and transcribes it, then acknowledges. Returns
        the transcripts that arrived since the last `close()` returned."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + CLOSE_TIMEOUT_S
        while self._backlog and not self.handle.closed and loop.time() < deadline:
            await asyncio.sleep(POLL_S)
        if self._pump is not None:
            self._pump.cancel()
        was_open = not self.handle.closed  # else the pool closed it (shutdown, lost worker)
        if not await self.handle.flush_close(max(0.1, deadline - loop.time())) and was_open:
            log.warning("listen_close_unacknowledged", stream_id=self.handle.stream_id)
        self._relay.cancel()
        while not self.handle.events.empty():  # what came before the ack, in order
            self._relay_one(self.handle.events.get_nowait())
        out = self._finals[self._returned:]
        self._returned = len(self._finals)
        return out


class PoolSpeech:
    def __init__(self, pool: WorkerPool, config: Config) -> None:
        self.pool = pool
        self.config = config

    def voices(self) -> list[VoiceMeta]:
        return [describe(f) for f in discover(self.config.tts.voices_dirs).values()]

    def asr_model(self) -> str | None:
        if not self.config.asr.enabled:
            return None
        model_dir = self.config.asr.model_dir
        return (Path(model_dir).resolve().name or "whisper") if model_dir else BUNDLED_ASR_MODEL

    def asr_languages(self) -> tuple[str, ...]:
        if not self.config.asr.enabled:
            return ()
        return _languages(self.config.asr.model_dir)

    async def synthesize(self, text: str | bytes, options: SynthesisOptions,
                         stream_id: str) -> PoolSynthesis:
        options.check()
        text = check_text(text, self.config.tts.max_chars)
        meta = describe(find_voice(options.voice or self.config.tts.voice,
                                   self.config.tts.voices_dirs))
        if options.ssml:
            # malformed SSML or too many pauses: a 400 before any audio
            parse_ssml(text, meta.language, max_pause_ms=round(self.config.tts.max_pause_s * 1000))
        rate = options.rate_hz or self.config.tts.rate_hz or meta.sample_rate_hz
        fmt = options.format or self.config.tts.format
        handle = await self.pool.open_tts_stream(rate, stream_id=_unique(stream_id))
        try:
            request_id = await handle.say(text, options)
        except BaseException:
            await handle.close()
            raise
        return PoolSynthesis(handle, request_id, fmt, words=options.words)

    async def listen(self, rate_hz: int, stream_id: str,
                     backlog_s: float | None = BACKLOG_S, language: str = "",
                     words: bool = False) -> PoolListening:
        handle = await self.pool.open_listen_stream(rate_hz, stream_id=stream_id,
                                                    language=language, words=words)
        return PoolListening(handle, backlog_s)


BUNDLED_ASR_MODEL = "whisper-tiny.en"
"""The name of the bundled model (`asr.model_dir` empty); another is named by its folder."""


def _languages(model_dir: str) -> tuple[str, ...]:
    """What the model transcribes (read from its files once, by the pre-flight check)."""
    return model_languages(Path(model_dir) if model_dir else bundled_model_dir())


_serial = iter(range(1, 1 << 62))


def _unique(stream_id: str) -> str:
    """Worker stream ids are per request (a call speaks many times)."""
    return f"{stream_id}/{next(_serial)}"
