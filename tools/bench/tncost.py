"""Suite `tncost`: what reading with NeMo's grammars costs the engine, against the rules.

One engine (the bundled voice, FP32, one ONNX thread, no prompt cache) on one pinned core
speaks call-center sentences with digits and symbols (tests/data/callcenter_tn_en/) in
interleaved rounds, English read by the grammars and by the hand-written rules in turn;
the grammars' window cache is emptied before each of their sentences (every reading is a
first one, as for a text the box has not seen). Rows: median time to first audio and RTF
per mode; targets: grammars / rules <= 1.05 for both (issue 44). `python -m tools.bench tn`
prints these rows too.
"""

from __future__ import annotations

import os
import re
import statistics
import sys
import tempfile
import time

from tools.bench.report import Report

SENTENCES = 12
"""Sentences measured (every n-th of the set's sentences with digits or symbols)."""


def measure(rounds: int = 3) -> dict[str, dict[str, float]]:
    """{"grammars"|"rules": {"ttfa_ms", "rtf"}} medians over sentences and rounds."""
    from cosyvoiced.config.schema import TtsConfig
    from cosyvoiced.runtime.log import setup_logging
    from cosyvoiced.testing.tn_cases import load_callcenter
    from cosyvoiced.tts.engine import TtsEngine
    from cosyvoiced.tts.frontend.normalize import _LOADED, use_grammars
    from cosyvoiced.tts.frontend.normalize.grammars import find
    from cosyvoiced.tts.request import SynthesisOptions

    setup_logging("warning", sink="json", stream=sys.stderr)
    directory = find()
    if directory is None or not use_grammars(directory):
        raise SystemExit("NeMo's English grammars are not built (make install)")
    texts = [c.written for c, _ in load_callcenter() if re.search(r"[\d$%#@&/]", c.written)]
    texts = texts[::max(1, len(texts) // SENTENCES)][:SENTENCES]
    engine = TtsEngine(TtsConfig(precision="fp32", vocoder="fp32", flow="fp32", cache_mb=0),
                       threads=1, cache_dir=tempfile.mkdtemp(prefix="bench-tncost-"))
    engine.voice(None, "fp32")
    opts = SynthesisOptions()
    results: dict[str, list[tuple[float, float]]] = {"grammars": [], "rules": []}
    for text in texts[:2]:  # warm-up: kernels, caches of the ONNX sessions
        list(engine.synthesize(text, opts, precision="fp32"))
    for _ in range(rounds):
        for text in texts:
            for mode in ("grammars", "rules"):
                use_grammars(directory if mode == "grammars" else None)
                for reader in _LOADED.values():
                    reader.window.__self__.clear()  # type: ignore[attr-defined]
                t0 = time.perf_counter()
                first = None
                audio_s = 0.0
                for chunk in engine.synthesize(text, opts, precision="fp32"):
                    first = first if first is not None else time.perf_counter() - t0
                    audio_s += chunk.samples / chunk.rate_hz
                total = time.perf_counter() - t0
                results[mode].append((first or total, total / audio_s))
    use_grammars(None)
    return {mode: {"ttfa_ms": 1000 * statistics.median(r[0] for r in runs),
                   "rtf": statistics.median(r[1] for r in runs)}
            for mode, runs in results.items()}


def add_rows(report: Report, figures: dict[str, dict[str, float]]) -> None:
    """The cost rows and targets, into a report of any columns (label first)."""
    g, r = figures["grammars"], figures["rules"]
    for mode in ("grammars", "rules"):
        report.notes.append(f"engine, English by the {mode}: first audio "
                            f"{figures[mode]['ttfa_ms']:.1f} ms, RTF {figures[mode]['rtf']:.4f}"
                            f" (median, {SENTENCES} call-center sentences, one core)")
    report.figures.update(cost=figures)
    ttfa, rtf = g["ttfa_ms"] / r["ttfa_ms"], g["rtf"] / r["rtf"]
    report.target("first audio, grammars / rules", ttfa, "<= 1.05", ttfa <= 1.05)
    report.target("engine RTF, grammars / rules", rtf, "<= 1.05", rtf <= 1.05)


def run(quick: bool) -> Report:
    os.sched_setaffinity(0, {sorted(os.sched_getaffinity(0))[-1]})
    figures = measure(rounds=1 if quick else 3)
    report = Report("tncost", ["english read by", "first audio ms (median)", "RTF (median)"])
    for mode in ("grammars", "rules"):
        report.rows.append([mode, figures[mode]["ttfa_ms"], figures[mode]["rtf"]])
    add_rows(report, figures)
    return report
