"""Streaming sample-rate conversion, one `StreamResampler` per stream (soxr).

soxr keeps the filter state between chunks, so a stream resampled chunk by chunk equals
the whole signal resampled at once (up to the filter delay, which `flush()` drains).
Same-rate streams pass through without soxr. soxr returns a new array per chunk; this
runs on the inference/network side, not in the ALSA threads.
"""

from __future__ import annotations

from typing import Literal

import numpy as np
import numpy.typing as npt
import soxr

from cosyvoiced.errors import CosyvoicedError

__all__ = ["RESAMPLER_RATES_HZ", "SUPPORTED_RATES_HZ", "ResampleError", "StreamResampler",
           "UnsupportedRate"]

SUPPORTED_RATES_HZ: tuple[int, ...] = (8000, 16000, 22050, 24000, 48000)
"""Rates every stream may use (telephony, ASR, Piper voices, sound cards)."""
RESAMPLER_RATES_HZ: tuple[int, ...] = tuple(sorted({*SUPPORTED_RATES_HZ, 12000, 32000, 44100,
                                                    96000, 192000}))
"""Rates a `StreamResampler` converts between: the above and every signed-linear rate an
Asterisk AudioSocket call may use (slin12 ... slin192)."""

Quality = Literal["QQ", "LQ", "MQ", "HQ", "VHQ"]


class ResampleError(CosyvoicedError, ValueError):
    """Base of the resampler's typed errors."""

    code = "resample_error"


class UnsupportedRate(ResampleError):
    """A rate outside RESAMPLER_RATES_HZ."""

    code = "unsupported_rate"

    def __init__(self, rate_hz: int) -> None:
        super().__init__(f"unsupported sample rate {rate_hz} Hz; "
                         f"supported: {', '.join(map(str, RESAMPLER_RATES_HZ))}")
        self.rate_hz = rate_hz


class StreamResampler:
    """Resample one stream chunk by chunk (float32 or int16, mono or interleaved frames)."""

    def __init__(self, in_rate_hz: int, out_rate_hz: int, channels: int = 1,
                 dtype: npt.DTypeLike = np.float32, quality: Quality = "HQ") -> None:
        for rate in (in_rate_hz, out_rate_hz):
            if rate not in RESAMPLER_RATES_HZ:
                raise UnsupportedRate(rate)
        if channels < 1:
            raise ResampleError(f"channels must be >= 1, got {channels}")
        self.in_rate_hz = in_rate_hz
        self.out_rate_hz = out_rate_hz
        self.channels = channels
        self.dtype = np.dtype(dtype)
        if self.dtype not in (np.dtype(np.float32), np.dtype(np.int16)):
            raise ResampleError(f"dtype must be float32 or int16, got {self.dtype}")
        self._passthrough = in_rate_hz == out_rate_hz
        self._stream = None if self._passthrough else soxr.ResampleStream(
            in_rate_hz, out_rate_hz, channels, dtype=self.dtype.name, quality=quality)
        self._empty = np.zeros((0,) if channels == 1 else (0, channels), dtype=self.dtype)

    def _check(self, x: np.ndarray) -> np.ndarray:
        x = np.asarray(x)
        if x.dtype != self.dtype:
            raise ResampleError(f"resampler expects {self.dtype}, got {x.dtype}")
        want_ndim = 1 if self.channels == 1 else 2
        if x.ndim != want_ndim or (want_ndim == 2 and x.shape[1] != self.channels):
            raise ResampleError(
                f"resampler expects shape {'(n,)' if want_ndim == 1 else f'(n, {self.channels})'},"
                f" got {x.shape}")
        return np.ascontiguousarray(x)

    def process(self, x: np.ndarray) -> np.ndarray:
        """Resample the next chunk; output length varies by the filter's state."""
        x = self._check(x)
        if self._stream is None:
            return x.copy()
        return self._stream.resample_chunk(x, last=False)

    def flush(self) -> np.ndarray:
        """End of stream: return what the filter still holds; the resampler is then reset."""
        if self._stream is None:
            return self._empty.copy()
        out = self._stream.resample_chunk(self._empty, last=True)
        self._stream.clear()
        return out

    def reset(self) -> None:
        """Forget the stream's state (e.g. after barge-in), keeping the configuration."""
        if self._stream is not None:
            self._stream.clear()

    def out_len(self, in_frames: int) -> int:
        """Expected output frames for `in_frames` input frames, over a long stream."""
        return in_frames * self.out_rate_hz // self.in_rate_hz
