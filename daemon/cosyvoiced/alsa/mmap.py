"""mmap backend: interleaved mmap access through the ctypes libasound binding.

Opens with start_threshold at the boundary (never auto-start) and avail_min of one
period, pre-fills playback with silence and starts it explicitly. `read`/`write` move one
period between the caller's buffer and the device's mmap area with at most two slices
(buffer wrap). All ctypes holders and the numpy view of the mmap area are made once per
open; the loop creates no arrays.
"""

from __future__ import annotations

import ctypes
import errno
from ctypes import POINTER, byref, c_int, c_uint, c_void_p

import numpy as np

from cosyvoiced.alsa import libasound as la
from cosyvoiced.alsa.errors import UnsupportedFormat, XrunError, check
from cosyvoiced.alsa.params import Negotiated, PcmRequest, accept, format_code

lib = la.lib

__all__ = ["MmapPcm"]


class MmapPcm:
    """One PCM opened for mmap interleaved access."""

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
        self._areas = POINTER(la.ChannelArea)()
        self._offset = la.uframes(0)
        self._frames = la.uframes(0)
        self._areas_ref = byref(self._areas)
        self._offset_ref = byref(self._offset)
        self._frames_ref = byref(self._frames)
        self._hw: np.ndarray | None = None  # view of the device's mmap area
        self._hw_addr = 0

    # -- setup ---------------------------------------------------------------------------

    def _configure(self) -> Negotiated:
        req, pcm, dev = self.req, self._pcm, self.req.pcm
        hw = c_void_p()
        check(lib.snd_pcm_hw_params_malloc(byref(hw)), dev, "hw_params_malloc")
        try:
            check(lib.snd_pcm_hw_params_any(pcm, hw), dev, "hw_params_any")
            rc = lib.snd_pcm_hw_params_set_access(pcm, hw, la.ACCESS["mmap"])
            if rc < 0:
                raise UnsupportedFormat(-rc, dev, "mmap access not available: "
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
            check(lib.snd_pcm_hw_params(pcm, hw), dev, "hw_params_period_and_buffer")
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
            # Never start on its own: playback starts after the silence pre-fill, capture
            # when the thread is ready; avail_min = one period wakes us once per period.
            check(lib.snd_pcm_sw_params_set_start_threshold(pcm, sw, boundary.value),
                  dev, "sw_params_start_threshold")
            check(lib.snd_pcm_sw_params_set_stop_threshold(pcm, sw, got.buffer_frames),
                  dev, "sw_params_stop_threshold")
            check(lib.snd_pcm_sw_params_set_avail_min(pcm, sw, got.period_frames),
                  dev, "sw_params_avail_min")
            check(lib.snd_pcm_sw_params(pcm, sw), dev, "sw_params")
        finally:
            lib.snd_pcm_sw_params_free(sw)

    def _map(self) -> np.ndarray:
        """Numpy view of the whole mmap area (fixed for the life of the hw params)."""
        area = self._areas[0]
        n = self.negotiated
        width = n.dtype.itemsize * 8
        if area.first != 0 or area.step != width * n.channels:
            raise UnsupportedFormat(0, self.device, "mmap area is not interleaved")
        for c in range(1, n.channels):
            other = self._areas[c]
            if other.addr != area.addr or other.first != c * width:
                raise UnsupportedFormat(0, self.device, "mmap area is not interleaved")
        raw = (ctypes.c_ubyte * (n.buffer_frames * self._frame_bytes)).from_address(area.addr)
        arr = np.frombuffer(raw, dtype=n.dtype)
        self._hw_addr = area.addr
        return arr if n.channels == 1 else arr.reshape(n.buffer_frames, n.channels)

    # -- streaming -----------------------------------------------------------------------

    def start(self) -> None:
        """Capture: start. Playback: fill the whole buffer with silence, then start."""
        pcm = self._pcm
        if self.req.direction == "playback":
            while True:
                avail = lib.snd_pcm_avail_update(pcm)
                check(avail, self.device, "avail_update")
                if avail == 0:
                    break
                off, n = self._begin(avail)
                self._hw[off:off + n] = 0
                self._commit(off, n)
        check(lib.snd_pcm_start(pcm), self.device, "start")

    def _begin(self, want: int) -> tuple[int, int]:
        self._frames.value = want
        check(lib.snd_pcm_mmap_begin(self._pcm, self._areas_ref, self._offset_ref,
                                     self._frames_ref), self.device, "mmap_begin")
        if self._hw is None or self._areas[0].addr != self._hw_addr:
            self._hw = self._map()
        return self._offset.value, self._frames.value

    def _commit(self, off: int, n: int) -> None:
        rc = lib.snd_pcm_mmap_commit(self._pcm, off, n)
        check(rc, self.device, "mmap_commit")
        if rc != n:
            raise XrunError(errno.EPIPE, self.device, "mmap_commit: short commit")

    def _wait_period(self) -> bool:
        """True when a period is available; False on timeout (caller re-checks stop)."""
        pcm = self._pcm
        while True:
            avail = lib.snd_pcm_avail_update(pcm)
            check(avail, self.device, "avail_update")
            if avail >= self._period:
                return True
            rc = lib.snd_pcm_wait(pcm, self._timeout_ms)
            check(rc, self.device, "wait")
            if rc == 0:
                return False

    def _recover(self, exc: XrunError) -> None:
        self.xruns += 1
        check(lib.snd_pcm_recover(self._pcm, -exc.errno, 1), self.device, "recover")
        self.start()

    def read(self, out: np.ndarray) -> int:
        """Capture one period into `out` (period_frames long); 0 on timeout."""
        try:
            if not self._wait_period():
                return 0
            got = 0
            hw = self._hw
            while got < self._period:
                off, n = self._begin(self._period - got)
                hw = self._hw
                out[got:got + n] = hw[off:off + n]
                self._commit(off, n)
                got += n
            return got
        except XrunError as exc:
            self._recover(exc)
            return 0

    def write(self, src: np.ndarray) -> int:
        """Play one period from `src` (period_frames long); 0 on timeout or xrun."""
        try:
            if not self._wait_period():
                return 0
            done = 0
            while done < self._period:
                off, n = self._begin(self._period - done)
                self._hw[off:off + n] = src[done:done + n]
                self._commit(off, n)
                done += n
            return done
        except XrunError as exc:
            self._recover(exc)
            return 0

    def state(self) -> str:
        s = lib.snd_pcm_state(self._pcm)
        return la.STATE_NAMES[s] if 0 <= s < len(la.STATE_NAMES) else str(s)

    def close(self) -> None:
        if self._pcm:
            self._hw = None
            lib.snd_pcm_drop(self._pcm)
            lib.snd_pcm_close(self._pcm)
            self._pcm = c_void_p()
