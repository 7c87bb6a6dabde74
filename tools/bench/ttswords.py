"""Suite `ttswords`: our TTS word times vs faster-whisper's on the same audio, and what
word timing costs.

Sentences (`sentences()`: 240, `--quick` every 8th) from templates with numbers, money,
dates, times and plain words, a quarter of them SSML with a `<break>` between two
sentences. Ours: the engine in process (FP32 front, the vocoder and flow as `auto` picks,
one thread, prompt cache off), `SynthesisOptions(words=True)`. Reference:
faster-whisper's `WhisperModel` on the bundled CT2 tiny.en, `word_timestamps=True`, VAD
off, on the same audio resampled to 16 kHz. Only words read as written are compared
(a span whose text is one word of letters; groups such as `$5` or a date are timed but
have no one Whisper word to pair with): paired by text (Whisper's English normalizer,
then difflib's matching runs), |Δstart| over the pairs. Cost: each sentence synthesized
off, on, on, off, the faster of each kind kept, in the same run (RTF on / off); first
audio on the real daemon's `/v1/audio/speech`, `pcm`, as plain streaming vs
`stream_format: "sse"` (first audio byte vs first `speech.audio.delta`), alternating,
medians.
"""

from __future__ import annotations

import difflib
import json
import random
import re
import statistics
import tempfile
import time
import urllib.request
from pathlib import Path
from typing import Any

import numpy as np
import soxr

from tools.bench.report import Report, cpu_flags

NAMES = ["Maria", "David", "Olivia", "James", "Sophie", "Daniel", "Grace", "Thomas"]
THINGS = ["order", "claim", "payment", "refund", "appointment", "delivery", "invoice",
          "subscription", "ticket", "booking"]
MONTHS = ["January", "February", "March", "April", "May", "June", "July", "August",
          "September", "October", "November", "December"]
TEMPLATES = [
    "Your {thing} of ${dollars}.{cents} was received on {month} {day}, {year}.",
    "Hello {name}, your {thing} number {number} is ready for pickup.",
    "Please call us back before {hour}:{minute} tomorrow morning.",
    "The total comes to ${big} including taxes and fees.",
    "We have {count} {thing}s waiting for review since {month} {day}.",
    "Thank you {name}, the {thing} was moved to {month} {day}, {year} at {hour} o'clock.",
    "Your balance is ${dollars} and the next {thing} is due in {count} days.",
    "Press {digit} to speak with an agent, or stay on the line.",
    "Between {year} and {year2}, prices rose by {pct}% across the region.",
    "The meeting with {name} starts at {hour}:{minute} in room {room}.",
]
SSML = ('<speak>{a} <break time="{ms}ms"/> {b}</speak>')


def sentences(n: int = 240, seed: int = 41) -> list[tuple[str, bool]]:
    """(text, is SSML) pairs, reproducible."""
    rng = random.Random(seed)

    def one() -> str:
        return rng.choice(TEMPLATES).format(
            thing=rng.choice(THINGS), name=rng.choice(NAMES), month=rng.choice(MONTHS),
            dollars=rng.randint(2, 950), cents=f"{rng.randint(0, 99):02d}",
            day=rng.randint(1, 28), year=rng.randint(1995, 2030),
            year2=rng.randint(2031, 2040), number=rng.randint(100, 99999),
            hour=rng.randint(1, 11), minute=f"{rng.choice([0, 15, 20, 30, 45]):02d}",
            big=f"{rng.randint(1, 99)},{rng.randint(0, 999):03d}", count=rng.randint(2, 40),
            digit=rng.randint(0, 9), pct=rng.randint(2, 60), room=rng.randint(100, 999))

    out = []
    for i in range(n):
        if i % 4 == 3:
            out.append((SSML.format(a=one(), b=one(), ms=rng.choice([300, 500, 800, 1200])),
                        True))
        else:
            out.append((one(), False))
    return out


def _engine() -> Any:
    from cosyvoiced.config.schema import TtsConfig
    from cosyvoiced.tts.cli import usable_dir
    from cosyvoiced.tts.engine import TtsEngine

    cache = usable_dir("/var/cache/cosyvoiced", Path.home() / ".cache" / "cosyvoiced")
    return TtsEngine(TtsConfig(cache_mb=0), cache_dir=cache)


def _speak(engine: Any, text: str, ssml: bool, words: bool) -> tuple[np.ndarray, list, float,
                                                                       int]:
    from cosyvoiced.tts.request import SynthesisOptions

    t0 = time.perf_counter()
    chunks = list(engine.synthesize(text, SynthesisOptions(words=words, ssml=ssml,
                                                           format="float32")))
    took = time.perf_counter() - t0
    return (np.concatenate([c.audio for c in chunks]), [w for c in chunks for w in c.words],
            took, chunks[0].rate_hz)


def _plain(word: str) -> bool:
    return bool(re.fullmatch(r"[A-Za-z']+[.,!?;:]?", word))


def paired(mine: list[Any], theirs: list[Any]) -> list[float]:
    """Signed start differences (ours - faster-whisper's, s) of the words read as written
    that both have."""
    from cosyvoiced.testing.prompts import normalizer

    norm = normalizer()
    a = [norm(w.text) if _plain(w.text) else "\0" for w in mine]
    b = [norm(w.word) for w in theirs]
    out = []
    for block in difflib.SequenceMatcher(a=a, b=b, autojunk=False).get_matching_blocks():
        for k in range(block.size):
            i, j = block.a + k, block.b + k
            if a[i] and a[i] != "\0":
                out.append(mine[i].start_s - float(theirs[j].start))
    return out


def _first_audio(url: str, body: dict[str, Any], sse: bool) -> float:
    data = json.dumps({**body, **({"stream_format": "sse"} if sse else {})}).encode()
    req = urllib.request.Request(url, data, {"Content-Type": "application/json"})
    t0 = time.perf_counter()
    first = 0.0
    with urllib.request.urlopen(req, timeout=120) as r:
        if sse:
            for line in r:
                if line.startswith(b'data: {"type": "speech.audio.delta"'):
                    first = first or time.perf_counter() - t0
        else:
            while r.read(4096):
                first = first or time.perf_counter() - t0
    return first


def first_audio(pairs: int) -> tuple[float, float]:
    """Median first audio (s) of plain streaming and of SSE on the real daemon."""
    from tools.bench.calls import Daemon

    with tempfile.TemporaryDirectory() as tmp:
        daemon = Daemon(Path(tmp), ("workers.count=1",))
        try:
            url = f"{daemon.http}/v1/audio/speech"
            texts = [t for t, ssml in sentences() if not ssml]
            plain, sse = [], []
            for i in range(pairs + 2):
                body = {"model": "tts-1", "voice": "alloy", "response_format": "pcm",
                        "input": texts[i % len(texts)]}
                order = (False, True) if i % 2 else (True, False)
                got = {s: _first_audio(url, body, s) for s in order}
                if i >= 2:  # warm-up
                    plain.append(got[False])
                    sse.append(got[True])
        finally:
            daemon.stop()
    return statistics.median(plain), statistics.median(sse)


def run(quick: bool) -> Report:
    import logging

    import structlog
    from faster_whisper import WhisperModel

    from cosyvoiced.listen.asr import bundled_model_dir

    structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(logging.WARNING))
    items = sentences()
    if quick:
        items = items[::8]
    engine = _engine()
    _speak(engine, items[0][0], items[0][1], True)  # warm-up
    model = WhisperModel(str(bundled_model_dir()), device="cpu", compute_type="int8",
                         cpu_threads=1, num_workers=1)
    deltas: list[float] = []
    n_words = 0
    for text, ssml in items:
        audio, said, _, rate = _speak(engine, text, ssml, True)
        n_words += len(said)
        segments, _ = model.transcribe(
            soxr.resample(audio, rate, 16000).astype(np.float32), beam_size=5,
            vad_filter=False, word_timestamps=True, language="en")
        deltas += paired(said, [w for s in segments for w in s.words or ()])
    # cost: each sentence off, on, on, off (the fastest of each pair: this box is shared)
    off_s = on_s = audio_off = audio_on = 0.0
    for text, ssml in items:
        best: dict[bool, tuple[float, float]] = {}
        for words in (False, True, True, False):
            audio, _, took, rate = _speak(engine, text, ssml, words)
            if words not in best or took < best[words][0]:
                best[words] = (took, audio.size / rate)
        off_s, audio_off = off_s + best[False][0], audio_off + best[False][1]
        on_s, audio_on = on_s + best[True][0], audio_on + best[True][1]
    rtf_off, rtf_on = off_s / audio_off, on_s / audio_on
    plain_fa, sse_fa = first_audio(6 if quick else 30)
    absd = np.abs(np.array(deltas)) if deltas else np.array([np.inf])
    median_ms = float(np.median(absd) * 1000)
    p90_ms = float(np.percentile(absd, 90) * 1000)
    rep = Report("ttswords", ["run", "sentences", "words", "synth_s", "audio_s", "rtf"])
    rep.rows.append(["word timing off", len(items), 0, off_s, audio_off, rtf_off])
    rep.rows.append(["word timing on", len(items), n_words, on_s, audio_on, rtf_on])
    ratio, fa_ratio = rtf_on / rtf_off, sse_fa / plain_fa
    rep.figures.update(
        cpu=cpu_flags(), sentences=len(items), ssml=sum(s for _, s in items), words=n_words,
        words_paired=len(deltas), abs_dstart_median_ms=round(median_ms, 1),
        abs_dstart_p90_ms=round(p90_ms, 1),
        dstart_mean_ms=round(float(np.mean(deltas) * 1000), 1) if deltas else None,
        rtf_off=round(rtf_off, 4), rtf_on=round(rtf_on, 4), rtf_ratio=round(ratio, 3),
        first_audio_plain_ms=round(plain_fa * 1000, 1), first_audio_sse_ms=round(sse_fa * 1000, 1),
        first_audio_ratio=round(fa_ratio, 3))
    rep.notes.append(f"CPU: {rep.figures['cpu']}")
    rep.notes.append(f"{len(deltas)} words paired of {n_words}: |Δstart| median {median_ms:.0f} "
                     f"ms, p90 {p90_ms:.0f} ms, mean signed {rep.figures['dstart_mean_ms']} ms; "
                     f"first audio plain {plain_fa * 1000:.0f} ms, SSE {sse_fa * 1000:.0f} ms")
    rep.target("tts_word_abs_dstart_median_ms", median_ms, "<= 60", median_ms <= 60)
    rep.target("tts_word_abs_dstart_p90_ms", p90_ms, "<= 150", p90_ms <= 150)
    rep.target("tts_rtf_words_on_over_off", ratio, "<= 1.03", ratio <= 1.03)
    rep.target("tts_first_audio_sse_over_plain", fa_ratio, "<= 1.03", fa_ratio <= 1.03)
    return rep
