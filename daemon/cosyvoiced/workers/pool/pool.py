"""The main-process side of the workers: start, assign, supervise, admit, report.

The pool owns the slots, the open streams (it is their handles' `StreamHost`) and a
`Supervisor`, whose thread owns the worker processes: it spawns them (and one warm spare),
reads their messages, and notices deaths through process sentinels. A dead worker's
slot is taken over by the spare at once (it re-pins itself to the slot's CPUs), the
slot's streams are re-opened there, their in-flight requests end with a `worker_lost`
error, and a new spare is spawned. A worker whose heartbeat stops for
`hang_restart_s` is killed and replaced the same way (the service watchdog sees the
workers only as a whole: it is withheld when no worker at all makes progress, so one stuck
worker costs its own requests, not the service). Restarts back off when a slot
keeps dying. The asyncio side opens streams (`open_tts_stream`, `open_listen_stream`)
and gets `Overloaded` when the measured load says no worker can serve one more.
"""

from __future__ import annotations

import asyncio
import atexit
import itertools
import threading
import time
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

import structlog

from cosyvoiced.audio.ring import Ring
from cosyvoiced.listen.asr import bundled_model_dir
from cosyvoiced.listen.languages import model_languages
from cosyvoiced.runtime.health import Health
from cosyvoiced.workers import messages as m
from cosyvoiced.workers.errors import PoolNotRunning, WorkerError, WorkerLost
from cosyvoiced.workers.pool.admission import Admission, WorkerLoad
from cosyvoiced.workers.pool.asr_proc import AsrService
from cosyvoiced.workers.pool.cpus import format_cpu_list
from cosyvoiced.workers.pool.handles import ListenHandle, StreamHandle, TtsHandle
from cosyvoiced.workers.pool.placement import CpuPlan
from cosyvoiced.workers.pool.procs import Slot, join_all
from cosyvoiced.workers.pool.supervisor import Supervisor
from cosyvoiced.workers.pool.template import WorkerTemplate
from cosyvoiced.workers.setup import WorkerSetup
from cosyvoiced.workers.worker.affinity import may_renice_to

log = structlog.get_logger(__name__)

DEFAULT_TTS_RATE_HZ = 22050
"""Piper medium voices' own rate, used when neither the caller nor `tts.rate_hz` says."""
CAPTURE_RING_S = 2.0
WORKERS_PROBE = "workers"
"""The health probe of the pool (see the module doc)."""
SPARE_DELAY_S = 2.0
"""The warm spare starts this long after the pool is ready."""
STARTED_KEEP_S = 5.0
"""How long a stream's start is remembered: well past the worker's next `owed` figure."""
PLAYBACK_EXTRA_S = 4.0
"""Playback ring room beyond the lookahead (a clause can be a few seconds long)."""


class WorkerPool:
    def __init__(self, workers: Any, setup: WorkerSetup, *, health: Health | None = None,
                 publish: Callable[[Any], None] | None = None,
                 said: Callable[[m.SayDone], None] | None = None) -> None:
        """`publish` gets each listen event, `said` each finished request (its RTF), both
        on the supervisor's thread."""
        self.config = workers
        self.setup = setup
        self.health = health
        self.publish = publish
        self.plan = CpuPlan.for_config(workers)  # whole physical cores first, a node each
        log.info("cpu_plan", **self.plan.fields())
        self.slots = [Slot(i, share) for i, share in enumerate(self.plan.shares)]
        self.all_cpus = self.plan.cpus
        self.admission = Admission(workers.admit_busy_max, workers.max_streams)
        self.running = False
        self.late_steps = 0
        """TTS steps the workers made after their listener ran dry, as of the last status."""
        self._handles: dict[str, StreamHandle] = {}
        self._ids = itertools.count(1)
        self._lock = threading.Lock()  # slot stream maps and procs, between loop and supervisor
        self.supervisor = Supervisor(self, self.slots, self._lock, spare_cpus=self.all_cpus,
                                     publish=publish, said=said)
        self.asr: AsrService | None = None
        """The box's one ASR process (`asr.enabled`), started before the workers."""
        self.template: WorkerTemplate | None = None  # what workers fork from, made at start
        # Workers ignore SIGTERM (systemd signals the whole cgroup on stop), so the
        # terminate() multiprocessing tries at exit would wait forever: kill them first.
        atexit.register(self.supervisor.kill_all)

    @property
    def restarts(self) -> int:
        """Inference process deaths replaced since the pool started (the workers' and the
        ASR process's)."""
        return self.supervisor.restarts + (self.asr.restarts if self.asr is not None else 0)

    def handle(self, stream_id: str) -> StreamHandle | None:
        """The open stream `stream_id` (the supervisor routes worker messages by it)."""
        return self._handles.get(stream_id)

    @classmethod
    def from_config(cls, config: Any, *, health: Health | None = None,
                    publish: Callable[[Any], None] | None = None,
                    said: Callable[[m.SayDone], None] | None = None,
                    lexicon: Any = None) -> WorkerPool:
        """The pool for a whole daemon `Config` (workers, tts, vad, service, log)."""
        w, svc = config.workers, config.service
        setup = WorkerSetup(
            tts=config.tts, vad=config.vad, cache_dir=svc.cache_dir, state_dir=svc.state_dir,
            onnx_threads=w.onnx_threads, policy=w.policy, lookahead_s=w.lookahead_s,
            first_audio_s=w.first_audio_s, work_conserving=w.work_conserving,
            clause_max_chars=w.clause_max_chars, vad_capacity=w.vad_slots, vad_tick_ms=w.vad_tick_ms, log_level=config.log.level,
            log_sink=config.log.sink, journal_socket=config.log.journal_socket,
            asr=config.asr, lexicon=lexicon)
        return cls(w, setup, health=health, publish=publish, said=said)

    def reconfigure(self, workers: Any) -> None:
        """Apply the live `[workers]` keys after a reload (count and CPUs need a restart)."""
        self.config = workers
        self.admission.busy_max = workers.admit_busy_max
        self.admission.max_streams = workers.max_streams
        live = (workers.policy, workers.lookahead_s, workers.first_audio_s)
        if live != (self.setup.policy, self.setup.lookahead_s, self.setup.first_audio_s):
            self.setup = replace(self.setup, policy=workers.policy,
                                 lookahead_s=workers.lookahead_s,
                                 first_audio_s=workers.first_audio_s)
            self.set_policy(workers.policy, workers.lookahead_s)

    def reconfigure_listen(self, vad: Any, asr: Any) -> None:
        """Apply the live `[vad]`/`[asr]` keys after a reload (respawned workers too)."""
        if (vad, asr) == (self.setup.vad, self.setup.asr):
            return
        self.setup = replace(self.setup, vad=vad, asr=asr)
        msg = m.SetListen(vad, asr)
        for p in self.supervisor.procs():
            p.send(msg)

    def set_lexicon(self, lexicon: Any) -> None:
        """A new `tts.lexicon` for every worker (and those spawned later)."""
        self.setup = replace(self.setup, lexicon=lexicon)
        msg = m.SetLexicon(lexicon)
        for p in self.supervisor.procs():
            p.send(msg)

    # --- lifecycle ----------------------------------------------------------------

    async def start(self, timeout_s: float = 180.0) -> None:
        """Start the ASR process and the workers; wait until each has warmed up and said
        it is ready."""
        deadline = time.monotonic() + timeout_s
        asr = self.setup.asr
        if asr is not None and asr.enabled:
            model_dir = Path(asr.model_dir) if asr.model_dir else bundled_model_dir()
            self.asr = AsrService(self.setup, self.all_cpus, replicas=len(self.slots),
                                  threads=min(asr.threads, len(self.slots[0].cpus)),
                                  languages=model_languages(model_dir),
                                  hang_s=self.config.hang_restart_s)
            atexit.register(self.asr.stop)
            self.setup = replace(self.setup, asr_link=self.asr.start())
        self.template = WorkerTemplate.made_for(self.config, self.setup, self.all_cpus)
        self.supervisor.start()
        while not (all(s.proc is not None and s.proc.ready for s in self.slots)
                   and (self.asr is None or self.asr.started)):
            error = self.supervisor.start_error or (self.asr.error if self.asr else None)
            if error:
                await self.stop()
                raise WorkerError(error, code="worker_start")
            if time.monotonic() > deadline:
                await self.stop()
                raise WorkerError(f"workers not ready within {timeout_s} s", code="worker_start")
            await asyncio.sleep(0.02)
        self.running = True
        if self.health is not None:  # one stuck worker is the supervisor's to replace
            self.health.register(WORKERS_PROBE, self.newest_heartbeat_s)
        if self.config.spare:  # a little later: not competing with the first requests
            self.supervisor.spawn_spare_in(SPARE_DELAY_S)
            if not may_renice_to(0):  # the spare's own test (worker entry), said once here
                log.warning("worker_spare_full_priority",
                            note="no CAP_SYS_NICE and RLIMIT_NICE < 20: spares warm up at "
                                 "the workers' priority (allow LimitNICE=+0)")
        log.info("workers_ready", count=len(self.slots), cpus=format_cpu_list(self.all_cpus),
                 onnx_threads=self.config.onnx_threads,
                 tts_rtf=[round(s.proc.ready_msg.tts_rtf, 4) for s in self.slots
                          if s.proc and s.proc.ready_msg])

    def newest_heartbeat_s(self) -> float:
        """Health probe: the latest loop turn of any worker (stalls only with none left)."""
        return max(slot.heartbeat_s() for slot in self.slots)

    async def stop(self, timeout_s: float = 5.0) -> None:
        """Close every stream, stop the workers (killing stragglers), end the supervisor."""
        self.supervisor.closing = True
        self.running = False
        if self.health is not None:
            self.health.unregister(WORKERS_PROBE)
        for handle in list(self._handles.values()):
            await handle.close()
        procs = self.supervisor.procs()
        for p in procs:
            p.send(m.Stop())
        await asyncio.to_thread(join_all, procs, timeout_s)
        await asyncio.to_thread(self.supervisor.join, 2.0)
        atexit.unregister(self.supervisor.kill_all)
        if self.template is not None:
            await asyncio.to_thread(self.template.stop)
        if self.asr is not None:  # after the workers: their last transcripts came from it
            await asyncio.to_thread(self.asr.stop)
            atexit.unregister(self.asr.stop)

    # --- streams ------------------------------------------------------------------

    def loads(self) -> list[WorkerLoad]:
        """Each slot's measured load, for admission and status."""
        out = []
        for s in self.slots:
            p = s.proc
            alive = p is not None and p.ready
            st = p.stats if p is not None else None
            owed_at = st.get("owed_at_s") if st else 0.0
            out.append(WorkerLoad(
                s.index, alive, st.get("busy") if st else 0.0, st.get("rtf") if st else 0.0,
                st.get("vad_us") if st else 0.0, s.speaking, s.listening, len(s.streams),
                st.get("asr_rtf") if st else 0.0, st.get("speech_share") if st else 0.0,
                st.get("ahead") if st else 0.0, st.get("owed") if st else 0.0,
                sum(1 for t in tuple(s.started) if t >= owed_at)))
        return out

    def worker_figures(self) -> list[dict[str, float]]:
        """Each live worker's published figures (`WorkerStats`)."""
        return [s.proc.stats.snapshot() for s in self.slots
                if s.proc is not None and s.proc.ready]

    def _open(self, handle_cls: type[StreamHandle], kind: str, ring: Ring, rate_hz: int,
              stream_id: str | None, language: str = "", words: bool = False) -> StreamHandle:
        if not self.running:
            raise PoolNotRunning("the worker pool is not running")
        sid = stream_id or f"{kind}-{next(self._ids)}"
        if sid in self._handles:
            raise WorkerError(f"stream {sid!r} is already open", code="duplicate_stream")
        try:
            # Never send while holding the lock: a full pipe would block the supervisor,
            # which needs the lock to drain the worker's side (a deadlock).
            with self._lock:
                self.admission.check_cap(len(self._handles))
                index = self.admission.choose(self.loads(), kind)
                self.plan.place_ring(ring, index)  # on its worker's node, before samples
                slot = self.slots[index]
                proc = slot.proc
                assert proc is not None
                handle = handle_cls(self, sid, index, ring, rate_hz)
                if isinstance(handle, ListenHandle):
                    handle.language, handle.words = language, words
                slot.streams[sid] = handle
                self._handles[sid] = handle
                if kind == "listen":
                    slot.listening += 1
            if not proc.send(handle.open_message()):
                self._forget(handle)
                raise WorkerLost(f"worker {index} is restarting")
        except BaseException:
            ring.close()
            ring.unlink()
            raise
        return handle

    async def open_tts_stream(self, rate_hz: int | None = None,
                              stream_id: str | None = None) -> TtsHandle:
        """A playback stream on the least loaded worker (Overloaded if none can serve it)."""
        rate = rate_hz or self.setup.tts.rate_hz or DEFAULT_TTS_RATE_HZ
        frames = int((self.setup.lookahead_s + PLAYBACK_EXTRA_S) * rate)
        ring = Ring.create(frames, policy="refuse")
        handle = self._open(TtsHandle, "tts", ring, rate, stream_id)
        assert isinstance(handle, TtsHandle)
        return handle

    async def open_listen_stream(self, rate_hz: int, stream_id: str | None = None,
                                 language: str = "", words: bool = False) -> ListenHandle:
        """A capture stream (8000 or 16000 Hz) whose VAD events arrive on `handle.events`,
        its utterances transcribed in `language` ("": the model's choice), with their
        words' times when `words`."""
        if rate_hz not in (8000, 16000):
            raise WorkerError(f"listen streams run at 8000 or 16000 Hz, not {rate_hz}",
                              code="unsupported_rate")
        ring = Ring.create(int(CAPTURE_RING_S * rate_hz), policy="drop")
        handle = self._open(ListenHandle, "listen", ring, rate_hz, stream_id, language, words)
        assert isinstance(handle, ListenHandle)
        return handle

    # StreamHost: what the handles call.

    def say(self, handle: TtsHandle, request_id: int, text: str, options: Any,
            was_idle: bool) -> None:
        """Send a request to the handle's worker (Overloaded, WorkerLost)."""
        with self._lock:
            slot = self.slots[handle.worker]
            proc = slot.proc
            if proc is None or not proc.ready:
                raise WorkerLost(f"worker {slot.index} is restarting")
            if was_idle:
                self.admission.can_speak(self.loads()[slot.index])
        if not proc.send(m.Say(handle.stream_id, request_id, text, options)):
            raise WorkerLost(f"worker {slot.index} is restarting")
        if was_idle:
            slot.speaking += 1
            now = time.monotonic()
            while slot.started and slot.started[0] < now - STARTED_KEEP_S:
                slot.started.popleft()
            slot.started.append(now)

    def speaking_changed(self, handle: TtsHandle) -> None:
        """The handle's last request settled (loop thread)."""
        slot = self.slots[handle.worker]
        slot.speaking = max(0, slot.speaking - 1)

    def send_to(self, handle: StreamHandle, msg: object) -> None:
        """Send a control message to the handle's worker, if it has one."""
        proc = self.slots[handle.worker].proc
        if proc is not None:
            proc.send(msg)

    def _forget(self, handle: StreamHandle) -> Slot:
        with self._lock:
            slot = self.slots[handle.worker]
            slot.streams.pop(handle.stream_id, None)
            self._handles.pop(handle.stream_id, None)
            if isinstance(handle, ListenHandle):
                slot.listening = max(0, slot.listening - 1)
            return slot

    def close_stream(self, handle: StreamHandle) -> None:
        """Forget the stream and close it in its worker."""
        slot = self._forget(handle)
        if isinstance(handle, TtsHandle) and handle.outstanding:
            handle.outstanding.clear()
            slot.speaking = max(0, slot.speaking - 1)
        proc = slot.proc
        if proc is not None:
            proc.send(m.CloseStream(handle.stream_id))

    def set_policy(self, policy: str, lookahead_s: float | None = None,
                   first_audio_s: float | None = None) -> None:
        """Switch every worker's TTS scheduling ("edf" | "fifo"); for tests and benches."""
        msg = m.SetPolicy(policy, self.setup.lookahead_s if lookahead_s is None else lookahead_s,
                          self.setup.first_audio_s if first_audio_s is None else first_audio_s)
        for p in self.supervisor.procs():
            p.send(msg)

    # --- figures ------------------------------------------------------------------

    def spare(self) -> float:
        """The pool's spare real-time capacity, 0..1 (`Admission.spare`): what the
        HAProxy agent and /readyz report. 0 while the pool is not running."""
        if not self.running:
            return 0.0
        return self.admission.spare(self.loads(), len(self._handles))

    def status(self) -> dict[str, Any]:
        """Per-worker and pool-wide figures (the daemon's status)."""
        now = time.monotonic()
        busy_max = self.admission.busy_max
        workers = []
        for slot, load in zip(self.slots, self.loads(), strict=True):
            self.late_steps += slot.late_since_read()
            workers.append(slot.status(load, busy_max, now))
        return {
            "workers": workers,
            "capacity": {"tts_speaking": sum(w["tts_capacity"] for w in workers),
                         "spare": round(self.spare(), 3),
                         "busy_max": busy_max, "max_streams": self.admission.max_streams},
            "load": {"speaking": sum(s.speaking for s in self.slots),
                     "listening": sum(s.listening for s in self.slots),
                     "streams": len(self._handles)},
            "restarts": self.restarts,
            "refused": self.admission.refused,
            "late_steps": self.late_steps,
            "spare": self.supervisor.spare_ready(),
            "asr": self.asr.status() if self.asr is not None else None,
            "template": self.template.status() if self.template is not None else None,
            "policy": self.setup.policy,
        }

    def status_line(self) -> str:
        """One line: the systemd status and the status summary."""
        loads = self.loads()
        up = sum(1 for w in loads if w.alive)
        cap = sum(w.tts_capacity(self.admission.busy_max) for w in loads)
        speaking = sum(w.speaking for w in loads)
        return (f"workers {up}/{len(loads)} up, tts {speaking}/{cap} speaking, "
                f"restarts {self.restarts}")
