"""The systems the judge compares, each synthesizing a sentence set from a seeded copy of
the voice: cosyvoiced's engine in its variants, and Piper's own synthesis."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    from cosyvoiced.config.schema import TtsConfig

WHISPER_RATE_HZ = 16000
RANDOM_OPS = ("RandomNormalLike", "RandomUniformLike", "RandomNormal", "RandomUniform")
SYSTEMS = ("cosyvoiced", "cosyvoiced-clauses", "cosyvoiced-fp32", "cosyvoiced-bf16",
           "cosyvoiced-bf16-flow", "piper", "piper-normalized")


class JudgeError(RuntimeError):
    """A system that cannot be judged in this checkout (unknown, or its config missing)."""


def seeded_copy(model_path: str | Path, seed: int, out_path: str | Path) -> int:
    """Save a copy of the model with `seed` set on every random node; returns how many."""
    import onnx

    model = onnx.load(str(model_path))
    count = 0
    for node in model.graph.node:
        if node.op_type in RANDOM_OPS:
            for attr in list(node.attribute):
                if attr.name == "seed":
                    node.attribute.remove(attr)
            node.attribute.append(onnx.helper.make_attribute("seed", float(seed)))
            count += 1
    onnx.save(model, str(out_path))
    return count


def check_system(system: str) -> None:
    """Raise `JudgeError` unless `system` can be judged in this checkout."""
    if system not in SYSTEMS:
        raise JudgeError(f"unknown system {system!r} (known: {', '.join(SYSTEMS)})")
    if system.startswith("cosyvoiced"):
        tts_config(system)


def tts_config(system: str) -> TtsConfig:
    """The engine config of a cosyvoiced system (`cosyvoiced-clauses`: the old cut-clause
    path, which needs `TtsConfig.decode`)."""
    from cosyvoiced.config.schema import TtsConfig

    fields = {f.name for f in dataclasses.fields(TtsConfig)}
    # every seed synthesized anew: no prompt cache (a checkout may predate it)
    config = TtsConfig(voice="judged", warmup=False, **({"cache_mb": 0} if "cache_mb" in fields
                                                        else {}))
    if system == "cosyvoiced":
        return config
    if system in ("cosyvoiced-fp32", "cosyvoiced-bf16", "cosyvoiced-bf16-flow"):
        if "vocoder" not in fields:
            raise JudgeError(f"{system} needs `TtsConfig.vocoder`, which this checkout lacks")
        if system.endswith("-flow") and "flow" not in fields:
            raise JudgeError(f"{system} needs `TtsConfig.flow`, which this checkout lacks")
        flow = {"flow": "bf16" if system.endswith("-flow") else "fp32"} \
            if "flow" in fields else {}
        return dataclasses.replace(config, vocoder=system.split("-")[1], **flow)
    if system != "cosyvoiced-clauses":
        raise JudgeError(f"{system!r} is not a cosyvoiced system")
    if "decode" not in fields:
        raise JudgeError("cosyvoiced-clauses needs the `decode` field of "
                         "cosyvoiced.config.schema.TtsConfig, which this checkout lacks")
    return dataclasses.replace(config, decode="clauses", first_clause_max_chars=30,
                               max_clause_chars=80)


def synthesize_set(model_path: str | Path, config_path: str | Path, texts: list[str],
                   threads: int = 2, noise: bool = True,
                   system: str = "cosyvoiced") -> list[np.ndarray]:
    """Each text as one 16 kHz float32 clip, spoken by `system` (see `SYSTEMS`)."""
    check_system(system)
    if system.startswith("piper"):
        return piper_set(model_path, config_path, texts, threads, noise,
                         normalized=system == "piper-normalized")
    from cosyvoiced.tts.engine import TtsEngine
    from cosyvoiced.tts.request import SynthesisOptions
    from cosyvoiced.tts.voice.catalog import VoiceFiles, load_voice

    files = VoiceFiles("judged", Path(model_path), Path(config_path))
    config = tts_config(system)
    engine = TtsEngine(config, threads=threads)
    decode = {"decode": config.decode} if hasattr(config, "decode") else {}  # as engine.voice()
    if hasattr(config, "vocoder"):
        decode.update(vocoder=config.vocoder, chunks_s=(config.first_chunk_s, config.chunk_s))
    if hasattr(config, "flow"):
        decode.update(flow=config.flow)
    engine.register(load_voice(files, precision="fp32", threads=threads, **decode), "fp32")
    opts = SynthesisOptions(rate_hz=WHISPER_RATE_HZ, format="float32",
                            **({} if noise else {"noise_scale": 0.0, "noise_w_scale": 0.0}))
    clips = []
    for text in texts:
        chunks = list(engine.synthesize(text, opts, precision="fp32"))
        clips.append(np.concatenate([c.audio for c in chunks]))
    return clips


def piper_set(model_path: str | Path, config_path: str | Path, texts: list[str],
              threads: int = 2, noise: bool = True, normalized: bool = False) -> list[np.ndarray]:
    """Each text through Piper's own `PiperVoice.synthesize` (a session at `threads`
    intra-op threads, the voice's scales), its sentences joined, resampled to 16 kHz."""
    import onnxruntime
    import soxr
    from piper import PiperConfig, PiperVoice, SynthesisConfig

    opts = onnxruntime.SessionOptions()
    opts.intra_op_num_threads = threads
    voice = PiperVoice(
        session=onnxruntime.InferenceSession(str(model_path), sess_options=opts,
                                             providers=["CPUExecutionProvider"]),
        config=PiperConfig.from_dict(json.loads(Path(config_path).read_text(encoding="utf-8"))))
    syn = None if noise else SynthesisConfig(noise_scale=0.0, noise_w_scale=0.0)
    spoken = spoken_references(texts) if normalized else texts
    clips = []
    for text in spoken:
        parts = [c.audio_float_array for c in voice.synthesize(text, syn)]
        audio = np.concatenate(parts) if parts else np.zeros(0, dtype=np.float32)
        clips.append(np.asarray(soxr.resample(audio, voice.config.sample_rate, WHISPER_RATE_HZ,
                                              quality="HQ"), dtype=np.float32))
    return clips


def spoken_references(texts: list[str]) -> list[str]:
    """What the voice is asked to say: the text after cosyvoiced's normalization."""
    from cosyvoiced.tts.frontend.normalize import normalize_text

    return [normalize_text(t, "en") for t in texts]
