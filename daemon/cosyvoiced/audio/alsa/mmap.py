"""mmap backend: interleaved mmap access through the ctypes libasound binding.

Opened by `pcm.LibasoundPcm` (start_threshold at the boundary: never auto-start; avail_min
of one period); pre-fills playback with silence and starts it explicitly. `read`/`write`
move one period between the caller's buffer and the device's mmap area with at most two
slices (buffer wrap). All ctypes holders and the numpy view of the mmap area are made once per
open; the loop creates no arrays.
"""

from __future__ import annotations

import ctypes
import errno
from ctypes import POINTER, byref

import numpy as np

from cosyvoiced.audio.alsa import libasound as la
from cosyvoiced.audio.alsa.errors import UnsupportedFormat, XrunError, check
from cosyvoiced.audio.alsa.params import PcmRequest
from cosyvoiced.audio.alsa.pcm import LibasoundPcm

lib = la.lib

__all__ = ["MmapPcm"]


class MmapPcm(LibasoundPcm):
    """One PCM opened for mmap interleaved access."""

    access = "mmap"

    def __init__(self, req: PcmRequest, *, wait_timeout_ms: int = 200) -> None:
        super().__init__(req, wait_timeout_ms=wait_timeout_ms)
        self._areas = POINTER(la.ChannelArea)()
        self._offset = la.uframes(0)
        self._frames = la.uframes(0)
        self._areas_ref = byref(self._areas)
        self._offset_ref = byref(self._offset)
        self._frames_ref = byref(self._frames)
        self._hw: np.ndarray | None = None  # view of the device's mmap area
        self._hw_addr = 0

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
        """True when a period is available; False on timeout (caller re-checks stop): a
        stalled device never holds a thread that was asked to stop."""
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

    def close(self) -> None:
        self._hw = None
        super().close()
