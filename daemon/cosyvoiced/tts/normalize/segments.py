"""What normalization hands to synthesis: speakable text, raw phonemes and pauses."""

from __future__ import annotations

import re
from dataclasses import dataclass

PHONEME_BLOCK = re.compile(r"\[\[(.*?)\]\]", re.DOTALL)
"""Piper-style raw phonemes: `[[ həlˈoʊ ]]` is spoken as written."""


@dataclass(frozen=True)
class Speech:
    text: str
    """Normalized text: words only, punctuation kept for prosody and clause splitting."""
    rate: float = 1.0
    """Speaking-rate multiplier (2.0 = twice as fast)."""


@dataclass(frozen=True)
class Phonemes:
    phonemes: str
    """IPA phonemes passed to the voice unchanged."""
    rate: float = 1.0
    """Speaking-rate multiplier."""


@dataclass(frozen=True)
class Pause:
    duration_ms: int
    """Silence inserted at this point."""


Segment = Speech | Phonemes | Pause


def split_phoneme_blocks(text: str, rate: float = 1.0) -> list[Speech | Phonemes]:
    """Cut `[[ ... ]]` blocks out of text: text parts stay Speech (not yet normalized)."""
    parts: list[Speech | Phonemes] = []
    pos = 0
    for m in PHONEME_BLOCK.finditer(text):
        if m.start() > pos:
            parts.append(Speech(text[pos:m.start()], rate))
        if m.group(1).strip():
            parts.append(Phonemes(m.group(1).strip(), rate))
        pos = m.end()
    if pos < len(text):
        parts.append(Speech(text[pos:], rate))
    return parts
