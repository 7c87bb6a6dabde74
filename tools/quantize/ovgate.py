#!/usr/bin/env python3
"""OpenVINO + NNCF INT8 decoders timed and gated: `python -m tools.quantize.ovgate VOICE.onnx`.

For each variant (tools/quantize/ovint8.py) it builds the INT8 IR (kept in `--work`),
then times the whole synthesis at ONE inference thread: the FP32 text front and flow on
ONNX Runtime as voices run them, the decoder chunk by chunk (the engine's first chunk and
chunk sizes) through the variant compiled for the daemon's fixed windows (OpenVINO, one
pinned thread, float parts in f32), against FP32 as voices run it (the ORT 2-D decoder):
each sentence's best of interleaved rounds, summed. Then, through the engine (noise
scales 0): log-mel L1 to FP32's audio and DNSMOS OVRL; then, for variants at most
`--wer-max-ratio` of FP32's time, WER/CER on seeded copies through the Whisper judge and
the INT8 gate (tools/quantize/gate.py). `--no-amx` withholds AMX first (noamx.py), so an
AMX Xeon runs the VNNI kernels of a CPU without it. Nothing is installed for the daemon.
"""

from __future__ import annotations

import argparse
import datetime
import functools
import json
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

#: The short gate (as cli.py was run before the full one): sentences x seeds.
SHORT = (40, 2)


def windows(split: Any, rate_hz: int) -> list[int]:
    """The windows (latent frames) the daemon compiles a fast decoder for: its first
    chunk, a whole chunk and a last chunk, each with the decoder's context
    (`split_load._checked`)."""
    from cosyvoiced.config.schema import TtsConfig
    from cosyvoiced.tts.voice.split import longest_chunk

    cfg = TtsConfig()
    chunks = [split.frames_for(s, rate_hz) for s in (cfg.first_chunk_s, cfg.chunk_s)]
    chunks.append(longest_chunk(chunks[-1]))
    left, right = split.context or (split.field.left, split.field.right)
    return sorted({n + left + right for n in chunks})


def synthesis_times(split: Any, fast: dict[str, dict[int, Any]], id_lists: list[list[int]],
                    scales: tuple[float, float, float], rate_hz: int, rounds: int
                    ) -> dict[str, dict[str, float]]:
    """Per system: (whole synthesis, decoder) seconds / audio seconds, each sentence's best
    of `rounds` interleaved rounds, summed; `fast[name]`: its decoders by window ({}:
    FP32 on ORT). The engine's chunks: first chunk, then whole ones."""
    from cosyvoiced.config.schema import TtsConfig
    from cosyvoiced.tts.voice.split import chunk_bounds
    from tools.quantize.cli import feeds

    cfg = TtsConfig()
    size, first = (split.frames_for(cfg.chunk_s, rate_hz), split.frames_for(cfg.first_chunk_s,
                                                                          rate_hz))
    best = {k: np.full((2, len(id_lists)), np.inf) for k in fast}
    audio = np.zeros(len(id_lists))
    for r in range(rounds + 1):  # round 0 warms up (arenas, kernels) and is dropped
        for i, ids in enumerate(id_lists):
            for name, sessions in fast.items():
                split.fast = sessions
                t0 = time.perf_counter()
                sentence = split.sentence(feeds(ids, scales))
                dec, samples = 0.0, 0
                for a, b in chunk_bounds(sentence.frames, size, first):
                    ctx = split.context or (split.field.left, split.field.right)
                    split._flow_to(sentence, min(sentence.frames, b + ctx[1]))
                    t1 = time.perf_counter()
                    samples += split.decode(split._decoder_inputs(sentence), a, b, ctx).size
                    dec += time.perf_counter() - t1
                total = time.perf_counter() - t0
                if r:
                    best[name][:, i] = np.minimum(best[name][:, i], (total, dec))
                audio[i] = samples / rate_hz
    split.fast = {}
    return {k: {"rtf": float(v[0].sum() / audio.sum()), "decoder_rtf": float(v[1].sum()
                                                                             / audio.sum())}
            for k, v in best.items()}


def engine_clips(model: Path, config_path: Path, texts: Sequence[str],
                 fast: dict[int, Any], threads: int, noise: bool) -> list[np.ndarray]:
    """Each text as one 16 kHz clip through the engine (as `judge_systems.synthesize_set`'s
    cosyvoiced-fp32), the decoder's fixed windows run by `fast` ({}: FP32 throughout)."""
    from cosyvoiced.tts.engine import TtsEngine
    from cosyvoiced.tts.request import SynthesisOptions
    from cosyvoiced.tts.voice.catalog import VoiceFiles, load_voice
    from tools.judge_systems import WHISPER_RATE_HZ, tts_config
    from tools.quantize.cli import JUDGED

    config = tts_config(JUDGED)
    engine = TtsEngine(config, threads=threads)
    voice = load_voice(VoiceFiles("judged", model, config_path), precision="fp32",
                       threads=threads, vocoder="fp32",
                       chunks_s=(config.first_chunk_s, config.chunk_s))
    if voice.split is None:
        raise RuntimeError(f"{model}: not loaded split")
    voice.split.fast, voice.split.vocoder = dict(fast), "int8" if fast else "fp32"
    engine.register(voice, "fp32")
    opts = SynthesisOptions(rate_hz=WHISPER_RATE_HZ, format="float32",
                            **({} if noise else {"noise_scale": 0.0, "noise_w_scale": 0.0}))
    return [np.concatenate([c.audio for c in engine.synthesize(t, opts, precision="fp32")])
            for t in texts]


def fidelity(model: Path, config_path: Path, texts: Sequence[str],
             fast: dict[str, dict[int, Any]], threads: int) -> dict[str, dict[str, float]]:
    """Log-mel L1 to FP32's clips and mean DNSMOS OVRL (noise scales 0), per system."""
    from faster_whisper.feature_extractor import FeatureExtractor

    from tools.dnsmos import set_mos
    from tools.quantize.gate import logmel_l1

    fe = FeatureExtractor(feature_size=80)
    mels, mos = {}, {}
    for name, sessions in fast.items():
        clips = engine_clips(model, config_path, texts, sessions, threads, noise=False)
        mels[name] = [fe(c, padding=0) for c in clips]
        mos[name] = float(np.mean([ovrl for ovrl, _ in set_mos(clips)]))
    return {k: {"logmel_l1": float(np.mean([logmel_l1(m, m0) for m, m0
                                             in zip(mels[k], mels["fp32"], strict=True)])),
                "dnsmos_ovrl": mos[k], "dnsmos_diff": mos[k] - mos["fp32"]} for k in fast}


def judge_wer(model: Path, config_path: Path, texts: list[str], seeds: list[int],
              fast: dict[int, Any], whisper: Any, threads: int) -> list[list[str]]:
    """Whisper's transcripts of `texts` through the engine with `fast` windows, one list
    per seed (each a seeded copy of the voice: its decoder has no random nodes, so the
    INT8 decoder is the same for every seed)."""
    from tools import judge

    hyps = []
    with tempfile.TemporaryDirectory(prefix="ovgate-") as tmp:
        for seed in seeds:
            copy = Path(tmp) / f"seed{seed}.onnx"
            judge.seeded_copy(model, seed, copy)
            t0 = time.perf_counter()
            clips = engine_clips(copy, config_path, texts, fast, threads, noise=True)
            hyps.append(whisper.transcribe(clips))
            print(f"  seed {seed}: {time.perf_counter() - t0:.0f}s", file=sys.stderr, flush=True)
            copy.unlink()
    return hyps


def latents(model: Path, id_lists: list[list[int]], scales: tuple[float, float, float],
            threads: int) -> list[dict[str, np.ndarray]]:
    """The decoder inputs of each sentence: front and flow of `model` (FP32, ORT)."""
    from cosyvoiced.tts.voice.split_load import load_split
    from tools.quantize.cli import feeds

    split = load_split(model, threads=threads)
    if split is None:
        raise RuntimeError(f"{model}: no latent seam")
    return [split.latent(feeds(ids, scales)) for ids in id_lists]


def render(report: dict[str, Any]) -> str:
    lines = [f"# OpenVINO + NNCF INT8 decoders: {report['voice']}", "",
             f"AMX {report['amx']}, CPU flags {report['cpu_flags']}, load {report['load']}, "
             f"openvino {report['openvino']}, nncf {report['nncf']}, windows {report['windows']}",
             "", "| variant | FQ | float convs | time vs FP32 | decoder vs FP32 | log-mel L1 "
             "| OVRL diff | WER diff pt [95% CI] | pass |", "|---|---|---|---|---|---|---|---|---|"]
    for name, v in report["variants"].items():
        wd = v.get("wer_diff")
        lines.append(f"| {name} | {v.get('fake_quantize', '-')} | {v.get('float_convs', '-')} "
                     f"| {v['time_ratio']:.3f}x | {v['decoder_ratio']:.3f}x "
                     f"| {v.get('logmel_l1', float('nan')):.4f} "
                     f"| {v.get('dnsmos_diff', float('nan')):+.3f} | "
                     + (f"{wd[0]:+.2f} [{wd[1]:+.2f}, {wd[2]:+.2f}]" if wd else "-")
                     + f" | {v.get('passed', '-')} |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("model", help="voice .onnx (its .onnx.json beside it)")
    p.add_argument("--variants", default="ov_poly_fp32post,ov_poly_fp32_last_stream",
                   help="tools/quantize/ovint8.py VARIANTS, comma-separated")
    p.add_argument("--work", default="ovint8-work", help="IR, latents and reports kept here")
    p.add_argument("--no-amx", action="store_true", help="withhold AMX first (noamx.py)")
    p.add_argument("--rtf-sentences", type=int, default=6)
    p.add_argument("--rtf-rounds", type=int, default=4)
    p.add_argument("--fidelity-sentences", type=int, default=12)
    p.add_argument("--calibration-sentences", type=int, default=0,
                   help="first N calibration sentences (0: all, as the ORT recipes)")
    p.add_argument("--validation-sentences", type=int, default=6,
                   help="held-out (last) judge sentences for accuracy-control variants")
    p.add_argument("--gate", choices=("none", "short", "full"), default="short")
    p.add_argument("--wer-max-ratio", type=float, default=0.65,
                   help="judge WER only for variants at most this share of FP32's time")
    p.add_argument("--threads", type=int, default=2, help="threads for judging (not timing)")
    p.add_argument("--gate-sentences", type=int, default=0,
                   help="first N judge sentences for the gate (0: the gate's own: 40 or all)")
    p.add_argument("--gate-seeds", type=int, default=0, help="seeds (0: the gate's own: 2 or 5)")
    p.add_argument("--wer-all", action="store_true",
                   help="judge WER also where DNSMOS already failed the gate")
    p.add_argument("--timing-only", action="store_true", help="no fidelity, no gate")
    args = p.parse_args(argv)
    if args.no_amx:
        from tools.quantize.noamx import withhold_amx

        withhold_amx()
    import os

    import nncf
    import openvino as ov

    from cosyvoiced.runtime.onnx import cpu_flags
    from cosyvoiced.tts.voice.split_load import load_split
    from tools import judge
    from tools.quantize import ovint8
    from tools.quantize.cli import (
        CALIBRATION,
        CALIBRATION_SEED,
        JUDGED,
        feeds,
        phoneme_ids,
        voice_config,
    )
    from tools.quantize.gate import DNSMOS_DROP_MAX, judged
    from tools.wer import score

    src = Path(args.model).resolve()
    config_path = Path(str(src) + ".json")
    cfg = voice_config(src)
    inf = cfg.get("inference", {})
    scales = (inf.get("noise_scale", 0.667), inf.get("length_scale", 1.0), inf.get("noise_w", 0.8))
    rate_hz = int(cfg["audio"]["sample_rate"])
    work = Path(args.work)
    work.mkdir(parents=True, exist_ok=True)
    texts = judge.load_sentences()
    split = load_split(src, threads=1)  # FP32 as voices run it at one thread
    if split is None:
        raise SystemExit(f"{src}: no latent seam")
    wins = windows(split, rate_hz)
    latent = split.seam.latent
    channels = int(split.latent(feeds(phoneme_ids(texts[:1], config_path)[0], scales))
                   [latent].shape[1])

    @functools.cache
    def fp32_model(poly: bool) -> Any:
        return ovint8.ov_model(ovint8.decoder_graph(src, poly)[0], latent, channels)

    @functools.cache
    def calibration() -> list[dict[str, np.ndarray]]:
        seeded = work / f"calibration-seeded-{src.stem}.onnx"
        if not seeded.exists():
            judge.seeded_copy(src, CALIBRATION_SEED, seeded)
        ids = phoneme_ids(judge.load_sentences(CALIBRATION), config_path)
        ids = ids[:args.calibration_sentences] if args.calibration_sentences else ids
        return latents(seeded, ids, scales, args.threads)

    @functools.cache
    def validation() -> list[tuple[dict[str, np.ndarray], np.ndarray]]:
        held = texts[-args.validation_sentences:]
        items = latents(src, phoneme_ids(held, config_path), (0.0, scales[1], 0.0), args.threads)
        return [(x, ovint8.logmel(split.decode(x), rate_hz)) for x in items]

    names = [n for n in args.variants.split(",") if n]
    report: dict[str, Any] = {
        "voice": src.stem, "amx": "withheld" if args.no_amx else "granted",
        "cpu_flags": " ".join(sorted(f for f in cpu_flags() if f.startswith("amx")
                                     or f in ("avx512_bf16", "avx512_vnni"))),
        "openvino": ov.get_version().split("-")[0], "nncf": nncf.__version__, "windows": wins,
        "created": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        "variants": {}}
    fast: dict[str, dict[int, Any]] = {"fp32": {}}
    built: dict[str, Any] = {}
    for name in names:
        t0 = time.perf_counter()
        variant = ovint8.VARIANTS[name]
        built[name] = ovint8.build(fp32_model(variant.poly_upsample), variant,
                                   work / f"{name}.xml", calibration, validation, rate_hz)
        report["variants"][name] = summary = ovint8.int8_summary(built[name])
        summary["float_convs"] = len(summary.pop("float_convs"))
        summary["int8_convs"] = len(summary["int8_convs"])
        print(f"built {name} in {time.perf_counter() - t0:.0f}s: {summary}", file=sys.stderr,
              flush=True)
        fast[name] = ovint8.compile_windows(built[name], latent, channels, wins, threads=1)
        summary["kernels"] = ovint8.kernels(fast[name][max(wins)])

    report["load"] = " ".join(f"{x:.2f}" for x in os.getloadavg())
    ids = phoneme_ids(texts[:args.rtf_sentences], config_path)
    times = synthesis_times(split, fast, ids, scales, rate_hz, args.rtf_rounds)
    report["load_after"] = " ".join(f"{x:.2f}" for x in os.getloadavg())
    print(f"times: {times}", file=sys.stderr, flush=True)
    report["fp32"] = times["fp32"]
    for name in names:
        report["variants"][name] |= times[name] | {
            "time_ratio": times[name]["rtf"] / times["fp32"]["rtf"],
            "decoder_ratio": times[name]["decoder_rtf"] / times["fp32"]["decoder_rtf"]}
    if args.timing_only:
        return finish(report, work / f"ovgate-{report['amx']}-timing.json")
    finish(report, work / f"ovgate-{report['amx']}-{args.gate}.json")  # so far
    judge_fast = {"fp32": {}} | {n: ovint8.compile_windows(built[n], latent, channels, wins,
                                                           threads=args.threads, pin=False)
                                 for n in names}
    fid = fidelity(src, config_path, texts[:args.fidelity_sentences], judge_fast, args.threads)
    print(f"fidelity: {fid}", file=sys.stderr, flush=True)
    report["fp32"] |= fid["fp32"]
    for name in names:
        report["variants"][name] |= fid[name]
    finish(report, work / f"ovgate-{report['amx']}-{args.gate}.json")
    if args.gate != "none":
        limit, n_seeds = SHORT if args.gate == "short" else (len(texts), 5)
        limit, n_seeds = args.gate_sentences or limit, args.gate_seeds or n_seeds
        gate_texts, seeds = texts[:limit], list(range(1, n_seeds + 1))
        whisper = judge.WhisperJudge(threads=args.threads)
        refs = judge.spoken_references(gate_texts)
        base = score(refs, judge.judge_model(src, config_path, gate_texts, seeds, whisper,
                                             args.threads, cache_dir=work / "judge-cache",
                                             system=JUDGED).hyps_by_seed)
        report["gate"] = {"sentences": len(gate_texts), "seeds": seeds,
                          "fp32_wer_pct": 100 * base.wer}
        for name in names:
            v = report["variants"][name]
            if v["time_ratio"] > args.wer_max_ratio:
                continue
            if v["dnsmos_diff"] < -DNSMOS_DROP_MAX and not args.wer_all:
                v["passed"] = False  # DNSMOS already refused it: no Whisper time on it
                continue
            s = score(refs, judge_wer(src, config_path, gate_texts, seeds, judge_fast[name],
                                      whisper, args.threads))
            v |= judged(s, base, v["dnsmos_diff"]) | {"wer_pct": 100 * s.wer}
            v["passed"] = bool(v["passed"])
            print(f"{name}: WER {100 * s.wer:.2f}% vs {100 * base.wer:.2f}%: {v['passed']}",
                  file=sys.stderr, flush=True)
    return finish(report, work / f"ovgate-{report['amx']}-{args.gate}.json")


def finish(report: dict[str, Any], out: Path) -> int:
    """Write the report as JSON at `out` and print its table."""
    out.write_text(json.dumps(report, indent=1, default=float) + "\n", encoding="utf-8")
    print(render(report))
    return 0


if __name__ == "__main__":
    sys.exit(main())
