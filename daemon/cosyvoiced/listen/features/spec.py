"""What a log-mel feature stream computes: `MelSpec` and the named presets.

Plain frozen data, importing nothing of ours, so the filterbank and the streaming
extractor (`features.stream`) can both depend on it without depending on each other.
`WHISPER` is Whisper's front end; `generic_spec` gives librosa-compatible presets.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Literal

__all__ = ["WHISPER", "MelSpec", "generic_spec", "with_rate"]


@dataclass(frozen=True, kw_only=True)
class MelSpec:
    rate_hz: int
    """Sample rate of the input."""
    n_fft: int
    """Frame (and window) length in samples."""
    hop: int
    """Hop between frames in samples."""
    n_mels: int
    """Mel bands."""
    fmin_hz: float = 0.0
    """Lowest mel band edge."""
    fmax_hz: float | None = None
    """Highest mel band edge; None: rate_hz / 2."""
    pad_mode: Literal["constant", "reflect"] = "constant"
    """How the first/last half frame is padded (librosa >= 0.10: constant; Whisper: reflect)."""
    log: Literal["power", "log10", "db"] = "db"
    """Per-frame output scale: mel power, log10(max(p, 1e-10)), or 10 * that (dB)."""
    n_mfcc: int = 0
    """0: frames are mel bands; > 0: frames are this many MFCCs (DCT-II ortho of dB mel)."""
    whisper_tail: bool = False
    """At flush, pad like Whisper: `hop` zeros before the end padding, last frame dropped."""

    @property
    def n_features(self) -> int:
        return self.n_mfcc or self.n_mels

    @property
    def frames_per_s(self) -> float:
        return self.rate_hz / self.hop


WHISPER = MelSpec(rate_hz=16000, n_fft=400, hop=160, n_mels=80, pad_mode="reflect",
                  log="log10", whisper_tail=True)
"""Whisper's log-mel: 16 kHz, 25 ms window, 10 ms hop, 80 bands (raw log10 frames)."""


def generic_spec(*, rate_hz: int = 16000, n_fft: int = 512, hop: int = 160, n_mels: int = 40,
                 n_mfcc: int = 0, fmin_hz: float = 0.0, fmax_hz: float | None = None,
                 log: Literal["power", "log10", "db"] = "db") -> MelSpec:
    """A librosa-compatible preset (constant padding); `n_mfcc > 0` gives MFCC frames."""
    return MelSpec(rate_hz=rate_hz, n_fft=n_fft, hop=hop, n_mels=n_mels, n_mfcc=n_mfcc,
                   fmin_hz=fmin_hz, fmax_hz=fmax_hz, log="db" if n_mfcc else log)


def with_rate(spec: MelSpec, rate_hz: int) -> MelSpec:
    """The same preset at another sample rate (hop and window scaled, 10/25 ms kept)."""
    factor = rate_hz / spec.rate_hz
    return replace(spec, rate_hz=rate_hz, n_fft=round(spec.n_fft * factor),
                   hop=round(spec.hop * factor))
