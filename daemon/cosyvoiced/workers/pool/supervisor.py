"""The pool's supervisor thread: worker messages, deaths, hangs, restarts (a mixin).

Everything here runs on the one supervisor thread, which also spawns every worker (a
worker dies with the thread that spawned it: PR_SET_PDEATHSIG).
"""

from __future__ import annotations

import os
import signal
import threading
import time
from collections.abc import Callable
from multiprocessing.connection import wait
from typing import TYPE_CHECKING, Any

import structlog

from cosyvoiced.workers import messages as m
from cosyvoiced.workers.pool.procs import Proc, Slot

if TYPE_CHECKING:
    from cosyvoiced.runtime.health import Health
    from cosyvoiced.workers.pool.handles import StreamHandle
    from cosyvoiced.workers.worker.entry import WorkerSetup

log = structlog.get_logger(__name__)


class Supervision:
    config: Any
    setup: WorkerSetup
    health: Health | None
    publish: Callable[[Any], None] | None
    slots: list[Slot]
    all_cpus: tuple[int, ...]
    restarts: int
    _handles: dict[str, StreamHandle]
    _lock: threading.Lock
    _spare: Proc | None
    _timers: list[tuple[float, Callable[[], None]]]
    _tasks: list[Callable[[], None]]
    _wake_r: int
    _wake_w: int
    _closing: bool
    _start_error: str | None
    running: bool

    def _procs(self) -> list[Proc]:
        with self._lock:
            procs = [p for s in self.slots for p in (s.proc, s.pending) if p is not None]
            if self._spare is not None:
                procs.append(self._spare)
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
        while not self._closing:
            while self._tasks:
                self._tasks.pop(0)()
            now = time.monotonic()
            for t in [t for t in self._timers if t[0] <= now]:
                self._timers.remove(t)
                t[1]()
            procs = [p for p in self._procs() if not p.dead]
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
                if p.proc.sentinel in ready and not self._closing:
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
        handle = self._handles.get(msg.stream_id)
        if handle is None:
            return
        try:
            handle.loop.call_soon_threadsafe(handle._deliver, msg)
        except RuntimeError:
            pass  # the handle's loop is closed

    # --- spawning -------------------------------------------------------------------

    def _spawn_for(self, slot: Slot) -> None:
        if self._closing:
            return
        proc = Proc(slot.index, slot.cpus, self.setup)
        with self._lock:
            slot.pending = proc
        log.info("worker_starting", index=slot.index, pid=proc.pid, cpus=list(slot.cpus))

    def _spawn_spare(self) -> None:
        if self._closing or self._spare is not None:
            return
        proc = Proc(-1, self.all_cpus, self.setup)
        with self._lock:
            self._spare = proc
        log.info("worker_spare_starting", pid=proc.pid)

    def _on_ready(self, p: Proc, msg: m.Ready) -> None:
        p.ready_msg = msg
        if msg.index < 0:
            log.info("worker_spare_ready", pid=p.pid, tts_rtf=round(msg.tts_rtf, 4))
            return
        slot = self.slots[msg.index]
        with self._lock:
            # Re-open the slot's streams before anyone may send to the new process.
            for handle in slot.streams.values():
                cls = m.OpenTts if handle.kind == "tts" else m.OpenListen
                p.send(cls(handle.stream_id, handle.ring.name, handle.rate_hz))
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
        how = (f"signal {signal.Signals(-code).name}" if code is not None and code < 0
               else f"exit code {code}")
        p.close()
        now = time.monotonic()
        if p is self._spare:
            with self._lock:
                self._spare = None
            log.error("worker_spare_died", pid=p.pid, how=how)
            if not self.running:
                return
            self._after(self.config.restart_backoff_s, self._spawn_spare)
            return
        slot = next((s for s in self.slots if p in (s.proc, s.pending)), None)
        if slot is None:
            return
        if not self.running and p.ready_msg is None:
            self._start_error = f"worker {slot.index} failed to start ({how})"
            log.error("worker_start_failed", index=slot.index, pid=p.pid, how=how)
            return
        with self._lock:
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
                handle.loop.call_soon_threadsafe(handle._worker_lost)
            except RuntimeError:
                pass
        self._replace(slot, now)

    def _replace(self, slot: Slot, now_s: float) -> None:
        delay = slot.backoff_s(now_s, self.config.restart_backoff_s,
                               self.config.restart_backoff_max_s)
        spare = self._spare
        if delay == 0.0 and spare is not None and spare.ready:
            with self._lock:
                self._spare = None
                slot.pending = spare
            spare.index = slot.index
            spare.cpus = slot.cpus
            spare.ready_msg = None  # Ready comes again once it has adopted the slot
            spare.send(m.Adopt(slot.index, slot.cpus))
            log.info("worker_spare_adopting", index=slot.index, pid=spare.pid)
            self._after(self.config.restart_backoff_s, self._spawn_spare)
            return
        if delay:
            log.warning("worker_restart_backoff", index=slot.index, delay_s=delay)
        self._after(delay, lambda: self._spawn_for(slot))

    def _check_hangs(self) -> None:
        limit = self.config.hang_restart_s
        if not limit or not self.running:
            return
        now = time.monotonic()
        for slot in self.slots:
            p = slot.proc
            if p is not None and p.ready and now - p.stats.heartbeat_s() > limit:
                log.error("worker_hung", index=slot.index, pid=p.pid,
                          silent_s=round(now - p.stats.heartbeat_s(), 3))
                p.kill()
