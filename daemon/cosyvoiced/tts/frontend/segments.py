"""What normalization hands to synthesis: speakable text, raw phonemes and pauses."""

from __future__ import annotations

import re
from dataclasses import dataclass, replace

PHONEME_BLOCK = re.compile(r"\[\[(.*?)\]\]", re.DOTALL)
"""Piper-style raw phonemes: `[[ həlˈoʊ ]]` is spoken as written."""


@dataclass(frozen=True)
class SourceSpan:
    """Where a run of spoken words came from: `Speech.text[start:end]` reads
    `source[src_start:src_end]` of the caller's input as sent (the raw text, or the SSML
    document). A word read as written has its own span; a group ("five dollars" from
    `$5`) one span over all its words."""

    start: int
    """Offset of the run in Speech.text."""
    end: int
    src_start: int
    """Offset in the caller's input as sent (raw text, or the SSML document)."""
    src_end: int


@dataclass(frozen=True)
class Speech:
    text: str
    """Normalized text: words only, punctuation kept for prosody and clause splitting."""
    rate: float = 1.0
    """Speaking-rate multiplier (2.0 = twice as fast)."""
    spans: tuple[SourceSpan, ...] = ()
    """Sorted, non-overlapping; every spoken word of `text` inside exactly one (punctuation
    may fall outside). `without_spans` compares readings alone."""


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


def without_spans(segments: list[Segment]) -> list[Segment]:
    """Segments as they are said, their spans dropped (to compare readings alone)."""
    return [replace(s, spans=()) if isinstance(s, Speech) else s for s in segments]


def shift_spans(spans: tuple[SourceSpan, ...], by: int) -> tuple[SourceSpan, ...]:
    """Spans moved `by` characters along Speech.text."""
    return tuple(SourceSpan(s.start + by, s.end + by, s.src_start, s.src_end) for s in spans)


def _stripped(speech: Speech) -> tuple[str, tuple[SourceSpan, ...]]:
    """A Speech's text stripped, and its spans moved (and clipped) along with it."""
    lead = len(speech.text) - len(speech.text.lstrip())
    text = speech.text.strip()
    spans = tuple(SourceSpan(max(s.start - lead, 0), min(s.end - lead, len(text)),
                             s.src_start, s.src_end)
                  for s in speech.spans if s.end - lead > 0 and s.start - lead < len(text))
    return text, spans


def join_speech(first: Speech, second: Speech) -> Speech:
    """Two Speech segments as one (one space between, none before punctuation), spans
    carried."""
    a, a_spans = _stripped(first)
    b, b_spans = _stripped(second)
    if not a or not b:
        return Speech(a or b, second.rate, a_spans or b_spans)
    sep = "" if b[0] in ".,;:!?" else " "  # "<sub>AI</sub>, say": no space before the comma
    return Speech(f"{a}{sep}{b}", second.rate, a_spans + shift_spans(b_spans, len(a) + len(sep)))


def merge_speech(segments: list[Segment]) -> list[Segment]:
    """Adjacent Speech segments at the same rate joined into one, so a sentence cut by
    markup (`<sub>`, `<phoneme>`, a lexicon word) is planned and spoken as one."""
    out: list[Segment] = []
    for seg in segments:
        last = out[-1] if out else None
        if isinstance(seg, Speech) and isinstance(last, Speech) and last.rate == seg.rate:
            out[-1] = join_speech(last, seg)
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
