"""Text normalization: written text to speakable words, one normalizer per language.

Languages plug in through `register(language, normalizer)`; a voice's language family
("en" for en_US) selects the normalizer. Languages without one are passed through as is
(espeak-ng still reads digits, less well).
"""

from __future__ import annotations

from collections.abc import Callable

from cosyvoiced.tts.normalize.en_text import normalize_en
from cosyvoiced.tts.normalize.segments import Pause, Phonemes, Segment, Speech, split_phoneme_blocks

Normalizer = Callable[[str], str]

_REGISTRY: dict[str, Normalizer] = {"en": normalize_en}


def register(language: str, normalizer: Normalizer) -> None:
    """Add or replace the normalizer of a language family ("en", "de", ...)."""
    _REGISTRY[language.lower()] = normalizer


def languages() -> list[str]:
    return sorted(_REGISTRY)


def normalize_text(text: str, language: str = "en") -> str:
    """Normalize plain text (no phoneme blocks) for `language` ("en", "en_US", "en-us")."""
    family = language.replace("-", "_").split("_")[0].lower()
    fn = _REGISTRY.get(family)
    return fn(text) if fn else text


def plain_segments(text: str, language: str = "en", rate: float = 1.0) -> list[Segment]:
    """Plain text (with optional `[[ phonemes ]]` blocks) to normalized segments."""
    out: list[Segment] = []
    for part in split_phoneme_blocks(text, rate):
        if isinstance(part, Speech):
            words = normalize_text(part.text, language)
            if words:
                out.append(Speech(words, rate))
        else:
            out.append(part)
    return out


__all__ = ["Pause", "Phonemes", "Segment", "Speech", "normalize_text", "plain_segments",
           "register", "languages"]
