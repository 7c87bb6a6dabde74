"""The real daemon with its workers: a stuck worker is replaced, the watchdog follows the
workers as a whole; kill -9 survives."""

from __future__ import annotations

import json
import os
import signal
import time

import numpy as np

WORKERS = ("workers.count=2", 'workers.cpus="0-1"', "workers.onnx_threads=1")


def worker_pids(d) -> list[int]:
    st = d.ctl("--json", "status")
    assert st.returncode == 0, st.stderr
    return [w["pid"] for w in json.loads(st.stdout)["workers"]["workers"]]


def test_one_stuck_worker_is_replaced_and_the_watchdog_keeps_pinging(daemon_factory):
    """A worker that stops making progress costs its own requests, not the service: the
    pool kills and replaces it after `hang_restart_s`, systemd's watchdog never misses a
    ping (it would kill every call on the box)."""
    d = daemon_factory(watchdog_usec=400_000, overrides=(
        *WORKERS, "service.health_stall_s=0.5", "workers.hang_restart_s=1.5")).start()
    d.wait_ready()
    deadline = time.monotonic() + 60  # on a loaded box a slow start can be taken for a hang
    while None in (pids := worker_pids(d)):
        assert time.monotonic() < deadline, pids
        time.sleep(0.2)
    stuck = pids[1]
    os.kill(stuck, signal.SIGSTOP)
    t0 = time.monotonic()
    while worker_pids(d)[1] in (stuck, None):
        assert time.monotonic() - t0 < 20, "the stuck worker was not replaced"
        time.sleep(0.1)
    assert time.monotonic() - t0 > 1.4  # not before hang_restart_s
    pings = d.notify.times("WATCHDOG", t0, time.monotonic())
    assert len(pings) >= 3 and max(np.diff(pings)) < 0.6, pings
    assert any(e.get("event") == "worker_hung" for e in d.log_events())
    assert not any(e.get("event") == "watchdog_withheld" for e in d.log_events())
    d.signal(signal.SIGTERM)
    assert d.wait() == 0


def test_no_worker_making_progress_stops_the_watchdog_pings_until_one_runs(daemon_factory):
    d = daemon_factory(watchdog_usec=400_000, overrides=(
        *WORKERS, "service.health_stall_s=0.5", "workers.hang_restart_s=0")).start()
    ready_at = d.wait_ready()
    _, ready = d.notify.wait_for("READY", "1")
    assert "workers 2/2 up" in ready["STATUS"]
    time.sleep(0.8)
    assert len(d.notify.times("WATCHDOG", ready_at, time.monotonic())) >= 2
    pids = worker_pids(d)
    for pid in pids:
        os.kill(pid, signal.SIGSTOP)
    t0 = time.monotonic()
    try:
        time.sleep(2.5)
        # after the stall limit (0.5 s) plus one ping interval (0.2 s), no ping may arrive
        assert d.notify.times("WATCHDOG", t0 + 0.8, t0 + 2.4) == []
    finally:
        for pid in pids:
            os.kill(pid, signal.SIGCONT)
    d.notify.wait_for("WATCHDOG", "1", after=time.monotonic(), timeout_s=5)
    assert any(e.get("event") == "watchdog_withheld" and "workers" in e.get("stalled", [])
               for e in d.log_events())
    d.signal(signal.SIGTERM)
    assert d.wait() == 0


def test_kill_9_a_worker_the_daemon_stays_up_and_counts_the_restart(daemon_factory):
    d = daemon_factory(watchdog_usec=400_000, overrides=WORKERS).start()
    d.wait_ready()
    deadline = time.monotonic() + 60
    while not json.loads(d.ctl("--json", "status").stdout)["workers"]["spare"]:
        assert time.monotonic() < deadline, "no warm spare"
        time.sleep(0.2)
    old = worker_pids(d)
    os.kill(old[0], signal.SIGKILL)
    t0 = time.monotonic()
    while True:
        status = json.loads(d.ctl("--json", "status").stdout)["workers"]
        w0 = status["workers"][0]
        if w0["alive"] and w0["pid"] != old[0]:
            break
        assert time.monotonic() - t0 < 1.5, status
        time.sleep(0.02)
    assert status["restarts"] == 1 and w0["restarts"] == 1
    assert status["workers"][1]["pid"] == old[1]  # the other worker was untouched
    # pings never stopped
    pings = d.notify.times("WATCHDOG", t0, time.monotonic() + 0.5)
    time.sleep(0.6)
    pings = d.notify.times("WATCHDOG", t0, time.monotonic())
    assert len(pings) >= 2
    assert any(e.get("event") == "worker_died" for e in d.log_events())
    assert d.proc.poll() is None
    d.signal(signal.SIGTERM)
    assert d.wait() == 0
