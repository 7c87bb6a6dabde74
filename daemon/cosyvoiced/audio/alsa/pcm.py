"""A PCM opened through the ctypes libasound binding: open, hw/sw params, xrun recovery,
state, close. The mmap and read/write backends share it and differ in how a period moves
(and how they wait for one).

sw_params: start_threshold at the boundary (never auto-start: playback starts after its
silence pre-fill, capture when the thread is ready), stop_threshold at the buffer size,
avail_min of one period (one wake-up per period).
"""

from __future__ import annotations

import errno
from ctypes import byref, c_int, c_uint, c_void_p

from cosyvoiced.audio.alsa import libasound as la
from cosyvoiced.audio.alsa.errors import (
    DeviceNotFound,
    PeriodRefused,
    UnsupportedFormat,
    XrunError,
    check,
)
from cosyvoiced.audio.alsa.params import Negotiated, PcmRequest, accept, format_code

lib = la.lib

__all__ = ["LibasoundPcm"]

_NOT_THERE = {errno.EIO, errno.ENODEV, errno.ENXIO, errno.ENOENT, errno.ECONNREFUSED}
"""errnos of installing hw params on a PCM whose device is not there (pulse: no sink)."""


class LibasoundPcm:
    """Base of the ctypes backends; `access` is "mmap" or "rw"."""

    access = ""

    def __init__(self, req: PcmRequest, *, wait_timeout_ms: int = 200) -> None:
        self.req = req
        self.device = req.pcm
        self.xruns = 0
        self._timeout_ms = wait_timeout_ms
        self._pcm = c_void_p()
        stream = la.STREAM_CAPTURE if req.direction == "capture" else la.STREAM_PLAYBACK
        check(lib.snd_pcm_open(byref(self._pcm), req.pcm.encode(), stream, 0),
              req.pcm, "snd_pcm_open")
        try:
            self.negotiated = accept(req, self._configure())
        except BaseException:
            lib.snd_pcm_close(self._pcm)
            self._pcm = c_void_p()
            raise
        n = self.negotiated
        self._period = n.period_frames
        self._frame_bytes = n.channels * n.dtype.itemsize

    # -- setup ---------------------------------------------------------------------------

    def _configure(self) -> Negotiated:
        req, pcm, dev = self.req, self._pcm, self.req.pcm
        hw = c_void_p()
        check(lib.snd_pcm_hw_params_malloc(byref(hw)), dev, "hw_params_malloc")
        try:
            check(lib.snd_pcm_hw_params_any(pcm, hw), dev, "hw_params_any")
            rc = lib.snd_pcm_hw_params_set_access(pcm, hw, la.ACCESS[self.access])
            if rc < 0:
                raise UnsupportedFormat(-rc, dev, f"{self.access} access not available: "
                                        f"{la.strerror(rc)}")
            rc = lib.snd_pcm_hw_params_set_format(pcm, hw, format_code(req))
            if rc < 0:
                raise UnsupportedFormat(-rc, dev, f"format {req.format} refused: "
                                        f"{la.strerror(rc)}")
            rc = lib.snd_pcm_hw_params_set_channels(pcm, hw, req.channels)
            if rc < 0:
                raise UnsupportedFormat(-rc, dev, f"{req.channels} channel(s) refused: "
                                        f"{la.strerror(rc)}")
            rate, d = c_uint(req.rate_hz), c_int(0)
            rc = lib.snd_pcm_hw_params_set_rate_near(pcm, hw, byref(rate), byref(d))
            if rc < 0:
                raise UnsupportedFormat(-rc, dev, f"rate {req.rate_hz} Hz refused: "
                                        f"{la.strerror(rc)}")
            period = la.uframes(req.period_frames)
            check(lib.snd_pcm_hw_params_set_period_size_near(pcm, hw, byref(period), byref(d)),
                  dev, "hw_params_set_period_size")
            buf = la.uframes(period.value * req.periods)
            check(lib.snd_pcm_hw_params_set_buffer_size_near(pcm, hw, byref(buf)),
                  dev, "hw_params_set_buffer_size")
            rc = lib.snd_pcm_hw_params(pcm, hw)
            if -rc in _NOT_THERE:  # e.g. the pulse plugin creates its stream here
                raise DeviceNotFound(-rc, dev, f"snd_pcm_hw_params: {la.strerror(rc)}")
            if rc < 0:
                raise PeriodRefused(-rc, dev, f"period {period.value} x {req.periods} "
                                    f"refused: {la.strerror(rc)}")
            ch = c_uint(0)
            check(lib.snd_pcm_hw_params_get_rate(hw, byref(rate), byref(d)), dev, "hw_params_get")
            check(lib.snd_pcm_hw_params_get_channels(hw, byref(ch)), dev, "hw_params_get")
            check(lib.snd_pcm_hw_params_get_period_size(hw, byref(period), byref(d)),
                  dev, "hw_params_get")
            check(lib.snd_pcm_hw_params_get_buffer_size(hw, byref(buf)), dev, "hw_params_get")
        finally:
            lib.snd_pcm_hw_params_free(hw)
        got = Negotiated(rate_hz=rate.value, channels=ch.value, period_frames=period.value,
                         buffer_frames=buf.value, format=req.format)
        self._set_sw_params(got)
        return got

    def _set_sw_params(self, got: Negotiated) -> None:
        pcm, dev = self._pcm, self.device
        sw = c_void_p()
        check(lib.snd_pcm_sw_params_malloc(byref(sw)), dev, "sw_params_malloc")
        try:
            check(lib.snd_pcm_sw_params_current(pcm, sw), dev, "sw_params_current")
            boundary = la.uframes(0)
            check(lib.snd_pcm_sw_params_get_boundary(sw, byref(boundary)), dev, "sw_params")
            check(lib.snd_pcm_sw_params_set_start_threshold(pcm, sw, boundary.value),
                  dev, "sw_params_start_threshold")
            check(lib.snd_pcm_sw_params_set_stop_threshold(pcm, sw, got.buffer_frames),
                  dev, "sw_params_stop_threshold")
            check(lib.snd_pcm_sw_params_set_avail_min(pcm, sw, got.period_frames),
                  dev, "sw_params_avail_min")
            check(lib.snd_pcm_sw_params(pcm, sw), dev, "sw_params")
        finally:
            lib.snd_pcm_sw_params_free(sw)

    # -- streaming -----------------------------------------------------------------------

    def start(self) -> None:
        raise NotImplementedError

    def _recover(self, exc: XrunError) -> None:
        self.xruns += 1
        check(lib.snd_pcm_recover(self._pcm, -exc.errno, 1), self.device, "recover")
        self.start()

    def state(self) -> str:
        s = lib.snd_pcm_state(self._pcm)
        return la.STATE_NAMES[s] if 0 <= s < len(la.STATE_NAMES) else str(s)

    def close(self) -> None:
        if self._pcm:
            lib.snd_pcm_drop(self._pcm)
            lib.snd_pcm_close(self._pcm)
            self._pcm = c_void_p()
