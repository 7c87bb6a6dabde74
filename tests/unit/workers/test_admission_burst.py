"""Admission against the real TTS scheduler on a simulated clock: what it admits must play
with no underrun. Each request is admitted or refused by `Admission.choose` on the load
the worker would publish (`TtsScheduler.owed` every 0.25 s, streams begun since at
`rtf` each, the listen streams' cost), then synthesized and heard at real-time pace."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import pytest

from cosyvoiced.tts.streaming.synthesis import Step
from cosyvoiced.workers.errors import Overloaded
from cosyvoiced.workers.pool.admission import VAD_WINDOW_S, Admission, WorkerLoad
from cosyvoiced.workers.worker.tts_sched import SayJob, TtsScheduler
from cosyvoiced.workers.worker.tts_stream import TtsStream
from tests.fakes.clock import Clock
from tests.fakes.ring import Listeners, PlaybackRing
from tests.unit.workers.test_slack import DEFAULTS, FRONT_S_PER_CHAR, RATE, Chunk, chunked

PUBLISH_S = 0.25
"""How often a worker publishes what its streams owe (`loop.OWED_EVERY_S`)."""
LONG = [5.2, 6.0, 4.4, 5.6]
"""A long reply's sentences (s of speech): ~21 s."""


@dataclass
class Run:
    admitted: int = 0
    refused: int = 0
    underruns: list[int] = field(default_factory=list)


def burst(n: int, rtf: float, *, every_s: float = 0.05, busy_max: float = 0.9,
          listen_cost: float = 0.0, listening: int = 0, counted_rtf: float | None = None,
          sentences: list[float] = LONG, seed: int = 0) -> Run:
    """`n` long requests, one every `every_s`, each on its own stream, on one worker whose
    steps take `rtf` (with noise) and whose `listening` listen streams take `listen_cost`
    of its core each (between the steps, as the loop's VAD ticks do); admission is told
    the worker's RTF is `counted_rtf` (default `rtf`)."""
    clock = Clock(0.0)
    rng = np.random.default_rng(seed)
    share = 1.0 - listening * listen_cost  # the core the listen streams leave to TTS
    profile = chunked(sentences, rtf)
    text = "x" * sum(c for _, _, c in profile)  # its speech at the front's s per char
    took = [0.0]
    rings: list[PlaybackRing] = []
    listeners = Listeners(clock, rings)
    advance = listeners.advance

    def make_gen(job: SayJob, _stream: TtsStream):
        done = [0]
        job.steps = lambda: (Step(c, a) for a, _, c in profile[done[0]:])

        def gen():
            for i, (audio_s, step_rtf, chars) in enumerate(profile):
                jitter = 1.0 + 0.1 * rng.standard_normal()
                front_s = chars * FRONT_S_PER_CHAR * jitter
                took[0] = audio_s * step_rtf * jitter + front_s
                advance(clock.t + took[0])
                done[0] = i + 1
                yield Chunk(np.zeros(int(audio_s * RATE), np.float32), i == len(profile) - 1,
                            "x", audio_s, chars, front_s)
        return gen()

    sched = TtsScheduler(make_gen, lambda _e: None, lookahead_s=DEFAULTS.lookahead_s,
                         first_audio_s=DEFAULTS.first_audio_s,
                         work_conserving=DEFAULTS.work_conserving, clock=lambda: clock.t,
                         timer=lambda: clock.t)
    adm = Admission(busy_max, max_streams=1000)
    rtf_seen = rtf if counted_rtf is None else counted_rtf
    owed, owed_at, started = 0.0, -1.0, []
    run = Run()
    arrivals = [i * every_s for i in range(n)]
    while clock.t < 120:
        now = clock.t
        if now - owed_at >= PUBLISH_S:
            owed, owed_at = sched.owed(rtf_seen), now
        while arrivals and arrivals[0] <= now:
            arrivals.pop(0)
            speaking = sum(1 for s in sched.streams.values() if s.has_work() or s.pending)
            load = WorkerLoad(0, True, 0.0, rtf_seen, listen_cost * VAD_WINDOW_S * 1e6,
                              speaking, listening, speaking + listening, owed=owed,
                              new=sum(1 for t in started if t >= owed_at))
            try:
                adm.choose([load], "tts")
            except Overloaded:
                run.refused += 1
                continue
            rings.append(PlaybackRing(clock=clock, rate_hz=RATE))
            sid = str(len(rings))
            sched.open(sid, rings[-1], RATE)
            sched.say(sid, SayJob(len(rings), text, None, now))
            started.append(now)
        sched.flush(now)
        if sched.step(now):  # the listen streams' VAD ticks and decodes between steps
            advance(clock.t + took[0] * (1.0 - share) / share)
            continue
        if not arrivals and not any(s.has_work() or s.pending for s in sched.streams.values()) \
                and all(r.read >= r.written for r in rings):
            break
        wake = [listeners.next_read_s, owed_at + PUBLISH_S] + arrivals[:1]
        w = sched.wake_in(now)
        if w is not None:
            wake.append(now + max(w, 1e-4))
        advance(max(clock.t, min(wake)))
    run.admitted = len(rings)
    run.underruns = [r.underruns for r in rings]
    return run


@pytest.mark.parametrize("seed", range(3))
@pytest.mark.parametrize("every_s", [0.05, 0.15, 0.3])
def test_a_burst_of_long_streams_is_refused_where_real_time_cannot_be_held(every_s, seed):
    """30 long requests, one every `every_s`, on a worker that can carry 9 of them (RTF
    0.1 at a 0.9 limit): the ones past that are refused, and every admitted one plays
    without a gap, whether the requests came within one published figure or each saw the
    one after the request before. A new request whose first audio may be held owed less
    than its RTF (its budget counted as slack): 10 were admitted and underran."""
    run = burst(30, 0.1, every_s=every_s, seed=seed)
    assert run.underruns == [0] * run.admitted, run
    assert 8 <= run.admitted <= 9, run
    assert run.refused == 30 - run.admitted


def test_listen_streams_on_the_core_leave_less_room_for_speech():
    """10 listen streams taking 3% of the core each: the TTS steps get 70% of it, so 6
    long streams at RTF 0.1 fit, not 9; all admitted play without a gap."""
    run = burst(30, 0.1, listening=10, listen_cost=0.03)
    assert run.underruns == [0] * run.admitted, run
    assert 5 <= run.admitted <= 6, run


def test_the_rtf_admission_counts_is_the_one_the_worker_measures():
    """The same burst on a worker whose measured RTF is that of a slower variant (FP32
    at 0.15 where BF16 ran 0.1): fewer are admitted, none underruns; counted at the
    faster variant's figure, the slower one's streams underrun."""
    slow = burst(30, 0.15)
    assert slow.underruns == [0] * slow.admitted and 5 <= slow.admitted <= 6, slow
    stale = burst(30, 0.15, counted_rtf=0.1)
    assert sum(stale.underruns) > 0, stale


def test_the_capacity_shown_leaves_out_what_listen_streams_take():
    w = WorkerLoad(0, True, 0.0, 0.1, 0.03 * VAD_WINDOW_S * 1e6, 0, 10, 10)
    assert w.tts_capacity(0.9) == 6
    assert WorkerLoad(0, True, 0.0, 0.1, 0.0, 0, 0, 0).tts_capacity(0.9) == 9
