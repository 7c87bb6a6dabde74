"""The daemon's lifecycle: start, READY, watchdog, SIGHUP reload, SIGTERM drain.

Signal handlers only set flags; the main coroutine does the work. A second SIGINT or
SIGTERM while draining cuts the drain short.
"""

from __future__ import annotations

import asyncio
import os
import signal
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import structlog

from cosyvoiced import __version__
from cosyvoiced.audio import shm
from cosyvoiced.config import Config, ConfigError, ConfigProblem, changed_keys, load_config
from cosyvoiced.config.addr import parse_allow_from
from cosyvoiced.config.loader import merge_live
from cosyvoiced.listen.events import EventBus, Transcript
from cosyvoiced.runtime.health import Health, Heartbeat
from cosyvoiced.runtime.log import set_level
from cosyvoiced.runtime.metrics import Metrics
from cosyvoiced.runtime.notify import Notifier, Watchdog, watchdog_interval_s
from cosyvoiced.serve.agent import AgentServer, Capacity, max_calls
from cosyvoiced.serve.audiosocket.server import AudioSocketServer
from cosyvoiced.serve.devices import Devices
from cosyvoiced.serve.http.server import HttpServer
from cosyvoiced.serve.speech import PoolSpeech, Speech
from cosyvoiced.serve.streams import Streams
from cosyvoiced.serve.wyoming.server import WyomingServer
from cosyvoiced.tts.frontend.lexicon import Lexicon, LexiconError, load_lexicon
from cosyvoiced.tts.frontend.normalize.grammars import ensure as ensure_grammars
from cosyvoiced.workers.messages import SayDone
from cosyvoiced.workers.pool.pool import WorkerPool
from cosyvoiced.workers.preflight import model_problems

log = structlog.get_logger(__name__)

LOOP_BEAT_S = 0.25
STATUS_EVERY_S = 2.0


class Daemon:
    def __init__(self, config: Config, config_path: str | None,
                 overrides: Sequence[str] = ()) -> None:
        self.config = config
        self.config_path = config_path
        self.overrides = list(overrides)
        self.notifier = Notifier()
        self.health = Health(config.service.health_stall_s)
        self.streams = Streams(config.workers.max_streams,
                               config.workers.streams_reserved_for_calls)
        self.metrics = Metrics()
        self.metrics.on_scrape(self._refresh_metrics)
        self.bus = EventBus()
        self.speech: Speech | None = None
        self.audiosocket: AudioSocketServer | None = None
        self.wyoming: WyomingServer | None = None
        self.devices: Devices | None = None
        self.pool: WorkerPool | None = None
        self.agent: AgentServer | None = None
        self.state = "starting"
        self.ready = False
        self.started_s = time.monotonic()
        self.exit_status = 0
        self._loop_beat = Heartbeat()
        self._http: HttpServer | None = None
        self._stop: asyncio.Event | None = None
        self._stop_signals = 0
        self._drain: asyncio.Task[bool] | None = None
        self._reload_pending = False

    @property
    def debug(self) -> bool:
        return self.config.service.debug

    # --- views for the API and cosyvoicectl ----------------------------------------

    def status(self) -> dict[str, Any]:
        return {
            "state": self.state,
            "version": __version__,
            "pid": os.getpid(),
            "uptime_s": round(time.monotonic() - self.started_s, 3),
            "config": self.config_path,
            "listeners": self.listeners(),
            "streams": {
                "active": len(self.streams),
                "max": self.streams.max_streams,
                "list": [{"id": s.id, "kind": s.kind,
                          "age_s": round(time.monotonic() - s.started_s, 3)}
                         for s in self.streams.snapshot()],
            },
            "workers": ({**self.pool.status(), "summary": self.pool.status_line()}
                        if self.pool else None),
            "devices": self.devices.status()["devices"] if self.devices else [],
            "health": {"stalled": list(self.health.check().stalled),
                       "parts": self.health.names()},
        }

    def healthy(self) -> tuple[bool, list[str]]:
        verdict = self.health.check()
        return verdict.healthy, list(verdict.stalled)

    def capacity(self) -> Capacity:
        """What this box can take now: the HAProxy agent's line and /readyz."""
        ok, stalled = self.healthy()
        return Capacity(self.state, ok, tuple(stalled),
                        self.pool.spare() if self.pool else 0.0,
                        max_calls(self.streams.max_streams, self.config.workers.max_streams))

    def status_line(self) -> str:
        workers = f"{self.pool.status_line()}; " if self.pool else ""
        return (f"{self.state}; streams {len(self.streams)}/{self.streams.max_streams}; "
                f"{workers}v{__version__}")

    def _refresh_metrics(self, m: Metrics) -> None:
        """The gauges read from live state at each scrape (the pool's and health's)."""
        m.stalled_parts.set(len(self.health.check().stalled))
        if self.pool is None:
            return
        m.set_pool(self.pool.status())

    # --- lifecycle -----------------------------------------------------------------

    async def run(self) -> int:
        """Serve until SIGTERM/SIGINT; returns the process exit status."""
        loop = asyncio.get_running_loop()
        self._stop = asyncio.Event()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, self._on_stop_signal, sig)
        loop.add_signal_handler(signal.SIGHUP, self._on_hup)
        self._make_dirs()
        self._sweep_shm()
        self.health.register("event_loop", self._loop_beat)
        beat = asyncio.create_task(self._beat_loop(), name="loop-heartbeat")
        watchdog: Watchdog | None = None
        try:
            await self._start_parts()
            self.state, self.ready = "ready", True
            self.notifier.ready(self.status_line())
            log.info("ready", startup_s=round(time.monotonic() - self.started_s, 3),
                     version=__version__, config=self.config_path)
            interval_s = watchdog_interval_s()
            if self.config.service.watchdog and interval_s:
                watchdog = Watchdog(self.notifier, self.health, interval_s)
                watchdog.start()
                log.info("watchdog_on", ping_every_s=interval_s)
                hang_s = self.config.workers.hang_restart_s
                if not hang_s or hang_s >= 2 * interval_s:  # WATCHDOG_USEC is twice the ping
                    log.warning("hang_restart_after_watchdog", hang_restart_s=hang_s,
                                watchdog_s=2 * interval_s,
                                hint="a hung sole worker would get the whole service killed; "
                                     "set workers.hang_restart_s below WatchdogSec")
            await self._serve()
            await self._shutdown()
        finally:
            if watchdog:
                watchdog.stop()
            beat.cancel()
            await self._stop_parts()
        log.info("stopped", exit_status=self.exit_status)
        return self.exit_status

    def _make_dirs(self) -> None:
        svc = self.config.service
        for d in (svc.state_dir, svc.cache_dir, str(Path(svc.control_socket).parent)):
            Path(d).mkdir(parents=True, exist_ok=True)

    def _sweep_shm(self) -> None:
        """Name this instance's rings, and remove those a killed predecessor left behind."""
        shm.set_instance(shm.instance_tag(os.path.abspath(self.config.service.control_socket)))
        swept = shm.sweep_dead()
        if swept:
            log.warning("shm_swept", segments=len(swept),
                        hint="a previous run was killed before it could remove its rings")

    async def _start_parts(self) -> None:
        # A model missing is a config problem (exit 78), not a worker dying at start
        # (exit 1, which systemd restarts in a loop): look before spawning any worker.
        overridden = {o.partition("=")[0].strip() for o in self.overrides}
        source = self.config_path or "defaults"
        problems = [ConfigProblem("--set" if key in overridden else source, key, msg)
                    for key, msg in model_problems(self.config)]
        try:
            lexicon: Lexicon | None = load_lexicon(self.config.tts.lexicon)
        except LexiconError as exc:
            problems.append(ConfigProblem(source, "tts.lexicon", str(exc)))
        if problems:
            raise ConfigError(problems)
        # NeMo's English grammars: found, or built once (a child process, ~40 s) where
        # missing and buildable, before any worker loads them; never on a request's path
        await asyncio.to_thread(ensure_grammars, self.config.service.cache_dir)
        # Workers load and warm up (one synthesis, one VAD run each) before READY=1.
        self.pool = WorkerPool.from_config(self.config, health=self.health,
                                           publish=self._publish, said=self._said,
                                           lexicon=lexicon)
        if lexicon:
            log.info("lexicon_loaded", path=self.config.tts.lexicon, entries=len(lexicon))
        await self.pool.start()
        self.metrics.watch_workers(self.pool.worker_figures)
        self.speech = PoolSpeech(self.pool, self.config)
        if self.config.audiosocket.enabled:
            self.audiosocket = AudioSocketServer(self.speech, self.streams, self.bus,
                                                 self.metrics, self.config.audiosocket)
            await self.audiosocket.start()
            clock = self.audiosocket.clock
            self.health.register("audiosocket_clock", lambda: clock.last_tick_s)
        if self.config.wyoming.enabled:
            self.wyoming = WyomingServer(self.speech, self.streams, self.config.wyoming,
                                         max_chars=self.config.tts.max_chars)
            await self.wyoming.start()
        self.devices = Devices(self.config.audio, self.speech, streams=self.streams,
                               metrics=self.metrics, health=self.health)
        await self.devices.start()  # a device that fails is reported and retried, not fatal
        self._http = HttpServer(self, self.config)
        await self._http.start()
        if self.config.agent.listen:  # last: it says "up" once everything serves
            self.agent = AgentServer(self.config.agent, self.capacity)
            await self.agent.start()

    def _publish(self, event: Any) -> None:
        """A worker's listen event: timed, then on the bus (the supervisor's thread)."""
        if isinstance(event, Transcript):
            self.metrics.transcript_latency.observe(event.latency_ms / 1000.0)
        self.bus.publish(event)

    def _said(self, done: SayDone) -> None:
        if done.rtf > 0 and not done.cancelled:
            self.metrics.tts_rtf.observe(done.rtf)

    def listeners(self) -> list[str]:
        out = list(self._http.bound) if self._http else []
        if self.audiosocket:
            out.append(f"audiosocket://{self.audiosocket.bound}")
        if self.wyoming:
            out.append(f"wyoming+{self.wyoming.bound}")
        if self.agent:
            out.append(f"agent://{self.agent.bound}")
        return out

    async def _stop_parts(self) -> None:
        if self._http:
            await self._http.stop()
            self._http = None
        if self.wyoming:
            await self.wyoming.stop()
            self.wyoming = None
        if self.audiosocket:
            self.health.unregister("audiosocket_clock")
            await self.audiosocket.stop()
            self.audiosocket = None
        if self.devices:
            await self.devices.stop()
            self.devices = None
        if self.pool:
            await self.pool.stop()
            self.pool = None
        if self.agent:  # last: says "maint" until the listeners are gone
            await self.agent.stop()
            self.agent = None

    async def _serve(self) -> None:
        assert self._stop is not None
        last_status = self.status_line()  # already sent with READY=1
        while not self._stop.is_set():
            if self._reload_pending:
                self._reload_pending = False
                self._reload()
            line = self.status_line()
            if line != last_status:
                self.notifier.status(line)
                last_status = line
            try:
                await asyncio.wait_for(self._stop.wait(), STATUS_EVERY_S)
            except TimeoutError:
                pass

    async def _shutdown(self) -> None:
        self.state, self.ready = "draining", False  # the agent says "drain" from now on
        self.notifier.stopping()
        timeout_s = self.config.service.drain_timeout_s
        log.info("draining", active_streams=len(self.streams), timeout_s=timeout_s)
        self._drain = asyncio.create_task(self._drain_streams(timeout_s))
        try:
            drained = await self._drain
        except asyncio.CancelledError:
            drained = False
        if not drained:
            log.warning("drain_incomplete", cut_streams=[s.id for s in self.streams.snapshot()])
        self.state = "stopping"

    async def _drain_streams(self, timeout_s: float) -> bool:
        """With a balancer's agent: keep taking new streams for `agent.drain_grace_s`
        (calls it routed here before it heard "drain"), then refuse them and wait for the
        live ones, within `timeout_s` in all. True if every stream finished."""
        t0 = time.monotonic()
        grace_s = min(self.config.agent.drain_grace_s, timeout_s) if self.agent else 0.0
        if grace_s > 0:
            await asyncio.sleep(grace_s)
        self.streams.accepting = False
        return await self.streams.wait_empty(max(0.0, timeout_s - (time.monotonic() - t0)))

    async def _beat_loop(self) -> None:
        while True:
            self._loop_beat.beat()
            await asyncio.sleep(LOOP_BEAT_S)

    # --- signals -------------------------------------------------------------------

    def _on_stop_signal(self, sig: signal.Signals) -> None:
        assert self._stop is not None
        self._stop_signals += 1
        if self._stop_signals == 1:
            log.info("stop_requested", signal=sig.name)
            self._stop.set()
            return
        log.warning("forced_stop", signal=sig.name)
        self.exit_status = 128 + sig
        if self._drain:
            self._drain.cancel()

    def _on_hup(self) -> None:
        if self.state == "ready":
            self._reload()
        elif self.state in ("starting", "reloading"):
            self._reload_pending = True  # picked up once serving

    def _reload(self) -> None:
        self.state = "reloading"
        self.notifier.reloading()
        log.info("reloading", config=self.config_path)
        try:
            new = load_config(self.config_path, self.overrides)
        except ConfigError as exc:
            log.error("reload_rejected", errors=[str(p) for p in exc.problems],
                      note="keeping the running config")
        else:
            self._apply(new)
        self.state = "ready"
        self.notifier.ready(self.status_line())

    def _apply(self, new: Config) -> None:
        changes = changed_keys(self.config, new)
        live = [k for k, is_live in changes if is_live]
        restart = [k for k, is_live in changes if not is_live]
        set_level(new.log.level)
        self.health.stall_s = new.service.health_stall_s
        self.streams.max_streams = new.workers.max_streams
        self.streams.reserved_for_calls = new.workers.streams_reserved_for_calls
        # Only live keys take effect; the rest keep their running values until restart.
        self.config = merge_live(self.config, new)
        if self.pool:
            self.pool.reconfigure(self.config.workers)
            self.pool.reconfigure_listen(self.config.vad, self.config.asr)
        if self.audiosocket:  # greeting, voice, barge-in, allow_from: read per call
            self.audiosocket.config = self.config.audiosocket
        if self.wyoming:  # defaults, speed, idle timeout, cap: read per connection
            self.wyoming.config = self.config.wyoming
            self.wyoming.allow = parse_allow_from(self.config.wyoming.allow_from)
        if self.agent:  # allow_from, drain_grace_s
            self.agent.config = self.config.agent
        if self.pool:
            self._reload_lexicon()
        log.info("reloaded", applied=live, needs_restart=restart)
        if restart:
            log.warning("restart_needed", keys=restart)


    def _reload_lexicon(self) -> None:
        """Read `tts.lexicon` again (its words may have changed while its path did not)."""
        assert self.pool is not None
        path = self.config.tts.lexicon
        try:
            lexicon = load_lexicon(path)
        except LexiconError as exc:
            log.error("lexicon_rejected", error=str(exc), note="keeping the running lexicon")
            return
        self.pool.set_lexicon(lexicon)
        log.info("lexicon_loaded", path=path, entries=len(lexicon))
