"""The worker's single loop: control first, then the VAD tick, then one TTS step (a
vocoder chunk, or a clause of a whole-graph voice) or one ASR batch, whichever is more
urgent (see `asr_sched`).

Control messages are drained before every unit of work (control outranks data), so a
cancel (barge-in) waits at most for the step being synthesized. Work units are short
(one VAD tick, one TTS step); between them the loop beats its heartbeat in shared memory, which
is what the daemon's watchdog reads.
"""

from __future__ import annotations

import os
import time
from dataclasses import replace
from typing import Any

import numpy as np
import structlog

from cosyvoiced.audio.ring import Ring, RingError
from cosyvoiced.listen.asr import WARMUP_FRAMES
from cosyvoiced.runtime.log import setup_logging
from cosyvoiced.runtime.openvino import release_memory
from cosyvoiced.tts.request import SynthesisOptions
from cosyvoiced.workers import messages as m
from cosyvoiced.workers.setup import WorkerSetup
from cosyvoiced.workers.stats import LoadMeter, WorkerStats
from cosyvoiced.workers.worker.affinity import pin_all_threads, renice_all, thread_count
from cosyvoiced.workers.worker.heap import malloc_trim
from cosyvoiced.workers.worker.listeners import WorkerListening
from cosyvoiced.workers.worker.preload import (
    VAD_RATES,
    WARMUP_TEXT,
    Preloaded,
    make_engine,
    make_vad,
)
from cosyvoiced.workers.worker.tts_sched import SayJob, TtsScheduler, TtsStream
from cosyvoiced.workers.worker.vad_tick import VadTicker

log = structlog.get_logger(__name__)

IDLE_WAKE_S = 0.1
"""Longest sleep: the heartbeat beats at least this often."""
TRIM_EVERY_S = 30.0
"""How often a worker returns freed heap memory to the kernel (`malloc_trim`, after
OpenVINO's models handed back their activation buffers): glibc keeps what its per-thread
arenas freed, so a worker otherwise stays at the memory of its busiest moment (figures:
docs/performance.md). It also trims once each time its last TTS stream is done (not
between the steps of one: their buffers are needed again at once)."""
OWED_EVERY_S = 0.25
"""How often the worker publishes what its TTS streams owe (admission's load)."""
RTF_TEXT = "The worker times this sentence once it is warm, to know how fast it speaks."
"""The warm-up's timed run: the RTF admission starts from, of the variant loaded."""


class Worker:
    def __init__(self, index: int, cpus: tuple[int, ...], conn: Any, stats_array: Any,
                 setup: WorkerSetup, preloaded: Preloaded | None = None) -> None:
        """`preloaded`: the engine and VAD graphs of the template this worker was forked
        from (None: load them here)."""
        setup_logging(setup.log_level, setup.log_sink, setup.journal_socket)  # type: ignore[arg-type]
        self.index = index
        self.cpus = cpus
        self.conn = conn
        self.setup = setup
        self.stats = WorkerStats(stats_array)
        self.meter = LoadMeter(cpus=len(cpus))
        self.engine = preloaded.engine if preloaded is not None else make_engine(setup)
        self.engine.lexicon = setup.lexicon  # the template's may be older (a reload)
        self.tts = TtsScheduler(self._make_gen, self._send, policy=setup.policy,
                                lookahead_s=setup.lookahead_s, first_audio_s=setup.first_audio_s,
                                work_conserving=setup.work_conserving,
                                on_clause=self.meter.add_clause)
        self.vad = VadTicker(self._make_vad, setup.vad_tick_ms / 1000)
        self._vads: dict[int, Any] = dict(preloaded.vads) if preloaded is not None else {}
        self._rings: dict[str, Ring] = {}
        self.listen = WorkerListening(setup, self.vad, self._send,
                                      on_decoded=self.meter.add_decoded,
                                      on_heard=self.meter.add_heard)
        self._stop = False
        self.clauses = 0
        self._trimmed_at = time.monotonic()
        self._owed_at = 0.0
        self._untrimmed = False
        """TTS steps were run since the last trim (VAD ticks and decodes do not count:
        listening alone would trim on every tick)."""
        self.vad_us = 0.0

    # --- setup --------------------------------------------------------------------

    def _make_vad(self, rate_hz: int) -> Any:
        """The rate's VAD batch (`SileroBatch`, one per rate): the one warmed up."""
        batch = self._vads.get(rate_hz)
        if batch is None:
            batch = self._vads[rate_hz] = make_vad(self.setup, rate_hz)
        return batch

    def _make_gen(self, job: SayJob, stream: TtsStream) -> Any:
        options = job.options if job.options is not None else SynthesisOptions()
        options = replace(options, rate_hz=stream.rate_hz, format="float32")
        synthesis = self.engine.synthesize(job.text, options)  # typed request errors raise here
        job.steps = synthesis.upcoming  # the scheduler's guess of each next step's cost
        return synthesis

    def _warm_up(self) -> tuple[float, float]:
        """Load the default voice and the VAD, run each once; returns (rtf, us/window)."""
        rtf = 0.0
        if self.setup.warm_up:
            self.engine.voice()
            # the first run pays for the graphs' first allocations (measured: 2.5-4x the
            # RTF of the next); the second, another text (not the prompt cache's copy), is
            # what admission starts from
            for text in (WARMUP_TEXT, RTF_TEXT):
                t0 = time.perf_counter()
                audio_s = sum(c.duration_s for c in self.engine.synthesize(
                    text, SynthesisOptions(format="float32"), capped=False))
            rtf = (time.perf_counter() - t0) / audio_s if audio_s else 0.0
            self.meter.rtf = rtf
            t0 = time.perf_counter()
            if said := self.engine.warm_prompts():
                log.info("tts_prompts_warmed", prompts=said, cached=len(self.engine.prompts),
                         seconds=round(time.perf_counter() - t0, 3))
        vad_us = 0.0
        for rate_hz in VAD_RATES:
            batch = self._make_vad(rate_hz)
            slots = [batch.open() for _ in range(min(32, batch.capacity))]
            windows = np.zeros((len(slots), batch.window), dtype=np.float32)
            batch.run(slots, windows)
            t0 = time.perf_counter()
            batch.run(slots, windows)
            vad_us = (time.perf_counter() - t0) * 1e6 / len(slots)  # per window, batched
            for slot in slots:
                batch.close(slot)
        self.vad_us = vad_us
        if took := self.listen.warm_up():
            self.meter.asr_rtf = took / (WARMUP_FRAMES * 0.01)
        release_memory()  # the warm-up's buffers: an idle worker or the spare keeps none
        malloc_trim()  # what loading the models freed goes back now, not at the first trim
        return rtf, vad_us

    def _ready(self, rtf: float, vad_us: float) -> None:
        self.stats.set("rtf", rtf)
        self.stats.set("vad_us", vad_us)
        self.stats.set("asr_rtf", self.meter.asr_rtf)
        self.stats.set("speech_share", self.meter.speech_share)
        self.stats.beat(time.monotonic())  # the hang check starts at Ready: not from a stale beat
        self._send(m.Ready(self.index, os.getpid(), self.cpus, rtf, vad_us,
                           thread_count(), self._engine_variant()))

    def _engine_variant(self) -> str:
        """What the default voice runs as, if the warm-up loaded it: int8 (the kept INT8
        model), bf16 (its vocoder on OpenVINO's bf16) or fp32."""
        if not self.setup.warm_up:
            return ""
        voice = self.engine.voice()
        if voice.precision == "int8":
            return "int8"
        return "bf16" if voice.split is not None and voice.split.vocoder == "bf16" else "fp32"

    # --- the loop -----------------------------------------------------------------

    def run(self) -> None:
        rtf, vad_us = self._warm_up()
        self._ready(rtf, vad_us)
        log.info("worker_ready", index=self.index, cpus=list(self.cpus), tts_rtf=round(rtf, 4),
                 vad_window_us=round(vad_us, 1), threads=thread_count())
        try:
            self._loop()
        except (EOFError, BrokenPipeError, ConnectionResetError):
            pass  # the daemon went away: nothing left to serve
        finally:
            for ring in self._rings.values():
                ring.close()

    def _loop(self) -> None:
        conn, stats, meter = self.conn, self.stats, self.meter
        perf = time.perf_counter
        while not self._stop:
            now = time.monotonic()
            stats.beat(now)
            while conn.poll(0):
                self._handle(m.recv(conn, m.TO_WORKER))
                if self._stop:
                    return
            t0 = perf()
            windows = self.vad.tick(now)
            did = windows > 0
            if did:  # measured batched cost per window: admission's VAD figure
                self.vad_us += 0.05 * ((perf() - t0) * 1e6 / windows - self.vad_us)
            self.tts.flush(now)
            now = time.monotonic()
            work = self.listen.pick(self.tts, now)
            if work == "asr":
                did = self.listen.run_batch() > 0 or did
            elif work == "tts":
                t1, c1 = perf(), time.thread_time()
                if self.tts.step(now):
                    did = True
                    if self.tts.ahead_step:
                        meter.add_ahead(perf() - t1, time.thread_time() - c1)
                    self.clauses += 1
                    self._untrimmed = True  # a request's buffers: trimmed once its stream ends
            if did:  # the loop's own wall time; a Whisper decode's is in the CPU figure
                meter.add_busy(perf() - t0)
            if meter.roll(time.monotonic(), len(self.listen)):
                self._publish_stats()
                if now - self._trimmed_at >= TRIM_EVERY_S:
                    self._trim(now)
            elif now - self._owed_at >= OWED_EVERY_S:
                self._publish_owed(now)
            if did:
                continue
            if self._untrimmed and not self.tts.streams:
                self._trim(now)  # the last request is done: its freed buffers go back
            now = time.monotonic()
            waits = [w for w in (self.tts.wake_in(now), self.vad.due_in(now),
                                 self.listen.wake_in()) if w is not None]
            conn.poll(min([IDLE_WAKE_S, *waits]))

    def _trim(self, now: float) -> None:
        self._trimmed_at = now
        self._untrimmed = False
        release_memory()  # OpenVINO's buffers first: they go back with the heap's
        malloc_trim()

    def _publish_owed(self, now: float) -> None:
        """The TTS streams' owed share of the worker (`TtsScheduler.owed`), admission's
        load: more often than the other figures, as it moves with every request."""
        self._owed_at = now
        self.stats.set("owed", self.tts.owed(self.meter.rtf))
        self.stats.set("owed_at_s", now)

    def _publish_stats(self) -> None:
        s = self.stats
        s.set("busy", self.meter.busy)
        s.set("rtf", self.meter.rtf)
        s.set("vad_us", self.vad_us)
        s.set("asr_rtf", self.meter.asr_rtf)
        s.set("speech_share", self.meter.speech_share)
        s.set("ahead", self.meter.ahead)
        self._publish_owed(time.monotonic())
        s.set("tts_streams", len(self.tts.streams))
        s.set("listen_streams", len(self.vad))
        s.set("clauses", self.clauses)
        s.set("late", self.tts.late)
        s.set("windows", sum(g.windows for g in self.vad.groups.values()))
        prompts = self.engine.prompts
        s.set("prompt_hits", prompts.hits)
        s.set("prompt_misses", prompts.misses)
        s.set("prompt_bytes", prompts.bytes)
        s.set("queued", self.tts.queued())

    def _send(self, msg: object) -> None:
        m.send(self.conn, msg)

    # --- control ------------------------------------------------------------------

    def _handle(self, msg: object) -> None:
        if isinstance(msg, m.Say):
            stream = self.tts.streams.get(msg.stream_id)
            if stream is None:
                self._send(m.StreamError(msg.stream_id, msg.request_id, "stream_closed",
                                         "no such TTS stream in this worker"))
                return
            self.tts.say(msg.stream_id, SayJob(msg.request_id, msg.text, msg.options,
                                               time.monotonic()))
        elif isinstance(msg, m.Cancel):
            self.tts.cancel(msg.stream_id)
        elif isinstance(msg, m.OpenTts):
            ring = self._attach(msg.stream_id, msg.ring_name)
            if ring is not None:
                self.tts.open(msg.stream_id, ring, msg.rate_hz)
        elif isinstance(msg, m.OpenListen):
            self._open_listen(msg)
        elif isinstance(msg, m.CloseStream):
            self._close(msg.stream_id)
        elif isinstance(msg, m.Adopt):
            pin_all_threads(msg.cpus)
            if not renice_all(0):
                log.warning("worker_renice_denied", index=msg.index,
                            note="runs at the spare's low priority; allow LimitNICE")
            self.index, self.cpus = msg.index, msg.cpus
            self.meter.cpus = max(1, len(msg.cpus))
            self._ready(self.meter.rtf, self.stats.get("vad_us"))
            log.info("worker_adopted", index=msg.index, cpus=list(msg.cpus))
        elif isinstance(msg, m.SetPolicy):
            self.tts.set_policy(msg.policy, msg.lookahead_s, msg.first_audio_s)
        elif isinstance(msg, m.SetListen):
            self.listen.reconfigure(msg.vad, msg.asr)
        elif isinstance(msg, m.SetLexicon):
            self.engine.lexicon = msg.lexicon  # requests planned from now on
        elif isinstance(msg, m.Stop):
            self._stop = True

    def _attach(self, stream_id: str, name: str) -> Ring | None:
        try:
            ring = Ring.attach(name)
        except RingError as exc:
            self._send(m.StreamError(stream_id, -1, exc.code, str(exc)))
            return None
        self._rings[stream_id] = ring
        return ring

    def _open_listen(self, msg: m.OpenListen) -> None:
        ring = self._attach(msg.stream_id, msg.ring_name)
        if ring is None:
            return
        sid = msg.stream_id
        try:
            self.listen.open(sid, msg.rate_hz, ring, msg.language, words=msg.words)
        except Exception as exc:  # a typed VadError or LanguageError ends this stream only
            self._rings.pop(sid).close()
            self._send(m.StreamError(sid, -1, getattr(exc, "code", "vad_error"), str(exc)))
            return

    def _close(self, stream_id: str) -> None:
        self.tts.close(stream_id)
        try:
            self.listen.close(stream_id)  # reads the ring to its end, acks with StreamClosed
        except Exception as exc:  # one stream's flush must not take the worker down
            log.exception("listen_close_failed", stream=stream_id)
            self._send(m.StreamError(stream_id, -1, getattr(exc, "code", "listen_error"),
                                     str(exc)))
            self._send(m.StreamClosed(stream_id))
        ring = self._rings.pop(stream_id, None)
        if ring is not None:
            ring.close()


