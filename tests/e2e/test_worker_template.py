"""The worker template on the real daemon: the workers and the spare are forked from one
process that loaded the voice, share its pages, speak, and come back with a new template
after a kill -9 of the old one (no orphans); `workers.template = false` spawns them."""

from __future__ import annotations

import json
import os
import signal
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from cosyvoiced.config.cpus import parse_cpu_list
from cosyvoiced.config.schema import WorkersConfig
from cosyvoiced.workers.pool.placement import CpuPlan
from tests.e2e.test_listen import _listener
from tests.fixtures.daemon import DaemonProcess, ready_daemon

SHARED_DIRTY_MB = 20
"""Heap, weights and kernels written by the template and only read since: a forked
worker shares ~130 MB of them (docs/performance.md); a spawned one shares only its small
shared-memory rings and stats."""


@pytest.fixture(scope="module")
def daemon(tmp_path_factory: pytest.TempPathFactory) -> Iterator[DaemonProcess]:
    yield from ready_daemon(tmp_path_factory, "template", ("workers.count=2",))


def _status(d: DaemonProcess) -> dict:
    return json.loads(d.ctl("--json", "status").stdout)["workers"]


def _ppid(pid: int) -> int:
    with open(f"/proc/{pid}/stat") as f:
        return int(f.read().rsplit(")", 1)[1].split()[1])


def _shared_dirty_mb(pid: int) -> float:
    with open(f"/proc/{pid}/smaps_rollup") as f:
        return next(int(x.split()[1]) for x in f if x.startswith("Shared_Dirty:")) / 1024


def _speak(d: DaemonProcess, text: str) -> bytes:
    base = _listener(d, "tcp://").replace("tcp://", "http://")
    req = urllib.request.Request(f"{base}/v1/tts", data=json.dumps({"text": text}).encode(),
                                 headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=120) as r:
        return r.read()


def _wait(what, timeout_s: float = 90.0):  # noqa: ANN001, ANN202 - a predicate, its value
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if value := what():
            return value
        time.sleep(0.2)
    raise AssertionError("timed out")


def _all_up(d: DaemonProcess) -> dict | None:
    st = _status(d)
    ok = all(w["alive"] for w in st["workers"]) and st["spare"] and st["template"]["alive"]
    return st if ok else None


def test_workers_and_spare_are_forked_from_the_template_and_share_its_pages(daemon):
    st = _wait(lambda: _all_up(daemon))
    template = st["template"]["pid"]
    assert _ppid(template) == daemon.daemon_pid()
    pids = [w["pid"] for w in st["workers"]]
    children = Path(f"/proc/{template}/task/{template}/children")
    spare = _wait(lambda: next((int(c) for c in children.read_text().split()
                                if int(c) not in pids), None))
    for pid in [*pids, spare]:
        assert _ppid(pid) == template
    for _ in range(len(pids)):  # a request on each worker: they write their own buffers
        assert len(_speak(daemon, "Your order has shipped and should arrive on Friday.")) > 44
    for pid in pids:
        assert _shared_dirty_mb(pid) >= SHARED_DIRTY_MB, pid
    assert "worker_template_ready" in daemon.log_path.read_text()


def test_kill_9_the_template_brings_back_a_new_one_and_its_workers(daemon):
    st = _wait(lambda: _all_up(daemon))
    old = st["template"]["pid"]
    old_workers = [w["pid"] for w in st["workers"]]
    os.kill(old, signal.SIGKILL)
    st = _wait(lambda: (s := _all_up(daemon)) and s["template"]["pid"] != old and s)
    assert st["template"]["starts"] == 2
    for pid in old_workers:  # died with it (PR_SET_PDEATHSIG): no orphan serves on
        assert not os.path.exists(f"/proc/{pid}") or _ppid(pid) != 1
    for w in st["workers"]:
        assert _ppid(w["pid"]) == st["template"]["pid"]
    assert len(_speak(daemon, "Thank you for waiting, I am back.")) > 44


def _affinity(pid: int) -> set[int]:
    """The CPUs of every thread of `pid` (Linux pins threads, not processes), which must
    agree."""
    sets = {frozenset(os.sched_getaffinity(int(t))) for t in os.listdir(f"/proc/{pid}/task")}
    assert len(sets) == 1, f"worker {pid}'s threads are pinned apart: {sets}"
    return set(next(iter(sets)))


def test_workers_run_where_the_logged_cpu_plan_puts_them(daemon):
    # after the template's restart above too: re-forked workers are pinned by the plan
    st = _wait(lambda: _all_up(daemon))
    logged = [e for e in daemon.log_events() if e.get("event") == "cpu_plan"]
    assert len(logged) == 1, logged
    plan = logged[0]
    here = CpuPlan.for_config(WorkersConfig(count=2))  # this box, as the test reads it
    assert plan["workers"] == here.fields()["workers"]
    assert (plan["numa_nodes"], plan["threads_per_core"]) == (
        len(here.topology.nodes), here.topology.threads_per_core)
    if plan["cores"] >= 2:  # two workers never share a physical core while there are two
        assert not any(w["shares_core"] for w in plan["workers"])
    for planned, w in zip(plan["workers"], st["workers"], strict=True):
        assert w["cpus"] == planned["cpus"]
        assert _affinity(w["pid"]) == set(parse_cpu_list(planned["cpus"])), w


def test_template_off_spawns_every_worker(tmp_path_factory):
    for d in ready_daemon(tmp_path_factory, "spawned", ("workers.template=false",
                                                        "workers.spare=false")):
        st = _status(d)
        assert st["template"] is None
        for w in st["workers"]:
            assert _ppid(w["pid"]) == d.daemon_pid()
            assert _shared_dirty_mb(w["pid"]) < SHARED_DIRTY_MB
        assert len(_speak(d, "Spawned workers still speak.")) > 44
