"""The box's one ASR process as the pool runs it: up before the workers, restarted when
it dies, stopped after them.

Whisper is loaded once per box there (`workers/worker/asr_serve.py`) instead of once per
worker. Its socket lives in a directory only the daemon's user may enter (made here,
removed at stop), at a path that stays the same across restarts, so a worker's
`RemoteAsr` simply connects again. The process is pinned to all the inference CPUs and
runs one Whisper replica per worker slot (one batch in flight per worker), all on one
copy of the weights. A death is logged (`asr_died`) and the process started again at
once, with doubling delays when it keeps dying; batches in flight meanwhile are sent
again to the new process (`RemoteAsr.RECONNECT_S`). A process that stops answering (its
probe, an empty batch every 2 s, unanswered for `workers.hang_restart_s`) is killed and
started again the same way (`asr_hung`).
"""

from __future__ import annotations

import multiprocessing
import os
import shutil
import tempfile
import threading
import time
from collections import deque
from multiprocessing import AuthenticationError
from multiprocessing.connection import Client, wait
from typing import Any

import structlog

from cosyvoiced.workers import messages as m
from cosyvoiced.workers.pool.procs import spawn_pinned
from cosyvoiced.workers.setup import AsrLink, WorkerSetup
from cosyvoiced.workers.worker.asr_serve import asr_main

log = structlog.get_logger(__name__)

_CTX = multiprocessing.get_context("spawn")
BACKOFF_S = 1.0
BACKOFF_MAX_S = 30.0
PROBE_EVERY_S = 2.0


class AsrService:
    """Starts, watches and stops the ASR process."""

    def __init__(self, setup: WorkerSetup, cpus: tuple[int, ...], *, replicas: int,
                 threads: int, languages: tuple[str, ...], hang_s: float = 10.0) -> None:
        self.setup = setup
        self.cpus = cpus
        self.replicas = max(1, replicas)
        self.threads = max(1, threads)
        self.dir = tempfile.mkdtemp(prefix="cosyvoiced-asr-")  # mode 0700
        self.address = os.path.join(self.dir, "asr.sock")
        self.authkey = os.urandom(32)
        self.languages = languages
        """What the model transcribes, read from its files by the pool (`model_languages`)."""
        self.hang_s = hang_s
        """No answer to a probe for this long: killed and started again
        (`workers.hang_restart_s`, as for a worker)."""
        self.restarts = 0
        self.proc: Any = None
        self.ready = False
        self.error: str | None = None
        self._deaths: deque[float] = deque(maxlen=8)
        self._stop = threading.Event()
        self._first = threading.Event()
        self._thread = threading.Thread(target=self._run, name="asr-supervisor", daemon=True)

    @property
    def pid(self) -> int:
        return self.proc.pid if self.proc is not None and self.proc.pid else 0

    def start(self) -> AsrLink:
        """Start the process (not waiting for it: the workers warm up meanwhile, their
        first batch waits for it); its link for the workers."""
        self._thread.start()
        return AsrLink(self.address, self.authkey, self.languages)

    @property
    def started(self) -> bool:
        """It said ready once (`error` says why it never will)."""
        return self._first.is_set() and not self.error

    def _spawn(self) -> tuple[Any, Any]:
        conn, child = _CTX.Pipe(duplex=False)
        proc = _CTX.Process(target=asr_main, name="cosyvoiced-asr", daemon=True,
                            args=(self.cpus, child, self.setup, self.address, self.authkey,
                                  self.threads, self.replicas, os.getpid()))
        spawn_pinned(proc, self.cpus, self.threads)  # from this thread: it outlives the child
        child.close()
        self.proc = proc
        return proc, conn

    def _run(self) -> None:
        while not self._stop.is_set():
            proc, conn = self._spawn()
            try:
                ready = self._wait_ready(proc, conn)
                if ready is None:
                    if not self._first.is_set() and not self._stop.is_set():
                        # never came up: the pool's start fails
                        self.error = f"the ASR process exited ({proc.exitcode}) before ready"
                        self._first.set()
                        return
                else:
                    self.ready = True
                    self._first.set()
                    self._watch(proc)
            finally:
                self.ready = False
                conn.close()
            proc.join(1.0)
            if self._stop.is_set():
                return
            now = time.monotonic()
            self._deaths.append(now)
            self.restarts += 1
            recent = sum(1 for t in self._deaths if now - t < 60.0)
            delay = 0.0 if recent <= 1 else min(BACKOFF_MAX_S, BACKOFF_S * 2 ** (recent - 2))
            log.error("asr_died", pid=proc.pid, exitcode=proc.exitcode,
                      restart_in_s=round(delay, 2))
            self._stop.wait(delay)

    def _watch(self, proc: Any) -> None:
        """Until it dies: every `PROBE_EVERY_S` an empty batch, which its connection thread
        answers at once however busy Whisper is; no answer within `hang_s` (stopped,
        deadlocked) and it is killed, to be started again."""
        if self.hang_s <= 0:  # `hang_restart_s = 0`: never
            wait([proc.sentinel])
            return
        while not wait([proc.sentinel], PROBE_EVERY_S) and not self._stop.is_set():
            answered = threading.Event()
            threading.Thread(target=self._probe, args=(answered,), name="asr-probe",
                             daemon=True).start()
            if not answered.wait(self.hang_s) and proc.is_alive() and not self._stop.is_set():
                log.error("asr_hung", pid=proc.pid, no_answer_s=self.hang_s)
                proc.kill()
                wait([proc.sentinel], 5.0)
                return

    def _probe(self, answered: threading.Event) -> None:
        try:
            with Client(self.address, family="AF_UNIX", authkey=self.authkey) as conn:
                conn.send(m.DecodeBatch((), self.setup.asr))
                if conn.poll(self.hang_s):
                    m.recv(conn, (m.Decoded,))
                    answered.set()
        except (OSError, EOFError, AuthenticationError, m.WorkerProtocolError):
            pass  # a dead process: its sentinel says so

    def _wait_ready(self, proc: Any, conn: Any) -> m.AsrReady | None:
        """Its AsrReady, or None if it died (or the pool stops) first."""
        while not self._stop.is_set():
            if conn in wait([conn, proc.sentinel], 0.5):
                try:
                    return m.recv(conn, (m.AsrReady,))
                except (EOFError, OSError, m.WorkerProtocolError):
                    return None
            if not proc.is_alive():
                return None
        return None

    def stop(self) -> None:
        """Kill the process (it holds nothing to flush) and remove its socket directory."""
        self._stop.set()
        proc = self.proc
        if proc is not None and proc.pid:
            try:
                os.kill(proc.pid, 9)
            except (ProcessLookupError, PermissionError):
                pass
            proc.join(2.0)
        if self._thread.is_alive() and self._thread is not threading.current_thread():
            self._thread.join(2.0)
        shutil.rmtree(self.dir, ignore_errors=True)

    def status(self) -> dict[str, Any]:
        return {"pid": self.pid or None, "alive": self.ready, "restarts": self.restarts,
                "replicas": self.replicas}
