"""Suite `scaleout`: calls through HAProxy to two daemons vs one daemon alone, and box failure.

The same call-center load as the `calls` suite (real prompts at real-time pace, a reply
into the call after each utterance) is ramped in steps against (1) one daemon with two
workers on this box's CPUs 0-1, called directly, (2) two daemons with one worker each
(CPU 0, CPU 1) behind real HAProxy running the shipped `contrib/haproxy/haproxy.cfg`, on
loopback, and (3) the same pair called straight, callers dealt to each daemon in turn:
the split without the proxy. The setups take turns at each step, all daemons up
throughout, so other jobs on the box weigh on all alike. All share the same two cores, so
(2) vs (1) is the cost of the proxy hop and of the split, not a gain; (3) tells them
apart. A step passes with zero underruns, drops and refusals and reply first audio p95
<= 500 ms; each row also gives each daemon's calls, refusals and underruns (a split
that dealt one box more calls shows there) and the CPU of the main, ASR and worker
processes (and HAProxy's). Then the hop alone: one call at a time on the idle pair,
alternately straight to a daemon and through HAProxy, dial to the greeting's first speech
(medians). Then one daemon of the pair is killed (SIGKILL) and a call is placed every
100 ms: the time from the kill to the first call answered (its greeting heard) by the
survivor.
"""

from __future__ import annotations

import asyncio
import json
import random
import tempfile
import time
import urllib.request
from pathlib import Path
from types import SimpleNamespace

import numpy as np

from cosyvoiced.testing.audiosocket_peer import Peer
from cosyvoiced.testing.events import follow_events
from cosyvoiced.testing.haproxy import Box, Haproxy
from cosyvoiced.testing.prompts import prompts
from tools.bench.calls import (
    FIRST_P95_MS,
    CallLog,
    Daemon,
    _analyse,
    _caller,
    _controller,
    _cpu_s,
    _pct,
)
from tools.bench.report import Report

GREETING = "Hello."
COMMON = ("workers.spare=false", f'audiosocket.greeting="{GREETING}"')
CHECK_S = 1.0
"""The shipped config's check and agent interval."""


def _box(d: Daemon) -> Box:
    status = json.load(urllib.request.urlopen(f"{d.http}/v1/status", timeout=30))
    agent = [x for x in status["listeners"] if x.startswith("agent://")][0]
    return Box(d.port, int(d.http.rsplit(":", 1)[1]), int(agent.rsplit(":", 1)[1]))


def _pids(d: Daemon) -> dict[str, list[int]]:
    """The daemon's processes by role: its main process, its ASR process, its workers."""
    status = json.load(urllib.request.urlopen(f"{d.http}/v1/status", timeout=30))
    asr = (status["workers"].get("asr") or {}).get("pid")
    return {"main": [d.pids[0]], "asr": [asr] if asr else [], "workers": d.pids[1:]}


def _step(daemons: list[Daemon], targets: list[SimpleNamespace], n: int, duration_s: float,
          corpus: list[np.ndarray], rng: random.Random,
          proxy: Haproxy | None = None) -> tuple[bool, list]:
    """`n` calls dealt round-robin over `targets` (a daemon, HAProxy in front of `daemons`,
    or the daemons themselves): passed, and the table row's figures (with each daemon's
    calls, refusals and underruns, and the CPU of each kind of process)."""
    before = [d.counters() for d in daemons]
    roles = [_pids(d) for d in daemons]
    extra = {"haproxy": [proxy.proc.pid]} if proxy is not None and proxy.proc else {}
    cpu0, t0 = {r: _cpu_s([p for x in roles for p in x.get(r, [])] + extra.get(r, []))
                for r in ("main", "asr", "workers", "haproxy")}, time.monotonic()
    logs: dict[str, CallLog] = {}
    events: list[list[dict]] = [[] for _ in daemons]
    """Each daemon's events over the step (its `call_started`: the calls it took)."""

    async def step() -> list:
        stop = asyncio.Event()
        ctls = [asyncio.create_task(_controller(d.http, logs, stop)) for d in daemons]
        ctls += [asyncio.create_task(follow_events(d.http, sink, stop))
                 for d, sink in zip(daemons, events, strict=True)]
        await asyncio.sleep(0.3)
        peers = await asyncio.gather(*(
            _caller(targets[i % len(targets)], corpus, duration_s, i * 3.0 / n, logs,  # type: ignore[arg-type]
                    rng)
            for i in range(n)))
        stop.set()
        for c in ctls:
            c.cancel()
        return peers

    peers = asyncio.run(step())
    time.sleep(1.0)
    elapsed = time.monotonic() - t0
    cpu = {r: 100 * (_cpu_s([p for x in roles for p in x.get(r, [])] + extra.get(r, []))
                     - c) / elapsed for r, c in cpu0.items()}
    after = [d.counters() for d in daemons]
    each = [{k: int(a.get(k, 0.0) - b.get(k, 0.0)) for k in ("underruns", "dropped_frames",
                                                             "refused")}
            for a, b in zip(after, before, strict=True)]
    delta = {k: sum(e[k] for e in each) for k in ("underruns", "dropped_frames", "refused")}
    calls = [sum(e["type"] == "call_started" for e in sink) for sink in events]
    a = _analyse(peers)
    first50, first95 = _pct(a["first"], 50) * 1000, _pct(a["first"], 95) * 1000
    ok = all(v == 0 for v in delta.values()) and first95 <= FIRST_P95_MS
    per = " / ".join(f"{c} {e['refused']} {e['underruns']}" for c, e in zip(calls, each,
                                                                          strict=True))
    use = " ".join(f"{cpu[r]:.0f}" for r in ("main", "asr", "workers")) + (
        f" {cpu['haproxy']:.0f}" if extra else "")
    return ok, [n, first50, first95, delta["underruns"], delta["dropped_frames"],
                delta["refused"], per, use, "yes" if ok else "no"]


def _caller_audio(peer: Peer, seconds: float) -> asyncio.Task[None]:
    """The caller's silence from the start, as Asterisk sends it: a call waits up to
    `audiosocket.first_frame_wait_ms` (1 s) for its caller's first frame, which sets the
    call's format, before it greets."""
    return asyncio.create_task(peer.play(np.zeros(int(8000 * seconds) // 160 * 160,
                                                  dtype=np.int16)))


async def _answered_at(port: int, timeout_s: float) -> float | None:
    """One call through HAProxy: when its greeting's first speech frame arrived, or None."""
    peer = Peer("127.0.0.1", port)
    try:
        await peer.connect()
    except OSError:
        return None
    audio = _caller_audio(peer, timeout_s)
    deadline = time.monotonic() + timeout_s
    try:
        while time.monotonic() < deadline and not peer.closed:
            if len(times := peer.call.speech_times()):
                return float(times[0])
            await asyncio.sleep(0.01)
        return None
    finally:
        audio.cancel()
        await peer.hangup()


async def _greeted_after(port: int, timeout_s: float = 5.0) -> float | None:
    """One call: seconds from dialing to the greeting's first speech frame, or None."""
    t0 = time.monotonic()
    peer = Peer("127.0.0.1", port)
    try:
        await peer.connect()
    except OSError:
        return None
    audio = _caller_audio(peer, timeout_s)
    try:
        while time.monotonic() - t0 < timeout_s and not peer.closed:
            if len(times := peer.call.speech_times()):
                return float(times[0]) - t0
            await asyncio.sleep(0.002)
        return None
    finally:
        audio.cancel()
        await peer.hangup()


async def _hop_ms(direct_port: int, proxy_port: int, pairs: int) -> tuple[float, float]:
    """The proxy hop alone: one call at a time on an otherwise idle pair, alternately
    straight to a daemon and through HAProxy (which picks either of the two alike);
    median dial-to-greeting ms of each."""
    times: dict[int, list[float]] = {direct_port: [], proxy_port: []}
    for i in range(pairs):
        for port in (direct_port, proxy_port) if i % 2 else (proxy_port, direct_port):
            if (t := await _greeted_after(port)) is not None:
                times[port].append(t * 1000)
            await asyncio.sleep(0.1)
    return float(np.median(times[direct_port])), float(np.median(times[proxy_port]))


async def _failover(port: int, kill: object, timeout_s: float = 15.0) -> float:
    """Kill, then a call every 100 ms until one is answered: seconds from the kill."""
    t0 = time.monotonic()
    kill()  # type: ignore[operator]
    tasks: list[asyncio.Task[float | None]] = []
    while time.monotonic() - t0 < timeout_s:
        tasks.append(asyncio.create_task(_answered_at(port, 3.0)))
        await asyncio.sleep(0.1)
        done = [t.result() for t in tasks if t.done() and t.result() is not None]
        if done:
            break
    got = [t for t in await asyncio.gather(*tasks) if t is not None]
    return min(got) - t0 if got else 1e9


def run(quick: bool) -> Report:
    rng = random.Random(7)
    corpus = [(p.samples() * 32767).astype(np.int16) for p in prompts()
              if 1.0 < p.samples().shape[0] / 8000 < 4.0][:60]
    steps = [4, 8] if quick else [4, 6, 8, 10, 12, 14, 16, 20, 24]
    duration_s = 10.0 if quick else 20.0
    report = Report("scaleout", ["setup", "calls", "reply first audio p50 ms", "p95 ms",
                                 "underruns", "dropped", "refused",
                                 "per daemon: calls refused underruns",
                                 "CPU %: main asr workers (haproxy)", "pass"])
    alone, both, dealt = "one daemon", "two daemons via haproxy", "two daemons, dealt in turn"
    passed: dict[str, dict[int, float]] = {alone: {}, both: {}, dealt: {}}
    """Steps each setup passed before its first failure, with their reply p95."""
    ran: dict[str, dict[int, float]] = {alone: {}, both: {}, dealt: {}}
    """Every step each setup ran, with its reply p95."""
    with tempfile.TemporaryDirectory() as tmp_name:
        tmp = Path(tmp_name)
        daemons: list[Daemon] = []
        proxy: Haproxy | None = None
        try:
            (tmp / "one").mkdir()
            one = Daemon(tmp / "one", COMMON)
            daemons.append(one)
            for i in range(2):
                (tmp / f"d{i}").mkdir()
                daemons.append(Daemon(tmp / f"d{i}", (*COMMON, "workers.count=1",
                                                      f'workers.cpus="{i}"',
                                                      'agent.listen="127.0.0.1:0"')))
            pair = daemons[1:]
            proxy = Haproxy(tmp, (_box(pair[0]), _box(pair[1]))).start()
            proxy.wait_for(lambda s: all(v["status"] == "UP" for v in s.values()),
                           "both up", 20.0)
            setups = {alone: ([one], [SimpleNamespace(host=one.host, port=one.port)]),
                      both: (pair, [SimpleNamespace(host="127.0.0.1", port=proxy.calls_port)]),
                      # the split alone, without the proxy: each caller straight to a daemon
                      dealt: (pair, [SimpleNamespace(host=d.host, port=d.port) for d in pair])}
            failed: set[str] = set()
            for n in steps:  # the setups take turns step by step: background load hits both
                for label, (ds, target) in setups.items():
                    if label in failed:
                        continue
                    ok, row = _step(ds, target, n, duration_s, corpus, rng,
                                    proxy if label == both else None)
                    report.rows.append([label, *row])
                    ran[label][n] = row[2]
                    if ok:
                        passed[label][n] = row[2]
                    else:
                        failed.add(label)
                if len(failed) == len(setups):
                    break
            time.sleep(2.0)
            direct_ms, proxied_ms = asyncio.run(_hop_ms(pair[0].port, proxy.calls_port,
                                                        10 if quick else 40))
            failover_s = asyncio.run(_failover(proxy.calls_port, pair[0].proc.kill))
        finally:
            for d in daemons:
                d.stop()
            if proxy is not None:
                proxy.stop()
    n_alone, n_both = max(passed[alone], default=0), max(passed[both], default=0)
    n_dealt = max(passed[dealt], default=0)
    ratio = n_both / n_alone if n_alone else 0.0
    # reply p95 at the largest load both ran: the split into two daemons and the noise of
    # a near-full box, more than the hop (measured on its own below)
    at = max((n for n in ran[both] if n in ran[alone]), default=0)
    added_ms = proxied_ms - direct_ms
    report.figures = {"calls_alone": n_alone, "calls_via_haproxy": n_both,
                      "calls_dealt_to_the_pair": n_dealt, "ratio": ratio,
                      "reply_p95_ms_at_step": at,
                      "reply_p95_ms_alone": ran[alone].get(at),
                      "reply_p95_ms_via_haproxy": ran[both].get(at),
                      "greeting_ms_direct": direct_ms, "greeting_ms_via_haproxy": proxied_ms,
                      "kill_to_answer_s": failover_s}
    report.notes.append(f"{duration_s:.0f} s per step, the two setups taking turns; callers "
                        "speak ~35% of the time and run on the same box; one daemon: 2 "
                        "workers on CPUs 0-1; the pair: 1 worker each on CPU 0 and CPU 1")
    report.notes.append(f"calls sustained: one daemon {n_alone}, the pair via haproxy {n_both}, "
                        f"the pair with callers dealt to each daemon in turn {n_dealt} (the "
                        "split without the proxy)")
    report.notes.append(f"reply p95 at {at} calls, the largest step both ran: "
                        f"{ran[alone].get(at, 0):.0f} ms alone, "
                        f"{ran[both].get(at, 0):.0f} ms via haproxy")
    report.notes.append(f"the hop alone (one call at a time, idle pair, alternating): dial to "
                        f"greeting median {direct_ms:.1f} ms straight to a daemon, "
                        f"{proxied_ms:.1f} ms through haproxy")
    report.notes.append(f"kill -9 of one daemon of the pair: a call every 100 ms until the "
                        f"survivor answers one: {failover_s:.2f} s")
    report.target("calls via haproxy / one daemon alone", ratio, ">= 0.95", ratio >= 0.95)
    report.target("first audio added by the hop, median (ms)", added_ms, "<= 5",
                  added_ms <= 5)
    report.target("kill -9 to the first call answered by the survivor (s)", failover_s,
                  f"<= {2 * CHECK_S:g} (2 check intervals)", failover_s <= 2 * CHECK_S)
    return report
