"""Clause-level TTS scheduling in a worker: earliest deadline first, bounded lookahead.

The engine synthesizes one clause per `next()` of a request's generator. The next
clause goes to the stream whose playback ring will run dry soonest: its deadline is
`now + ahead`, where `ahead` is the audio it holds ahead of its listener, the larger of
(ring fill + pending) and its real-time playback clock (so a listener reading faster
than real time gets real-time service, not all of it). A stream with `lookahead_s` of
audio ahead waits, so a long text cannot starve short ones. A new request has no
audio ahead: it goes first, which keeps time to first audio short.

"fifo" is the naive baseline kept for comparison: clauses in the order streams became
ready for them, no lookahead bound.

Cancel drops a stream's queued requests and unwritten audio at once and asks the
ring's consumer to flush what it holds.
"""

from __future__ import annotations

import itertools
import time
from collections import deque
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any, Protocol

import numpy as np
import structlog

from cosyvoiced.workers.messages import FirstAudio, SayDone, StreamError

log = structlog.get_logger(__name__)

POLICIES = ("edf", "fifo")
PENDING_RETRY_S = 0.01
"""How soon to retry writing audio that did not fit in a full ring."""


class ProducerRing(Protocol):
    def write(self, samples: np.ndarray) -> int: ...
    def available(self) -> int: ...
    def set_playing(self, playing: bool) -> None: ...
    def request_flush(self) -> None: ...


class Chunk(Protocol):
    audio: np.ndarray


@dataclass
class SayJob:
    request_id: int
    text: str
    options: Any
    received_s: float
    synth_s: float = 0.0
    audio_samples: int = 0
    written: int = 0
    synth_done: bool = False
    first_sent: bool = False


@dataclass
class TtsStream:
    id: str
    ring: ProducerRing
    rate_hz: int
    jobs: deque[SayJob] = field(default_factory=deque)
    job: SayJob | None = None
    gen: Iterator[Chunk] | None = None
    pending: deque[list[Any]] = field(default_factory=deque)
    """[job, audio, offset] entries not yet in the ring (it was full)."""
    pending_samples: int = 0
    play_end_s: float = 0.0
    """When the audio produced so far ends if played in real time from its first sample."""
    ready_seq: int = 0
    last_synth_s: float = 0.0
    """How long this stream's last clause took: the guess for its next one."""

    def has_work(self) -> bool:
        return self.gen is not None or bool(self.jobs)

    def ahead_s(self, now_s: float) -> float:
        held = (self.ring.available() + self.pending_samples) / self.rate_hz
        return max(held, self.play_end_s - now_s)


Emit = Callable[[object], None]
MakeGen = Callable[[SayJob, TtsStream], Iterator[Chunk]]


class TtsScheduler:
    """Pure scheduling logic; the worker loop calls `step`, `flush` and `wake_in`."""

    def __init__(self, make_gen: MakeGen, emit: Emit, *, policy: str = "edf",
                 lookahead_s: float = 3.0,
                 on_clause: Callable[[float, float], None] | None = None,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.make_gen = make_gen
        self.clock = clock
        self.emit = emit
        self.on_clause = on_clause
        self.streams: dict[str, TtsStream] = {}
        self._seq = itertools.count(1)
        self.set_policy(policy, lookahead_s)

    def set_policy(self, policy: str, lookahead_s: float) -> None:
        if policy not in POLICIES:
            raise ValueError(f"policy must be one of {POLICIES}, got {policy!r}")
        self.policy = policy
        self.lookahead_s = lookahead_s

    # --- control --------------------------------------------------------------------

    def open(self, stream_id: str, ring: ProducerRing, rate_hz: int) -> TtsStream:
        stream = TtsStream(stream_id, ring, rate_hz)
        self.streams[stream_id] = stream
        return stream

    def say(self, stream_id: str, job: SayJob) -> None:
        stream = self.streams[stream_id]
        if not stream.has_work():
            stream.ready_seq = next(self._seq)
        stream.jobs.append(job)

    def cancel(self, stream_id: str) -> None:
        stream = self.streams.get(stream_id)
        if stream is None:
            return
        dropped = ([stream.job] if stream.job is not None else []) + list(stream.jobs)
        for entry in stream.pending:
            if entry[0] not in dropped:
                dropped.append(entry[0])
        self._stop_gen(stream)
        stream.jobs.clear()
        stream.pending.clear()
        stream.pending_samples = 0
        stream.play_end_s = 0.0
        stream.ring.request_flush()
        stream.ring.set_playing(False)
        for job in dropped:
            self.emit(SayDone(stream_id, job.request_id, job.written, cancelled=True))

    def close(self, stream_id: str) -> TtsStream | None:
        stream = self.streams.get(stream_id)
        if stream is not None:
            self.cancel(stream_id)
            del self.streams[stream_id]
        return stream

    def _stop_gen(self, stream: TtsStream) -> None:
        if stream.gen is not None:
            close = getattr(stream.gen, "close", None)
            if close is not None:
                close()
        stream.gen = None
        stream.job = None

    # --- scheduling -----------------------------------------------------------------

    def queued(self) -> int:
        return sum(1 for s in self.streams.values() if s.has_work())

    def pick(self, now_s: float) -> TtsStream | None:
        best: TtsStream | None = None
        best_key: tuple[float, int] = (0.0, 0)
        edf = self.policy == "edf"
        for stream in self.streams.values():
            if not stream.has_work():
                continue
            if edf:
                ahead = stream.ahead_s(now_s)
                if ahead >= self.lookahead_s:
                    continue
                # Latest start = deadline minus the time its next clause will take.
                key = (ahead - stream.last_synth_s, stream.ready_seq)
            else:
                key = (0.0, stream.ready_seq)
            if best is None or key < best_key:
                best, best_key = stream, key
        return best

    def wake_in(self, now_s: float) -> float | None:
        """Seconds until a waiting stream becomes eligible or pending audio may fit."""
        wait: float | None = None
        for stream in self.streams.values():
            if stream.pending_samples:
                wait = PENDING_RETRY_S if wait is None else min(wait, PENDING_RETRY_S)
            if stream.has_work():
                w = max(0.0, stream.ahead_s(now_s) - self.lookahead_s) \
                    if self.policy == "edf" else 0.0
                wait = w if wait is None else min(wait, w)
        return wait

    def step(self, now_s: float) -> bool:
        """Synthesize one clause for the most urgent stream; False if none is eligible."""
        stream = self.pick(now_s)
        if stream is None:
            return False
        self._run_clause(stream)
        return True

    def _run_clause(self, stream: TtsStream) -> None:
        if stream.gen is None:
            job = stream.jobs.popleft()
            try:
                stream.gen = self.make_gen(job, stream)
            except Exception as exc:  # typed request errors end this request only
                self._fail(stream, job, exc)
                return
            stream.job = job
        job = stream.job
        assert job is not None and stream.gen is not None
        t0 = time.perf_counter()
        try:
            chunk = next(stream.gen)
        except StopIteration:
            chunk = None
        except Exception as exc:  # one bad request must not take the worker down
            self._stop_gen(stream)
            self._fail(stream, job, exc)
            return
        dt = time.perf_counter() - t0
        job.synth_s += dt
        stream.last_synth_s = dt
        if chunk is None:
            self._finish_synth(stream, job)
            return
        audio = chunk.audio
        n = int(audio.shape[0])
        job.audio_samples += n
        if self.on_clause is not None:
            self.on_clause(dt, n / stream.rate_hz)
        now = self.clock()
        stream.play_end_s = max(stream.play_end_s, now) + n / stream.rate_hz
        if n:
            stream.pending.append([job, audio, 0])
            stream.pending_samples += n
        if getattr(chunk, "is_last", False):
            self._finish_synth(stream, job)
        else:
            stream.ready_seq = next(self._seq)
        self._write(stream, now)

    def _finish_synth(self, stream: TtsStream, job: SayJob) -> None:
        job.synth_done = True
        self._stop_gen(stream)
        stream.ready_seq = next(self._seq)
        self._maybe_done(stream, job)

    def _fail(self, stream: TtsStream, job: SayJob, exc: Exception) -> None:
        code = getattr(exc, "code", None)
        if not isinstance(code, str):
            code = "internal"
            log.exception("tts_request_failed", stream=stream.id, request=job.request_id)
        self.emit(StreamError(stream.id, job.request_id, code, str(exc)))
        job.synth_done = True
        self._maybe_done(stream, job, failed=True)

    def _maybe_done(self, stream: TtsStream, job: SayJob, failed: bool = False) -> None:
        if not job.synth_done or any(e[0] is job for e in stream.pending):
            return
        if not failed:
            rtf = job.synth_s / (job.audio_samples / stream.rate_hz) if job.audio_samples else 0.0
            self.emit(SayDone(stream.id, job.request_id, job.written, rtf=rtf))
        if not stream.has_work() and not stream.pending:
            stream.ring.set_playing(False)

    # --- audio out ------------------------------------------------------------------

    def flush(self, now_s: float) -> None:
        """Move pending audio into rings as room allows."""
        for stream in self.streams.values():
            if stream.pending:
                self._write(stream, now_s)

    def _write(self, stream: TtsStream, now_s: float) -> None:
        ring = stream.ring
        while stream.pending:
            entry = stream.pending[0]
            job, audio, off = entry
            n = ring.write(audio[off:]) if off else ring.write(audio)
            if n and not job.first_sent:
                job.first_sent = True
                ring.set_playing(True)
                self.emit(FirstAudio(stream.id, job.request_id, now_s - job.received_s))
            job.written += n
            stream.pending_samples -= n
            if off + n < audio.shape[0]:
                entry[2] = off + n
                return
            stream.pending.popleft()
            self._maybe_done(stream, job)
