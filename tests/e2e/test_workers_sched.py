"""Admission and late-step counting on the real pool, at loads chosen from measured RTF.

Least-slack scheduling against FIFO is a figure of the machine (how busy it is decides
the margin): the `sched` bench measures it on the real pool (`python -m tools.bench
sched`), and tests/unit/workers/test_slack.py holds the claim on a simulated clock."""

from __future__ import annotations

import math
import time

import pytest

from cosyvoiced.testing.pace import PacedReader
from cosyvoiced.workers.errors import Overloaded

TWO_SENTENCES = ("The technician will visit your home tomorrow morning. He will check the "
                 "line and replace the old router.")
"""About 5 s of speech: the second sentence's front is made while the other streams speak."""
SENTENCE = "The technician will visit your home tomorrow morning to replace the router."
"""One clause of about 3.5 s of speech."""


TOO_SLOW = "the machine is too busy right now for a real-time test"
"""These tests run real-time streams on two workers and must be judged at a load the
workers can carry. On this shared box other jobs (several at raised priority) sometimes
leave each worker a third of a core: the RTF measured with both workers busy then
triples and the load a test derives from it would need more than ~0.7 of each worker.
The test then reports XFAIL (the figures are printed) instead of judging at a load
nobody can carry; whenever the measured load allows, it must pass."""


def test_requests_beyond_capacity_are_refused_and_admitted_streams_keep_up(pool_runner):
    """The cap is set to 2.5 x the workers' measured RTF (room for two speaking streams
    each, about 0.4 of a worker on a quiet machine), so the test means the same on a
    slow, shared machine: refusals come from the model of the load, not from luck.
    A round whose admitted streams underran is run once more (other jobs on this box can
    take half its CPU for seconds); one must come out clean."""
    pool = pool_runner.pool
    busy_max = pool.admission.busy_max
    results: list[list[int]] = []
    try:
        for _ in range(2):
            underruns = _admit_until_refused(pool_runner)
            if underruns is None:
                if not results:  # see TOO_SLOW
                    pytest.xfail(TOO_SLOW)
                break  # a failed first round is judged as it is
            results.append(underruns)
            if not any(underruns):
                break
    finally:
        pool.admission.busy_max = busy_max
    print("underruns per attempt:", results)
    assert results[-1] == [0] * len(results[-1])


def _admit_until_refused(runner) -> list[int] | None:
    """Underruns of each admitted stream (None: the machine is too slow right now)."""
    pool = runner.pool
    deadline = time.monotonic() + 15  # busy figures of the previous run decay (EWMA)
    while max(w.busy for w in pool.loads()) > 0.1 and time.monotonic() < deadline:
        time.sleep(0.2)
    rtf = max(w.rtf for w in pool.loads())
    print(f"rtf {rtf:.3f}: cap {2.5 * rtf:.2f}")
    if 2 * rtf >= 0.7:
        return None
    pool.admission.busy_max = 2.5 * rtf
    refused_before = pool.status()["refused"]
    reader = PacedReader()
    reader.start()
    admitted, refused = [], []
    text = TWO_SENTENCES
    try:
        for _ in range(60):
            try:
                h = runner.call(pool.open_tts_stream())
            except Overloaded as exc:
                refused.append(exc)
                break
            try:
                rid = runner.call(h.say(text))
            except Overloaded as exc:
                refused.append(exc)
                runner.call(h.close())
                break
            admitted.append((h, rid, reader.add(h.stream_id, h.ring, h.rate_hz)))
        assert refused and refused[0].code == "overloaded", "never refused"
        assert len(admitted) >= 2
        # one more, now, is refused too; the status says why
        extra = []
        with pytest.raises(Overloaded):
            extra.append(runner.call(pool.open_tts_stream()))
            runner.call(extra[0].say(text))
        for h2 in extra:
            runner.call(h2.close())
        assert pool.status()["refused"] >= refused_before + 2
        _heard_to_the_end(runner, admitted, 60)
        underruns = [h.ring.stats().underruns for h, _, _ in admitted]
        print(f"admitted {len(admitted)}; underruns {underruns}")
        return underruns
    finally:
        reader.stop()
        for h, _, _ in admitted:
            runner.call(h.close())


def _heard_to_the_end(runner, admitted: list, timeout_s: float) -> None:
    """Wait until each (handle, request id, listener) request is made and its listener
    has read all of it (within `timeout_s` of the request being made)."""
    for h, rid, ls in admitted:
        done = runner.call(h.wait(rid), 300)
        deadline = time.monotonic() + timeout_s
        while ls.received < done.samples:
            assert time.monotonic() < deadline
            time.sleep(0.05)


def test_the_workers_count_the_steps_their_listeners_waited_for(pool_runner):
    """Streams enough for about 1.5 x both workers (admission wide open), all heard at
    real-time pace: listeners run dry, and the workers say so (`late_steps`, per worker
    and in all), no more often than the listeners heard gaps. On a slow box admission's
    wide cap (4 x a worker) may refuse the last ones: the load is past 1.5 x by then."""
    pool = pool_runner.pool
    before = pool.status()["late_steps"]
    rtf = max([w.rtf for w in pool.loads()] + [0.05])
    n = min(80, max(24, math.ceil(3.0 / rtf)))
    reader = PacedReader()
    reader.start()
    admitted = []
    try:
        for _ in range(n):
            try:
                h = pool_runner.call(pool.open_tts_stream())
            except Overloaded:
                break
            try:
                rid = pool_runner.call(h.say(SENTENCE))
            except Overloaded:
                pool_runner.call(h.close())
                break
            admitted.append((h, rid, reader.add(h.stream_id, h.ring, h.rate_hz)))
        _heard_to_the_end(pool_runner, admitted, 120)
        time.sleep(1.5)  # the workers publish their counters every second
        status = pool.status()
        late = status["late_steps"] - before
        underruns = sum(h.ring.stats().underruns for h, _, _ in admitted)
        print(f"rtf {rtf:.3f}, {len(admitted)} of {n} streams: late steps {late}, "
              f"underruns {underruns}")
        assert 0 < late <= underruns
        assert sum(w["late_steps"] for w in status["workers"]) >= late
    finally:
        reader.stop()
        for h, _, _ in admitted:
            pool_runner.call(h.close())
