"""Whisper tiny.en on our own log-mel: real prompts end to end, batching, typed errors."""

from __future__ import annotations

import time

import numpy as np
import pytest
import soxr
from tools.bench.prompts import prompts, wer

from cosyvoiced.config.schema import AsrConfig
from cosyvoiced.listen.asr import AsrError, Utterance, WhisperAsr
from cosyvoiced.listen.features.stream import WHISPER, FrameRing, MelStream


@pytest.fixture(scope="module")
def asr():
    return WhisperAsr(AsrConfig())


@pytest.fixture(scope="module")
def dozen():
    every = prompts()
    assert len(every) > 500
    # A fixed spread over the list: short words, sentences and long menus.
    return [every[i] for i in range(7, len(every), len(every) // 12)][:12]


def frames_of(samples_8k):
    y = soxr.resample(samples_8k, 8000, 16000).astype(np.float32)
    mel = MelStream(WHISPER)
    ring = FrameRing(y.shape[0] // WHISPER.hop + 2, WHISPER.n_mels)
    mel.push(y, ring)
    mel.flush(ring)
    return ring.buf[: ring.count].copy()


def test_english_only_prompt_tokens(asr):
    assert asr.prompt == [50257, 50362]  # <|startoftranscript|><|notimestamps|> for tiny.en
    assert asr.eot == 50256


def test_encoder_length_policy(asr):
    assert asr.encoder_frames(50) == asr.cfg.min_encoder_frames
    assert asr.encoder_frames(2950) == 3000
    assert asr.encoder_frames(10_000) == 3000


@pytest.mark.e2e
def test_a_dozen_real_prompts_wer(asr, dozen):
    utts = [Utterance(frames_of(p.samples()), 0, 0, time.monotonic(), p.name) for p in dozen]
    results = asr.transcribe(utts)
    hyps = [r.text for r in results]
    score = wer([p.text for p in dozen], hyps)
    assert score <= 15.0, list(zip([p.text for p in dozen], hyps, strict=True))
    assert all(r.rtf > 0 and r.latency_ms >= 0 for r in results)
    assert [r.stream for r in results] == [p.name for p in dozen]


@pytest.mark.e2e
def test_batched_equals_one_by_one(asr, dozen):
    utts = [Utterance(frames_of(p.samples()), i, i + 1, time.monotonic(), str(i))
            for i, p in enumerate(dozen[:4])]
    # All four are shorter than the encoder window, so batch and single use the same width.
    assert {asr.encoder_frames(u.frames.shape[0]) for u in utts} == {asr.cfg.min_encoder_frames}
    together = [t.text for t in asr.transcribe(utts)]
    alone = [asr.transcribe([u])[0].text for u in utts]
    assert together == alone
    assert all(together)


def test_empty_and_bad_input(asr):
    assert asr.transcribe([]) == []
    with pytest.raises(AsrError) as e:
        asr.transcribe([Utterance(np.zeros((10, 40), dtype=np.float32), 0, 1, 0.0)])
    assert e.value.code == "asr_input"
    # Zero frames (an utterance cut to nothing) decodes to some text without failing.
    out = asr.transcribe([Utterance(np.zeros((0, 80), dtype=np.float32), 0, 0, 0.0)])
    assert len(out) == 1


def test_missing_model_dir_is_typed(tmp_path):
    with pytest.raises(AsrError) as e:
        WhisperAsr(AsrConfig(model_dir=str(tmp_path)))
    assert e.value.code == "asr_model_missing"
