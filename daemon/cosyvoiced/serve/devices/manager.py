"""`Devices`: starts every configured device, supervises them, routes `/v1/play` and
stop, applies barge-in and half duplex, exports their counters."""

from __future__ import annotations

import asyncio
import contextlib
import time
from typing import Any

import structlog

from cosyvoiced.audio.alsa.device import Opener, open_backend
from cosyvoiced.config.schema import AudioConfig
from cosyvoiced.listen.events import VoiceStarted
from cosyvoiced.runtime.health import Health
from cosyvoiced.runtime.metrics import Metrics
from cosyvoiced.serve.devices.base import (
    METRICS_EVERY_S,
    SUPERVISE_S,
    Device,
    NoPlaybackDevice,
    UnknownDevice,
)
from cosyvoiced.serve.devices.capture import LISTEN_RATE_HZ, CaptureDevice
from cosyvoiced.serve.devices.playback import PlaybackDevice
from cosyvoiced.serve.speech import Speech
from cosyvoiced.serve.streams import Streams
from cosyvoiced.tts.request import SynthesisOptions

log = structlog.get_logger(__name__)

START_WAIT_S = 3.0
"""How long start() waits for the devices' first open before reporting them."""
LISTEN_RETRY_S = 5.0
"""A listening stream the workers refused is asked for again after this."""


class Devices:
    def __init__(self, config: AudioConfig, speech: Speech, *, streams: Streams,
                 metrics: Metrics, health: Health, opener: Opener = open_backend) -> None:
        self.config = config
        self.speech = speech
        self.streams = streams
        self.metrics = metrics
        self.health = health
        self.playback: list[PlaybackDevice] = []
        self.capture: list[CaptureDevice] = []
        self.barge_ins = 0
        names: set[str] = set()
        for cfg in config.devices:
            name = cfg.name or cfg.pcm
            if name in names:  # the API could not tell them apart: report, run the rest
                log.error("device_duplicate_name", device=name, pcm=cfg.pcm,
                          note="a second [[audio.devices]] with this name is ignored")
                continue
            names.add(name)
            cls = PlaybackDevice if cfg.direction == "playback" else CaptureDevice
            dev = cls(cfg, opener, config.retry_max_s)
            if isinstance(dev, PlaybackDevice):
                dev._on_done = self.streams.close
                self.playback.append(dev)
            else:
                self.capture.append(dev)
        self._task: asyncio.Task[None] | None = None

    @property
    def all(self) -> list[Device]:
        return [*self.playback, *self.capture]

    # -- lifecycle -------------------------------------------------------------------

    async def start(self) -> None:
        """Open every device (failures are reported, then retried in the background)."""
        for dev in self.all:
            dev.launch()
            self.health.register(f"audio:{dev.name}", dev.last_progress_s)
        deadline = time.monotonic() + START_WAIT_S
        while any(d.state == "starting" for d in self.all) and time.monotonic() < deadline:
            await self._supervise_once()
            await asyncio.sleep(0.01)
        await self._supervise_once()
        if self.all:
            log.info("devices_started", devices={d.name: d.state for d in self.all},
                     half_duplex=self.config.half_duplex, barge_in=self.config.barge_in)
            self._task = asyncio.create_task(self._supervise(), name="devices")

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None
        for dev in self.playback:
            dev.stop()
        await asyncio.gather(*(d.shutdown() for d in self.all), return_exceptions=True)
        for dev in self.all:
            self.health.unregister(f"audio:{dev.name}")
            dev.export(self.metrics)
            dev.close_ring()

    async def _supervise(self) -> None:
        next_export = 0.0
        while True:
            await self._supervise_once()
            now = time.monotonic()
            if now >= next_export:
                self.export()
                next_export = now + METRICS_EVERY_S
            await asyncio.sleep(SUPERVISE_S)

    async def _supervise_once(self) -> None:
        now = time.monotonic()
        for dev in self.all:
            dev.supervise(now)
            if (isinstance(dev, CaptureDevice) and dev.state == "running"
                    and dev.listening is None and now >= dev.listen_retry_at_s):
                await self._listen(dev)

    async def _listen(self, dev: CaptureDevice) -> None:
        try:
            listening = await self.speech.listen(LISTEN_RATE_HZ, dev.stream_id)
        except Exception as exc:  # the pool refused: the device stays open, asked again
            dev.listen_retry_at_s = time.monotonic() + LISTEN_RETRY_S
            log.error("device_listen_failed", device=dev.name, retry_in_s=LISTEN_RETRY_S,
                      code=getattr(exc, "code", "internal"), error=str(exc))
            return
        dev.start_listening(listening, self._gate, self._on_voice)
        log.info("device_listening", device=dev.name, stream=dev.stream_id,
                 rate_hz=dev.rate_hz, to_rate_hz=LISTEN_RATE_HZ)

    def export(self) -> None:
        """Counters and ring fill into the metrics (a slow timer, never per period)."""
        for direction, devs in (("playback", self.playback), ("capture", self.capture)):
            for dev in devs:
                dev.export(self.metrics)
            if devs:
                self.metrics.ring_fill.labels(direction).set(
                    sum(d.fill_ratio() for d in devs) / len(devs))

    # -- speaking --------------------------------------------------------------------

    def find_playback(self, name: str | None) -> PlaybackDevice:
        if not self.playback:
            raise NoPlaybackDevice("no playback device is configured ([[audio.devices]] "
                                   'with direction = "playback")')
        if not name:
            return self.playback[0]
        for dev in self.playback:
            if dev.name == name:
                return dev
        known = ", ".join(d.name for d in self.playback)
        raise UnknownDevice(f"no playback device named {name!r}; playback devices: {known}",
                            name)

    async def play(self, text: str, options: SynthesisOptions,
                   device: str | None = None) -> dict[str, Any]:
        """Speak `text` on `device` (default: the first playback device), replacing what
        it was saying. Typed errors: DeviceError, Refused, TtsError, Unavailable."""
        dev = self.find_playback(device)
        info = self.streams.open("play")
        try:
            rate = await dev.say(self.speech, text, options, info.id)
        except BaseException:
            self.streams.close(info.id)
            raise
        log.info("play", device=dev.name, stream=info.id, rate_hz=rate, chars=len(text))
        return {"device": dev.name, "stream": info.id, "rate_hz": rate, "playing": True}

    def stop_playing(self, device: str | None = None) -> list[str]:
        """Stop the named device (or all); returns the names that were playing."""
        devs = [self.find_playback(device)] if device else self.playback
        return [d.name for d in devs if d.stop()]

    def speaking_recently(self) -> bool:
        """A playback device speaks, or stopped less than echo_tail_ms ago."""
        tail_s = self.config.echo_tail_ms / 1000
        now = time.monotonic()
        return any(d.speaking or now - d.last_spoke_s < tail_s for d in self.playback)

    def _gate(self) -> bool:
        return self.config.half_duplex and self.speaking_recently()

    def _on_voice(self, mic: CaptureDevice, ev: VoiceStarted) -> None:
        if not self.config.barge_in or self._gate():
            return
        stopped = [d.name for d in self.playback if d.speaking and d.stop()]
        if stopped:
            self.barge_ins += 1
            log.info("barge_in", mic=mic.name, stopped=stopped, speech_start_ms=ev.start_ms)

    # -- reporting -------------------------------------------------------------------

    def status(self) -> dict[str, Any]:
        return {"devices": [d.status() for d in self.all],
                "half_duplex": self.config.half_duplex, "barge_in": self.config.barge_in,
                "barge_ins": self.barge_ins}
