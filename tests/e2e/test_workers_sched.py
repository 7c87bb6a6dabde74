"""Deadline scheduling and admission on the real pool, at loads chosen from measured RTF."""

from __future__ import annotations

import asyncio
import math
import time
from collections.abc import Iterator
from dataclasses import replace

import numpy as np
import pytest

from cosyvoiced.config.schema import TtsConfig
from cosyvoiced.testing.pace import PacedReader
from cosyvoiced.workers.errors import Overloaded
from tests.fixtures.workers import TEST_WORKERS, PoolRunner

SHORT = "Yes, sure. Okay. Fine, thanks. All right. Got it. Sure thing. No problem. Right away."
"""Sentences of 5-13 chars: each is its own clause of about half a second of speech."""
LONG_SENTENCE = ("The technician will visit your home tomorrow morning to replace the router.")
"""75 chars, no comma: one clause (under workers.clause_max_chars) of ~3.5 s of speech."""
LONG = ("The technician will visit your home between nine and eleven tomorrow morning "
        "to check the line and replace the old router that keeps dropping your connection.")


TOO_SLOW = "the machine is too busy right now for a real-time test"
"""These tests run real-time streams on two workers and must be judged at a load the
workers can carry. On this shared box other jobs (several at raised priority) sometimes
leave each worker a third of a core: the RTF measured with both workers busy then
triples and the smallest mix that starves FIFO needs more than ~0.7 of each worker.
The test then reports XFAIL (the figures are printed) instead of judging EDF at a load
nobody can carry; whenever the measured load allows, it must pass."""


@pytest.fixture(scope="module")
def clause_runner(onnx_cache) -> Iterator[PoolRunner]:
    """A pool whose every step is a whole clause (vocoder chunks longer than any clause
    here), as the EDF test's model of FIFO has it. At the default 1 s chunks FIFO's
    round robin hands the short stream a step per round too, and on a fast CPU (RTF
    ~0.1) no load a worker can carry starves it: the steps' size, not the policy,
    would be under test. No warm spare: its model load would overlap the first measure."""
    runner = PoolRunner(replace(TEST_WORKERS, spare=False), onnx_cache,
                        tts=TtsConfig(cache_mb=0, vocoder="fp32", flow="fp32", first_chunk_s=6.0,
                                      chunk_s=6.0))
    yield runner
    runner.close()


def measure(runner, text: str) -> tuple[float, float]:
    """(RTF, seconds of audio) of `text`, both workers synthesizing at once.

    Measured with every worker busy, as in the runs that follow: on a shared machine a
    lone worker gets more of the CPU than each of two busy ones.
    """
    hs = [runner.call(runner.pool.open_tts_stream()) for _ in runner.pool.slots]
    try:
        rids = [runner.call(h.say(text)) for h in hs]
        waits = [asyncio.run_coroutine_threadsafe(h.wait(r), runner.loop)
                 for h, r in zip(hs, rids, strict=True)]
        sink = np.zeros(1 << 16, np.float32)
        deadline = time.monotonic() + 120
        while not all(w.done() for w in waits):  # drained unpaced: rings hold ~5 s
            assert time.monotonic() < deadline
            for h in hs:
                h.ring.read_into(sink)
            time.sleep(0.01)
        dones = [w.result() for w in waits]
        return max(d.rtf for d in dones), dones[0].samples / hs[0].rate_hz
    finally:
        for h in hs:
            runner.call(h.close())


def run_mix(runner, texts: list[str], policy: str, lookahead_s: float) -> dict[str, int]:
    """Speak each text on its own stream, all at once, heard at real-time pace."""
    pool = runner.pool
    pool.set_policy(policy, lookahead_s)
    time.sleep(0.2)
    reader = PacedReader()
    reader.start()
    handles = [runner.call(pool.open_tts_stream()) for _ in texts]
    listeners = [reader.add(h.stream_id, h.ring, h.rate_hz) for h in handles]
    rids = [runner.call(h.say(t)) for h, t in zip(handles, texts, strict=True)]
    dones = [runner.call(h.wait(r), 300) for h, r in zip(handles, rids, strict=True)]
    deadline = time.monotonic() + 120
    while any(ls.received < d.samples for ls, d in zip(listeners, dones, strict=True)):
        assert time.monotonic() < deadline
        time.sleep(0.05)
    reader.stop()
    underruns = {f"{i}:{t[:12]}": h.ring.stats().underruns
                 for i, (h, t) in enumerate(zip(handles, texts, strict=True))}
    for h in handles:
        runner.call(h.close())
    pool.set_policy("edf", pool.setup.lookahead_s)
    return underruns


def test_edf_keeps_every_stream_fed_where_fifo_starves_short_clauses(clause_runner):
    """Per worker: one stream of short clauses and L streams of long ones, all at once.

    FIFO serves clauses round robin, so the short stream gets short_s of audio per round
    while a round costs rtf x (short_s + L x long_s): it starves once that exceeds short_s
    (L is chosen with a margin). Least-slack EDF keeps all of them fed at that load.
    The RTF is measured first with both workers busy (as in the runs), on this machine.

    This box is shared: other jobs can take half its CPU for seconds at a time, more than
    any buffer covers. So a round whose EDF run underran is measured and run once more
    (both policies again); EDF must come out clean in one of the two, FIFO must starve in
    it. A broken EDF fails both; a bad moment of the machine fails at most one.
    """
    attempts: list[tuple[dict[str, int], dict[str, int]]] = []
    for extra_long in range(2):
        result = _edf_vs_fifo(clause_runner, extra_long)
        if result is None:
            if not attempts:  # see TOO_SLOW
                pytest.xfail(TOO_SLOW)
            break  # a failed first round is judged as it is
        attempts.append(result)
        if sum(result[0].values()) == 0 and sum(result[1].values()) > 0:
            break
        # EDF underran (a bad moment of the box), or FIFO did not (the RTF measured
        # beforehand overstated the runs' cost, so the mix was too light to tell them
        # apart): once more, one long stream per worker heavier.
    print("attempts (edf, fifo):", attempts)
    edf, fifo = attempts[-1]
    assert sum(edf.values()) == 0, attempts
    assert sum(fifo.values()) > 0, attempts


def _edf_vs_fifo(pool_runner, extra_long: int = 0
                 ) -> tuple[dict[str, int], dict[str, int]] | None:
    """One measured round (None: the machine is too slow for a fair one right now)."""
    rtf, long_s = measure(pool_runner, " ".join([LONG_SENTENCE] * 2))
    long_s /= 2  # one sentence: one clause
    _, short_total_s = measure(pool_runner, SHORT)
    short_s = short_total_s / SHORT.count(".")
    s_per = 1
    # 60% margin: the RTF measured over a whole text includes its first clause, which is
    # short and costs more per second of speech than the long clauses (measured: a round
    # at 1.3x on that RTF left FIFO with no underruns on a quiet machine).
    l_per = max(1, math.ceil((1.6 * short_s - s_per * rtf * short_s) / (rtf * long_s)))
    l_per += extra_long
    demand = (l_per + s_per) * rtf
    print(f"rtf={rtf:.3f} long clause={long_s:.2f}s short clause={short_s:.2f}s L={l_per} "
          f"S={s_per} demand/worker={demand:.2f}")
    if demand >= 0.7:
        return None
    # Streams are opened idle and spread by count, alternating between the two workers:
    # in this order each worker gets s_per short and l_per long ones.
    texts = [" ".join([SHORT] * 3)] * (2 * s_per) + [" ".join([LONG_SENTENCE] * 5)] * (2 * l_per)
    lookahead_s = pool_runner.pool.setup.lookahead_s
    edf = run_mix(pool_runner, texts, "edf", lookahead_s)
    fifo = run_mix(pool_runner, texts, "fifo", lookahead_s)
    print("edf", edf, "fifo", fifo)
    return edf, fifo


def test_requests_beyond_capacity_are_refused_and_admitted_streams_keep_up(pool_runner):
    """The cap is set to 2.5 x the workers' measured RTF (room for two speaking streams
    each, about 0.4 of a worker on a quiet machine), so the test means the same on a
    slow, shared machine: refusals come from the model of the load, not from luck.
    As in the EDF test, a round whose admitted streams underran is run once more (other
    jobs on this box can take half its CPU for seconds); one must come out clean."""
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
    text = " ".join([LONG] * 2)
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
    and in all), no more often than the listeners heard gaps."""
    pool = pool_runner.pool
    before = pool.status()["late_steps"]
    rtf = max([w.rtf for w in pool.loads()] + [0.05])
    n = min(80, max(24, math.ceil(3.0 / rtf)))
    reader = PacedReader()
    reader.start()
    admitted = []
    try:
        for _ in range(n):
            h = pool_runner.call(pool.open_tts_stream())
            rid = pool_runner.call(h.say(LONG))
            admitted.append((h, rid, reader.add(h.stream_id, h.ring, h.rate_hz)))
        _heard_to_the_end(pool_runner, admitted, 120)
        time.sleep(1.5)  # the workers publish their counters every second
        status = pool.status()
        late = status["late_steps"] - before
        underruns = sum(h.ring.stats().underruns for h, _, _ in admitted)
        print(f"rtf {rtf:.3f}, {n} streams: late steps {late}, underruns {underruns}")
        assert 0 < late <= underruns
        assert sum(w["late_steps"] for w in status["workers"]) >= late
    finally:
        reader.stop()
        for h, _, _ in admitted:
            pool_runner.call(h.close())
