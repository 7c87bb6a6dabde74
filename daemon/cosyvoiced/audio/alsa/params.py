"""What a PCM is asked for, what it agreed to, and whether we can live with the difference."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import numpy as np

from cosyvoiced.audio.alsa.errors import PeriodRefused, UnsupportedFormat
from cosyvoiced.audio.alsa.libasound import FORMATS
from cosyvoiced.audio.resample import SUPPORTED_RATES_HZ

Direction = Literal["capture", "playback"]


@dataclass(frozen=True)
class PcmRequest:
    """Hardware parameters asked of one PCM."""

    pcm: str
    """ALSA PCM name, e.g. "pulse:cvtest", "hw:0,0", "null"."""
    direction: Direction
    rate_hz: int
    channels: int
    period_frames: int
    periods: int
    format: str = "FLOAT_LE"
    """ALSA sample format name (see libasound.FORMATS)."""


@dataclass(frozen=True)
class Negotiated:
    """What the device agreed to (read back after hw_params)."""

    rate_hz: int
    channels: int
    period_frames: int
    buffer_frames: int
    format: str

    @property
    def dtype(self) -> np.dtype:
        return np.dtype(FORMATS[self.format][1])

    @property
    def period_ms(self) -> float:
        return 1000.0 * self.period_frames / self.rate_hz


def format_code(req: PcmRequest) -> int:
    try:
        return FORMATS[req.format][0]
    except KeyError:
        raise UnsupportedFormat(0, req.pcm, f"unknown sample format {req.format!r}; known: "
                                f"{', '.join(FORMATS)}") from None


def accept(req: PcmRequest, got: Negotiated) -> Negotiated:
    """Adapt to what the device offers, or raise if the stream cannot use it.

    A different rate is fine if it is one the resamplers handle (SUPPORTED_RATES_HZ; the
    consumer reads `negotiated.rate_hz`); channels and format must match (the ring's layout depends on
    them); the period may move within a factor of two, and the buffer must hold two.
    """
    if got.channels != req.channels:
        raise UnsupportedFormat(0, req.pcm, f"asked {req.channels} channel(s), device "
                                f"offers {got.channels}")
    if got.format != req.format:
        raise UnsupportedFormat(0, req.pcm, f"asked {req.format}, device offers {got.format}")
    if got.rate_hz not in SUPPORTED_RATES_HZ:
        raise UnsupportedFormat(0, req.pcm, f"asked {req.rate_hz} Hz, device offers "
                                f"{got.rate_hz} Hz; streams use "
                                f"{', '.join(map(str, SUPPORTED_RATES_HZ))} Hz")
    if not req.period_frames / 2 <= got.period_frames <= req.period_frames * 2:
        raise PeriodRefused(0, req.pcm, f"asked a {req.period_frames}-frame period, device "
                            f"offers {got.period_frames}")
    if got.buffer_frames < 2 * got.period_frames:
        raise PeriodRefused(0, req.pcm, f"buffer of {got.buffer_frames} frames holds fewer "
                            f"than two {got.period_frames}-frame periods")
    return got
