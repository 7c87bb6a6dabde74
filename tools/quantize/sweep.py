#!/usr/bin/env python3
"""Which parts of a voice suffer most from INT8? `python -m tools.quantize.sweep VOICE.onnx`.

Per-group sensitivity sweep, cheap (no Whisper): build the recipe's variant once as is
and once per group with that group kept FP32 (groups: tools.quantize.recipes.node_group),
synthesize a few judge sentences with noise scales 0 (deterministic), and measure the
log-mel distance to FP32 at two floors: 80 dB below the clip's peak (Whisper's own
floor: quantization noise in pauses counts) and 40 dB (speech only). The groups whose
FP32 copy lowers the distance most are the ones to keep FP32 (`keep_fp32` of a recipe).
With --time, each build's run time against FP32 too (interleaved rounds, 1 thread).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import numpy as np

from tools import judge
from tools.quantize import cli as quantize
from tools.quantize.recipes import RECIPES, node_group, select_nodes, with_fp32

HOP = 256
N_FFT = 1024
N_MELS = 80


def log_mel(audio: np.ndarray, rate_hz: int) -> np.ndarray:
    """(frames, 80) log10 power mel spectrogram, Hann window 1024, hop 256."""
    import librosa

    bank = librosa.filters.mel(sr=rate_hz, n_fft=N_FFT, n_mels=N_MELS)
    padded = np.pad(audio.astype(np.float64), N_FFT // 2)
    frames = np.lib.stride_tricks.sliding_window_view(padded, N_FFT)[::HOP][:len(audio) // HOP]
    power = np.abs(np.fft.rfft(frames * np.hanning(N_FFT), axis=1)) ** 2
    return np.log10(np.maximum(power @ bank.T, 1e-10))


def mel_distance(test: np.ndarray, ref: np.ndarray, floor_db: float) -> float:
    """Mean |log10 mel difference| on the common frames, both clamped `floor_db` below
    the reference's peak (so differences under the floor do not count)."""
    frames = min(len(test), len(ref))
    floor = ref.max() - floor_db / 10.0
    return float(np.abs(np.maximum(test[:frames], floor) - np.maximum(ref[:frames], floor)).mean())


def synthesize(model: Path, id_lists: list[list[int]], threads: int = 1) -> list[np.ndarray]:
    from cosyvoiced.runtime.onnx import create_session

    session = create_session(model, threads=threads)
    return [session.run(None, quantize.feeds(ids, (0.0, 1.0, 0.0)))[0].reshape(-1)
            for ids in id_lists]


def time_ratios(models: dict[str, Path], id_lists: list[list[int]], rounds: int,
                scales: tuple[float, float, float]) -> dict[str, float]:
    """Median run time of each model over interleaved rounds, divided by FP32's."""
    from cosyvoiced.runtime.onnx import create_session

    sessions = {k: create_session(p, threads=1) for k, p in models.items()}
    times: dict[str, list[float]] = {k: [] for k in sessions}
    for s in sessions.values():
        s.run(None, quantize.feeds(id_lists[0], scales))
    for _ in range(rounds):
        for k, s in sessions.items():
            t0 = time.perf_counter()
            for ids in id_lists:
                s.run(None, quantize.feeds(ids, scales))
            times[k].append(time.perf_counter() - t0)
    base = statistics.median(times["fp32"])
    return {k: statistics.median(v) / base for k, v in times.items()}


def main(argv: list[str] | None = None) -> int:
    import onnx

    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("model", help="voice .onnx (its .onnx.json beside it)")
    p.add_argument("--recipe", default="static_qdq_dec_add_lrelu_fp32post", choices=sorted(RECIPES))
    p.add_argument("--sentences", type=int, default=8, help="first N judge sentences")
    p.add_argument("--time", action="store_true", help="also time each build against FP32")
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--work", default="/tmp/quantize-sweep", help="scratch directory")
    args = p.parse_args(argv)

    src = Path(args.model).resolve()
    config_path = Path(str(src) + ".json")
    cfg = quantize.voice_config(src)
    inf = cfg.get("inference", {})
    scales = (inf.get("noise_scale", 0.667), inf.get("length_scale", 1.0), inf.get("noise_w", 0.8))
    rate_hz = cfg["audio"]["sample_rate"]
    work = Path(args.work)
    work.mkdir(parents=True, exist_ok=True)
    recipe = RECIPES[args.recipe]
    calib_ids = quantize.phoneme_ids(judge.load_sentences(quantize.CALIBRATION), config_path)
    ids = quantize.phoneme_ids(judge.load_sentences()[:args.sentences], config_path)

    models = {"fp32": src}
    models[recipe.name] = work / f"{recipe.name}.onnx"
    quantize.build_variant(recipe, src, models[recipe.name], calib_ids, scales, work)
    pre = quantize.prepared_model(src, work, recipe.poly_upsample, recipe.decoder_2d)
    names = [n.name for n in onnx.load(str(pre), load_external_data=False).graph.node]
    include, exclude = select_nodes(names, recipe)
    quantized = set(include if include is not None else names) - set(exclude)
    groups = sorted({node_group(n) for n in quantized})
    for g in groups:
        variant = with_fp32(recipe, (g,), name=f"fp32 {g}")
        models[variant.name] = work / f"sweep-{g.replace('/', '_')}.onnx"
        quantize.build_variant(variant, src, models[variant.name], calib_ids, scales, work)
        print(f"built {variant.name}", file=sys.stderr, flush=True)

    ref = [log_mel(a, rate_hz) for a in synthesize(src, ids)]
    rows = []
    for name, path in models.items():
        mels = [log_mel(a, rate_hz) for a in synthesize(path, ids)]
        rows.append((name, float(np.mean([mel_distance(m, r, 80) for m, r in zip(mels, ref, strict=True)])),
                     float(np.mean([mel_distance(m, r, 40) for m, r in zip(mels, ref, strict=True)]))))
    ratios = time_ratios(models, ids[:5], args.rounds, scales) if args.time else {}
    base = next(r for r in rows if r[0] == recipe.name)
    print(f"# INT8 sensitivity: {src.stem}, recipe {recipe.name}, {len(ids)} sentences, noise 0\n")
    print("| build | log-mel L1 (80 dB) | gain | log-mel L1 (40 dB) | gain | time vs FP32 |")
    print("|---|---|---|---|---|---|")
    for name, d80, d40 in sorted(rows, key=lambda r: r[1]):
        t = f"{ratios[name]:.2f}x" if name in ratios else "-"
        print(f"| {name} | {d80:.4f} | {base[1] - d80:+.4f} | {d40:.4f} | {base[2] - d40:+.4f} | {t} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
