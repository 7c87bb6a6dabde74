#!/usr/bin/env python3
"""INT8 variants of a Piper voice with a quality gate: `python -m tools.quantize VOICE.onnx`.

Builds variants with onnxruntime.quantization, measures for each: file size, RTF at one
ORT thread (interleaved rounds, median), fidelity against FP32 (Whisper log-mel distance
with noise scales 0), and WER/CER through the Whisper judge (tools/judge.py) on seeded
copies, with a bootstrap 95% interval of the difference to FP32, and DNSMOS OVRL. Keeps
the fastest variant faster than FP32 that passes the gate (tools/quantize/gate.py: mean
WER difference <= +0.3 points, interval's upper bound <= +1.5, OVRL >= FP32's - 0.05), in STATE_DIR/voices/NAME/ with manifest.json (which
also names this CPU's kind of INT8 dot product: the verdict holds for such CPUs only), so
`tts.precision = "auto"` uses it. Writes gate-report.md and gate-report.json there too.
"""

from __future__ import annotations

import argparse
import datetime
import json
import shutil
import sys
import time
from pathlib import Path

import numpy as np

from tools import judge
from tools.quantize.gate import (
    DNSMOS_DROP_MAX,
    WER_MEAN_MAX,
    WER_UPPER_MAX,
    judged,
    kept_variant,
    logmel_l1,
)
from tools.quantize.graph import rewrite_conv_transpose
from tools.quantize.recipes import RECIPES, Recipe, select_nodes

#: Built by default: the recipes with the decoder's last stage FP32 and the 2026-12-04
#: calibration (percentile 99.99: 99.9 scored better on DNSMOS but cut the waveform's peaks
#: by ~16%), Convs only or with the middle stage's residual stream FP32 too. `--variants`
#: names any other in RECIPES.
VARIANTS = ("static_qdq_dec_poly_p9999_conv_fp32_last_stage",
            "static_qdq_dec_poly_p9999_chains0_fp32_last_stage")
CALIBRATION = judge.DATA / "calibration_en.txt"
#: Variants are judged as ONNX Runtime runs them: with the engine's defaults a CPU with
#: bf16 would put the decoder and the flow of every variant, FP32 too, on OpenVINO.
JUDGED = "cosyvoiced-fp32"


def voice_config(model: Path) -> dict:
    return json.loads(Path(str(model) + ".json").read_text(encoding="utf-8"))


def phoneme_ids(texts: list[str], config_path: Path) -> list[list[int]]:
    from piper.config import PiperConfig

    from cosyvoiced.tts.frontend.normalize import normalize_text
    from cosyvoiced.tts.frontend.phonemize import text_to_ids

    cfg = PiperConfig.from_dict(json.loads(config_path.read_text(encoding="utf-8")))
    return [text_to_ids(normalize_text(t, "en"), cfg) for t in texts]


def feeds(ids: list[int], scales: tuple[float, float, float]) -> dict[str, np.ndarray]:
    return {"input": np.asarray([ids], dtype=np.int64),
            "input_lengths": np.asarray([len(ids)], dtype=np.int64),
            "scales": np.asarray(scales, dtype=np.float32)}


class _Calibration:
    """CalibrationDataReader over phoneme ids of the calibration sentences."""

    def __init__(self, id_lists: list[list[int]], scales: tuple[float, float, float]) -> None:
        self._it = iter([feeds(ids, scales) for ids in id_lists])

    def get_next(self) -> dict[str, np.ndarray] | None:
        return next(self._it, None)


CALIBRATION_SEED = 1234
CALIBRATION_OPS = ["Conv", "ConvTranspose", "MatMul", "Add", "LeakyRelu", "Mul"]


def calibration_ranges(pre: Path, calib_ids: list[list[int]], scales: tuple[float, float, float],
                       recipe: Recipe, work: Path) -> Path:
    """Activation ranges of the calibration sentences, cached in `work` per method.

    Calibrated on a seeded copy (the random nodes draw the same noise every time), so the
    same voice, sentences and method give the same ranges and the same variant file.
    Histogram methods get one sentence per call (they stack outputs of equal shape only).
    """
    import tempfile

    from onnxruntime.quantization import CalibrationMethod, create_calibrator
    from onnxruntime.quantization.quantize import save_tensors_data

    tag = recipe.calibration + (f"-{recipe.percentile}" if recipe.calibration == "Percentile" else "")
    cache = work / f"calibration-{pre.stem}-{tag}.json"
    if cache.is_file():
        return cache
    seeded = work / f"calibration-seeded-{pre.stem}.onnx"
    if not seeded.exists():
        judge.seeded_copy(pre, CALIBRATION_SEED, seeded)
    options = {"percentile": recipe.percentile} if recipe.calibration == "Percentile" else {}
    with tempfile.TemporaryDirectory(prefix="calib-") as tmp:
        calibrator = create_calibrator(seeded, CALIBRATION_OPS,
                                       augmented_model_path=f"{tmp}/augmented.onnx",
                                       calibrate_method=getattr(CalibrationMethod, recipe.calibration),
                                       extra_options=options)
        if recipe.calibration == "MinMax":
            calibrator.collect_data(_Calibration(calib_ids, scales))
        else:
            for ids in calib_ids:
                calibrator.collect_data(_Calibration([ids], scales))
        save_tensors_data(calibrator.compute_data(), cache)
    return cache


def prepared_model(src: Path, work: Path, poly_upsample: bool = False,
                   decoder_2d: bool = False) -> Path:
    """ORT's quantization pre-processing (shape inference, graph cleanup), then when asked
    the decoder as 2-D convs (as voices run FP32 at one thread: ORT's blocked kernels for
    what stays float) and its ConvTranspose as Conv + depth-to-time (both exact)."""
    import onnx
    from onnxruntime.quantization.shape_inference import quant_pre_process

    pre = work / "preprocessed.onnx"
    if not pre.exists():
        quant_pre_process(str(src), str(pre), skip_symbolic_shape=True)
    if not poly_upsample and not decoder_2d:
        return pre
    out = work / f"preprocessed{'-2d' if decoder_2d else ''}{'-poly' if poly_upsample else ''}.onnx"
    if not out.exists():
        from cosyvoiced.tts.voice.rewrites import decoder_as_2d

        model = onnx.load(str(pre))
        if decoder_2d:
            decoder_as_2d(model)
        if poly_upsample:
            rewrite_conv_transpose(model)
        onnx.save(model, str(out))
    return out


def build_variant(name: str | Recipe, src: Path, out: Path, calib_ids: list[list[int]],
                  scales: tuple[float, float, float], work: Path) -> None:
    from onnxruntime.quantization import (
        CalibrationMethod,
        QuantFormat,
        QuantType,
        quantize_dynamic,
        quantize_static,
    )

    recipe = name if isinstance(name, Recipe) else RECIPES[name]
    ops = list(recipe.op_types) or None
    if recipe.kind == "dynamic":
        quantize_dynamic(src, out, weight_type=getattr(QuantType, recipe.weight_type),
                         per_channel=recipe.per_channel, op_types_to_quantize=ops)
        return
    import onnx

    pre = prepared_model(src, work, recipe.poly_upsample, recipe.decoder_2d)
    names = [n.name for n in onnx.load(str(pre), load_external_data=False).graph.node]
    include, exclude = select_nodes(names, recipe)
    quantize_static(pre, out, None, quant_format=getattr(QuantFormat, recipe.quant_format),
                    per_channel=recipe.per_channel,
                    weight_type=getattr(QuantType, recipe.weight_type),
                    activation_type=getattr(QuantType, recipe.activation_type), op_types_to_quantize=ops,
                    nodes_to_quantize=include, nodes_to_exclude=exclude,
                    calibrate_method=getattr(CalibrationMethod, recipe.calibration),
                    calibration_cache_path=calibration_ranges(pre, calib_ids, scales, recipe, work))


def measure_rtf(models: dict[str, Path], id_lists: list[list[int]], rate_hz: int,
                scales: tuple[float, float, float], rounds: int, threads: int = 1
                ) -> dict[str, float]:
    """(ONNX time / audio time) at `threads` intra-op threads (1 by default): each
    sentence's best time over interleaved rounds (models alternate per sentence), summed.
    On a shared machine the best of several runs is the run that was not preempted; a
    median there measures the neighbours' load as much as the model."""
    from cosyvoiced.runtime.onnx import create_session
    from cosyvoiced.tts.voice.rewrites import DECODER_2D

    # FP32 as voices run it at one thread (2-D decoder); QDQ variants are left as built.
    sessions = {k: create_session(p, threads=threads, rewrite=DECODER_2D)
                for k, p in models.items()}
    for s in sessions.values():  # warm-up
        s.run(None, feeds(id_lists[0], scales))
    best = {k: [float("inf")] * len(id_lists) for k in models}
    audio = [0.0] * len(id_lists)
    for _ in range(rounds):
        for i, ids in enumerate(id_lists):
            for k, s in sessions.items():
                t0 = time.perf_counter()
                out = s.run(None, feeds(ids, scales))[0]
                best[k][i] = min(best[k][i], time.perf_counter() - t0)
                audio[i] = out.size / rate_hz
    return {k: sum(v) / sum(audio) for k, v in best.items()}


def fidelity(models: dict[str, Path], config_path: Path, texts: list[str]) -> dict[str, dict]:
    """Whisper log-mel distance (mean |diff| of log10 mel, aligned on the shorter clip),
    duration ratio against FP32 and mean DNSMOS OVRL (what a WER gate cannot hear: an
    8-bit noise floor), noise scales 0 (deterministic)."""
    from faster_whisper.feature_extractor import FeatureExtractor

    from tools.dnsmos import set_mos

    fe = FeatureExtractor(feature_size=80)
    mels, mos = {}, {}
    for k, p in models.items():
        clips = judge.synthesize_set(p, config_path, texts, threads=2, noise=False,
                                     system=JUDGED)  # 16 kHz, as Whisper and DNSMOS take
        mels[k] = [(fe(c, padding=0), len(c)) for c in clips]
        mos[k] = float(np.mean([ovrl for ovrl, _ in set_mos(clips)]))
    out = {}
    for k in models:
        dists, ratios = [], []
        for (m, n), (m0, n0) in zip(mels[k], mels["fp32"], strict=True):
            dists.append(logmel_l1(m, m0))
            ratios.append(n / n0)
        out[k] = {"logmel_l1": float(np.mean(dists)), "duration_ratio": float(np.mean(ratios)),
                  "dnsmos_ovrl": mos[k], "dnsmos_diff": mos[k] - mos["fp32"]}
    return out


def describe(r: Recipe) -> str:
    """One line: what a recipe quantizes and how."""
    if r.kind == "dynamic":
        return f"{r.name}: dynamic {r.weight_type} on {', '.join(r.op_types) or 'default ops'}"
    calib = r.calibration + (f" {r.percentile}" if r.calibration == "Percentile" else "")
    return (f"{r.name}: static QDQ, {', '.join(r.op_types)} in "
            f"{', '.join(r.scope) or 'the whole graph'}, per-channel {r.weight_type} weights, "
            f"{r.activation_type} activations, {calib} calibration"
            + (f", FP32 kept: {', '.join(r.keep_fp32)}" if r.keep_fp32 else "")
            + (", ConvTranspose rewritten as Conv + depth-to-time" if r.poly_upsample else "")
            + (", decoder as 2-D convs" if r.decoder_2d else ""))


def render_markdown(report: dict) -> str:
    lines = [f"# INT8 gate: {report['voice']}", "",
             f"{report['sentences']} sentences x {len(report['seeds'])} seeds "
             f"(seeds {report['seeds']}), onnxruntime {report['ort_version']}, "
             f"gate: mean WER diff <= +{WER_MEAN_MAX} pt and upper 95% <= +{WER_UPPER_MAX} pt, "
             f"DNSMOS OVRL >= FP32's - {DNSMOS_DROP_MAX}, faster than FP32.", "",
             "| variant | size MB | RTF 1 thr | time vs FP32 | log-mel L1 | dur ratio | OVRL "
             "| WER % | WER diff pt [95% CI] | CER diff pt [95% CI] | seeds | pass |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for name, v in report["variants"].items():
        wd, cd = v.get("wer_diff"), v.get("cer_diff")
        wd_s = f"{wd[0]:+.2f} [{wd[1]:+.2f}, {wd[2]:+.2f}]" if wd else "-"
        cd_s = f"{cd[0]:+.2f} [{cd[1]:+.2f}, {cd[2]:+.2f}]" if cd else "-"
        mark = " (earlier run)" if "from_run" in v else ""
        lines.append(
            f"| {name}{mark} | {v['size_mb']:.1f} | {v['rtf']:.4f} | {v['time_ratio']:.2f}x "
            f"| {v['fidelity']['logmel_l1']:.4f} | {v['fidelity']['duration_ratio']:.3f} "
            f"| {v['fidelity'].get('dnsmos_ovrl', float('nan')):.3f} | {v['wer_pct']:.2f} | {wd_s} | {cd_s} | {len(v['seeds'])} | {v.get('passed', '-')} |")
    lines += ["", f"Kept: **{report['kept'] or 'none'}**", ""]
    lines += [f"- {n}" for n in report.get("notes", [])]
    recipes = [RECIPES[n] for n in report["variants"] if n in RECIPES]
    if recipes:
        lines += ["", "Recipes (tools/quantize/recipes.py):", ""]
        lines += [f"- {describe(r)}" for r in recipes]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("model", help="voice .onnx (its .onnx.json beside it)")
    p.add_argument("--state-dir", default="/var/lib/cosyvoiced",
                   help="where the kept variant and its manifest go (service.state_dir)")
    p.add_argument("--variants", default=",".join(VARIANTS),
                   help=f"recipes to build and judge (any of: {', '.join(RECIPES)})")
    p.add_argument("--seeds", type=int, default=5)
    p.add_argument("--slow-seeds", type=int, default=1,
                   help="seeds for variants slower than FP32 (they cannot be kept)")
    p.add_argument("--limit", type=int, default=0, help="first N judge sentences (0: all)")
    p.add_argument("--rtf-sentences", type=int, default=8)
    p.add_argument("--rtf-rounds", type=int, default=5)
    p.add_argument("--fidelity-sentences", type=int, default=20)
    p.add_argument("--threads", type=int, default=2, help="threads for judging (not RTF)")
    p.add_argument("--merge-report", help="gate-report.json of an earlier run: its variants "
                   "join the table and the choice (time ratios are each run's own)")
    p.add_argument("--no-amx", action="store_true", help="withhold AMX from this process "
                   "first, to judge as a CPU without it runs (tools/quantize/noamx.py)")
    args = p.parse_args(argv)
    if args.no_amx:
        from tools.quantize.noamx import withhold_amx

        withhold_amx()
    import onnxruntime

    from cosyvoiced.runtime.onnx import cpu_flags, file_sha256, int8_dot
    from cosyvoiced.tts.voice.catalog import MANIFEST, validate_name

    src = Path(args.model).resolve()
    config_path = Path(str(src) + ".json")
    voice = validate_name(src.stem)
    cfg = voice_config(src)
    inf = cfg.get("inference", {})
    scales = (inf.get("noise_scale", 0.667), inf.get("length_scale", 1.0), inf.get("noise_w", 0.8))
    rate_hz = cfg["audio"]["sample_rate"]
    out_dir = Path(args.state_dir) / "voices" / voice
    work = out_dir / "candidates"
    work.mkdir(parents=True, exist_ok=True)

    texts = judge.load_sentences()
    if args.limit:
        texts = texts[:args.limit]
    calib_ids = phoneme_ids(judge.load_sentences(CALIBRATION), config_path)
    models: dict[str, Path] = {"fp32": src}
    for name in [v for v in args.variants.split(",") if v]:
        out = work / f"{voice}.{name}.onnx"
        t0 = time.perf_counter()
        build_variant(name, src, out, calib_ids, scales, work)
        print(f"built {name} in {time.perf_counter() - t0:.0f}s", file=sys.stderr, flush=True)
        models[name] = out

    rtf_ids = phoneme_ids(texts[:args.rtf_sentences], config_path)
    rtf = measure_rtf(models, rtf_ids, rate_hz, scales, args.rtf_rounds)
    print(f"rtf: {rtf}", file=sys.stderr, flush=True)
    fid = fidelity(models, config_path, texts[:args.fidelity_sentences])
    print(f"fidelity: {fid}", file=sys.stderr, flush=True)

    whisper = judge.WhisperJudge(threads=args.threads)
    refs = judge.spoken_references(texts)
    seeds = list(range(1, args.seeds + 1))
    scores = {}
    for name, path in models.items():
        slow = rtf[name] >= rtf["fp32"] and name != "fp32"
        run = judge.judge_model(path, config_path, texts,
                                seeds[:args.slow_seeds] if slow else seeds, whisper, args.threads,
                                cache_dir=out_dir / "judge-cache", system=JUDGED)
        scores[name] = judge.score(refs, run.hyps_by_seed)
        print(f"{name}: WER {100 * scores[name].wer:.2f}%", file=sys.stderr, flush=True)

    base = scores["fp32"]
    report: dict = {"voice": voice, "model": str(src), "sentences": len(texts), "seeds": seeds,
                    "ort_version": onnxruntime.__version__, "variants": {}, "kept": None,
                    "amx_withheld": args.no_amx,
                    "created": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
                    "notes": ["RTF: ONNX run time / audio time at 1 intra-op thread, each "
                              f"sentence's best of {args.rtf_rounds} interleaved rounds, "
                              f"{len(rtf_ids)} sentences",
                              "WER/CER on Whisper-normalized text with each digit a word and "
                              "a.m./p.m. after a number as am/pm; references are cosyvoiced's "
                              "normalized (spoken) text; rows from an earlier run keep that "
                              "run's scoring and FP32 baseline",
                              "variants slower than FP32 cannot be kept and are judged on "
                              f"{args.slow_seeds} seed(s) only (interval against the same seeds)"]}
    for name, path in models.items():
        s = scores[name]
        v = {"file": path.name, "size_mb": path.stat().st_size / 1e6, "rtf": rtf[name],
             "time_ratio": rtf[name] / rtf["fp32"], "fidelity": fid[name],
             "wer_pct": 100 * s.wer, "cer_pct": 100 * s.cer}
        v["seeds"] = seeds[:s.word_errors.shape[0]]
        if name != "fp32":
            v |= judged(s, base, fid[name]["dnsmos_diff"])
        report["variants"][name] = v
    if args.merge_report:  # variants judged in an earlier run (their own FP32 baseline)
        prev = json.loads(Path(args.merge_report).read_text(encoding="utf-8"))
        for name, v in prev["variants"].items():
            if name not in report["variants"]:
                report["variants"][name] = {**v, "from_run": prev["created"]}
    best = report["kept"] = kept_variant(report["variants"])

    manifest_path = out_dir / MANIFEST
    if best is not None and best not in models:  # kept by the earlier run: leave it there
        pass
    elif best is not None:
        for stale in out_dir.glob(f"{voice}.*.onnx"):
            stale.unlink()
        kept = out_dir / models[best].name
        shutil.copy2(models[best], kept)
        v = report["variants"][best]
        manifest = {"voice": voice, "model": kept.name, "variant": best, "passed": True,
                    "source_sha256": file_sha256(src), "ort_version": onnxruntime.__version__,
                    "int8_dot": int8_dot(cpu_flags()),
                    "rtf": v["rtf"], "rtf_fp32": rtf["fp32"], "wer_diff": v["wer_diff"],
                    "wer_fp32_pct": 100 * base.wer, "created": report["created"]}
        manifest_path.write_text(json.dumps(manifest, indent=2) + "\n", encoding="utf-8")
    else:
        for stale in out_dir.glob(f"{voice}.*.onnx"):
            stale.unlink()
        manifest_path.unlink(missing_ok=True)
    (out_dir / "gate-report.json").write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")
    md = render_markdown(report)
    (out_dir / "gate-report.md").write_text(md, encoding="utf-8")
    shutil.rmtree(work, ignore_errors=True)
    print(md)
    return 0


if __name__ == "__main__":
    sys.exit(main())
