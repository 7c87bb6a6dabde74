"""Text normalization: written text to speakable words, one normalizer per language.

Languages plug in through `register(language, normalizer)`; a voice's language family
("en" for en_US) selects the normalizer. Languages without one are passed through as is
(espeak-ng still reads digits, less well).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

import structlog

from cosyvoiced.tts.errors import TtsError, UnreadableText
from cosyvoiced.tts.frontend.normalize.en_text import normalize_en
from cosyvoiced.tts.frontend.segments import (
    Pause,
    Phonemes,
    Segment,
    Speech,
    inline_phonemes,
    split_inline,
    split_phoneme_blocks,
    strip_markers,
)

if TYPE_CHECKING:
    from cosyvoiced.tts.frontend.lexicon import Lexicon

Normalizer = Callable[[str], str]

log = structlog.get_logger(__name__)

_REGISTRY: dict[str, Normalizer] = {"en": normalize_en}


def register(language: str, normalizer: Normalizer) -> None:
    """Add or replace the normalizer of a language family ("en", "de", ...)."""
    _REGISTRY[language.lower()] = normalizer


def languages() -> list[str]:
    return sorted(_REGISTRY)


def normalize_text(text: str, language: str = "en") -> str:
    """Normalize plain text (no phoneme blocks) for `language` ("en", "en_US", "en-us").

    A rule that fails on the text is a typed `UnreadableText` (answered 400), never an
    untyped error: the rules are meant to read or leave whatever they match, so it is also
    logged as the bug it is."""
    family = language.replace("-", "_").split("_")[0].lower()
    fn = _REGISTRY.get(family)
    if fn is None:
        return text
    try:
        return fn(text)
    except TtsError:
        raise
    except Exception as exc:  # a rule's bug must not become a 500
        # the message may quote the input: its type only above debug
        log.warning("normalize_failed", language=family, error=type(exc).__name__,
                    text_chars=len(text))
        log.debug("normalize_failed_detail", error=repr(exc)[:200])
        raise UnreadableText(f"the {family} text normalizer could not read this text "
                             f"({type(exc).__name__})") from exc


def plain_segments(text: str, language: str = "en", rate: float = 1.0,
                   lexicon: Lexicon | None = None) -> list[Segment]:
    """Plain text (with optional `[[ phonemes ]]` blocks) to normalized segments; the
    lexicon's words respelled or kept as inline IPA inside their Speech segment."""
    out: list[Segment] = []
    for part in split_phoneme_blocks(strip_markers(text), rate):
        if isinstance(part, Speech):
            mixed = lexicon.apply(part.text) if lexicon is not None else part.text
            pieces = [inline_phonemes(piece) if is_ipa else normalize_text(piece, language)
                      for piece, is_ipa in split_inline(mixed)]
            words = "".join(p if not n or p[0] in ".,;:!?" else " " + p
                            for n, p in enumerate(x for x in pieces if x))
            if words:
                out.append(Speech(words, rate))
        else:
            out.append(part)
    return out


__all__ = ["Pause", "Phonemes", "Segment", "Speech", "normalize_text", "plain_segments",
           "register", "languages"]
