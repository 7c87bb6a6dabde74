"""The INT8 gate: which judged variant, if any, is kept (FP32 is always the fallback).

A variant passes when its WER against FP32's, judged by Whisper on the same sentences and
seeds, has a mean difference <= `WER_MEAN_MAX` points and a bootstrap 95% upper bound
<= `WER_UPPER_MAX`, and its mean DNSMOS OVRL (noise scales 0) is at most `DNSMOS_DROP_MAX`
under FP32's (Whisper does not hear an 8-bit noise floor; DNSMOS does); of those that
pass, the fastest one faster than FP32 is kept. None kept: the voice runs FP32 (no manifest, so `tts.precision = "auto"` loads FP32).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from tools.wer import Scores, bootstrap_diff

WER_MEAN_MAX = 0.3
WER_UPPER_MAX = 1.5
DNSMOS_DROP_MAX = 0.05


def passes_gate(wer_diff: tuple[float, float, float] | list[float],
                dnsmos_diff: float = 0.0) -> bool:
    """Mean WER difference <= +0.3 points, the interval's upper bound <= +1.5, and DNSMOS
    OVRL no more than 0.05 under FP32's (`dnsmos_diff`: variant's - FP32's)."""
    return bool(wer_diff[0] <= WER_MEAN_MAX and wer_diff[2] <= WER_UPPER_MAX
                and dnsmos_diff >= -DNSMOS_DROP_MAX)


def judged(scores: Scores, base: Scores, dnsmos_diff: float) -> dict[str, Any]:
    """WER/CER differences of a variant's `scores` to FP32's `base` (on the variant's
    seeds: slow variants are judged on the first seeds only) and whether it passed, with
    its DNSMOS OVRL difference to FP32's."""
    k = scores.word_errors.shape[0]
    wer_diff = bootstrap_diff(scores.word_errors, base.word_errors[:k], base.word_counts)
    cer_diff = bootstrap_diff(scores.char_errors, base.char_errors[:k], base.char_counts)
    return {"wer_diff": wer_diff, "cer_diff": cer_diff, "dnsmos_diff": dnsmos_diff,
            "passed": passes_gate(wer_diff, dnsmos_diff)}


def kept_variant(variants: dict[str, dict[str, Any]]) -> str | None:
    """The fastest variant that passed and runs faster than FP32; None: FP32."""
    faster = [name for name, v in variants.items()
              if name != "fp32" and v.get("passed") and v["time_ratio"] < 1.0]
    return min(faster, key=lambda name: variants[name]["time_ratio"], default=None)


def logmel_l1(a: np.ndarray, b: np.ndarray) -> float:
    """Mean |difference| of two Whisper log-mels (bands x frames) on their common frames:
    a variant's audio against FP32's."""
    frames = min(a.shape[1], b.shape[1])
    return float(np.abs(a[:, :frames] - b[:, :frames]).mean())
