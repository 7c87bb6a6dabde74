"""ASR jobs in a worker: a deadline queue decoded in batches, and the pick between a TTS
clause and an ASR batch.

Every finished utterance (any listen stream of the worker) becomes a job whose deadline
is its end of speech plus `DEADLINE_S`; a stream being closed makes its jobs due now.
A batch takes up to `max_batch` jobs, earliest deadline first, and decodes them in one
`WhisperAsr.transcribe` call (Whisper's encoder is far cheaper per utterance batched).

The worker loop's policy, one unit of work per turn:
1. control messages (always first: control outranks data);
2. the VAD tick when due (cheap, and capture rings must not overflow);
3. the more urgent of the next TTS clause and the next ASR batch, by latest start time:
   a clause's is `now + audio ahead of its listener - its expected synthesis time` (what
   `TtsScheduler` orders streams by), a batch's is `earliest deadline - expected decode
   time` (a moving average of past batches). So a new TTS request (nothing ahead) goes
   before a transcript that still has slack, a stream about to underrun goes first, and
   a transcript due soon is not starved by streams with seconds of audio buffered.
"""

from __future__ import annotations

import heapq
import itertools
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

import structlog

from cosyvoiced.asr import Utterance
from cosyvoiced.events import Transcript

log = structlog.get_logger(__name__)

DEADLINE_S = 1.5
"""Target from the end of speech to its transcript (the listen bench's p95 goal)."""
_EWMA = 0.3


class Decoder(Protocol):
    def transcribe(self, utterances: Sequence[Utterance]) -> list[Transcript]: ...


@dataclass(order=True)
class AsrJob:
    deadline_s: float
    seq: int
    utterance: Utterance = field(compare=False)


Emit = Callable[[str, Any], None]
"""(stream id, Transcript) for each decoded utterance."""


class AsrQueue:
    """Deadline-ordered ASR jobs of one worker, decoded in batches."""

    def __init__(self, decoder: Decoder, emit: Emit, *, max_batch: int = 8,
                 deadline_s: float = DEADLINE_S, on_idle: Callable[[str], None] | None = None,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.decoder = decoder
        self.emit = emit
        self.max_batch = max_batch
        self.deadline_s = deadline_s
        self.on_idle = on_idle
        """Called with a stream id whose last job is done after `close_when_done`."""
        self.clock = clock
        self._heap: list[AsrJob] = []
        self._seq = itertools.count()
        self._pending: dict[str, int] = {}
        self._closing: set[str] = set()
        self.batch_s = 0.2
        """Expected duration of the next batch (moving average of measured ones)."""
        self.batches = 0
        self.decoded = 0

    def __len__(self) -> int:
        return len(self._heap)

    def push(self, utt: Utterance, *, urgent: bool = False) -> None:
        deadline = self.clock() if urgent else utt.speech_end_s + self.deadline_s
        heapq.heappush(self._heap, AsrJob(deadline, next(self._seq), utt))
        self._pending[utt.stream] = self._pending.get(utt.stream, 0) + 1

    def pending(self, stream_id: str) -> int:
        return self._pending.get(stream_id, 0)

    def close_when_done(self, stream_id: str) -> bool:
        """Make the stream's queued jobs due now; True if none is left (call `on_idle`
        yourself), else `on_idle` is called after its last job."""
        if not self._pending.get(stream_id):
            return True
        now = self.clock()
        for job in self._heap:
            if job.utterance.stream == stream_id:
                job.deadline_s = min(job.deadline_s, now)
        heapq.heapify(self._heap)
        self._closing.add(stream_id)
        return False

    def latest_start_s(self) -> float | None:
        """When the next batch must start to meet its earliest deadline (None: no job)."""
        if not self._heap:
            return None
        return self._heap[0].deadline_s - self.batch_s

    def run(self) -> int:
        """Decode one batch (earliest deadlines first); returns utterances decoded."""
        jobs = [heapq.heappop(self._heap) for _ in range(min(self.max_batch, len(self._heap)))]
        if not jobs:
            return 0
        t0 = time.perf_counter()
        try:
            results: list[Any] = list(self.decoder.transcribe([j.utterance for j in jobs]))
        except Exception as exc:  # a typed AsrError fails this batch, never the worker
            code = getattr(exc, "code", None)
            if not isinstance(code, str):
                log.exception("asr_batch_failed", jobs=len(jobs))
            results = [exc] * len(jobs)
        took = time.perf_counter() - t0
        self.batch_s += _EWMA * (took - self.batch_s)
        self.batches += 1
        self.decoded += len(jobs)
        for job, result in zip(jobs, results, strict=True):
            sid = job.utterance.stream
            self.emit(sid, result)
            left = self._pending.get(sid, 1) - 1
            if left:
                self._pending[sid] = left
            else:
                self._pending.pop(sid, None)
                if sid in self._closing:
                    self._closing.discard(sid)
                    if self.on_idle is not None:
                        self.on_idle(sid)
        return len(jobs)


def tts_latest_start_s(tts: Any, now_s: float) -> float | None:
    """The next TTS clause's latest start (None: no stream is eligible now)."""
    stream = tts.pick(now_s)
    if stream is None:
        return None
    return now_s + stream.ahead_s(now_s) - stream.last_synth_s


def pick_work(tts: Any, asr: AsrQueue | None, now_s: float) -> str | None:
    """"tts", "asr" or None: the more urgent unit of work by latest start time."""
    asr_at = asr.latest_start_s() if asr is not None else None
    tts_at = tts_latest_start_s(tts, now_s)
    if asr_at is None:
        return None if tts_at is None else "tts"
    if tts_at is None or asr_at <= tts_at:
        return "asr"
    return "tts"
