"""The pool's supervisor thread: worker messages, deaths, hangs, restarts.

The pool owns one `Supervisor`. Everything here runs on its one thread, which also
spawns every worker (a worker dies with the thread that spawned it: PR_SET_PDEATHSIG);
the pool's loop thread only starts it, asks for the spare, lists the processes and
stops it. What it reads from the pool is `SupervisedPool`, passed in.
"""

from __future__ import annotations

import os
import signal
import threading
import time
from collections.abc import Callable
from multiprocessing.connection import wait
from typing import Any, Protocol

import structlog

from cosyvoiced.workers import messages as m
from cosyvoiced.workers.pool.handles import StreamHandle
from cosyvoiced.workers.pool.placement import CpuPlan
from cosyvoiced.workers.pool.procs import Proc, Slot
from cosyvoiced.workers.pool.template import WorkerTemplate
from cosyvoiced.workers.setup import WorkerSetup

log = structlog.get_logger(__name__)


class SupervisedPool(Protocol):
    """What the supervisor reads from the pool that owns it (live: a reload changes it)."""

    config: Any
    """`[workers]`: restart_backoff_s, restart_backoff_max_s, hang_restart_s."""
    setup: WorkerSetup
    """What the next spawned worker starts with."""
    running: bool
    """Every slot was ready once and the pool has not stopped."""
    template: WorkerTemplate | None
    """What workers are forked from (None: spawned)."""
    plan: CpuPlan
    """Where each slot's worker runs (and keeps its memory)."""

    def handle(self, stream_id: str) -> StreamHandle | None:
        """The open stream a worker message is for."""


class Supervisor:
    """The supervisor thread of one pool, and the worker processes it spawned."""

    def __init__(self, pool: SupervisedPool, slots: list[Slot], lock: threading.Lock, *,
                 spare_cpus: tuple[int, ...],
                 publish: Callable[[Any], None] | None = None,
                 said: Callable[[m.SayDone], None] | None = None) -> None:
        self.pool = pool
        self.slots = slots
        self.lock = lock
        """The pool's: guards slot stream maps and processes, between loop and supervisor."""
        self.spare_cpus = spare_cpus
        self.publish = publish
        self.said = said
        self.restarts = 0
        self.spare: Proc | None = None
        self.closing = False
        """Set when the pool stops: deaths are no longer handled, nothing is spawned."""
        self.start_error: str | None = None
        """Why a worker failed to start before the pool was running."""
        self._timers: list[tuple[float, Callable[[], None]]] = []
        self._tasks: list[Callable[[], None]] = []
        self._wake_r, self._wake_w = os.pipe()
        self._thread = threading.Thread(target=self._supervise, name="worker-supervisor",
                                        daemon=True)

    # --- the pool's side (any thread) -------------------------------------------------

    def start(self) -> None:
        """Start the thread and spawn a worker for every slot from it."""
        self._thread.start()
        for slot in self.slots:
            self._call(lambda s=slot: self._spawn_for(s))

    def spawn_spare_in(self, delay_s: float) -> None:
        """Spawn the warm spare `delay_s` from now."""
        self._call(lambda: self._after(delay_s, self._spawn_spare))

    def spare_ready(self) -> bool:
        """A warm spare is waiting to adopt a slot."""
        return self.spare is not None and self.spare.ready

    def kill_all(self) -> None:
        """At interpreter exit: SIGKILL every worker (they ignore SIGTERM)."""
        self.closing = True
        for p in self.procs():
            if p.proc.is_alive():
                p.kill()

    def join(self, timeout_s: float) -> None:
        """After the workers stopped: end the thread and close its wake pipe."""
        self._wake()
        if self._thread.is_alive():
            self._thread.join(timeout_s)
        for fd in (self._wake_r, self._wake_w):
            try:
                os.close(fd)
            except OSError:
                pass

    def procs(self) -> list[Proc]:
        """Every worker process: the slots', those warming up, the spare."""
        with self.lock:
            procs = [p for s in self.slots for p in (s.proc, s.pending) if p is not None]
            if self.spare is not None:
                procs.append(self.spare)
        return list({id(p): p for p in procs}.values())

    def _wake(self) -> None:
        try:
            os.write(self._wake_w, b"x")
        except OSError:
            pass

    def _call(self, fn: Callable[[], None]) -> None:
        """Run `fn` on the supervisor thread."""
        self._tasks.append(fn)
        self._wake()

    def _after(self, delay_s: float, fn: Callable[[], None]) -> None:
        self._timers.append((time.monotonic() + delay_s, fn))

    # --- the thread -----------------------------------------------------------------

    def _supervise(self) -> None:
        while not self.closing:
            while self._tasks:
                self._tasks.pop(0)()
            now = time.monotonic()
            for t in [t for t in self._timers if t[0] <= now]:
                self._timers.remove(t)
                t[1]()
            procs = [p for p in self.procs() if not p.dead]
            objs: list[Any] = [self._wake_r]
            for p in procs:
                objs += [p.conn, p.proc.sentinel]
            timeout = min([0.1] + [max(0.0, t[0] - now) for t in self._timers])
            try:
                ready = wait(objs, timeout)
            except OSError:
                continue
            if self._wake_r in ready:
                try:
                    os.read(self._wake_r, 4096)
                except OSError:
                    return
            for p in procs:
                if p.conn in ready:
                    self._drain(p)
                if p.proc.sentinel in ready and not self.closing:
                    self._on_death(p)
            self._check_hangs()

    def _drain(self, p: Proc) -> None:
        try:
            while not p.dead and p.conn.poll():
                self._dispatch(p, m.recv(p.conn, m.FROM_WORKER))
        except (EOFError, OSError):
            pass  # the sentinel reports the death

    def _dispatch(self, p: Proc, msg: Any) -> None:
        if isinstance(msg, m.Ready):
            self._on_ready(p, msg)
            return
        if isinstance(msg, m.ListenEvent) and self.publish is not None:
            self.publish(msg.event)
        elif isinstance(msg, m.SayDone) and self.said is not None:
            self.said(msg)
        handle = self.pool.handle(msg.stream_id)
        if handle is None:
            return
        try:
            handle.loop.call_soon_threadsafe(handle.deliver, msg)
        except RuntimeError:
            pass  # the handle's loop is closed

    # --- filling slots --------------------------------------------------------------

    def _spawn_for(self, slot: Slot) -> None:
        if self.closing:
            return
        proc = Proc(slot.index, slot.cpus, self.pool.setup, self.pool.template)
        with self.lock:
            slot.pending = proc
        log.info("worker_starting", index=slot.index, pid=proc.pid, cpus=list(slot.cpus))

    def _spawn_spare(self) -> None:
        if self.closing or self.spare is not None:
            return
        proc = Proc(-1, self.spare_cpus, self.pool.setup, self.pool.template)
        with self.lock:
            self.spare = proc
        log.info("worker_spare_starting", pid=proc.pid)

    def _on_ready(self, p: Proc, msg: m.Ready) -> None:
        p.ready_msg = msg
        if msg.index < 0:
            log.info("worker_spare_ready", pid=p.pid, tts_rtf=round(msg.tts_rtf, 4))
            return
        slot = self.slots[msg.index]
        with self.lock:
            # Re-open the slot's streams before anyone may send to the new process.
            for handle in slot.streams.values():
                p.send(handle.open_message())
            slot.proc = p
            if slot.pending is p:
                slot.pending = None
            moved = len(slot.streams)
        if slot.restarts:
            log.info("worker_restarted", index=slot.index, pid=p.pid, moved_streams=moved,
                     down_s=round(time.monotonic() - slot.dead_since, 3),
                     restarts=slot.restarts)

    # --- deaths ---------------------------------------------------------------------

    def _on_death(self, p: Proc) -> None:
        p.proc.join(0.5)
        code = p.proc.exitcode
        how = p.killed_for or (f"signal {signal.Signals(-code).name}"
                               if code is not None and code < 0 else f"exit code {code}")
        p.close()
        now = time.monotonic()
        if p is self.spare:
            with self.lock:
                self.spare = None
            log.error("worker_spare_died", pid=p.pid, how=how)
            if not self.pool.running:
                return
            self._after(self.pool.config.restart_backoff_s, self._spawn_spare)
            return
        slot = next((s for s in self.slots if p in (s.proc, s.pending)), None)
        if slot is None:
            return
        if not self.pool.running and p.ready_msg is None:
            self.start_error = f"worker {slot.index} failed to start ({how})"
            log.error("worker_start_failed", index=slot.index, pid=p.pid, how=how)
            return
        with self.lock:
            if slot.proc is p:
                slot.proc = None
            if slot.pending is p:
                slot.pending = None
            slot.dead_since = now
            handles = list(slot.streams.values())
        slot.restarts += 1
        self.restarts += 1
        slot.deaths.append(now)
        log.error("worker_died", index=slot.index, pid=p.pid, how=how, streams=len(handles),
                  restarts=slot.restarts)
        for handle in handles:
            try:
                handle.loop.call_soon_threadsafe(handle.worker_lost, how)
            except RuntimeError:
                pass
        self._replace(slot, now)

    def _replace(self, slot: Slot, now_s: float) -> None:
        workers = self.pool.config
        delay = slot.backoff_s(now_s, workers.restart_backoff_s, workers.restart_backoff_max_s)
        spare = self.spare
        if delay == 0.0 and spare is not None and spare.ready:
            with self.lock:
                self.spare = None
                slot.pending = spare
            spare.index = slot.index
            spare.cpus = slot.cpus
            spare.ready_msg = None  # Ready comes again once it has adopted the slot
            spare.send(m.Adopt(slot.index, slot.cpus))
            log.info("worker_spare_adopting", index=slot.index, pid=spare.pid)
            self.pool.plan.move_memory(spare.pid, slot.index)  # to the slot's node
            self._after(workers.restart_backoff_s, self._spawn_spare)
            return
        if delay:
            log.warning("worker_restart_backoff", index=slot.index, delay_s=delay)
        self._after(delay, lambda: self._spawn_for(slot))

    def _check_hangs(self) -> None:
        limit = self.pool.config.hang_restart_s
        if not limit or not self.pool.running:
            return
        now = time.monotonic()
        for slot in self.slots:
            p = slot.proc
            if p is not None and p.ready and now - p.stats.heartbeat_s() > limit:
                silent_s = round(now - p.stats.heartbeat_s(), 1)
                log.error("worker_hung", index=slot.index, pid=p.pid, silent_s=silent_s)
                p.killed_for = f"hung: no heartbeat for {silent_s} s, killed"
                p.kill()
