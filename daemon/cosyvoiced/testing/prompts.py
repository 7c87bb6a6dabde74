"""The Asterisk English prompts (human telephone speech, 8 kHz) with their transcripts.

Debian `asterisk-core-sounds-en-wav` ships the recordings, `asterisk-core-sounds-en` the
transcript list. Entries that are only a bracketed description ("[this is a simple beep
tone]") are skipped; a bracketed note after words ("at [@]") is dropped from the text.
The one loader of these recordings for tests and tools; jiwer and whisper-normalizer
(test-only dependencies) are imported only by `wer` and `normalizer`.
"""

from __future__ import annotations

import gzip
import re
import wave
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np

SOUNDS = Path("/usr/share/asterisk/sounds/en_US_f_Allison")
TRANSCRIPTS = Path("/usr/share/doc/asterisk-core-sounds-en/core-sounds-en.txt.gz")


@dataclass(frozen=True)
class Prompt:
    name: str
    text: str
    path: Path

    def samples(self) -> np.ndarray:
        """float32 mono samples at 8 kHz."""
        return load_wav(self.path)


RATE_HZ = 8000
"""The recordings' sample rate."""


def load_wav(path: Path | str, rate_hz: int = RATE_HZ) -> np.ndarray:
    """float32 mono samples of a 16-bit mono WAV recorded at `rate_hz`."""
    with wave.open(str(path)) as w:
        if (w.getsampwidth(), w.getnchannels(), w.getframerate()) != (2, 1, rate_hz):
            raise ValueError(f"{path}: expected 16-bit mono at {rate_hz} Hz")
        pcm = np.frombuffer(w.readframes(w.getnframes()), dtype="<i2")
    return pcm.astype(np.float32) / 32768.0


def prompt_samples(name: str, rate_hz: int = RATE_HZ) -> np.ndarray:
    """The prompt `name` (e.g. "vm-goodbye") as float32 samples, resampled (soxr) to
    `rate_hz`."""
    audio = load_wav(SOUNDS / f"{name}.wav")
    if rate_hz == RATE_HZ:
        return audio
    import soxr

    return soxr.resample(audio, RATE_HZ, rate_hz).astype(np.float32)


def prompts() -> list[Prompt]:
    """Every prompt with a real transcript and a recording, in the list's order."""
    out = []
    with gzip.open(TRANSCRIPTS, "rt", encoding="utf-8", errors="replace") as f:
        for line in f:
            line = line.strip()
            if not line or line.startswith(";") or ":" not in line:
                continue
            name, text = (part.strip() for part in line.split(":", 1))
            text = re.sub(r"\[[^\]]*\]", "", text).strip()
            path = SOUNDS / f"{name}.wav"
            if text and path.is_file():
                out.append(Prompt(name, text, path))
    return out


def normalizer() -> Callable[[str], str]:
    """Whisper's English text normalizer (package whisper-normalizer, no torch)."""
    from whisper_normalizer.english import EnglishTextNormalizer

    return EnglishTextNormalizer()


def wer(refs: list[str], hyps: list[str]) -> float:
    """Corpus word error rate in percent, after Whisper's English normalization."""
    import jiwer

    norm = normalizer()
    pairs = [(norm(r), norm(h)) for r, h in zip(refs, hyps, strict=True)]
    pairs = [(r, h) for r, h in pairs if r.strip()]
    return 100.0 * jiwer.wer([r for r, _ in pairs], [h for _, h in pairs])
