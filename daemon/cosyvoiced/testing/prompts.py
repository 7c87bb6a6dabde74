"""The Asterisk English prompts (human telephone speech, 8 kHz) with their transcripts.

Debian `asterisk-core-sounds-en-wav` ships the recordings, `asterisk-core-sounds-en` the
transcript list. Entries that are only a bracketed description ("[this is a simple beep
tone]") are skipped; a bracketed note after words ("at [@]") is dropped from the text.
"""

from __future__ import annotations

import gzip
import re
import wave
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


def load_wav(path: Path) -> np.ndarray:
    with wave.open(str(path)) as w:
        if w.getsampwidth() != 2 or w.getnchannels() != 1:
            raise ValueError(f"{path}: expected 16-bit mono")
        pcm = np.frombuffer(w.readframes(w.getnframes()), dtype="<i2")
    return pcm.astype(np.float32) / 32768.0


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


def normalizer():
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
