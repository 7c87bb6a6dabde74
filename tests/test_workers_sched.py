"""Deadline scheduling and admission on the real pool, at loads chosen from measured RTF."""

from __future__ import annotations

import math
import time

import pytest

from cosyvoiced.workers.errors import Overloaded
from cosyvoiced.workers.pace import PacedReader

pytestmark = pytest.mark.e2e

SHORT = ["Yes, of course.", "Sure, right away.", "Okay, no problem.", "All right, thanks.",
         "Good, let us see.", "Fine, one moment."]
LONG = ("The technician will visit your home between nine and eleven tomorrow morning "
        "to check the line and replace the old router that keeps dropping your connection.")


def measure(runner, text: str) -> tuple[float, float]:
    """(RTF, seconds of audio) of `text`, both workers synthesizing at once.

    Measured with every worker busy, as in the runs that follow: on a shared machine a
    lone worker gets more of the CPU than each of two busy ones.
    """
    hs = [runner.call(runner.pool.open_tts_stream()) for _ in runner.pool.slots]
    try:
        rids = [runner.call(h.say(text)) for h in hs]
        dones = [runner.call(h.wait(r), 60) for h, r in zip(hs, rids, strict=True)]
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


@pytest.mark.xfail(strict=False, reason="issue 5 open: on 2026-11-30 EDF still underran on "
                   "long-clause streams at 0.36 load per worker, quiet machine")
def test_edf_keeps_every_stream_fed_where_fifo_starves_short_clauses(pool_runner):
    rtf, long_s = measure(pool_runner, LONG)
    _, short_s = measure(pool_runner, SHORT[0])
    short_s = max(short_s, 0.5)
    # Per worker: S short-clause streams and L long-clause ones. FIFO serves them round
    # robin, so a short stream gets short_s of audio per round of L long clauses: it
    # starves once L * rtf * long_s + S * rtf * short_s exceeds short_s (30% margin).
    s_per = 1
    l_per = max(1, math.ceil((1.3 * short_s - s_per * rtf * short_s) / (rtf * long_s)))
    demand = (l_per + s_per) * rtf
    print(f"rtf={rtf:.3f} long={long_s:.2f}s short={short_s:.2f}s L={l_per} S={s_per} "
          f"demand/worker={demand:.2f}")
    assert demand < 0.7, "machine too slow right now for a fair comparison"
    lookahead_s = 3.0
    assert rtf * long_s < lookahead_s, "one long text would outlast the lookahead"
    texts = []
    for _ in range(2):  # two workers
        texts += [" ".join(SHORT * 2)] * s_per + [" ".join([LONG] * 4)] * l_per
    edf = run_mix(pool_runner, texts, "edf", lookahead_s)
    fifo = run_mix(pool_runner, texts, "fifo", lookahead_s)
    print("edf", edf, "fifo", fifo)
    assert sum(edf.values()) == 0, edf
    assert sum(fifo.values()) > 0, fifo


@pytest.mark.xfail(strict=False, reason="issue 5 open: refusal works, but on 2026-11-30 "
                   "admitted streams still underran under the 0.4 busy cap, quiet machine")
def test_requests_beyond_capacity_are_refused_and_admitted_streams_keep_up(pool_runner):
    runner, pool = pool_runner, pool_runner.pool
    busy_max = pool.admission.busy_max
    pool.admission.busy_max = 0.4
    time.sleep(1.5)  # let the busy figures settle after the previous test
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
        with pytest.raises(Overloaded):
            h2 = runner.call(pool.open_tts_stream())
            runner.call(h2.say(text))
        assert pool.status()["refused"] >= 2
        for h, rid, ls in admitted:
            done = runner.call(h.wait(rid), 300)
            deadline = time.monotonic() + 60
            while ls.received < done.samples:
                assert time.monotonic() < deadline
                time.sleep(0.05)
        underruns = [h.ring.stats().underruns for h, _, _ in admitted]
        print(f"admitted {len(admitted)}; underruns {underruns}")
        assert underruns == [0] * len(admitted)
    finally:
        reader.stop()
        pool.admission.busy_max = busy_max
        for h, _, _ in admitted:
            runner.call(h.close())
