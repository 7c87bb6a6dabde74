"""Capture and playback threads: one per configured ALSA device, moving periods between
the device and a shared-memory ring, and nothing else.

Each thread asks SCHED_FIFO for itself only, opens its PCM (rw or mmap backend), adapts
to the negotiated period, and loops: capture reads a period and writes it to the ring
(a full ring drops the period and counts an overrun); playback reads a period from the
ring, pads it with silence when the ring runs short (an underrun only if the producer
flagged the stream as playing) and writes it. Xruns are recovered in the backend and
counted. A device that vanishes is reopened with exponential back-off; the thread and
the rest of the daemon keep running. The loop allocates no arrays, takes no lock and
never logs per period. `last_progress_s` (time.monotonic) moves every period, for the
service watchdog.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Protocol

import numpy as np
import structlog

from cosyvoiced.audio.alsa.errors import AlsaError, DeviceGone
from cosyvoiced.audio.alsa.params import Negotiated, PcmRequest
from cosyvoiced.audio.codec import f32_to_s16, s16_to_f32
from cosyvoiced.audio.ring import Ring
from cosyvoiced.config.schema import AudioDeviceConfig
from cosyvoiced.runtime.rtprio import ask_fifo

log = structlog.get_logger(__name__)

__all__ = ["AudioThread", "CaptureThread", "PcmBackend", "PlaybackThread", "open_backend",
           "request_for", "start_device"]


class PcmBackend(Protocol):
    negotiated: Negotiated
    xruns: int

    def start(self) -> None: ...
    def read(self, out: np.ndarray) -> int: ...
    def write(self, src: np.ndarray) -> int: ...
    def close(self) -> None: ...


Opener = Callable[[PcmRequest, str], PcmBackend]


def open_backend(req: PcmRequest, access: str) -> PcmBackend:
    """Open `req` with the rw (readi/writei) or mmap backend (both ctypes libasound)."""
    if access == "mmap":
        from cosyvoiced.audio.alsa.mmap import MmapPcm
        return MmapPcm(req)
    from cosyvoiced.audio.alsa.rw import RwPcm
    return RwPcm(req)


def request_for(cfg: AudioDeviceConfig, ring: Ring) -> PcmRequest:
    fmt = cfg.format
    if fmt == "auto":
        fmt = "FLOAT_LE" if ring.dtype == np.float32 else "S16_LE"
    return PcmRequest(pcm=cfg.pcm, direction=cfg.direction, rate_hz=cfg.rate_hz,
                      channels=cfg.channels,
                      period_frames=max(1, round(cfg.rate_hz * cfg.period_ms / 1000.0)),
                      periods=cfg.periods, format=fmt)


class AudioThread(threading.Thread):
    """Base of the capture/playback threads (see module doc)."""

    def __init__(self, cfg: AudioDeviceConfig, ring: Ring, *, opener: Opener = open_backend,
                 backoff_initial_s: float = 0.05) -> None:
        super().__init__(name=f"audio-{cfg.direction}-{cfg.name or cfg.pcm}", daemon=True)
        if ring.channels != cfg.channels:
            raise ValueError(f"device {cfg.pcm}: ring has {ring.channels} channel(s), "
                             f"config {cfg.channels}")
        self.cfg = cfg
        self.ring = ring
        self.request = request_for(cfg, ring)
        self._opener = opener
        self._backoff_initial_s = backoff_initial_s
        self._stop_event = threading.Event()
        self._ready = threading.Event()
        self._running = True
        self.last_progress_s = time.monotonic()
        """time.monotonic() of the last period moved (or open attempt): the watchdog's view."""
        self.periods = 0
        self.reopens = 0
        self.gone = 0
        """Times the device vanished mid-stream."""
        self.open_failures = 0
        """Failed reopen attempts (each followed by a back-off wait)."""
        self._xruns_before = 0
        self._backend: PcmBackend | None = None
        self.negotiated: Negotiated | None = None
        self.error: AlsaError | None = None
        """Set when the device cannot be used at all (the thread has then exited)."""
        self.realtime: bool | None = None
        self.cpu_s = 0.0
        """CPU time this thread used (time.thread_time), updated when it exits."""

    # -- control (other threads) ---------------------------------------------------------

    @property
    def xruns(self) -> int:
        backend = self._backend
        return self._xruns_before + (backend.xruns if backend is not None else 0)

    def wait_ready(self, timeout_s: float = 5.0) -> Negotiated:
        """Block until the device is open and streaming; raise its typed error if not."""
        if not self._ready.wait(timeout_s):
            raise TimeoutError(f"device {self.cfg.pcm} not ready after {timeout_s} s")
        if self.error is not None:
            raise self.error
        assert self.negotiated is not None
        return self.negotiated

    def stop(self, timeout_s: float = 3.0) -> None:
        self._running = False
        self._stop_event.set()
        if self.is_alive():
            self.join(timeout_s)

    # -- the thread ----------------------------------------------------------------------

    def run(self) -> None:
        self._ask_realtime()
        backoff = self._backoff_initial_s
        opened_once = False
        t_cpu = time.thread_time()
        try:
            while self._running:
                try:
                    backend = self._opener(self.request, self.cfg.access)
                except AlsaError as exc:
                    # First open: a configuration problem, reported once. Later: the
                    # device (or sound server) is coming back; wait for it.
                    if not opened_once:
                        self._fail(exc)
                        return
                    self.last_progress_s = time.monotonic()
                    self.open_failures += 1
                    log.warning("alsa_reopen_failed", device=self.cfg.pcm, error=exc.code,
                                detail=exc.message, retry_in_s=round(backoff, 3))
                    self._stop_event.wait(backoff)
                    backoff = min(backoff * 2, self.cfg.reopen_backoff_max_s)
                    continue
                if opened_once:
                    self.reopens += 1
                    log.info("alsa_reopened", device=self.cfg.pcm, reopens=self.reopens)
                opened_once = True
                backoff = self._backoff_initial_s
                try:
                    self._stream(backend)
                except DeviceGone as exc:
                    self.gone += 1
                    log.warning("alsa_device_gone", device=self.cfg.pcm, detail=exc.message,
                                xruns=self.xruns)
                except AlsaError as exc:
                    self._fail(exc)
                    return
                finally:
                    self._xruns_before += backend.xruns
                    self._backend = None
                    backend.close()
        finally:
            self.cpu_s = time.thread_time() - t_cpu
            self._ready.set()

    def _fail(self, exc: AlsaError) -> None:
        self.error = exc
        log.error("alsa_device_failed", device=self.cfg.pcm, direction=self.cfg.direction,
                  error=exc.code, detail=exc.message)
        self._ready.set()

    def _ask_realtime(self) -> None:
        self.realtime = ask_fifo(self.cfg.rt_priority, f"alsa:{self.cfg.pcm}")

    def _opened(self, backend: PcmBackend) -> Negotiated:
        n = backend.negotiated
        self._backend = backend
        self.negotiated = n
        log.info("alsa_opened", device=self.cfg.pcm, direction=self.cfg.direction,
                 access=self.cfg.access, format=n.format, rate_hz=n.rate_hz,
                 asked_rate_hz=self.request.rate_hz, period_frames=n.period_frames,
                 asked_period_frames=self.request.period_frames,
                 buffer_frames=n.buffer_frames)
        return n

    def _buffers(self, n: Negotiated) -> tuple[np.ndarray, np.ndarray]:
        """(device-format, ring-format) period buffers; the same array when formats agree."""
        shape = (n.period_frames,) if n.channels == 1 else (n.period_frames, n.channels)
        dev = np.zeros(shape, dtype=n.dtype)
        ring = dev if n.dtype == self.ring.dtype else np.zeros(shape, dtype=self.ring.dtype)
        self._scratch = np.zeros(shape, dtype=np.float32)
        return dev, ring

    def _stream(self, backend: PcmBackend) -> None:
        raise NotImplementedError


class CaptureThread(AudioThread):
    """Device -> ring (the ring's producer; ring policy "drop")."""

    def _stream(self, backend: PcmBackend) -> None:
        n = self._opened(backend)
        dev, out = self._buffers(n)
        ring, scratch = self.ring, self._scratch
        convert = dev is not out
        backend.start()
        self._ready.set()
        monotonic = time.monotonic
        while self._running:
            got = backend.read(dev)
            if got == 0:
                continue  # timeout or recovered xrun
            if convert:
                if dev.dtype == np.int16:
                    s16_to_f32(dev, out)
                else:
                    f32_to_s16(dev, out, scratch)
            ring.write(out)
            self.periods += 1
            self.last_progress_s = monotonic()


class PlaybackThread(AudioThread):
    """Ring -> device (the ring's consumer); silence when the ring runs short."""

    def _stream(self, backend: PcmBackend) -> None:
        n = self._opened(backend)
        dev, src = self._buffers(n)
        ring, scratch = self.ring, self._scratch
        convert = dev is not src
        period = n.period_frames
        backend.start()
        self._ready.set()
        monotonic = time.monotonic
        while self._running:
            got = ring.read_into(src)
            if got < period:
                src[got:] = 0
            if convert:
                if src.dtype == np.int16:
                    s16_to_f32(src, dev)
                else:
                    f32_to_s16(src, dev, scratch)
            while backend.write(dev) == 0 and self._running:
                pass  # timed out or recovered an xrun: the same period goes next
            self.periods += 1
            self.last_progress_s = monotonic()


def start_device(cfg: AudioDeviceConfig, ring: Ring, *, opener: Opener = open_backend,
                 backoff_initial_s: float = 0.05) -> AudioThread:
    """Start the thread for `cfg` (capture or playback) moving audio to/from `ring`."""
    cls = CaptureThread if cfg.direction == "capture" else PlaybackThread
    thread = cls(cfg, ring, opener=opener, backoff_initial_s=backoff_initial_s)
    thread.start()
    return thread
