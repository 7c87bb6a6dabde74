"""Whisper tiny.en on our own log-mel, on a dozen real prompts: WER, and batching."""

from __future__ import annotations

import time

import numpy as np
import pytest
import soxr

from cosyvoiced.config.schema import AsrConfig
from cosyvoiced.listen.asr import Utterance, WhisperAsr, clip_frames
from cosyvoiced.testing.prompts import Prompt, prompts, wer


@pytest.fixture(scope="module")
def asr() -> WhisperAsr:
    return WhisperAsr(AsrConfig())


@pytest.fixture(scope="module")
def dozen() -> list[Prompt]:
    every = prompts()
    assert len(every) > 500
    # A fixed spread over the list: short words, sentences and long menus.
    return [every[i] for i in range(7, len(every), len(every) // 12)][:12]


def frames_of(samples_8k: np.ndarray) -> np.ndarray:
    return clip_frames(soxr.resample(samples_8k, 8000, 16000).astype(np.float32))


def test_a_dozen_real_prompts_wer(asr, dozen):
    utts = [Utterance(frames_of(p.samples()), 0, 0, time.monotonic(), p.name) for p in dozen]
    results = asr.transcribe(utts)
    hyps = [r.text for r in results]
    score = wer([p.text for p in dozen], hyps)
    assert score <= 15.0, list(zip([p.text for p in dozen], hyps, strict=True))
    assert all(r.rtf > 0 and r.latency_ms >= 0 for r in results)
    assert [r.stream for r in results] == [p.name for p in dozen]


def test_batched_equals_one_by_one(asr, dozen):
    utts = [Utterance(frames_of(p.samples()), i, i + 1, time.monotonic(), str(i))
            for i, p in enumerate(dozen[:4])]
    # All four are shorter than the encoder window, so batch and single use the same width.
    assert {asr.encoder_frames(u.frames.shape[0]) for u in utts} == {asr.cfg.min_encoder_frames}
    together = [t.text for t in asr.transcribe(utts)]
    alone = [asr.transcribe([u])[0].text for u in utts]
    assert together == alone
    assert all(together)
