"""Suite `sched`: least-slack (EDF) TTS scheduling against FIFO on the real worker pool.

Per worker: one stream of short clauses (sentences of 5-13 characters, ~0.9 s of speech
each) and L streams of long ones (a 75-character sentence, ~3.7 s), all started at once
and heard at real-time pace from their playback rings; every step is a whole clause
(vocoder chunks longer than any clause here: at the default 1 s chunks FIFO's round
robin hands the short stream a step per round too, and the steps' size, not the policy,
would be measured). FIFO serves clauses round robin, so the short stream gets one short
clause of audio per round while a round costs RTF x (short + L x long): it starves once
that exceeds the short clause. L is chosen from the RTF measured first in the same run,
both workers busy, with a 60% margin; the same mix then runs under EDF and under FIFO.

Targets: EDF keeps every stream fed (0 underruns), and FIFO, the reference of the same
run, starves at that load (underruns on the short streams): a mix too light to starve
FIFO tells nothing. A run is judged only at a load the workers can carry (under 0.7 of
each); a round whose EDF run underran, or whose mix did not starve FIFO, is run once
more (the latter one long stream per worker heavier). Every round is in the table. The
simulated-clock version of this claim is a unit test (tests/unit/workers/test_slack.py).

The bench process and its workers run at nice -15, as the `streams` suite does (needs
root; other jobs on the machine get less CPU meanwhile).
"""

from __future__ import annotations

import asyncio
import math
import sys
import time

import numpy as np

from tools.bench.report import Report
from tools.bench.streams import BENCH_NICE, _autogroup_nice, _prioritize, _stop

SHORT = "Yes, sure. Okay. Fine, thanks. All right. Got it. Sure thing. No problem. Right away."
"""Sentences of 5-13 chars: each is its own clause of about 0.9 s of speech."""
LONG_SENTENCE = "The technician will visit your home tomorrow morning to replace the router."
"""75 chars, no comma: one clause (under workers.clause_max_chars) of ~3.7 s of speech."""
MARGIN = 1.6
"""The RTF measured over a whole text includes its first clause, which is short and costs
more per second of speech than the long clauses (measured: a round at 1.3x on that RTF
left FIFO with no underruns on a quiet machine)."""
MAX_DEMAND = 0.7
"""Above this share of each worker, the mix is not one the workers can be asked to carry."""


def _pool(loop: asyncio.AbstractEventLoop):
    from cosyvoiced.config.schema import TtsConfig, VadConfig, WorkersConfig
    from cosyvoiced.workers.pool.pool import WorkerPool
    from cosyvoiced.workers.setup import WorkerSetup

    wc = WorkersConfig(count=2, cpus="0-1", onnx_threads=1, admit_busy_max=4.0, spare=False,
                       hang_restart_s=60.0)
    # every step a whole clause; the engine's real costs (no prompt cache); vocoder and
    # flow fixed (auto's choice rests on a timing: runs would differ)
    tts = TtsConfig(cache_mb=0, vocoder="fp32", flow="fp32", first_chunk_s=6.0, chunk_s=6.0)
    setup = WorkerSetup(tts=tts, vad=VadConfig(), cache_dir="/tmp/cosyvoiced-bench",
                        state_dir=None, policy=wc.policy, lookahead_s=wc.lookahead_s,
                        first_audio_s=wc.first_audio_s, work_conserving=wc.work_conserving,
                        clause_max_chars=wc.clause_max_chars, vad_capacity=64,
                        log_level="warning")
    pool = WorkerPool(wc, setup)
    loop.run_until_complete(pool.start())
    pool.admission.busy_max = float("inf")  # the mix is chosen here, not by admission
    pool.autogroup_nice = _autogroup_nice()
    pool.prioritized = _prioritize(pool)
    return pool


async def _measure(pool, text: str) -> tuple[float, float]:
    """(RTF, seconds of audio) of `text`, every worker synthesizing it at once (on a shared
    machine a lone worker gets more of the CPU than each of two busy ones)."""
    hs = [await pool.open_tts_stream() for _ in pool.slots]
    try:
        waits = [asyncio.ensure_future(h.wait(await h.say(text))) for h in hs]
        sink = np.zeros(1 << 16, np.float32)
        deadline = time.monotonic() + 120
        while not all(w.done() for w in waits):  # drained unpaced: rings hold ~5 s
            if time.monotonic() > deadline:
                raise RuntimeError("the RTF measure did not end within 120 s")
            for h in hs:
                h.ring.read_into(sink)
            await asyncio.sleep(0.01)
        dones = [w.result() for w in waits]
        return max(d.rtf for d in dones), dones[0].samples / hs[0].rate_hz
    finally:
        for h in hs:
            await h.close()


async def _run_mix(pool, texts: list[str], policy: str) -> list[int]:
    """Each text on its own stream, all at once, heard at real-time pace: the underruns
    of each stream."""
    from cosyvoiced.testing.pace import PacedReader

    pool.set_policy(policy, pool.setup.lookahead_s)
    await asyncio.sleep(0.2)
    reader = PacedReader()
    reader.start()
    handles = []
    try:
        handles = [await pool.open_tts_stream() for _ in texts]
        listeners = [reader.add(h.stream_id, h.ring, h.rate_hz) for h in handles]
        rids = [await h.say(t) for h, t in zip(handles, texts, strict=True)]
        dones = [await asyncio.wait_for(h.wait(r), 300)
                 for h, r in zip(handles, rids, strict=True)]
        deadline = time.monotonic() + 120
        while any(ls.received < d.samples for ls, d in zip(listeners, dones, strict=True)):
            if time.monotonic() > deadline:
                raise RuntimeError(f"{policy}: audio never fully heard")
            await asyncio.sleep(0.05)
        return [h.ring.stats().underruns for h in handles]
    finally:
        reader.stop()
        for h in handles:
            await h.close()
        pool.set_policy("edf", pool.setup.lookahead_s)


async def _round(pool, extra_long: int) -> dict:
    """One measured round: the RTF, the mix it gives, EDF's and FIFO's underruns (not
    run where the demand would be over MAX_DEMAND)."""
    rtf, long_s = await _measure(pool, " ".join([LONG_SENTENCE] * 2))
    long_s /= 2  # one sentence: one clause
    _, short_total_s = await _measure(pool, SHORT)
    short_s = short_total_s / SHORT.count(".")
    s_per = 1
    l_per = max(1, math.ceil((MARGIN * short_s - s_per * rtf * short_s) / (rtf * long_s)))
    l_per += extra_long
    demand = (l_per + s_per) * rtf
    out = {"rtf": rtf, "long_clause_s": long_s, "short_clause_s": short_s, "long_per_worker": l_per,
           "demand_per_worker": demand}
    print(f"sched: {out}", file=sys.stderr, flush=True)
    if demand >= MAX_DEMAND:
        return out
    # Streams are opened idle and spread by count, alternating between the two workers:
    # in this order each worker gets s_per short and l_per long ones.
    texts = [" ".join([SHORT] * 3)] * (2 * s_per) + [" ".join([LONG_SENTENCE] * 5)] * (2 * l_per)
    out["edf"] = await _run_mix(pool, texts, "edf")
    out["fifo"] = await _run_mix(pool, texts, "fifo")
    out["short_streams"] = 2 * s_per
    print(f"sched: edf {out['edf']} fifo {out['fifo']}", file=sys.stderr, flush=True)
    return out


def _row(i: int, r: dict) -> list:
    run = "edf" in r
    short = r.get("short_streams", 0)
    return [i + 1, round(r["rtf"], 3), f"{r['short_clause_s']:.2f} / {r['long_clause_s']:.2f}",
            r["long_per_worker"], round(r["demand_per_worker"], 2),
            sum(r["edf"]) if run else "not run", sum(r["fifo"][:short]) if run else "",
            sum(r["fifo"][short:]) if run else ""]


def run(quick: bool) -> Report:
    rep = Report("sched", ["round", "RTF (both busy)", "clause s short / long",
                           "long streams per worker", "demand per worker", "EDF underruns",
                           "FIFO underruns (short streams)", "FIFO underruns (long)"])
    loop = asyncio.new_event_loop()
    pool = _pool(loop)
    rounds: list[dict] = []
    try:
        extra = 0
        for _ in range(1 if quick else 2):
            r = loop.run_until_complete(_round(pool, extra))
            rounds.append(r)
            if "edf" not in r or (sum(r["edf"]) == 0 and sum(r["fifo"]) > 0):
                break
            if sum(r["fifo"]) == 0:  # the RTF measured overstated the runs' cost
                extra += 1
    finally:
        _stop(loop, pool)
        loop.close()
    rep.rows += [_row(i, r) for i, r in enumerate(rounds)]
    rep.figures["rounds"] = rounds
    rep.notes.append(f"workers at nice {BENCH_NICE}" if pool.prioritized
                     else "not prioritized (needs root)")
    rep.notes.append("per worker: 1 stream of short clauses, L of long ones, all at once, "
                     "heard at real-time pace; every step a whole clause")
    last = rounds[-1]
    if "edf" not in last:
        rep.notes.append(f"the workers are too busy for a fair round: demand "
                         f"{last['demand_per_worker']:.2f} of each worker >= {MAX_DEMAND}")
        rep.target("demand per worker of the mix", last["demand_per_worker"],
                   f"< {MAX_DEMAND}", False)
        return rep
    edf, fifo_short = sum(last["edf"]), sum(last["fifo"][:last["short_streams"]])
    rep.target("EDF underruns (every stream, last round)", edf, "== 0", edf == 0)
    rep.target("FIFO underruns on the short-clause streams (reference, same round)",
               fifo_short, "> 0", fifo_short > 0)
    return rep
