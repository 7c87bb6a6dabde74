"""The worker template with a real template process (no voice: `warm_up` off, the VAD
graphs only): a child forked from it has it as parent and takes its pieces when its setup
loads the same ones, dies with it, and a stuck template is killed and reported
(`TemplateError`) instead of holding the pool; the next start brings a new one, and a
start that meets a dying template waits for it and forks from the new one."""

from __future__ import annotations

import multiprocessing
import os
import signal
import time
from collections.abc import Callable, Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from cosyvoiced.config.schema import TtsConfig, VadConfig
from cosyvoiced.workers.errors import TemplateError
from cosyvoiced.workers.pool import template as template_mod
from cosyvoiced.workers.pool.template import WorkerTemplate
from cosyvoiced.workers.setup import WorkerSetup


def _child(conn: Any, setup: WorkerSetup) -> None:
    """What the forked child reports: its parent, and whether it took the template's."""
    from cosyvoiced.workers.worker import preload

    conn.send((os.getppid(), preload.adopt(setup) is not None))
    conn.recv()  # held until the test says, or until the template takes it down


@pytest.fixture
def setup(tmp_path: Path) -> WorkerSetup:
    return WorkerSetup(tts=TtsConfig(cache_mb=0, vocoder="fp32", flow="fp32"), vad=VadConfig(),
                       cache_dir=str(tmp_path / "cache"), state_dir=None, warm_up=False,
                       vad_capacity=4)


@pytest.fixture
def template(setup: WorkerSetup) -> Iterator[WorkerTemplate]:
    t = WorkerTemplate(setup, (0,))
    yield t
    t.stop()


def _fork(template: WorkerTemplate, setup: WorkerSetup) -> tuple[Any, Any]:
    ours, theirs = multiprocessing.get_context("spawn").Pipe()
    proc = template.start(_child, "test-child", lambda _pid: (theirs, setup))
    theirs.close()
    assert ours.poll(120), "the forked child said nothing"
    return proc, ours


def test_a_forked_child_has_the_template_as_parent_and_takes_its_pieces(template, setup):
    proc, conn = _fork(template, setup)
    assert conn.recv() == (template.pid, True)
    other, other_conn = _fork(template, replace(setup, vad_capacity=8))  # loads other graphs
    assert other_conn.recv() == (template.pid, False)
    for c, p in ((conn, proc), (other_conn, other)):
        c.send("done")
        p.join(10)
        assert p.exitcode == 0
    assert template.alive() and template.starts == 1


def test_the_template_s_death_takes_its_children_and_the_next_start_brings_a_new_one(
        template, setup):
    proc, conn = _fork(template, setup)
    conn.recv()
    first = template.pid
    assert first is not None
    os.kill(first, signal.SIGKILL)
    proc.join(10)
    assert proc.exitcode is not None, "the child outlived its template"
    again, again_conn = _fork(template, setup)
    assert again_conn.recv() == (template.pid, True)
    assert template.pid != first and template.starts == 2
    again_conn.send("done")
    again.join(10)


def _killed_at_the_next_start(template: WorkerTemplate, setup: WorkerSetup,
                              monkeypatch: pytest.MonkeyPatch,
                              meets: Callable[[], tuple[int, int]]) -> None:
    """The next start kills the (loaded) template and meets it dying as `meets` says (it
    raises or returns the connection): that start must fork from a new template."""
    proc, conn = _fork(template, setup)
    conn.recv()
    first = template.pid
    assert first is not None
    server = template._server
    real = server.connect_to_new_process
    met: list[int] = []

    def once(fds: list[int]) -> tuple[int, int]:
        if met:
            return real(fds)
        met.append(1)
        os.kill(first, signal.SIGKILL)
        return meets()

    monkeypatch.setattr(server, "connect_to_new_process", once)
    again, again_conn = _fork(template, setup)
    assert again_conn.recv() == (template.pid, True)
    assert met and template.pid != first and template.starts == 2
    again_conn.send("done")
    again.join(10)
    proc.join(10)


def test_a_template_that_refuses_while_it_exits_is_reaped_and_started_again(
        template, setup, monkeypatch):
    """Killed, a template's workers die before it can be reaped: a start in between is
    refused by a template that still looks alive, and must start a new one."""
    def refused() -> tuple[int, int]:
        raise ConnectionRefusedError(111, "Connection refused")

    _killed_at_the_next_start(template, setup, monkeypatch, refused)


def test_a_template_that_dies_with_the_request_is_reaped_and_started_again(
        template, setup, monkeypatch):
    """Killed, a template may take a start's request as it dies and never say the new
    pid (EOF): that start must wait for it to be reaped and fork from a new one."""
    def taken_and_gone() -> tuple[int, int]:
        pid_r, pid_w = os.pipe()
        os.close(pid_w)  # the pid never comes
        data_r, data_w = os.pipe()
        os.close(data_r)
        return pid_r, data_w

    _killed_at_the_next_start(template, setup, monkeypatch, taken_and_gone)


def test_a_stuck_template_is_killed_and_reported(template, setup, monkeypatch):
    proc, conn = _fork(template, setup)  # up and loaded
    conn.send("done")
    proc.join(10)
    stuck = template.pid
    assert stuck is not None
    os.kill(stuck, signal.SIGSTOP)
    monkeypatch.setattr(template_mod, "FORK_TIMEOUT_S", 1.0)
    t0 = time.monotonic()
    with pytest.raises(TemplateError):
        template.start(_child, "test-child", lambda _pid: (None, setup))
    assert time.monotonic() - t0 < 10
    deadline = time.monotonic() + 10  # SIGKILLed: gone once the kernel has reaped its threads
    while template.alive() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not template.alive()
