"""Worker processes as the pool sees them: starting, and one record per process/slot.

A `Proc` is one worker process, forked from the worker template or spawned (pipe, shared
stats, Ready); a `Slot` is a fixed CPU share whose process changes across restarts.
Which process fills which slot, and when, is the supervisor's business (`supervisor`).
"""

from __future__ import annotations

import multiprocessing
import os
import threading
import time
from collections import deque
from typing import TYPE_CHECKING, Any

import structlog

from cosyvoiced.workers import messages as m
from cosyvoiced.workers.errors import TemplateError
from cosyvoiced.workers.pool.cpus import format_cpu_list
from cosyvoiced.workers.pool.handles import StreamHandle
from cosyvoiced.workers.pool.template import WorkerTemplate
from cosyvoiced.workers.setup import WorkerSetup
from cosyvoiced.workers.stats import WorkerStats
from cosyvoiced.workers.worker.affinity import starting_pinned, thread_env
from cosyvoiced.workers.worker.entry import worker_main

if TYPE_CHECKING:
    from cosyvoiced.workers.pool.admission import WorkerLoad

log = structlog.get_logger(__name__)

_CTX = multiprocessing.get_context("spawn")


def spawn_pinned(proc: Any, cpus: tuple[int, ...], threads: int) -> None:
    """Start `proc` with the thread limits in the environment, from a thread pinned to
    `cpus`, so both hold from the child's first instruction.

    Must be called from a thread that outlives the child: it asks the kernel to kill it
    when its parent *thread* exits (PR_SET_PDEATHSIG).
    """
    with starting_pinned(cpus, thread_env(threads)):
        proc.start()


class Proc:
    """One worker process: its control pipe, its shared stats, whether it said Ready."""

    def __init__(self, index: int, cpus: tuple[int, ...], setup: WorkerSetup,
                 template: WorkerTemplate | None = None) -> None:
        """Forked from `template` where there is one (spawned where it fails)."""
        self.index = index
        """Slot served; -1 for a spare."""
        self.cpus = cpus
        self.conn, child = _CTX.Pipe(duplex=True)
        self.stats = WorkerStats.create(_CTX)
        name = f"cosyvoiced-worker-{index}" if index >= 0 else "cosyvoiced-worker-spare"

        def args(parent: int) -> tuple[Any, ...]:
            return index, cpus, child, self.stats.array, setup, parent

        self.proc: Any = None
        self.ready_msg: m.Ready | None = None
        self.started_s = time.monotonic()
        self.dead = False
        self.killed_for = ""
        """Why the pool killed it (its death then says this, not just SIGKILL)."""
        self._lock = threading.Lock()
        if template is not None:
            try:
                self.proc = template.start(worker_main, name, args)
            except TemplateError as exc:
                log.warning("worker_template_unavailable", error=str(exc), index=index)
        if self.proc is None:
            self.proc = _CTX.Process(target=worker_main, name=name, daemon=True,
                                     args=args(os.getpid()))
            spawn_pinned(self.proc, cpus, setup.onnx_threads)
        child.close()

    @property
    def pid(self) -> int:
        return self.proc.pid or 0

    @property
    def ready(self) -> bool:
        return self.ready_msg is not None and not self.dead

    def send(self, msg: object) -> bool:
        """False if the worker is gone (its death is handled by the supervisor)."""
        if self.dead:
            return False
        try:
            with self._lock:
                m.send(self.conn, msg)
            return True
        except (BrokenPipeError, ConnectionResetError, OSError):
            return False

    def kill(self) -> None:
        try:
            os.kill(self.pid, 9)
        except (ProcessLookupError, PermissionError):
            pass

    def close(self) -> None:
        self.dead = True
        self.conn.close()


def join_all(procs: list[Proc], timeout_s: float) -> None:
    """Wait up to `timeout_s` in all for the processes to exit; kill the rest; close."""
    deadline = time.monotonic() + timeout_s
    for p in procs:
        p.proc.join(max(0.0, deadline - time.monotonic()))
        if p.proc.is_alive():
            p.kill()
            p.proc.join(1.0)
        p.close()


class Slot:
    """A worker position: fixed CPUs; the process in it changes across restarts."""

    def __init__(self, index: int, cpus: tuple[int, ...]) -> None:
        self.index = index
        self.cpus = cpus
        self.proc: Proc | None = None
        self.pending: Proc | None = None
        """A process warming up (or adopting) to fill this slot."""
        self.restarts = 0
        self.dead_since = time.monotonic()
        self.deaths: deque[float] = deque(maxlen=16)
        self.streams: dict[str, StreamHandle] = {}
        self.speaking = 0
        self.listening = 0
        self.started: deque[float] = deque()
        """When streams began to speak (monotonic), the last few seconds: those since its
        worker last published what it owes are not in that figure yet."""
        self._late_read: tuple[int | None, int] = (None, 0)

    def late_since_read(self) -> int:
        """Late TTS steps its worker counted since the last call (a new process counts
        from 0)."""
        proc = self.proc
        if proc is None or not proc.ready:
            return 0
        late = int(proc.stats.get("late"))
        pid, seen = self._late_read
        self._late_read = (proc.pid, late)
        return late - seen if pid == proc.pid else late

    def status(self, load: WorkerLoad, busy_max: float, now: float) -> dict[str, Any]:
        """This worker's row of the pool's status, from its measured `load`."""
        p = self.proc
        return {
            "index": self.index, "pid": p.pid if p else None, "alive": load.alive,
            "cpus": format_cpu_list(self.cpus), "busy": round(load.busy, 3),
            "ahead": round(load.ahead, 3), "owed": round(load.owed, 3),
            "rtf": round(load.rtf, 4), "vad_window_us": round(load.vad_us, 1),
            "asr_rtf": round(load.asr_rtf, 4), "speech_share": round(load.speech_share, 3),
            "listen_cost": round(load.listen_cost(), 4),
            "streams": load.streams, "speaking": load.speaking,
            "listening": load.listening, "load": round(load.load(), 3),
            "tts_capacity": load.tts_capacity(busy_max), "restarts": self.restarts,
            "late_steps": int(p.stats.get("late")) if p and p.ready else 0,
            "heartbeat_age_s": round(now - self.heartbeat_s(), 3),
            "threads": p.ready_msg.threads if p and p.ready_msg else None,
            "engine": p.ready_msg.engine or None if p and p.ready_msg else None,
        }

    def heartbeat_s(self) -> float:
        """Health probe: the live worker's last loop turn, else when it went missing."""
        proc = self.proc
        if proc is not None and proc.ready:
            return proc.stats.heartbeat_s()
        return self.dead_since

    def backoff_s(self, now_s: float, base_s: float, max_s: float) -> float:
        """No delay for an occasional death; doubling delays for a crash loop."""
        recent = sum(1 for t in self.deaths if now_s - t < 60.0)
        if recent <= 1:
            return 0.0
        return min(max_s, base_s * 2 ** (recent - 2))
