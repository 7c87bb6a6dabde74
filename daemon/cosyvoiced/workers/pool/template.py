"""The worker template, as the pool sees it: started, asked for workers, stopped.

What it loads and why is `workers.worker.preload`. Here it is a multiprocessing
forkserver of the pool's own (the global one stays free for anyone else), started pinned
to the inference CPUs with one thread each and with `TEMPLATE_ENV` naming the pickled
setup; a worker is a `multiprocessing` process launched through it, so the pool handles
it as a spawned one (pid, sentinel, exit code: the template reports them). A template
that dies takes its workers with it (PR_SET_PDEATHSIG); the next worker started starts it
again. One that does not fork within `FORK_TIMEOUT_S` is killed and the worker spawned
instead (`TemplateError`).
"""

from __future__ import annotations

import atexit
import io
import os
import pickle
import shutil
import signal
import tempfile
import time
from collections.abc import Callable
from dataclasses import replace
from multiprocessing import forkserver, popen_forkserver, process, reduction, spawn, util
from multiprocessing.connection import wait
from multiprocessing.context import set_spawning_popen
from pathlib import Path
from typing import Any

import structlog

from cosyvoiced.workers.errors import TemplateError
from cosyvoiced.workers.setup import WorkerSetup
from cosyvoiced.workers.worker.affinity import starting_pinned, thread_env
from cosyvoiced.workers.worker.preload import TEMPLATE_ENV

log = structlog.get_logger(__name__)

FORK_TIMEOUT_S = 300.0
"""Longest wait for the template to fork a worker: its first fork waits for its load (a
cold cache converts and compiles the voice: tens of seconds)."""
DYING_WAIT_S = 5.0
"""Longest wait for a template that refused a worker to finish exiting."""


class _Gone(TemplateError):
    """The template took the request and died before it forked."""


class _Server(forkserver.ForkServer):
    """A forkserver that (re)starts as the template: pinned, one thread, its setup named."""

    def __init__(self, cpus: tuple[int, ...], env: dict[str, str]) -> None:
        super().__init__()
        self.cpus = cpus
        self.env = env
        self.starts = 0
        self.set_forkserver_preload(["cosyvoiced.workers.worker.preload"])

    def ensure_running(self) -> None:
        with starting_pinned(self.cpus, self.env):
            pid = self._forkserver_pid
            super().ensure_running()
            if self._forkserver_pid != pid:
                self.starts += 1

    def connect(self, fds: list[int]) -> tuple[int, int]:
        """`connect_to_new_process`, once more after a refusal: a template killed a
        moment ago may refuse before it can be reaped (its workers, killed as it exits,
        are gone first), so `ensure_running` took it for alive."""
        try:
            return self.connect_to_new_process(fds)
        except (ConnectionRefusedError, FileNotFoundError) as exc:
            if not self._reaped(DYING_WAIT_S):
                raise TemplateError(f"the worker template refuses to fork: {exc}") from exc
        return self.connect_to_new_process(fds)

    def _reaped(self, timeout_s: float) -> bool:
        """Whether the template, if it is exiting, was reaped within `timeout_s` (and
        forgotten as `ensure_running` forgets a dead one, so the next call starts one)."""
        deadline = time.monotonic() + timeout_s
        pid = self._forkserver_pid
        if pid is None:
            return True
        while True:
            try:
                if os.waitpid(pid, os.WNOHANG)[0]:
                    break
            except ChildProcessError:
                break
            if time.monotonic() > deadline:
                return False
            time.sleep(0.01)
        with self._lock:
            os.close(self._forkserver_alive_fd)
            self._forkserver_address = self._forkserver_alive_fd = self._forkserver_pid = None
        return True

    @property
    def pid(self) -> int | None:
        return self._forkserver_pid

    def stop(self) -> None:
        self._stop()


class _Popen(popen_forkserver.Popen):
    """multiprocessing's forkserver launch, through the template's server, with a
    deadline on the fork (the pid is read before the process data is written: the
    template writes it once it has forked, whatever the child reads)."""

    def __init__(self, process_obj: Any, server: _Server) -> None:
        self._server = server
        super().__init__(process_obj)

    def _launch(self, process_obj: Any) -> None:
        prep_data = spawn.get_preparation_data(process_obj._name)
        buf = io.BytesIO()
        set_spawning_popen(self)
        try:
            reduction.dump(prep_data, buf)
            reduction.dump(process_obj, buf)
        finally:
            set_spawning_popen(None)
        self.sentinel, w = self._server.connect(self._fds)
        _parent_w = os.dup(w)
        self.finalizer = util.Finalize(self, util.close_fds, (_parent_w, self.sentinel))
        if not wait([self.sentinel], FORK_TIMEOUT_S):
            os.close(w)
            if self._server.pid:
                os.kill(self._server.pid, signal.SIGKILL)
            raise TemplateError(f"the worker template forked nothing in {FORK_TIMEOUT_S} s")
        try:
            self.pid = forkserver.read_signed(self.sentinel)
        except (OSError, EOFError) as exc:
            os.close(w)
            raise _Gone(f"the worker template is gone: {exc}") from exc
        with open(w, "wb", closefd=True) as f:
            f.write(buf.getbuffer())


_SERVERS: dict[int, _Server] = {}


class TemplateProcess(process.BaseProcess):
    """A worker launched through a template (`_template` names it in this process)."""

    _start_method = "forkserver"
    _template = 0

    @staticmethod
    def _Popen(process_obj: Any) -> Any:
        return _Popen(process_obj, _SERVERS[process_obj._template])


class WorkerTemplate:
    """The pool's template process (started on the first worker asked of it)."""

    def __init__(self, setup: WorkerSetup, cpus: tuple[int, ...]) -> None:
        self._dir = tempfile.mkdtemp(prefix="cosyvoiced-template-")  # 0700
        path = Path(self._dir) / "setup.pickle"
        path.write_bytes(pickle.dumps(replace(setup, asr_link=None)))  # a worker's own
        self._server = _Server(cpus, {**thread_env(setup.onnx_threads),
                                      TEMPLATE_ENV: str(path)})
        _SERVERS[id(self)] = self._server

    @classmethod
    def made_for(cls, workers: Any, setup: WorkerSetup, cpus: tuple[int, ...]
                 ) -> WorkerTemplate | None:
        """The template for workers of `setup` (stopped at exit), or None: off in
        `[workers]`, or (logged) where they cannot fork."""
        if not workers.template:
            return None
        if setup.onnx_threads > 1:
            log.info("worker_template_off", reason="workers.onnx_threads > 1: a forked "
                     "worker would have none of the template's thread pools")
            return None
        template = cls(setup, cpus)
        atexit.register(template.stop)
        return template

    def status(self) -> dict[str, Any]:
        """For `cosyvoicectl status` (`workers.template`)."""
        return {"pid": self.pid, "alive": self.alive(), "starts": self.starts}

    @property
    def pid(self) -> int | None:
        return self._server.pid

    @property
    def starts(self) -> int:
        return self._server.starts

    def start(self, target: Callable[..., Any], name: str,
              args: Callable[[int], tuple[Any, ...]]) -> TemplateProcess:
        """A started worker process running `target(*args(template pid))`; TemplateError
        where the template does not fork it."""
        try:
            return self._start(target, name, args)
        except _Gone:
            # killed a moment ago and not reaped yet (so `ensure_running` took it for
            # alive), it took the request as it died: once reaped, a new one forks it
            if not self._server._reaped(DYING_WAIT_S):
                raise
            return self._start(target, name, args)

    def _start(self, target: Callable[..., Any], name: str,
               args: Callable[[int], tuple[Any, ...]]) -> TemplateProcess:
        self._server.ensure_running()
        proc = TemplateProcess(target=target, name=name, daemon=True,
                               args=args(self._server.pid or 0))
        proc._template = id(self)
        proc.start()
        return proc

    def alive(self) -> bool:
        """Running (not reaped here: the server's own restart check reaps it)."""
        try:
            stat = Path(f"/proc/{self._server.pid}/stat").read_text()
        except OSError:
            return False
        return stat.rsplit(")", 1)[1].split()[0] not in ("Z", "X")

    def stop(self) -> None:
        """Stop the template (its workers die with it) and remove its setup file."""
        atexit.unregister(self.stop)
        try:
            if self._server.pid:
                os.kill(self._server.pid, signal.SIGKILL)
            self._server.stop()
        except (OSError, ChildProcessError):
            pass
        _SERVERS.pop(id(self), None)
        shutil.rmtree(self._dir, ignore_errors=True)
