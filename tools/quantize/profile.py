#!/usr/bin/env python3
"""Where an INT8 voice's time goes, op by op: `python -m tools.quantize.profile VOICE.onnx VARIANT.onnx...`.

Runs FP32 (2-D decoder, as voices run it at one thread) and each variant through ONNX
Runtime's profiler (`SessionOptions.enable_profiling`) at `--threads` intra-op threads on
the first judge sentences, and prints, per model, milliseconds per sentence by the kernel
that ran (after ORT's graph fusions: a QDQ Conv that ORT fused shows as QLinearConv, an
unfused one as DequantizeLinear + Conv + QuantizeLinear), the same by graph group
(tools.quantize.recipes.node_group), the Quantize/DequantizeLinear count and time, which
float ops remain in the decoder, and each variant's time against FP32 measured without
the profiler (interleaved rounds, each sentence's best). `--no-amx` withholds AMX from
the process first (tools/quantize/noamx.py): an AMX Xeon then runs the AVX512-VNNI
kernels of a CPU without AMX.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from collections import defaultdict
from pathlib import Path
from typing import Any

#: Kernels that move between float and 8-bit (their time is the price of the QDQ format).
CONVERSIONS = ("QuantizeLinear", "DequantizeLinear", "DynamicQuantizeLinear")
#: Kernels that compute on 8-bit data.
INT8_KERNELS = ("QLinearConv", "ConvInteger", "MatMulInteger", "QLinearMatMul", "QLinearAdd",
                "QLinearLeakyRelu", "QLinearMul", "QLinearConcat", "QLinearSigmoid",
                "DynamicQuantizeMatMul", "MatMulIntegerToFloat", "QGemm")


def summarize(events: list[dict], runs: int) -> dict[str, Any]:
    """Per-run milliseconds by kernel (op_name) and by graph group, and node counts, from
    the trace events of `runs` runs (ORT's profile JSON, `cat == "Node"`)."""
    from tools.quantize.recipes import node_group

    by_op: dict[str, float] = defaultdict(float)
    by_group: dict[str, float] = defaultdict(float)
    nodes: dict[str, set[str]] = defaultdict(set)
    for e in events:
        if e.get("cat") != "Node" or not str(e.get("name", "")).endswith("_kernel_time"):
            continue
        name = e["name"][:-len("_kernel_time")]
        op = e.get("args", {}).get("op_name", "?")
        ms = e.get("dur", 0) / 1000.0 / runs
        by_op[op] += ms
        by_group[node_group(name)] += ms
        nodes[op].add(name)
    total = sum(by_op.values())
    return {"total_ms": total, "by_op": dict(by_op), "by_group": dict(by_group),
            "nodes": {k: len(v) for k, v in nodes.items()},
            "conversion_ms": sum(v for k, v in by_op.items() if k in CONVERSIONS),
            "int8_ms": sum(v for k, v in by_op.items() if k in INT8_KERNELS),
            "float_dec_nodes": sorted(n for op, names in nodes.items()
                                      if op in ("Conv", "ConvTranspose", "FusedConv")
                                      for n in names if n.startswith("/dec/"))}


def profile_model(model: Path, id_lists: list[list[int]], scales: tuple[float, float, float],
                  threads: int, rounds: int) -> dict[str, Any]:
    from cosyvoiced.runtime.onnx import create_session
    from cosyvoiced.tts.voice.rewrites import DECODER_2D
    from tools.quantize import cli as quantize

    with tempfile.TemporaryDirectory(prefix="ort-profile-") as tmp:
        # as voices run it (FP32's decoder 2-D; a quantized decoder as built), profiled
        session = create_session(model, threads=threads, rewrite=DECODER_2D,
                                 profile_prefix=f"{tmp}/p")
        for _ in range(rounds + 1):  # the first pass warms up (arenas, kernels), dropped below
            for ids in id_lists:
                session.run(None, quantize.feeds(ids, scales))
        events = json.loads(Path(session.end_profiling()).read_text(encoding="utf-8"))
    # ORT writes a run's model_run event after that run's node events
    runs = [i for i, e in enumerate(events) if e.get("name") == "model_run"]
    first_timed = runs[len(id_lists) - 1] + 1
    return summarize(events[first_timed:], rounds)


def render(profiles: dict[str, dict], ratios: dict[str, float], sentences: int, threads: int,
           amx: str) -> str:
    names = list(profiles)
    ops = sorted({op for p in profiles.values() for op in p["by_op"]},
                 key=lambda op: -max(p["by_op"].get(op, 0.0) for p in profiles.values()))
    groups = sorted({g for p in profiles.values() for g in p["by_group"]})
    head = "| " + " | ".join(names) + " |"
    rule = "|---" * (len(names) + 1) + "|"
    out = [f"# Per-node profile: {sentences} sentences, {threads} thread(s), AMX {amx}", "",
           "ms per pass over the sentences by kernel as ORT ran it (node count in brackets)", "",
           "| kernel " + head, rule]
    for op in ops:
        cells = [f"{p['by_op'][op]:.1f} ({p['nodes'][op]})" if op in p["by_op"] else "-"
                 for p in profiles.values()]
        out.append(f"| {op} | " + " | ".join(cells) + " |")
    out.append("| **total** | " + " | ".join(f"**{p['total_ms']:.1f}**"
                                             for p in profiles.values()) + " |")
    out += ["", "ms by graph group", "", "| group " + head, rule]
    for g in groups:
        out.append(f"| {g} | " + " | ".join(f"{p['by_group'].get(g, 0.0):.1f}"
                                            for p in profiles.values()) + " |")
    out += ["", "| summary " + head, rule,
            "| time vs FP32 (no profiler) | " + " | ".join(f"{ratios.get(n, 0.0):.3f}x"
                                                         for n in names) + " |",
            "| Q/DQ kernels ms | " + " | ".join(f"{p['conversion_ms']:.1f}"
                                               for p in profiles.values()) + " |",
            "| INT8 kernels ms | " + " | ".join(f"{p['int8_ms']:.1f}"
                                               for p in profiles.values()) + " |",
            "| float convs in /dec/ | " + " | ".join(str(len(p["float_dec_nodes"]))
                                                    for p in profiles.values()) + " |"]
    return "\n".join(out) + "\n"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("model", help="voice .onnx (FP32, its .onnx.json beside it)")
    p.add_argument("variants", nargs="*", help="quantized copies of it to profile")
    p.add_argument("--no-amx", action="store_true",
                   help="withhold AMX from this process first (tools/quantize/noamx.py)")
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--sentences", type=int, default=4, help="first N judge sentences")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--json", help="also write the profiles here")
    args = p.parse_args(argv)
    if args.no_amx:
        from tools.quantize.noamx import withhold_amx

        withhold_amx()

    from tools import judge
    from tools.quantize import cli as quantize
    from tools.quantize.noamx import tile_permitted

    src = Path(args.model).resolve()
    cfg = quantize.voice_config(src)
    inf = cfg.get("inference", {})
    scales = (inf.get("noise_scale", 0.667), inf.get("length_scale", 1.0), inf.get("noise_w", 0.8))
    ids = quantize.phoneme_ids(judge.load_sentences()[:args.sentences], Path(str(src) + ".json"))
    models = {"fp32": src} | {Path(v).stem.split(".")[-1]: Path(v) for v in args.variants}
    profiles = {}
    for name, path in models.items():
        profiles[name] = profile_model(path, ids, scales, args.threads, args.rounds)
        print(f"profiled {name}", file=sys.stderr, flush=True)
    rtf = quantize.measure_rtf(models, ids, cfg["audio"]["sample_rate"], scales, args.rounds,
                               threads=args.threads)
    ratios = {k: v / rtf["fp32"] for k, v in rtf.items()}
    amx = "withheld" if args.no_amx else ("granted" if tile_permitted() else "unused")
    print(render(profiles, ratios, len(ids), args.threads, amx))
    if args.json:
        Path(args.json).write_text(json.dumps({"amx": amx, "threads": args.threads,
                                               "ratios": ratios, "profiles": profiles},
                                              indent=1) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
