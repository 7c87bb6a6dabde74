"""Step-level TTS scheduling in a worker: least slack first, bounded lookahead, first
audio held until the worker can keep it fed.

The engine makes one step per `next()` of a request's synthesis (one uninterruptible
run: a vocoder chunk of ~1 s, the first chunk of a sentence after the sentence's text
front, or one clause of a whole-graph voice). The next step goes to the stream with the
least slack: its deadline (when its listener runs dry: `now + ahead`, where `ahead` is
the larger of ring fill + pending audio and its real-time playback clock) minus the
expected synthesis time of that step (`clause_cost`: from the steps the engine says are
next and the worker's measured costs). So a sentence's front starts early enough, and a
stream with seconds buffered yields to one about to run dry. A stream with
`lookahead_s` of audio ahead waits, so a long text cannot starve short ones.

A new request has no listener deadline yet: its first step is due `first_audio_s`
after it arrived. Its first audio goes out at once if the worker can keep every
speaking stream fed with it playing (`clause_cost.fits`, with the longest next step of
another stream as blocking); otherwise it is held (pending, not in the ring) until that
holds, `prebuffer_s` is buffered, or the budget is spent, the budget counted from when
it could first have audio (its arrival plus the expected first steps of the requests
queued ahead of it on the worker and its own: `SayJob.queued_s`). A burst of new
requests on a busy worker thus has its first steps made as soon as from arrival, and
starts them one after another with a buffer instead of starting all and underrunning
all; the last ones of a burst are held as long as the first, not started bare.

Work-conserving: when no stream is due (every one has `lookahead_s` ahead), a spare
step goes to the stream with the least audio in its ring, if the ring has room for what
the step makes (so nothing waits in worker memory): a consumer that drains its ring at
once (a download, a Wyoming client) gets audio as fast as the worker makes it, while
streams with a deadline (calls, sound cards) still go first, one step later at most.

"fifo" is the naive baseline kept for comparison: steps in the order streams became
ready for them, no lookahead bound, no hold.

Cancel drops a stream's queued requests and unwritten audio at once and asks the
ring's consumer to flush what it holds.
"""

from __future__ import annotations

import itertools
import time
from collections.abc import Callable, Iterator

import structlog

from cosyvoiced.workers.messages import FirstAudio, SayDone, SayWords, StreamError
from cosyvoiced.workers.worker.clause_cost import ClauseCosts
from cosyvoiced.workers.worker.hold import fits_playing, sustainable
from cosyvoiced.workers.worker.owed import owed
from cosyvoiced.workers.worker.tts_stream import LATE_MIN_S, Chunk, ProducerRing, SayJob, TtsStream

log = structlog.get_logger(__name__)

POLICIES = ("edf", "fifo")
PENDING_RETRY_S = 0.01
"""How soon to retry writing audio that did not fit in a full ring."""
AHEAD_STEP_S = 2.0
"""Room a stream's ring must have for a step served beyond its lookahead when the step's
audio is not known yet (a request not started: its first steps are small)."""


Emit = Callable[[object], None]
MakeGen = Callable[[SayJob, TtsStream], Iterator[Chunk]]


class TtsScheduler:
    """Pure scheduling logic; the worker loop calls `step`, `flush` and `wake_in`."""

    def __init__(self, make_gen: MakeGen, emit: Emit, *, policy: str = "edf",
                 lookahead_s: float = 3.0, first_audio_s: float = 0.0,
                 prebuffer_s: float = 3.0, work_conserving: bool = True,
                 on_clause: Callable[[float, float], None] | None = None,
                 clock: Callable[[], float] = time.monotonic,
                 timer: Callable[[], float] = time.perf_counter) -> None:
        self.make_gen = make_gen
        self.clock = clock
        self.timer = timer
        self.emit = emit
        self.on_clause = on_clause
        self.streams: dict[str, TtsStream] = {}
        self._seq = itertools.count(1)
        self.costs = ClauseCosts()
        self.ahead_step = False
        """The last step picked was a work-conserving one: every stream had `lookahead_s`
        ahead (the worker's load meter shows it apart, `LoadMeter.ahead`)."""
        self.late = 0
        """Steps made after their listener had run dry (`TtsStream.late_s`): gaps heard
        at real-time playback (status and `cosyvoiced_tts_late_steps`)."""
        self.prebuffer_s = prebuffer_s
        self.work_conserving = work_conserving
        self.set_policy(policy, lookahead_s, first_audio_s)

    def set_policy(self, policy: str, lookahead_s: float,
                   first_audio_s: float | None = None) -> None:
        if policy not in POLICIES:
            raise ValueError(f"policy must be one of {POLICIES}, got {policy!r}")
        self.policy = policy
        self.lookahead_s = lookahead_s
        if first_audio_s is not None:
            self.first_audio_s = first_audio_s

    # --- control --------------------------------------------------------------------

    def open(self, stream_id: str, ring: ProducerRing, rate_hz: int) -> TtsStream:
        stream = TtsStream(stream_id, ring, rate_hz)
        self.streams[stream_id] = stream
        return stream

    def say(self, stream_id: str, job: SayJob) -> None:
        stream = self.streams[stream_id]
        if not stream.has_work():
            stream.ready_seq = next(self._seq)
        if not stream.has_work() and self.policy == "edf":
            job.queued_s = self._first_steps_until(job, stream)
        stream.jobs.append(job)

    def _first_steps_until(self, job: SayJob, stream: TtsStream) -> float:
        """Expected synthesis of `job`'s first step and of the first steps not made yet of
        the requests ahead of it (other streams'): a burst of new requests on a worker
        gets its first-audio budgets counted from when each can have its first audio,
        so the last ones of a burst are held as long as the first, not started bare."""
        total = self.costs.expected_s(job, stream.last_synth_s)
        for st in self.streams.values():
            ahead = st.job if st.job is not None else (st.jobs[0] if st.jobs else None)
            if ahead is not None and not ahead.audio_samples:
                total += self.costs.expected_s(ahead, st.last_synth_s)
        return total

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
        stream.hold_until_s = None
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

    def owed(self, rtf: float) -> float:
        """What the streams owe: admission's load (`owed.owed`)."""
        return owed(self.streams.values(), self.costs, rtf)

    def slack_s(self, stream: TtsStream, now_s: float, ahead_s: float,
                budget_s: float | None = None) -> float:
        """How long the stream's next step may wait: deadline - now - expected synthesis.

        The deadline is when its listener runs out of audio. Before a request's first
        audio is out, playback starts at the latest `budget_s` (`first_audio_s`) after
        the request arrived (its held audio plays from then)."""
        if budget_s is None:
            budget_s = self.first_audio_s
        return stream.deadline_s(now_s, ahead_s, budget_s) - self.expected_s(stream)

    def expected_s(self, stream: TtsStream) -> float:
        """How long the stream's next step will take to synthesize (a guess)."""
        return self.costs.expected_s(stream.next_job(), stream.last_synth_s)

    def _release(self, stream: TtsStream, now_s: float) -> bool:
        """Start a held first audio now? Yes once the worker can still make every
        speaking stream's next step in time with this one playing (`hold.fits_playing`), or the job
        is fully synthesized, or `prebuffer_s` is held, or the first-audio budget is
        spent. On an idle worker a first chunk longer than the next one's synthesis
        leaves at once."""
        held_s = stream.pending_samples / stream.rate_hz
        job = stream.job
        if job is not None and stream.hold_until_s is not None and now_s < stream.hold_until_s \
                and held_s < self.prebuffer_s and sustainable(self.streams.values(), self.costs) \
                and not fits_playing(stream, held_s, now_s, self.streams.values(), self.costs):
            return False
        stream.hold_until_s = None  # playback starts now with what is held
        stream.play_end_s = now_s + held_s
        return True

    def pick(self, now_s: float) -> TtsStream | None:
        best: TtsStream | None = None
        best_key: tuple[float, int] = (0.0, 0)
        edf = self.policy == "edf"
        # Beyond capacity no schedule keeps everyone fed: new requests go first again.
        budget = self.first_audio_s if edf and sustainable(self.streams.values(), self.costs) \
            else 0.0
        spare: TtsStream | None = None
        spare_key: tuple[int, int] = (0, 0)
        for stream in self.streams.values():
            if not stream.has_work():
                continue
            if edf:
                ahead = stream.ahead_s(now_s)
                if ahead >= self.lookahead_s:
                    if best is None and self._room_short(stream) == 0.0:
                        key2 = (stream.ring.available(), stream.ready_seq)
                        if spare is None or key2 < spare_key:
                            spare, spare_key = stream, key2
                    continue
                key = (self.slack_s(stream, now_s, ahead, budget), stream.ready_seq)
            else:
                key = (0.0, stream.ready_seq)
            if best is None or key < best_key:
                best, best_key = stream, key
        self.ahead_step = best is None and spare is not None
        return best if best is not None else spare

    def _room_short(self, stream: TtsStream) -> float | None:
        """Seconds of ring room `stream` lacks for a step beyond its lookahead (0: it may
        have one now), or None where it may not (work-conserving off, audio held or
        pending: nothing is made that would wait in worker memory)."""
        if not self.work_conserving or stream.hold_until_s is not None or stream.pending:
            return None
        job = stream.next_job()
        step = next(iter(job.steps()), None) if job.steps is not None else None
        need_s = step.speech_s + step.pause_s if step is not None else AHEAD_STEP_S
        return max(0.0, need_s - stream.ring.room() / stream.rate_hz)

    def wake_in(self, now_s: float) -> float | None:
        """Seconds until a waiting stream becomes eligible or pending audio may fit."""
        wait: float | None = None
        for stream in self.streams.values():
            if stream.hold_until_s is not None:
                w = max(0.0, stream.hold_until_s - now_s)
                wait = w if wait is None else min(wait, w)
            elif stream.pending_samples:
                wait = PENDING_RETRY_S if wait is None else min(wait, PENDING_RETRY_S)
            if stream.has_work():
                w = max(0.0, stream.ahead_s(now_s) - self.lookahead_s) \
                    if self.policy == "edf" else 0.0
                short = self._room_short(stream) if w > 0 else None
                if short is not None:  # room comes at real-time pace at the slowest
                    w = min(w, max(PENDING_RETRY_S, short))
                wait = w if wait is None else min(wait, w)
        return wait

    def step(self, now_s: float) -> bool:
        """Synthesize one step for the most urgent stream; False if none is eligible."""
        stream = self.pick(now_s)
        if stream is None:
            return False
        self._run_step(stream)
        return True

    def _run_step(self, stream: TtsStream) -> None:
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
        t0 = self.timer()
        try:
            chunk = next(stream.gen)
        except StopIteration:
            chunk = None
        except Exception as exc:  # one bad request must not take the worker down
            self._stop_gen(stream)
            self._fail(stream, job, exc)
            return
        dt = self.timer() - t0
        first = not job.audio_samples
        job.synth_s += dt
        stream.last_synth_s = dt
        if chunk is not None and not getattr(chunk, "cached", False):
            self._learn(job, chunk, dt, first, stream.rate_hz)
        if chunk is None:
            self._finish_synth(stream, job)
            return
        audio = chunk.audio
        n = int(audio.shape[0])
        job.audio_samples += n
        if getattr(job.options, "words", False):  # told before its audio is in the ring
            self.emit(SayWords(stream.id, job.request_id, tuple(getattr(chunk, "words", ())),
                               job.audio_samples))
        if self.on_clause is not None:
            self.on_clause(dt, n / stream.rate_hz)
        now = self.clock()
        if stream.late_s(job, now) > LATE_MIN_S:
            self.late += 1
        if first and n:
            job.first_made_s = now
        if (first and n and self.first_audio_s > 0 and self.policy == "edf" and not job.first_sent
                and not stream.pending and not stream.ring.available()):
            stream.hold_until_s = job.received_s + job.queued_s + self.first_audio_s  # _release
        stream.play_end_s = max(stream.play_end_s, now) + n / stream.rate_hz
        if n:
            stream.pending.append([job, audio, 0])
            stream.pending_samples += n
        if getattr(chunk, "is_last", False):
            self._finish_synth(stream, job)
        else:
            stream.ready_seq = next(self._seq)
        self._write(stream, now)

    def _learn(self, job: SayJob, chunk: Chunk, dt: float, first: bool, rate_hz: int) -> None:
        """Step costs from a chunk: what it says of its front, and of its sentence's speech
        the steps the engine says are left of it."""
        speech_s = getattr(chunk, "speech_s", chunk.audio.shape[0] / rate_hz)
        front_chars = getattr(chunk, "front_chars", 0)
        sentence_s = 0.0
        if front_chars and job.steps is not None:
            sentence_s = speech_s + sum(s.speech_s for s in itertools.takewhile(
                lambda s: s.front_chars == 0, job.steps()))
        self.costs.learn(dt, speech_s, front_chars, getattr(chunk, "front_s", 0.0),
                         sentence_s, first)

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
        if stream.hold_until_s is not None and not self._release(stream, now_s):
            return
        ring = stream.ring
        while stream.pending:
            entry = stream.pending[0]
            job, audio, off = entry
            n = ring.write(audio[off:]) if off else ring.write(audio)
            if n and not job.first_sent:
                job.first_sent = True
                ring.set_playing(True)
                self.emit(FirstAudio(stream.id, job.request_id, now_s - job.received_s))
                log.debug("tts_first_audio", stream=stream.id, request=job.request_id,
                          latency_ms=round((now_s - job.received_s) * 1000, 1),
                          made_ms=round((job.first_made_s - job.received_s) * 1000, 1),
                          synth_ms=round(job.synth_s * 1000, 1))
            job.written += n
            stream.pending_samples -= n
            if off + n < audio.shape[0]:
                entry[2] = off + n
                return
            stream.pending.popleft()
            self._maybe_done(stream, job)
