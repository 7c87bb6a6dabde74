"""Suite `io`: shared-memory ring vs multiprocessing.Queue, audio-thread CPU, allocations.

* Ring throughput: a spawned producer process streams float32 chunks to this process
  through a Ring, then through a multiprocessing.Queue of numpy chunks; same chunk sizes,
  same process pair, same run. Reported as MB/s and the ring/queue ratio.
* CPU per second of audio: capture and playback threads at 10 ms periods, rw backend on
  a private PulseAudio null sink (paced), mmap backend on ALSA's null PCM (unpaced: the
  cost per period with no waiting), from time.thread_time() inside each thread.
* Allocations in steady state: the thread's per-period calls driven one period at a time
  under tracemalloc; a period "allocates a buffer" when the traced peak rises by at least
  one period's bytes (an array, bytes or copy); small transient Python objects (ints from
  counters and ctypes, slice views) stay below that and are reported separately as
  bytes/period. Growth of traced memory over the run is reported too.
"""

from __future__ import annotations

import multiprocessing as mp
import os
import time
import tracemalloc

import numpy as np

from cosyvoiced.audio.alsa.device import open_backend, start_device
from cosyvoiced.audio.alsa.params import PcmRequest
from cosyvoiced.audio.ring import Ring
from cosyvoiced.config.schema import AudioDeviceConfig
from tools.bench.report import Report

RATE = 16000
PERIOD = 160


# -- ring vs queue ---------------------------------------------------------------------------


def _ring_producer(name: str, chunk: int, total: int) -> None:
    ring = Ring.attach(name)
    x = np.arange(chunk, dtype=np.float32)
    sent = 0
    while sent < total:
        off = 0
        while off < chunk:
            n = ring.write(x[off:])
            if n == 0:
                os.sched_yield()  # full: let the consumer run (2 shared cores)
            off += n
        sent += chunk
    ring.close()


def _queue_producer(q, chunk: int, total: int) -> None:
    x = np.arange(chunk, dtype=np.float32)
    sent = 0
    while sent < total:
        q.put(x)
        sent += chunk
    q.put(None)


def ring_vs_queue(chunk: int, total: int) -> tuple[float, float]:
    ctx = mp.get_context("spawn")
    nbytes = total * 4
    ring = Ring.create(max(8 * chunk, 1 << 16), policy="refuse")
    try:
        out = np.empty(chunk, np.float32)
        p = ctx.Process(target=_ring_producer, args=(ring.name, chunk, total))
        p.start()
        while ring.available() == 0:  # start the clock at the first data, not at spawn
            time.sleep(0)
        t0 = time.perf_counter()
        got = 0
        while got < total:
            n = ring.read_into(out)
            if n == 0:
                os.sched_yield()  # empty: let the producer run
            got += n
        ring_s = time.perf_counter() - t0
        p.join()
    finally:
        ring.close()
        ring.unlink()
    q = ctx.Queue(maxsize=64)
    p = ctx.Process(target=_queue_producer, args=(q, chunk, total))
    p.start()
    first = q.get()
    t0 = time.perf_counter()
    got = len(first)
    while True:
        item = q.get()
        if item is None:
            break
        got += len(item)
    queue_s = time.perf_counter() - t0
    p.join()
    return nbytes / ring_s / 1e6, (nbytes - len(first) * 4) / queue_s / 1e6


# -- audio threads ---------------------------------------------------------------------------


def dev(pcm: str, direction: str, access: str) -> AudioDeviceConfig:
    return AudioDeviceConfig(name=pcm, pcm=pcm, direction=direction, rate_hz=RATE,
                             period_ms=10.0, periods=4, access=access, rt_priority=0)


def thread_cpu(pcm_play: str, pcm_cap: str, access: str, seconds: float) -> dict[str, float]:
    play_ring = Ring.create(RATE, policy="refuse")
    cap_ring = Ring.create(RATE, policy="drop")
    play = start_device(dev(pcm_play, "playback", access), play_ring)
    cap = start_device(dev(pcm_cap, "capture", access), cap_ring)
    try:
        play.wait_ready()
        cap.wait_ready()
        out = np.empty(RATE, np.float32)
        t_end = time.monotonic() + seconds
        while time.monotonic() < t_end:
            cap_ring.read_into(out)
            time.sleep(0.02)
    finally:
        play.stop()
        cap.stop()
        for r in (play_ring, cap_ring):
            r.close()
            r.unlink()
    res = {}
    for name, t in (("playback", play), ("capture", cap)):
        audio_s = t.periods * PERIOD / RATE
        res[name] = 1000.0 * t.cpu_s / audio_s if audio_s else float("nan")
        res[name + "_xruns"] = t.xruns
        res[name + "_audio_s"] = audio_s
    return res


def steady_allocs(pcm: str, direction: str, access: str, periods: int) -> dict[str, float]:
    """Drive the thread's per-period calls under tracemalloc (see module doc)."""
    ring = Ring.create(RATE, policy="drop" if direction == "capture" else "refuse")
    backend = open_backend(PcmRequest(pcm, direction, RATE, 1, PERIOD, 4, "FLOAT_LE"), access)
    buf = np.zeros(PERIOD, np.float32)
    drain = np.empty(RATE, np.float32)
    period_bytes = PERIOD * 4
    try:
        backend.start()

        def step() -> None:
            if direction == "capture":
                if backend.read(buf):
                    ring.write(buf)
            else:
                got = ring.read_into(buf)
                if got < PERIOD:
                    buf[got:] = 0
                backend.write(buf)

        for _ in range(50):
            step()
            ring.read_into(drain) if direction == "capture" else ring.write(buf)
        tracemalloc.start()
        try:
            buffer_allocs = 0
            transient = 0
            start_mem = tracemalloc.get_traced_memory()[0]
            for i in range(periods):
                if direction == "capture" and i % 50 == 0:
                    ring.read_into(drain)
                elif direction == "playback" and ring.room() >= PERIOD:
                    ring.write(buf)
                tracemalloc.reset_peak()
                base = tracemalloc.get_traced_memory()[0]
                step()
                peak = tracemalloc.get_traced_memory()[1]
                extra = peak - base
                transient += extra
                if extra >= period_bytes:
                    buffer_allocs += 1
            growth = tracemalloc.get_traced_memory()[0] - start_mem
        finally:
            tracemalloc.stop()
    finally:
        backend.close()
        ring.close()
        ring.unlink()
    per_s = RATE / PERIOD
    return {"buffer_allocs_per_s": buffer_allocs / periods * per_s,
            "transient_bytes_per_period": transient / periods,
            "growth_bytes": growth}


def run(quick: bool) -> Report:
    from cosyvoiced.testing.pulse import running_pulse

    report = Report(suite="io", columns=["measure", "case", "value", "unit"])
    total = (4 if quick else 40) * 1_000_000  # float32 samples per transport
    ratios = []
    for chunk in (PERIOD, 4096):
        ring_mb, queue_mb = ring_vs_queue(chunk, total // (8 if chunk == PERIOD else 1))
        ratios.append(ring_mb / queue_mb)
        report.rows += [["ring MB/s", f"{chunk}-frame chunks", ring_mb, "MB/s"],
                        ["queue MB/s", f"{chunk}-frame chunks", queue_mb, "MB/s"],
                        ["ring/queue", f"{chunk}-frame chunks", ring_mb / queue_mb, "x"]]
    seconds = 3.0 if quick else 10.0
    with running_pulse() as pulse:
        rw = thread_cpu(pulse.playback_pcm(), pulse.capture_pcm(), "rw", seconds)
        rw_alloc = {d: steady_allocs(pcm, d, "rw", 200 if quick else 600)
                    for d, pcm in (("capture", pulse.capture_pcm()),
                                   ("playback", pulse.playback_pcm()))}
    mm = thread_cpu("null", "null", "mmap", 1.0)
    mm_alloc = {d: steady_allocs("null", d, "mmap", 2000 if quick else 10000)
                for d in ("capture", "playback")}
    for name, res in (("rw/pulse (paced)", rw), ("mmap/null (unpaced)", mm)):
        for d in ("capture", "playback"):
            report.rows.append([f"{d} thread CPU", name, res[d], "ms CPU / s audio"])
            report.rows.append([f"{d} xruns", name, res[d + "_xruns"], "count"])
    for name, allocs in (("rw/pulse", rw_alloc), ("mmap/null", mm_alloc)):
        for d, a in allocs.items():
            report.rows += [[f"{d} buffer allocs", name, a["buffer_allocs_per_s"], "/s"],
                            [f"{d} transient objects", name, a["transient_bytes_per_period"],
                             "B/period"],
                            [f"{d} traced growth", name, a["growth_bytes"], "B"]]
    report.figures = {"rw": rw, "mmap": mm, "rw_alloc": rw_alloc, "mmap_alloc": mm_alloc,
                      "ring_queue_ratio": ratios}
    report.notes.append("rw reads/writes with snd_pcm_readi/writei (ctypes) straight into/from "
                        "the period buffer; mmap copies to/from the device's mmap area")
    report.target("ring/queue throughput ratio (160-frame chunks)", ratios[0], "> 1",
                  ratios[0] > 1)
    report.target("ring/queue throughput ratio (4096-frame chunks)", ratios[1], "> 1",
                  ratios[1] > 1)
    mm_allocs = sum(a["buffer_allocs_per_s"] for a in mm_alloc.values())
    report.target("mmap capture+playback buffer allocations/s", mm_allocs, "== 0",
                  mm_allocs == 0)
    rw_play = rw_alloc["playback"]["buffer_allocs_per_s"]
    report.target("rw playback buffer allocations/s", rw_play, "== 0", rw_play == 0)
    rw_cap = rw_alloc["capture"]["buffer_allocs_per_s"]
    report.target("rw capture buffer allocations/s (snd_pcm_readi)", rw_cap, "== 0",
                  rw_cap == 0)
    cpu = max(rw["capture"], rw["playback"])
    report.target("audio thread CPU per s of audio (rw, 10 ms periods)", cpu, "< 50 ms",
                  cpu < 50)
    return report
