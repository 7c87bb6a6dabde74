"""One configured device: its ring, its ALSA thread, its state, what it reports; and
the typed errors a request for a device can meet."""

from __future__ import annotations

import asyncio
import contextlib
import time
from typing import Any

import numpy as np
import structlog

from cosyvoiced.audio.alsa.device import AudioThread, Opener, start_device
from cosyvoiced.audio.alsa.errors import AlsaError
from cosyvoiced.audio.ring import Ring
from cosyvoiced.config.schema import AudioDeviceConfig
from cosyvoiced.errors import CosyvoicedError
from cosyvoiced.runtime.metrics import Metrics

log = structlog.get_logger(__name__)

__all__ = ["Device", "DeviceError", "DeviceUnavailable", "NoPlaybackDevice", "UnknownDevice"]

SUPERVISE_S = 0.25
"""How often device states are looked at (readiness, failures, retries)."""
METRICS_EVERY_S = 1.0
PUMP_S = 0.02
"""How often captured audio is moved to the listener / synthesized audio waits for room."""
RETRY_INITIAL_S = 1.0


class DeviceError(CosyvoicedError):
    """A request for a local device that cannot be served."""

    code = "device_error"

    def __init__(self, message: str, device: str = "") -> None:
        super().__init__(message)
        self.device = device


class UnknownDevice(DeviceError):
    code = "unknown_device"


class NoPlaybackDevice(DeviceError):
    code = "no_playback_device"


class DeviceUnavailable(DeviceError):
    """The device is configured but not open (failed, retrying, starting)."""

    code = "device_unavailable"


class Device:
    """One configured device: its ring, its thread, its state."""

    direction = ""
    policy = "drop"

    def __init__(self, cfg: AudioDeviceConfig, opener: Opener, retry_max_s: float) -> None:
        self.cfg = cfg
        self.name = cfg.name or cfg.pcm
        self.ring = Ring.create(max(2, cfg.rate_hz * cfg.ring_ms // 1000),
                                channels=cfg.channels, dtype=np.float32, policy=self.policy)
        self.thread: AudioThread | None = None
        self.state = "stopped"
        """starting | running | reopening (vanished mid-stream) | failed (retry at
        `retry_at_s`) | retrying (a retry is opening) | stopped"""
        self.error: AlsaError | None = None
        self.failures = 0
        self.retry_at_s = 0.0
        self._opener = opener
        self._retry_max_s = retry_max_s
        self._backoff_s = RETRY_INITIAL_S
        self._banked_xruns = 0
        self._seen: dict[str, int] = {"xruns": 0, "underruns": 0, "dropped": 0}

    # -- the thread ------------------------------------------------------------------

    def launch(self) -> None:
        if self.thread is not None:
            self._banked_xruns += self.thread.xruns
        self.thread = start_device(self.cfg, self.ring, opener=self._opener)
        self.state = "retrying" if self.failures else "starting"

    def supervise(self, now_s: float) -> bool:
        """Advance the state; True when the device has just become usable."""
        t = self.thread
        if self.state == "failed":
            if now_s >= self.retry_at_s:
                log.info("device_retry", device=self.name, attempt=self.failures + 1)
                self.launch()
            return False
        if t is None or self.state == "stopped":
            return False
        if t.error is not None:
            self._failed(t.error, now_s)
            return False
        if self.state in ("starting", "retrying"):
            try:
                t.wait_ready(0)
            except TimeoutError:
                return False
            self.state, self.error, self._backoff_s = "running", None, RETRY_INITIAL_S
            return True
        self.state = "reopening" if t.gone > t.reopens else "running"
        return False

    def _failed(self, error: AlsaError, now_s: float) -> None:
        self.failures += 1
        self.error = error
        self.state = "failed"
        self.retry_at_s = now_s + self._backoff_s
        log.error("device_unavailable", device=self.name, pcm=self.cfg.pcm,
                  direction=self.direction, error=error.code, detail=error.message,
                  retry_in_s=self._backoff_s)
        self._backoff_s = min(self._backoff_s * 2, self._retry_max_s)

    def last_progress_s(self) -> float:
        """Health probe: a streaming thread's progress; other states are not stalls."""
        t = self.thread
        if self.state == "running" and t is not None:
            return t.last_progress_s
        return time.monotonic()

    @property
    def xruns(self) -> int:
        return self._banked_xruns + (self.thread.xruns if self.thread is not None else 0)

    @property
    def rate_hz(self) -> int | None:
        t = self.thread
        return t.negotiated.rate_hz if t is not None and t.negotiated is not None else None

    async def shutdown(self) -> None:
        """Stop the thread (the ring stays until `close_ring`)."""
        self.state = "stopped"
        if self.thread is not None:
            await asyncio.to_thread(self.thread.stop)

    def close_ring(self) -> None:
        self.ring.close()
        with contextlib.suppress(FileNotFoundError):
            self.ring.unlink()

    # -- reporting -------------------------------------------------------------------

    def export(self, metrics: Metrics) -> None:
        """Counters since the last export into `metrics` (called on a slow timer)."""
        s = self.ring.stats()
        now = {"xruns": self.xruns, "underruns": s.underruns, "dropped": s.dropped_frames}
        deltas = {k: v - self._seen[k] for k, v in now.items()}
        self._seen = now
        if deltas["xruns"] > 0:
            metrics.xruns.labels(self.direction).inc(deltas["xruns"])
        if deltas["underruns"] > 0:
            metrics.underruns.labels("device").inc(deltas["underruns"])
        if deltas["dropped"] > 0:
            metrics.dropped_frames.labels("device").inc(deltas["dropped"])

    def fill_ratio(self) -> float:
        return self.ring.available() / self.ring.capacity_frames

    def status(self) -> dict[str, Any]:
        t = self.thread
        n = t.negotiated if t is not None else None
        s = self.ring.stats()
        out: dict[str, Any] = {
            "name": self.name, "pcm": self.cfg.pcm, "direction": self.direction,
            "access": self.cfg.access, "state": self.state,
            "error": ({"code": self.error.code, "message": str(self.error)}
                      if self.error is not None else None),
            "rate_hz": n.rate_hz if n else None, "channels": self.cfg.channels,
            "period_frames": n.period_frames if n else None,
            "period_ms": round(n.period_ms, 3) if n else None,
            "buffer_frames": n.buffer_frames if n else None,
            "xruns": self.xruns, "underruns": s.underruns, "overruns": s.overruns,
            "dropped_frames": s.dropped_frames, "ring_fill_ratio": round(self.fill_ratio(), 4),
            "realtime": t.realtime if t is not None else None,
            "reopens": t.reopens if t is not None else 0, "failures": self.failures,
        }
        if self.state == "failed":
            out["retry_in_s"] = round(max(0.0, self.retry_at_s - time.monotonic()), 3)
        return out
