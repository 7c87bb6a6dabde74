"""ASR jobs in a worker: a deadline queue decoded in batches, and the pick between a TTS
clause and an ASR batch.

Every finished utterance (any listen stream of the worker) becomes a job whose deadline
is its end of speech plus `DEADLINE_S`; a stream being closed makes its jobs due now.
A batch takes jobs earliest deadline first, as many as can be decoded before the
earliest one's deadline at the measured cost per utterance (at least one, at most
`max_batch`), and decodes them in one `transcribe` call (the ASR process's, `RemoteAsr`). Why not a fixed
batch: with a long encoder input a full batch costs more per utterance than decoding
alone and stalls the worker for seconds (every transcript in it late), while with a
short one batching is cheaper per utterance (figures: docs/performance.md). Sizing by
slack lets both cases batch only what their deadlines allow.

A provisional job (`utterances.Provisional`: decoded while the endpointer still waits out
`stop_ms`) is decoded like any other, but its result is held until `confirm` (then sent
at once, its latency measured at that moment) or dropped on `retract`.

`take()` / `deliver()` split a batch so the decode can run off the worker's loop thread
(`AsrRunner`): the VAD tick must keep reading the capture rings (2 s deep) while Whisper
works, or every stream of the worker drops audio.

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

import dataclasses
import heapq
import itertools
import time
from collections.abc import Callable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any, Protocol

import structlog

from cosyvoiced.listen.asr import Utterance
from cosyvoiced.listen.events import Transcript

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
    provisional: bool = field(default=False, compare=False)
    """Decoded ahead of the end of speech; its result waits for `confirm`."""
    void: bool = field(default=False, compare=False)
    """Retracted while being decoded: its result is dropped."""


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
        self._provisional: dict[str, AsrJob] = {}
        self._held: dict[str, tuple[AsrJob, Any]] = {}
        """Decoded provisional jobs waiting for `confirm`."""
        self.retracted = 0
        self.batch_s = 0.2
        """Expected duration of a one-utterance batch (moving average of measured ones,
        per utterance decoded)."""
        self.batches = 0
        self.decoded = 0

    def __len__(self) -> int:
        return len(self._heap)

    def push(self, utt: Utterance, *, urgent: bool = False, provisional: bool = False) -> None:
        deadline = self.clock() if urgent else utt.speech_end_s + self.deadline_s
        job = AsrJob(deadline, next(self._seq), utt, provisional)
        heapq.heappush(self._heap, job)
        self._pending[utt.stream] = self._pending.get(utt.stream, 0) + 1
        if provisional:
            self._provisional[utt.stream] = job

    def confirm(self, stream_id: str, *, urgent: bool = False) -> None:
        """The stream's provisional job is final: send its result now if decoded."""
        job = self._provisional.pop(stream_id, None)
        if job is None:
            return
        job.provisional = False
        held = self._held.pop(stream_id, None)
        if held is not None:
            self._send(job, held[1])
        elif urgent and any(j is job for j in self._heap):
            job.deadline_s = min(job.deadline_s, self.clock())
            heapq.heapify(self._heap)

    def retract(self, stream_id: str) -> None:
        """The stream's provisional job is void: dropped, whether queued, decoding or done."""
        job = self._provisional.pop(stream_id, None)
        if job is None:
            return
        self.retracted += 1
        job.void = True
        if self._held.pop(stream_id, None) is not None:
            self._done(stream_id)
        elif any(j is job for j in self._heap):
            self._heap = [j for j in self._heap if j is not job]
            heapq.heapify(self._heap)
            self._done(stream_id)
        # else it is being decoded: `deliver` drops it

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

    def take(self) -> list[AsrJob]:
        """Pop the next batch: earliest deadlines first, as many as fit before the first
        one's deadline at `batch_s` each (at least one, at most `max_batch`)."""
        if not self._heap:
            return []
        slack = self._heap[0].deadline_s - self.clock()
        k = max(1, min(self.max_batch, int(slack / max(self.batch_s, 1e-3))))
        return [heapq.heappop(self._heap) for _ in range(min(k, len(self._heap)))]

    def decode(self, jobs: Sequence[AsrJob]) -> tuple[list[Any], float]:
        """Decode a batch (safe off the loop thread); a typed failure fails the batch only."""
        t0 = time.perf_counter()
        try:
            results: list[Any] = list(self.decoder.transcribe([j.utterance for j in jobs]))
        except Exception as exc:  # a typed AsrError fails this batch, never the worker
            code = getattr(exc, "code", None)
            if not isinstance(code, str):
                log.exception("asr_batch_failed", jobs=len(jobs))
            results = [exc] * len(jobs)
        return results, time.perf_counter() - t0

    def deliver(self, jobs: Sequence[AsrJob], results: Sequence[Any], took_s: float) -> int:
        """Emit a decoded batch's results (on the loop thread); returns utterances."""
        self.batch_s += _EWMA * (took_s / max(1, len(jobs)) - self.batch_s)
        self.batches += 1
        self.decoded += len(jobs)
        for job, result in zip(jobs, results, strict=True):
            sid = job.utterance.stream
            if job.void:
                self._done(sid)
            elif job.provisional:
                self._held[sid] = (job, result)
            else:
                self._send(job, result)
        return len(jobs)

    def _send(self, job: AsrJob, result: Any) -> None:
        if isinstance(result, Transcript):  # latency: until the text goes out
            now = time.monotonic()
            result = dataclasses.replace(result, latency_ms=round(
                (now - job.utterance.speech_end_s) * 1000.0, 1))
        self.emit(job.utterance.stream, result)
        self._done(job.utterance.stream)

    def _done(self, sid: str) -> None:
        left = self._pending.get(sid, 1) - 1
        if left:
            self._pending[sid] = left
            return
        self._pending.pop(sid, None)
        if sid in self._closing:
            self._closing.discard(sid)
            if self.on_idle is not None:
                self.on_idle(sid)

    def run(self) -> int:
        """Decode one batch here and now; returns utterances decoded."""
        jobs = self.take()
        if not jobs:
            return 0
        results, took = self.decode(jobs)
        return self.deliver(jobs, results, took)


class AsrRunner:
    """Decodes an `AsrQueue`'s batches on one background thread, one batch at a time.

    The loop thread calls `poll()` each turn: it delivers a finished batch (events are
    sent from the loop thread only) and starts the next when jobs are waiting. The thread
    waits on the ASR process's socket (or, with a local decoder, on CTranslate2, which
    releases the GIL), so the VAD tick and TTS go on meanwhile.
    """

    POLL_S = 0.005
    """How often the loop looks for a finished batch while one is running."""

    def __init__(self, queue: AsrQueue,
                 on_decoded: Callable[[float, float], None] | None = None) -> None:
        self.queue = queue
        self.on_decoded = on_decoded
        """Told each batch's CPU seconds and seconds of speech (the worker's load meter)."""
        self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="asr")
        self._jobs: list[AsrJob] = []
        self._future: Future[tuple[list[Any], float]] | None = None
        self._cpu0 = (0.0, 0.0)

    @property
    def running(self) -> bool:
        return self._future is not None

    @property
    def finished(self) -> bool:
        """A batch is done and waits to be delivered."""
        return self._future is not None and self._future.done()

    def warm_up(self) -> None:
        """Make the decode thread now (it inherits the caller's CPU pinning)."""
        self._pool.submit(int).result()

    def start(self) -> bool:
        """Start the next batch if none is running and jobs wait; True if started."""
        if self._future is not None or not len(self.queue):
            return False
        self._jobs = self.queue.take()
        self._cpu0 = (time.process_time(), time.thread_time())
        self._future = self._pool.submit(self.queue.decode, self._jobs)
        return True

    def _cpu_s(self) -> float:
        """CPU seconds the batch took: this process's meanwhile, less the loop thread's
        (TTS steps and VAD ticks run on while the batch is away), plus what the decoder
        charged from elsewhere (`RemoteAsr.last_cpu_s`: the ASR process's)."""
        process0, loop0 = self._cpu0
        here = max(0.0, (time.process_time() - process0) - (time.thread_time() - loop0))
        return here + getattr(self.queue.decoder, "last_cpu_s", 0.0)

    def poll(self) -> int:
        """Deliver a finished batch (returns its utterances) and start the next."""
        done = 0
        fut = self._future
        if fut is not None and fut.done():
            results, took = fut.result()
            jobs, self._jobs, self._future = self._jobs, [], None
            cpu_s = self._cpu_s()
            speech_s = sum(j.utterance.end_ms - j.utterance.start_ms for j in jobs) / 1000.0
            log.debug("asr_batch", utterances=len(jobs), speech_s=round(speech_s, 2),
                      took_ms=round(took * 1000, 1), cpu_ms=round(cpu_s * 1000, 1))
            if self.on_decoded is not None:
                self.on_decoded(cpu_s, speech_s)
            done = self.queue.deliver(jobs, results, took)
        self.start()
        return done

    def wait(self, timeout_s: float | None = None) -> int:
        """Block until the running batch is done, then deliver it (tests, shutdown)."""
        if self._future is not None:
            self._future.result(timeout_s)
        return self.poll()

    def wake_in(self) -> float | None:
        """Seconds until the loop should poll again (None: nothing to wait for)."""
        if self._future is not None:
            return self.POLL_S
        return 0.0 if len(self.queue) else None

    def close(self) -> None:
        self._pool.shutdown(wait=False, cancel_futures=True)


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
