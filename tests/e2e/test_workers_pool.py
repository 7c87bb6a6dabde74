"""The real worker pool: pinning, thread counts, kill -9 recovery, cancel."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

import numpy as np
import pytest

from cosyvoiced.testing.pace import PacedReader
from cosyvoiced.workers.errors import WorkerError
from cosyvoiced.workers.pool.cpus import format_cpu_list
from cosyvoiced.workers.worker.affinity import SPARE_NICE
from tests.fixtures.workers import make_runner

TEXT = ("Thank you for calling. Your call is important to us, and an agent will be with "
        "you shortly. Please have your account number ready.")


def proc_cpus(pid: int, tid: int | None = None) -> str:
    path = f"/proc/{pid}/task/{tid}/status" if tid else f"/proc/{pid}/status"
    with open(path) as f:
        text = f.read()
    for line in text.splitlines():
        if line.startswith("Cpus_allowed_list:"):
            return line.split(":", 1)[1].strip()
    raise AssertionError("no Cpus_allowed_list")


def threads_of(pid: int) -> list[int]:
    return [int(t) for t in os.listdir(f"/proc/{pid}/task")]


def test_each_worker_and_each_of_its_threads_is_pinned_to_its_cpus(pool_runner):
    pool = pool_runner.pool
    assert [format_cpu_list(s.cpus) for s in pool.slots] == ["0", "1"]
    for slot in pool.slots:
        pid = slot.proc.pid
        assert proc_cpus(pid) == format_cpu_list(slot.cpus)
        for tid in threads_of(pid):
            assert proc_cpus(pid, tid) == format_cpu_list(slot.cpus), (pid, tid)
        with open(f"/proc/{pid}/environ", "rb") as f:
            env = f.read().split(b"\0")
        assert b"OMP_NUM_THREADS=1" in env and b"MKL_NUM_THREADS=1" in env


def test_onnx_threads_per_worker_match_the_config(pool_runner, onnx_cache):
    # 1 thread per session: no intra-op pool threads. 2 threads: one extra per session
    # (the TTS voice's split graphs and the VAD's flat graphs for 8 and 16 kHz), all
    # pinned to the worker's two CPUs.
    import onnxruntime as ort

    from cosyvoiced.tts.voice.catalog import bundled_voice, load_voice

    split = load_voice(bundled_voice(), precision="fp32", cache_dir=onnx_cache).split
    assert split is not None
    voice_sessions = sum(isinstance(x, ort.InferenceSession) for x in vars(split).values())
    one = {len(threads_of(s.proc.pid)) for s in pool_runner.pool.slots}
    assert len(one) == 1
    # two threads a session are spawned (a fork would have none of the template's pools):
    # against a spawned worker at one thread, not a forked one
    spawned = make_runner(onnx_cache, count=1, spare=False, template=False)
    try:
        base = len(threads_of(spawned.pool.slots[0].proc.pid))
    finally:
        spawned.close()
    runner = make_runner(onnx_cache, count=1, onnx_threads=2, spare=False)
    try:
        slot = runner.pool.slots[0]
        tids = threads_of(slot.proc.pid)
        assert len(tids) == base + voice_sessions + 2
        assert all(proc_cpus(slot.proc.pid, t) == "0-1" for t in tids)
    finally:
        runner.close()


def wait_until(cond, timeout_s: float, step_s: float = 0.005) -> float:
    t0 = time.monotonic()
    while not cond():
        if time.monotonic() - t0 > timeout_s:
            raise AssertionError(f"not within {timeout_s} s")
        time.sleep(step_s)
    return time.monotonic() - t0


def test_kill_9_a_worker_while_10_streams_synthesize(pool_runner):
    runner, pool = pool_runner, pool_runner.pool
    wait_until(lambda: pool.status()["spare"], 60, 0.1)
    reader = PacedReader()
    reader.start()
    handles = [runner.call(pool.open_tts_stream()) for _ in range(10)]
    on = {i: [h for h in handles if h.worker == i] for i in (0, 1)}
    assert len(on[0]) == len(on[1]) == 5
    listeners = {h.stream_id: reader.add(h.stream_id, h.ring, h.rate_hz) for h in handles}
    requests = {h.stream_id: runner.call(h.say(TEXT)) for h in handles}
    wait_until(lambda: all(listeners[h.stream_id].first_audio_s for h in on[0]), 60, 0.02)
    victim, spare = pool.slots[0].proc, pool.supervisor.spare
    assert os.getpriority(os.PRIO_PROCESS, spare.pid) == SPARE_NICE  # warms up politely
    restarts = pool.restarts
    os.kill(victim.pid, signal.SIGKILL)
    t_kill = time.monotonic()
    back_s = wait_until(lambda: pool.slots[0].proc is not None and pool.slots[0].proc.ready
                        and pool.slots[0].proc is not victim, 5)
    assert back_s < 1.0, f"worker back after {back_s:.3f} s"
    assert pool.restarts == restarts + 1
    assert proc_cpus(pool.slots[0].proc.pid) == "0"
    assert pool.slots[0].proc is spare and os.getpriority(os.PRIO_PROCESS, spare.pid) == 0
    # the killed worker's streams: a clear typed error, quickly
    for h in on[0]:
        with pytest.raises(WorkerError) as err:
            runner.call(h.wait(requests[h.stream_id]), 10)
        assert err.value.code == "worker_lost"
        assert "(signal SIGKILL)" in str(err.value)  # how it died, for the operator
    # the other worker's streams finish intact: every sample synthesized was heard
    for h in on[1]:
        done = runner.call(h.wait(requests[h.stream_id]), 120)
        assert not done.cancelled and done.samples > 3 * h.rate_hz
        wait_until(lambda h=h, n=done.samples: listeners[h.stream_id].received >= n, 30, 0.05)
        assert listeners[h.stream_id].received == done.samples
    assert time.monotonic() - t_kill < 120
    # the moved streams speak again on the replacement
    h = on[0][0]
    again = runner.call(h.wait(runner.call(h.say("Back again."))), 60)
    assert again.samples > 0
    reader.stop()
    for h in handles:
        runner.call(h.close())


def test_cancel_drops_queued_audio_at_once(pool_runner):
    runner, pool = pool_runner, pool_runner.pool
    h = runner.call(pool.open_tts_stream())
    rid = runner.call(h.say(TEXT * 3))
    wait_until(lambda: h.ring.available() > 0, 30)
    t0 = time.monotonic()
    runner.call(h.cancel())
    done = runner.call(h.wait(rid), 10)
    took = time.monotonic() - t0
    assert done.cancelled
    assert took < 2.0  # at most one clause in flight
    out = np.zeros(1 << 16, np.float32)
    assert h.ring.read_into(out) == 0  # the consumer's next read honours the flush
    assert not h.ring.playing
    runner.call(h.close())


SPARE_PROBE = """
import json, os, resource, signal, sys, time
from dataclasses import replace
from pathlib import Path
from tests.fixtures.workers import TEST_WORKERS, PoolRunner
resource.setrlimit(resource.RLIMIT_NICE, (0, 0))
r = PoolRunner(replace(TEST_WORKERS, count=1, cpus="0"), Path(sys.argv[1]))
pool, t0 = r.pool, time.monotonic()
while not pool.supervisor.spare_ready() and time.monotonic() - t0 < 120:
    time.sleep(0.1)
spare = pool.supervisor.spare.pid
nice = {"spare": os.getpriority(os.PRIO_PROCESS, spare)}
os.kill(pool.slots[0].proc.pid, signal.SIGKILL)
while not (pool.slots[0].proc and pool.slots[0].proc.pid == spare and pool.slots[0].proc.ready):
    time.sleep(0.05)
nice["adopted"] = os.getpriority(os.PRIO_PROCESS, spare)
r.close()
print(json.dumps(nice))
"""


def test_a_spare_that_could_not_return_to_nice_0_warms_up_at_it(onnx_cache, tmp_path):
    """Without CAP_SYS_NICE and with RLIMIT_NICE 0 (root in a default container) a spare
    niced to 19 could not renice itself back when it adopts a slot, and would serve at
    19, starved by anything else on its core: it warms up at 0 instead, and the pool
    says so once."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    out = subprocess.run(["setpriv", "--inh-caps=-sys_nice", "--bounding-set=-sys_nice",
                          sys.executable, "-c", SPARE_PROBE, str(onnx_cache)],
                         capture_output=True, text=True, timeout=300, env=env, cwd=tmp_path)
    assert out.returncode == 0, out.stderr[-2000:]
    assert json.loads(out.stdout.strip().splitlines()[-1]) == {"spare": 0, "adopted": 0}
    assert "worker_spare_full_priority" in out.stdout + out.stderr
