"""The flow in bf16 (OpenVINO, windows padded with masked frames) on the bundled voice
(auto's choice per CPU: `test_tts.py`, with the vocoder's)."""

from __future__ import annotations

import numpy as np
import pytest

from cosyvoiced.config.schema import TtsConfig
from cosyvoiced.runtime.onnx import run
from cosyvoiced.tts.engine import TtsEngine
from cosyvoiced.tts.request import SynthesisOptions
from cosyvoiced.tts.voice.flow_precision import FLOW_PAD, PaddedFlow, timed_inputs
from cosyvoiced.tts.voice.vocoder_precision import snr_db

SENTENCE = ("Your payment of forty nine dollars was received this morning and your account "
            "is now fully up to date.")
QUIET = {"format": "float32", "noise_scale": 0.0, "noise_w_scale": 0.0}


@pytest.fixture(scope="module")
def cache_dir(tmp_path_factory):
    return str(tmp_path_factory.mktemp("cache"))


def engine(cache_dir: str, flow: str) -> TtsEngine:
    return TtsEngine(TtsConfig(precision="fp32", vocoder="fp32", flow=flow, warmup=False,
                               cache_mb=0), cache_dir=cache_dir)


def audio(engine: TtsEngine, text: str) -> np.ndarray:
    return np.concatenate([c.audio for c in engine.synthesize(text, SynthesisOptions(**QUIET))])


def test_masked_frames_past_a_window_change_nothing(cache_dir):
    """What padding rests on: the FP32 flow itself, fed a window and the same window with
    masked frames after it, computes the same latent (any window length)."""
    split = engine(cache_dir, "fp32").voice().split
    assert split is not None and split.flow is not None and split.flow_seam is not None
    sentence = split.sentence({"input": np.asarray([[1, 20, 30, 40, 50, 60] * 12 + [2]]),
                               "input_lengths": np.asarray([73]),
                               "scales": np.asarray([0.0, 1.0, 0.0], dtype=np.float32)})
    feeds = {k: sentence.inputs[k] for k in split.flow_seam.inputs}
    padded = PaddedFlow(split.flow, timed_inputs(feeds, sentence.frames), pad=64)
    for lo, hi in ((0, 37), (5, 100), (0, sentence.frames)):
        window = {k: np.ascontiguousarray(x[..., lo:hi]) for k, x in feeds.items()}
        ref = np.asarray(run(split.flow, window)[0])
        out = np.asarray(run(padded, window)[0])
        assert out.shape == ref.shape
        assert snr_db(ref.reshape(-1), out.reshape(-1)) > 90.0


def test_a_bf16_flow_speaks_what_fp32_speaks(cache_dir):
    """bf16 through OpenVINO (native where the CPU has it, computed in f32 elsewhere): the
    same length of audio, close to FP32's, and its own prompt-cache key."""
    fp32, bf16 = engine(cache_dir, "fp32"), engine(cache_dir, "bf16")
    voice = bf16.voice()
    assert voice.split is not None and voice.split.flow_precision == "bf16"
    assert isinstance(voice.split.flow, PaddedFlow) and voice.split.flow.pad == FLOW_PAD
    assert voice.model_id != fp32.voice().model_id  # cached prompts are kept apart
    for text in (SENTENCE, "Please hold."):
        ref, out = audio(fp32, text), audio(bf16, text)
        assert out.size == ref.size  # durations come from the front: untouched
        assert snr_db(ref, out) > 12.0  # measured 21-29 dB (phase; the judge decides)
