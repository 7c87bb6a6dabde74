"""Text to phoneme ids through the espeak-ng bridge shipped by piper-tts.

espeak-ng keeps global state (current voice, internal buffers) and is not thread-safe,
so every call in this process goes through one lock.
"""

from __future__ import annotations

import threading
import unicodedata
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING

from cosyvoiced.tts.errors import TtsError
from cosyvoiced.tts.frontend.segments import INLINE_OPEN, split_inline

if TYPE_CHECKING:  # piper's package imports onnxruntime: the main process never needs it
    from piper.config import PiperConfig
    from piper.phonemize_espeak import EspeakPhonemizer

_LOCK = threading.Lock()
_PHONEMIZER: EspeakPhonemizer | None = None


class UnsupportedPhonemeType(TtsError):
    code = "unsupported_voice"


def espeak_phonemes(text: str, espeak_voice: str,
                    vowel_clusters: set[tuple[str, ...]] | None = None) -> list[str]:
    """Phonemes of `text` (one clause or sentence) as a flat list of codepoints."""
    global _PHONEMIZER
    with _LOCK:
        if _PHONEMIZER is None:
            from piper.phonemize_espeak import EspeakPhonemizer

            _PHONEMIZER = EspeakPhonemizer()
        sentences = _PHONEMIZER.phonemize(espeak_voice, text, vowel_clusters=vowel_clusters)
    flat: list[str] = []
    for n, sentence in enumerate(sentences):
        if n and flat and flat[-1] != " ":
            flat.append(" ")
        flat.extend(sentence)
    return flat


def espeak_sentences(text: str, espeak_voice: str) -> list[str]:
    """Phonemes of each sentence espeak-ng finds in `text`, one string each."""
    global _PHONEMIZER
    with _LOCK:
        if _PHONEMIZER is None:
            from piper.phonemize_espeak import EspeakPhonemizer

            _PHONEMIZER = EspeakPhonemizer()
        return ["".join(s) for s in _PHONEMIZER.phonemize(espeak_voice, text)]


def raw_phonemes(phonemes: str) -> list[str]:
    """`[[ ... ]]` passthrough: the written IPA, decomposed like espeak's output."""
    return list(unicodedata.normalize("NFD", phonemes.strip()))


def to_ids(phonemes: Sequence[str], id_map: Mapping[str, Sequence[int]]) -> list[int]:
    """Phonemes to the voice's ids (BOS, PAD between, EOS), unknown phonemes dropped."""
    from piper.phoneme_ids import phonemes_to_ids

    return phonemes_to_ids(list(phonemes), id_map)


def mixed_phonemes(text: str, espeak_voice: str,
                   vowel_clusters: set[tuple[str, ...]] | None = None) -> list[str]:
    """Phonemes of a text with inline IPA pieces (lexicon words, SSML `<phoneme>`): the
    text between them through espeak-ng, the IPA as written, joined by word spaces, as
    piper's own `[[ ]]` splicing does (piper/voice.py `phonemize`)."""
    flat: list[str] = []
    for piece, is_ipa in split_inline(text):
        if not piece.strip():
            continue
        phonemes = (raw_phonemes(piece) if is_ipa
                    else espeak_phonemes(piece.strip(), espeak_voice, vowel_clusters))
        if flat and flat[-1] != " " and phonemes and phonemes[0] not in (" ", ",", "."):
            flat.append(" ")
        flat.extend(phonemes)
    return flat


def text_phonemes(text: str, config: PiperConfig) -> list[str]:
    """The phonemes the voice is given for `text` (inline IPA pieces spliced in)."""
    from piper.config import PhonemeType

    if config.phoneme_type != PhonemeType.ESPEAK:
        raise UnsupportedPhonemeType(
            f"voice phoneme type {config.phoneme_type.value!r} is not supported (espeak only)")
    return (mixed_phonemes if INLINE_OPEN in text else espeak_phonemes)(
        text, config.espeak_voice, config.vowel_clusters)


def text_to_ids(text: str, config: PiperConfig) -> list[int]:
    return to_ids(text_phonemes(text, config), config.phoneme_id_map)
