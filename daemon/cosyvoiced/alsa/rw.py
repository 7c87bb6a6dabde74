"""read/write backend: blocking interleaved readi/writei through pyalsaaudio.

pyalsaaudio has no sw_params and no explicit start: its PCM starts on the first write
(playback) or read (capture), so `start()` for playback writes a whole buffer of silence
at once, which starts the device with a full buffer. It recovers an xrun inside
`read()`/`write()` (prepare) when it sees the XRUN state; we look at the state first so
each xrun is counted. Its `read()` returns a new bytes object per period (it has no
read-into); the mmap backend allocates nothing and is the one to use where that matters.
"""

from __future__ import annotations

import errno

import alsaaudio
import numpy as np

from cosyvoiced.alsa.errors import XrunError, from_pyalsaaudio, raise_for
from cosyvoiced.alsa.libasound import FORMATS
from cosyvoiced.alsa.params import Negotiated, PcmRequest, accept, format_code

__all__ = ["RwPcm"]

_PYALSA_FORMATS = {
    "S16_LE": alsaaudio.PCM_FORMAT_S16_LE,
    "S32_LE": alsaaudio.PCM_FORMAT_S32_LE,
    "FLOAT_LE": alsaaudio.PCM_FORMAT_FLOAT_LE,
    "MU_LAW": alsaaudio.PCM_FORMAT_MU_LAW,
    "A_LAW": alsaaudio.PCM_FORMAT_A_LAW,
    "S24_3BE": alsaaudio.PCM_FORMAT_S24_3BE,
}
_FORMAT_NAMES = {v: k for k, v in _PYALSA_FORMATS.items()}
_STATE_XRUN = alsaaudio.PCM_STATE_XRUN


class RwPcm:
    """One PCM opened for read/write interleaved access via pyalsaaudio."""

    def __init__(self, req: PcmRequest) -> None:
        self.req = req
        self.device = req.pcm
        self.xruns = 0
        format_code(req)  # unknown format names fail here, typed
        kind = alsaaudio.PCM_CAPTURE if req.direction == "capture" else alsaaudio.PCM_PLAYBACK
        try:
            self._pcm = alsaaudio.PCM(type=kind, mode=alsaaudio.PCM_NORMAL, device=req.pcm,
                                      rate=req.rate_hz, channels=req.channels,
                                      format=_PYALSA_FORMATS[req.format],
                                      periodsize=req.period_frames, periods=req.periods)
        except alsaaudio.ALSAAudioError as exc:
            raise from_pyalsaaudio(exc, req.pcm, "snd_pcm_open+hw_params") from None
        try:
            info = self._pcm.info()
            got = Negotiated(rate_hz=info["rate"], channels=info["channels"],
                             period_frames=info["period_size"],
                             buffer_frames=info["buffer_size"],
                             format=_FORMAT_NAMES.get(info["format"], str(info["format"])))
            self.negotiated = accept(req, got)
        except BaseException:
            self._pcm.close()
            raise
        self._period = self.negotiated.period_frames
        self._dtype = np.dtype(FORMATS[self.negotiated.format][1])

    def start(self) -> None:
        """Playback: write one buffer of silence (pyalsaaudio starts on it). Capture: no-op."""
        if self.req.direction != "playback":
            return
        n = self.negotiated
        silence = np.zeros(n.period_frames * n.channels, dtype=self._dtype)
        for _ in range(max(1, n.buffer_frames // n.period_frames)):
            self._write(memoryview(silence).cast("B"))

    def _write(self, data: memoryview) -> int:
        if self._pcm.state() == _STATE_XRUN:
            self.xruns += 1  # pyalsaaudio prepares before writing
        try:
            return self._pcm.write(data)
        except alsaaudio.ALSAAudioError as exc:
            err = from_pyalsaaudio(exc, self.device, "writei")
            if isinstance(err, XrunError):
                self.xruns += 1
                return 0
            raise err from None

    def read(self, out: np.ndarray) -> int:
        """Capture one period into `out`; 0 after an xrun (recovered)."""
        if self._pcm.state() == _STATE_XRUN:
            self.xruns += 1  # pyalsaaudio prepares before reading
        try:
            n, data = self._pcm.read()
        except alsaaudio.ALSAAudioError as exc:
            raise from_pyalsaaudio(exc, self.device, "readi") from None
        if n < 0:
            if n == -errno.EPIPE:
                self.xruns += 1
                return 0
            raise_for(-n, self.device, "readi")
        if n:
            flat = out.reshape(-1)
            flat[: n * self.negotiated.channels] = np.frombuffer(data, dtype=self._dtype)
        return n

    def write(self, src: np.ndarray) -> int:
        """Play one period from `src`; returns frames written (0 after an xrun)."""
        return self._write(memoryview(src).cast("B"))

    def state(self) -> str:
        return str(self._pcm.state())

    def close(self) -> None:
        if self._pcm is not None:
            self._pcm.close()
            self._pcm = None
