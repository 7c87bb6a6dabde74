"""Suite `listen`: concurrent 8 kHz calls two cores can listen to, ours vs a naive baseline.

Each call replays real Asterisk prompts at real-time pace between quiet noise, speech
~35 % of the time (`callmix`), VAD on every stream and ASR on every utterance. A count
passes when no frame was dropped and the p95 latency from each prompt's end of speech to
its transcript (a prompt with no transcript counts as infinitely late) is at most 1.5 s.
The same ramp (`callmix.search`: doubling, then bisection) runs, in this invocation, on

* ours: the worker pool's listen path (2 workers pinned to cores 0 and 1, batched Silero
  per tick, log-mel while speech is open, batched Whisper jobs by deadline, `[asr]` and
  `[vad]` defaults); a feeder thread writes every call's 20 ms frames into its capture
  ring at real-time pace, transcripts are timed when they reach this process;
* the naive baseline (`listennaive`): a thread per call, its own Silero iterator and
  faster-whisper on each utterance, in this process (2 cores).

Both hear the same calls (same seeds per count) and are judged the same way, and both
run prioritized as the `streams` suite runs (this process, its threads and the workers at
nice -15, the session's autogroup too, put back at the end): on a shared machine other
jobs' CPU would otherwise decide the result. Also:
VAD-only (ASR off) 16 kHz streams on the pool, with the `streams` suite's VAD run (a
stream passes with no ring overrun and the workers kept up), ramped the same way; and the
numpy allocations per second of the worker listen path while speech is open (8 kHz,
where each window is resampled to 16 kHz for the log-mel, and 16 kHz).
"""

from __future__ import annotations

import asyncio
import logging
import os
import sys
import threading
import time
from typing import Any

import numpy as np

from tools.bench.callmix import (
    CallPlan,
    CallRamp,
    Heard,
    Verdict,
    judge,
    plan_calls,
    search,
    summary,
)
from tools.bench.report import Report

RATE_HZ = 8000
FRAME = 160
"""20 ms at 8 kHz: what an AudioSocket call delivers."""
LATENCY_GOAL_S = 1.5
RELAXED_GOAL_S = 3.0
"""Second figure: calls served with no drop and p95 within 3 s (throughput when the
strict goal is out of reach on a loaded machine)."""
CACHE = "/tmp/cosyvoiced-bench"


def _cpu_s(pids: list[int]) -> float:
    from tools.bench.streams import _cpu_s as cpu

    return cpu(pids)


def _quiet_logs() -> None:
    import structlog

    structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(logging.WARNING))


def _listen_pool(loop: asyncio.AbstractEventLoop) -> Any:
    from cosyvoiced.config.schema import AsrConfig, TtsConfig, VadConfig, WorkersConfig
    from cosyvoiced.workers.pool.pool import WorkerPool
    from cosyvoiced.workers.setup import WorkerSetup

    wc = WorkersConfig(count=2, cpus="0-1", onnx_threads=1, admit_busy_max=4.0, spare=False,
                       max_streams=100000)
    setup = WorkerSetup(tts=TtsConfig(), vad=VadConfig(), cache_dir=CACHE, state_dir=None,
                        vad_capacity=1024, log_level="warning", warm_up=False,
                        asr=AsrConfig())
    pool = WorkerPool(wc, setup)
    loop.run_until_complete(pool.start())
    return pool


def _verdicts(plans: list[CallPlan], heard: list[list[Heard]], t0: float) -> Verdict:
    v = Verdict()
    for plan, h in zip(plans, heard, strict=True):
        v.merge(judge(plan, h, t0))
    return v


# --- ours -------------------------------------------------------------------------


def _ours_run(loop: asyncio.AbstractEventLoop, pool: Any, plans: list[CallPlan]) -> dict:
    from cosyvoiced.listen.events import Transcript
    from cosyvoiced.workers import messages as m

    async def open_all() -> list[Any]:
        return [await pool.open_listen_stream(RATE_HZ) for _ in plans]

    hs = loop.run_until_complete(open_all())
    heard: list[list[Heard]] = [[] for _ in plans]
    worker_lat: list[float] = []
    errors: list[str] = []

    async def collect(i: int, h: Any) -> None:
        while True:
            msg = await h.events.get()
            if isinstance(msg, m.ListenEvent) and isinstance(msg.event, Transcript):
                t = msg.event
                heard[i].append(Heard(t.start_ms, t.end_ms, t.text, time.monotonic()))
                worker_lat.append(t.latency_ms / 1000)
            elif isinstance(msg, m.StreamError):
                errors.append(msg.code)

    pids = [s.proc.pid for s in pool.slots]
    t0 = time.monotonic() + 0.2
    stop = threading.Event()
    late = [0.0]

    def feed() -> None:  # frame k of every call is written once it has been "spoken"
        k, total = 0, max(p.audio.shape[0] for p in plans) // FRAME
        while k < total and not stop.is_set():
            due = t0 + (k + 1) * FRAME / RATE_HZ
            d = due - time.monotonic()
            if d > 0:
                time.sleep(d)
            else:
                late[0] = max(late[0], -d)
            for p, h in zip(plans, hs, strict=True):
                x = p.audio[k * FRAME:(k + 1) * FRAME]
                if x.shape[0]:
                    h.ring.write(x)
            k += 1

    async def go() -> None:
        tasks = [asyncio.ensure_future(collect(i, h)) for i, h in enumerate(hs)]
        th = threading.Thread(target=feed, daemon=True)
        cpu0 = _cpu_s(pids) + time.process_time()
        th.start()
        try:
            end = t0 + max(p.seconds for p in plans)
            while time.monotonic() < end:
                await asyncio.sleep(0.1)
            want = sum(len(p.spans) for p in plans)
            deadline = time.monotonic() + 6.0
            while (sum(len(x) for x in heard) < want and time.monotonic() < deadline):
                await asyncio.sleep(0.05)
            stats["cpu_cores"] = ((_cpu_s(pids) + time.process_time() - cpu0)
                                  / (time.monotonic() - t0))
        finally:
            stop.set()
            await asyncio.to_thread(th.join)
            for t in tasks:
                t.cancel()

    stats: dict[str, Any] = {}
    try:
        loop.run_until_complete(go())
    finally:
        dropped = sum(h.ring.stats().overruns for h in hs)

        async def close_all() -> None:
            for h in hs:
                await h.close()

        loop.run_until_complete(close_all())
    v = _verdicts(plans, heard, t0)
    out = {"n": len(plans), "dropped_frames": dropped, **summary(v),
           "worker_latency_p95_s": round(float(np.percentile(worker_lat, 95)), 3)
           if worker_lat else None,
           "feeder_late_max_s": round(late[0], 3), "errors": len(errors),
           "cpu_cores": round(stats.get("cpu_cores", 0.0), 2)}
    return out


# --- the naive baseline ------------------------------------------------------------


def _naive_run(naive: Any, plans: list[CallPlan]) -> dict:
    t0 = time.monotonic() + 0.2
    cpu0 = time.process_time()
    calls = naive.run(plans, t0)
    cpu = (time.process_time() - cpu0) / (time.monotonic() - t0)
    v = _verdicts(plans, [c.heard for c in calls], t0)
    errors = [c.error for c in calls if c.error]
    return {"n": len(plans), "dropped_frames": sum(c.dropped_frames for c in calls),
            **summary(v), "late_max_s": round(max(c.late_s for c in calls), 3),
            "errors": len(errors), "error": errors[0] if errors else None,
            "cpu_cores": round(cpu, 2)}


def _passed(r: dict, goal_s: float = LATENCY_GOAL_S) -> bool:
    p95 = r["latency_p95_s"]
    return (r["dropped_frames"] == 0 and r["errors"] == 0 and p95 is not None
            and p95 <= goal_s)


class Trials:
    """Each pipeline's runs by call count (a count is run once, judged by every goal)."""

    def __init__(self, rep: Report, runners: dict[str, Any], corpus, seconds: float) -> None:
        self.rep, self.runners, self.corpus, self.seconds = rep, runners, corpus, seconds
        self.runs: dict[str, dict[int, dict]] = {name: {} for name in runners}

    def get(self, name: str, n: int) -> dict:
        r = self.runs[name].get(n)
        if r is None:
            plans = plan_calls(self.corpus, n, self.seconds, seed=n)
            r = self.runners[name](plans)
            r["ok"] = _passed(r)
            r["ok_relaxed"] = _passed(r, RELAXED_GOAL_S)
            r["speech_fraction"] = round(sum(p.speech_s for p in plans)
                                         / sum(p.seconds for p in plans), 3)
            self.runs[name][n] = r
            print(f"{name} N={n}: {r}", file=sys.stderr, flush=True)
            self.rep.rows.append([name, n, "ok" if r["ok"] else "FAIL",
                                  "ok" if r["ok_relaxed"] else "FAIL", r["dropped_frames"],
                                  r["utterances"], r["missed"], r["latency_p50_s"],
                                  r["latency_p95_s"], r["wer_pct"], r["cpu_cores"]])
        return r

    def ramps(self, ramps: dict[str, CallRamp], key: str) -> None:
        """Step every pipeline's ramp in turn (a shared machine's load shifts hit all)."""
        while True:
            stepped = False
            for name, ramp in ramps.items():
                n = ramp.next()
                if n is not None:
                    ramp.report(self.get(name, n)[key])
                    stepped = True
            if not stepped:
                return


# --- VAD only, and allocations -------------------------------------------------------


def _vad_only(rep: Report, quick: bool) -> tuple[int, list[dict]]:
    from tools.bench.streams import _pool, _speech16k, _stop, _vad_run

    loop = asyncio.new_event_loop()
    pool = _pool(loop)
    audio = _speech16k(30)
    runs: list[dict] = []
    try:
        def trial(n: int) -> bool:  # streams._pool prioritized this process and the pool
            r = _vad_run(loop, pool, n, 4 if quick else 8, audio)
            runs.append(r)
            print(f"vad-only N={n}: {r}", file=sys.stderr, flush=True)
            rep.rows.append(["vad-only 16k", n, "ok" if r["ok"] else "FAIL", "",
                             r["overruns"], "", "", "", "", "", round(r["cpu_cores"], 2)])
            return r["ok"]

        best, _ = search(trial, 800 if quick else 500, 2 if quick else 5, resolution=0.05)
    finally:
        _stop(loop, pool)  # and the autogroup's nice put back
        loop.close()
    return best, runs


def listen_path_allocs(rate_hz: int, seconds: float = 5.0) -> float:
    """numpy allocations per second of audio on a worker listen stream with speech open
    (tap read + clean + history + resample + log-mel; the VAD run itself excluded)."""
    from cosyvoiced.config.schema import VadConfig
    from cosyvoiced.workers.worker.utterances import ListenTap, MelPool
    from tools.bench.npalloc import counting

    class Ring:
        def __init__(self, x: np.ndarray) -> None:
            self.x, self.pos = x, 0

        def available(self) -> int:
            return self.x.shape[0] - self.pos

        def read_into(self, out: np.ndarray) -> int:
            n = min(out.shape[0], self.available())
            out[:n] = self.x[self.pos:self.pos + n]
            self.pos += n
            return n

    cfg = VadConfig()
    window = rate_hz * 32 // 1000
    t = np.arange(int((seconds + 2) * rate_hz)) / rate_hz
    ring = Ring((0.1 * np.sin(2 * np.pi * 300 * t)).astype(np.float32))
    tap = ListenTap("a", rate_hz, ring, cfg, MelPool(cfg, cache_dir=CACHE), lambda e: None)
    buf = np.zeros(window, np.float32)
    for _ in range(int(1.0 * rate_hz / window)):  # speech opens, mel warms up
        tap.read_into(buf)
        tap.on_prob(0.9)
    n = int(seconds * rate_hz / window)
    with counting() as c:
        for _ in range(n):
            tap.read_into(buf)
            tap.on_prob(0.9)
    return c.calls / (n * window / rate_hz)


# --- the suite -----------------------------------------------------------------------


def run(quick: bool) -> Report:
    from cosyvoiced.config.schema import VadConfig
    from cosyvoiced.listen.asr import bundled_model_dir
    from cosyvoiced.testing.prompts import prompts
    from tools.bench.callmix import clips

    _quiet_logs()
    os.makedirs(CACHE, exist_ok=True)
    rep = Report("listen", ["pipeline", "calls", "p95<=1.5s", "p95<=3s", "dropped",
                            "utterances", "missed", "lat_p50_s", "lat_p95_s", "wer_pct",
                            "cpu_cores"])
    corpus = clips(prompts())
    seconds = 12.0 if quick else 30.0
    steps = 2 if quick else 6
    from tools.bench.listennaive import NaiveListen

    naive = NaiveListen(str(bundled_model_dir()), VadConfig())
    from tools.bench.streams import _autogroup_nice, _prioritize

    loop = asyncio.new_event_loop()
    pool = _listen_pool(loop)
    autogroup = _autogroup_nice()
    prioritized = _prioritize(pool)
    trials = Trials(rep, {"ours": lambda plans: _ours_run(loop, pool, plans),
                          "naive": lambda plans: _naive_run(naive, plans)}, corpus, seconds)
    strict = {"ours": CallRamp(8 if quick else 12, steps), "naive": CallRamp(2, steps)}
    try:
        trials.ramps(strict, "ok")
        relaxed = {name: CallRamp(r.fail or 2 * r.best, 1 if quick else 5)
                   for name, r in strict.items()}
        for r, s in zip(relaxed.values(), strict.values(), strict=True):
            r.best = s.best  # what passed the strict goal passes this one
        trials.ramps(relaxed, "ok_relaxed")
    finally:
        loop.run_until_complete(pool.stop())
        loop.close()
        if autogroup is not None:
            _autogroup_nice(autogroup)
        os.setpriority(os.PRIO_PROCESS, 0, 0)
    ours, base = strict["ours"].best, strict["naive"].best
    ours3, base3 = relaxed["ours"].best, relaxed["naive"].best
    ours_runs = list(trials.runs["ours"].values())
    base_runs = list(trials.runs["naive"].values())
    vad_best, vad_runs = _vad_only(rep, quick)
    allocs = {rate: round(listen_path_allocs(rate, 2.0 if quick else 5.0), 1)
              for rate in (8000, 16000)}
    ratio = ours / max(base, 1)
    ratio3 = ours3 / max(base3, 1)
    rep.figures.update(ours_calls=ours, naive_calls=base, ratio=ratio, ours_calls_p95_3s=ours3,
                       naive_calls_p95_3s=base3, ratio_p95_3s=ratio3, ours_runs=ours_runs,
                       naive_runs=base_runs, vad_only_streams=vad_best, vad_runs=vad_runs,
                       listen_path_allocs_per_s=allocs, call_seconds=seconds,
                       prioritized=prioritized,
                       corpus_clips=len(corpus))
    rep.notes.append(f"ours {ours} calls, naive {base} calls: {ratio:.2f}x"
                     + (" (the naive baseline passed no count; ratio taken against 1)"
                        if base == 0 else ""))
    rep.notes.append(f"within p95 <= 3 s: ours {ours3} calls, naive {base3}: {ratio3:.2f}x")
    rep.notes.append(f"worker listen path, speech open: {allocs[8000]} numpy allocations/s "
                     f"at 8 kHz (soxr returns a new array per chunk), {allocs[16000]} at "
                     "16 kHz")
    rep.target("listen_calls_vs_naive", ratio, ">= 2", ours >= 2 * max(base, 1))
    rep.target("vad_only_streams_16k_2cores", vad_best, ">= 1000", vad_best >= 1000)
    return rep
