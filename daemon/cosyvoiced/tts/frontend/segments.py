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

INLINE_OPEN, INLINE_CLOSE, INLINE_SPACE = "\ue000", "\ue001", "\ue002"
"""Private-use characters that carry phonemes inside a Speech text (a lexicon entry, an
SSML `<phoneme>`): the word stays in its sentence, and the marker holds no whitespace or
punctuation, so planning never cuts inside it. Taken out of every input first."""
INLINE_RE = re.compile("\ue000([^\ue000\ue001]*)\ue001")
_MARKERS = str.maketrans({INLINE_OPEN: " ", INLINE_CLOSE: " ", INLINE_SPACE: " "})


def strip_markers(text: str) -> str:
    """Input text with any of the inline phoneme markers made spaces."""
    return text.translate(_MARKERS)


def inline_phonemes(ipa: str) -> str:
    """IPA as an inline piece of a Speech text."""
    return INLINE_OPEN + INLINE_SPACE.join(ipa.split()) + INLINE_CLOSE


def split_inline(text: str) -> list[tuple[str, bool]]:
    """A Speech text -> (text, False) and (IPA, True) parts, in order."""
    parts: list[tuple[str, bool]] = []
    pos = 0
    for m in INLINE_RE.finditer(text):
        if m.start() > pos:
            parts.append((text[pos:m.start()], False))
        parts.append((m.group(1).replace(INLINE_SPACE, " "), True))
        pos = m.end()
    if pos < len(text):
        parts.append((text[pos:], False))
    return parts


def merge_speech(segments: list[Segment]) -> list[Segment]:
    """Adjacent Speech segments at the same rate joined into one, so a sentence cut by
    markup (`<sub>`, `<phoneme>`, a lexicon word) is planned and spoken as one."""
    out: list[Segment] = []
    for seg in segments:
        last = out[-1] if out else None
        if isinstance(seg, Speech) and isinstance(last, Speech) and last.rate == seg.rate:
            out[-1] = Speech(f"{last.text.rstrip()} {seg.text.lstrip()}".strip(), seg.rate)
        else:
            out.append(seg)
    return out


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
