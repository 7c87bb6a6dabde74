"""read/write backend: interleaved snd_pcm_readi/writei through the ctypes libasound binding.

Why ctypes and not pyalsaaudio: its `read()` returns a new bytes object per period (no
read-into), and it has no sw_params, explicit start or wait timeout; readi/writei here
copy straight between the device and the caller's preallocated buffer.

Opened by `pcm.LibasoundPcm` (never auto-start, avail_min of one period). Playback writes
one buffer of silence and starts explicitly; capture starts explicitly. Each `read`/`write`
is one blocking readi/writei of a period into/from the caller's buffer, whose address is
looked up once and cached: the loop creates no arrays. No snd_pcm_wait before it: on
ALSA's pulse plugin that poll misses wake-ups (periods stalled to the timeout and the sink
underran: docs/performance.md), while the blocking call's own wait does not.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from cosyvoiced.audio.alsa import libasound as la
from cosyvoiced.audio.alsa.errors import XrunError, check
from cosyvoiced.audio.alsa.params import PcmRequest
from cosyvoiced.audio.alsa.pcm import LibasoundPcm

lib = la.lib

__all__ = ["RwPcm"]


class RwPcm(LibasoundPcm):
    """One PCM opened for read/write interleaved access."""

    access = "rw"

    def __init__(self, req: PcmRequest, *, wait_timeout_ms: int = 200) -> None:
        super().__init__(req, wait_timeout_ms=wait_timeout_ms)
        self._buf: np.ndarray | None = None
        self._addr = 0

    def _address(self, buf: np.ndarray) -> int:
        """Data address of the caller's period buffer (checked once per buffer)."""
        if buf is not self._buf:
            n = self.negotiated
            if (buf.dtype != n.dtype or not buf.flags.c_contiguous
                    or buf.size < n.period_frames * n.channels):
                raise ValueError(f"{self.device}: period buffer must be C-contiguous "
                                 f"{n.dtype} of {n.period_frames} x {n.channels}, got "
                                 f"{buf.dtype} {buf.shape}")
            self._buf, self._addr = buf, buf.ctypes.data
        return self._addr

    def start(self) -> None:
        """Playback: write one buffer of silence, then start. Capture: start."""
        pcm = self._pcm
        if self.req.direction == "playback":
            n = self.negotiated
            silence = np.zeros(n.buffer_frames * n.channels, dtype=n.dtype)
            done = 0
            while done < n.buffer_frames:
                rc = lib.snd_pcm_writei(pcm, silence.ctypes.data + done * self._frame_bytes,
                                        n.buffer_frames - done)
                check(rc, self.device, "writei")
                if rc == 0:
                    break
                done += rc
        check(lib.snd_pcm_start(pcm), self.device, "start")

    def read(self, out: np.ndarray) -> int:
        """Capture one period into `out` (blocks ~a period); 0 after a recovered xrun."""
        return self._transfer(lib.snd_pcm_readi, out, "readi")

    def write(self, src: np.ndarray) -> int:
        """Play one period from `src` (blocks ~a period); 0 after a recovered xrun."""
        return self._transfer(lib.snd_pcm_writei, src, "writei")

    def _transfer(self, fn: Any, buf: np.ndarray, op: str) -> int:
        try:
            addr, moved, period, fb = self._address(buf), 0, self._period, self._frame_bytes
            while moved < period:
                rc = fn(self._pcm, addr + moved * fb, period - moved)
                if check(rc, self.device, op) == 0:
                    break  # nothing moved (cannot happen in blocking mode): no spin
                moved += rc
            return moved
        except XrunError as exc:
            self._recover(exc)
            return 0

    def close(self) -> None:
        self._buf = None
        super().close()
