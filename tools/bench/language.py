"""Suite `language`: the multilingual Whisper base against the bundled tiny.en, and what
detecting the language costs.

Decoded with `WhisperAsr.transcribe` (our log-mel, our encoder window, the default
`AsrConfig`, one thread, batches of one) on every 4th Asterisk prompt with a real
transcript (`--quick`: every 20th; English telephone speech, 8 kHz resampled to 16 kHz),
and on German and Spanish sentences spoken by espeak-ng (6 each, base only). Rows: the
model, the language mode (`en`/`de`/`es` asked, or detected), WER (Whisper's English
normalizer for English; lower-cased words without punctuation otherwise), decoding
seconds per second of utterance, and the share of utterances detected as the language
spoken. Needs `var/models/whisper-base` (`make whisper-base`; assembled here if absent).
"""

from __future__ import annotations

import re
import subprocess
import tempfile
import time
import unicodedata
import wave
from pathlib import Path

import numpy as np
import soxr
from jiwer import wer as jiwer_wer

from cosyvoiced.testing.prompts import prompts, wer
from tools.bench.report import Report

FOREIGN = {
    "de": ("de+m3", [
        "Das Wetter ist heute sehr schön, und wir gehen am Nachmittag zusammen in den Park.",
        "Guten Morgen. Ich möchte heute Abend einen Tisch für vier Personen reservieren.",
        "Können Sie mir bitte sagen, wie ich zum Bahnhof komme?",
        "Die Sitzung beginnt morgen um neun Uhr.",
        "Ihre Bestellung wird am Dienstag geliefert.",
        "Bitte warten Sie, Sie werden gleich verbunden.",
    ]),
    "es": ("es", [
        "Buenos días. Quisiera reservar una mesa para cuatro personas esta noche.",
        "El tiempo está muy bonito hoy y vamos al parque por la tarde.",
        "¿Puede decirme cómo llegar a la estación de tren?",
        "La reunión empieza mañana a las nueve.",
        "Su pedido llegará el martes por la tarde.",
        "Por favor espere, le vamos a conectar en seguida.",
    ]),
}


def _espeak(voice: str, text: str, tmp: Path) -> np.ndarray:
    path = tmp / "said.wav"
    subprocess.run(["espeak-ng", "-v", voice, "-s", "150", "-w", str(path), text], check=True,
                   capture_output=True, timeout=60)
    with wave.open(str(path)) as w:
        rate = w.getframerate()
        pcm = np.frombuffer(w.readframes(w.getnframes()), "<i2")
    y = soxr.resample(pcm.astype(np.float32) / 32768, rate, 16000).astype(np.float32)
    pad = np.zeros(4800, np.float32)
    return np.concatenate([pad, y, pad])


def _plain(text: str) -> str:
    flat = unicodedata.normalize("NFKD", text.lower()).encode("ascii", "ignore").decode()
    return " ".join(re.findall(r"[a-z0-9]+", flat))


def _decode(asr, frames: list[np.ndarray], language: str) -> tuple[list, float, float]:
    """Transcripts, decoding seconds, utterance seconds (one utterance per batch)."""
    from cosyvoiced.listen.asr import Utterance

    out, took = [], 0.0
    for f in frames:
        t0 = time.perf_counter()
        out += asr.transcribe([Utterance(f, 0, 0, time.monotonic(), "", language)])
        took += time.perf_counter() - t0
    return out, took, sum(f.shape[0] for f in frames) / 100.0


def run(quick: bool) -> Report:
    import logging

    import structlog

    from cosyvoiced.config.schema import AsrConfig
    from cosyvoiced.listen.asr import WhisperAsr, clip_frames
    from cosyvoiced.listen.models import assemble_base

    structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(logging.WARNING))
    base_dir = Path("var/models/whisper-base")
    assemble_base(base_dir)
    items = prompts()[:: 20 if quick else 4]
    english = [clip_frames(soxr.resample(p.samples(), 8000, 16000).astype(np.float32))
               for p in items]
    refs = [p.text for p in items]
    rep = Report("language", ["model", "speech", "language", "utterances", "wer_pct",
                              "asr_s_per_speech_s", "detected_right_pct"])
    tiny = WhisperAsr(AsrConfig())
    base = WhisperAsr(AsrConfig(model_dir=str(base_dir)))
    for name, asr, modes in (("tiny.en", tiny, ("en",)), ("base", base, ("en", ""))):
        for mode in modes:
            out, took, speech_s = _decode(asr, english, mode)
            right = 100.0 * sum(t.language == "en" for t in out) / len(out)
            rep.rows.append([name, "English (Asterisk)", mode or "detected", len(out),
                             wer(refs, [t.text for t in out]), took / speech_s, right])
            rep.figures[f"{name}_{mode or 'detected'}_en_s_per_s"] = took / speech_s
    with tempfile.TemporaryDirectory() as tmp:
        for lang, (voice, texts) in FOREIGN.items():
            frames = [clip_frames(_espeak(voice, t, Path(tmp))) for t in texts]
            for mode in (lang, ""):
                out, took, speech_s = _decode(base, frames, mode)
                right = 100.0 * sum(t.language == lang for t in out) / len(out)
                score = 100.0 * jiwer_wer([_plain(t) for t in texts],
                                          [_plain(t.text) or "-" for t in out])
                rep.rows.append(["base", f"{lang} (espeak-ng)", mode or "detected", len(out),
                                 score, took / speech_s, right])
    en_asked = rep.figures["base_en_en_s_per_s"]
    rep.figures["detect_cost_ratio"] = rep.figures["base_detected_en_s_per_s"] / en_asked
    rep.notes.append("detecting the language runs the encoder once (encode, detect_language, "
                     "generate on its output): the ratio is detected / asked on base, "
                     f"{rep.figures['detect_cost_ratio']:.2f}")
    return rep
