"""An INT8 variant as `python -m tools.quantize` builds it (the recipe with the decoder's
last stage in FP32; calibrated on two sentences here) loads split and runs chunked as FP32
does: its chunks join to its whole-sentence decode, and it says what FP32 says."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from cosyvoiced.config.schema import TtsConfig
from cosyvoiced.runtime.onnx import cpu_flags, file_sha256, int8_dot
from cosyvoiced.tts.engine import TtsEngine
from cosyvoiced.tts.request import SynthesisOptions
from cosyvoiced.tts.voice.catalog import BUNDLED_VOICE, bundled_voice
from cosyvoiced.tts.voice.vocoder_precision import snr_db

RECIPE = "static_qdq_dec_poly_p9999_conv_fp32_last_stage"
TEXT = "Your claim number is 4417. An agent will call you back before noon tomorrow."
QUIET = SynthesisOptions(format="float32", noise_scale=0.0, noise_w_scale=0.0)


@pytest.fixture(scope="module")
def dirs(tmp_path_factory: pytest.TempPathFactory, repo_root: Path) -> tuple[str, str]:
    """(state_dir with the kept variant and its manifest, cache_dir)."""
    from tools import judge
    from tools.quantize import cli

    src = bundled_voice()
    kept = tmp_path_factory.mktemp("state") / "voices" / BUNDLED_VOICE
    work = kept / "candidates"
    work.mkdir(parents=True)
    inf = cli.voice_config(src.model_path)["inference"]
    scales = (inf["noise_scale"], inf["length_scale"], inf["noise_w"])
    calib = cli.phoneme_ids(judge.load_sentences(cli.CALIBRATION)[:2], src.config_path)
    variant = kept / f"{BUNDLED_VOICE}.{RECIPE}.onnx"
    cli.build_variant(RECIPE, src.model_path, variant, calib, scales, work)
    (kept / "manifest.json").write_text(json.dumps({
        "model": variant.name, "passed": True, "source_sha256": file_sha256(src.model_path),
        "int8_dot": int8_dot(cpu_flags())}))
    return str(kept.parent.parent), str(tmp_path_factory.mktemp("cache"))


def speak(dirs: tuple[str, str], precision: str, **kw: float) -> tuple[TtsEngine, np.ndarray]:
    engine = TtsEngine(TtsConfig(precision=precision, vocoder="fp32", flow="fp32",
                                 warmup=False, cache_mb=0, **kw),
                       state_dir=dirs[0], cache_dir=dirs[1])
    return engine, np.concatenate([c.audio for c in engine.synthesize(TEXT, QUIET)])


def test_an_int8_variant_runs_split_in_chunks_that_join(dirs):
    engine, joined = speak(dirs, "int8", first_chunk_s=0.1, chunk_s=0.2)
    voice = engine.voice()
    assert voice.precision == "int8" and voice.split is not None
    _, whole = speak(dirs, "int8", first_chunk_s=30.0, chunk_s=30.0)
    assert joined.shape == whole.shape
    # Measured 44 dB (FP32 chunks: 62 dB with trimmed contexts); a chunk decoded without
    # its context clicks at its edges, far below this.
    assert snr_db(whole, joined) >= 30.0


def test_an_int8_variant_says_what_fp32_says(dirs):
    _, int8 = speak(dirs, "int8")
    _, fp32 = speak(dirs, "fp32")
    assert int8.shape == fp32.shape  # the text front and its durations stay FP32
    assert 10.0 <= snr_db(fp32, int8) < 60.0  # close, and really quantized
