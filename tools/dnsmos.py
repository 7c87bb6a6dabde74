"""DNSMOS (P.835 overall and P.808) of clips, for what a WER gate cannot hear (noise,
buzz, coarse rounding: DESIGN.md). The models come inside PyPI `speechmos`."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

RATE_HZ = 16000
MIN_SAMPLES = RATE_HZ  # DNSMOS scores windows of audio: a shorter clip is padded to one second


def clip_mos(clip: np.ndarray) -> tuple[float, float]:
    """(OVRL, P.808) of one 16 kHz float32 clip."""
    from speechmos import dnsmos

    if clip.shape[0] < MIN_SAMPLES:
        clip = np.pad(clip, (0, MIN_SAMPLES - clip.shape[0]))
    out = dnsmos.run(np.clip(clip, -1.0, 1.0).astype(np.float32), sr=RATE_HZ)
    return float(out["ovrl_mos"]), float(out["p808_mos"])


def set_mos(clips: Sequence[np.ndarray]) -> list[tuple[float, float]]:
    return [clip_mos(c) for c in clips]
