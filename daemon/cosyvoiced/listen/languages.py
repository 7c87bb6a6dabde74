"""The languages a Whisper model transcribes, and a request's language checked against them.

A CTranslate2 Whisper model directory names its language tokens in `config.json`
(`lang_ids`: token ids such as `<|de|>`'s) and spells them in `tokenizer.json`. Only a
multilingual model can be prompted with one: CTranslate2 calls a model multilingual when
its vocabulary (`vocabulary.json` or `vocabulary.txt`, one token a line) has at least
51865 tokens (`Whisper.is_multilingual`); an English-only model (tiny.en, base.en, ...)
has 51864 and its `lang_ids` are there but unused, so it transcribes `en` only. The worker asks CTranslate2 itself (`WhisperAsr.languages`); the
main process reads the same answer from the files, without loading the weights.

A request names a language by its code (`de`), a language tag (`de-DE`: its primary
subtag) or Whisper's English name (`german`), in any case.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Mapping, Sequence
from pathlib import Path

from cosyvoiced.errors import CosyvoicedError
from cosyvoiced.listen.events import Transcript

__all__ = ["MULTILINGUAL_VOCAB", "NAMES", "LanguageError", "language_name", "language_tokens",
           "read_special_ids", "special_ids", "model_languages", "read_lang_ids", "resolve_language",
           "spoken_language", "vocabulary_size"]

MULTILINGUAL_VOCAB = 51865
"""Vocabulary size from which CTranslate2 calls a Whisper model multilingual."""

NAMES: dict[str, str] = {
    "en": "english", "zh": "chinese", "de": "german", "es": "spanish", "ru": "russian",
    "ko": "korean", "fr": "french", "ja": "japanese", "pt": "portuguese", "tr": "turkish",
    "pl": "polish", "ca": "catalan", "nl": "dutch", "ar": "arabic", "sv": "swedish",
    "it": "italian", "id": "indonesian", "hi": "hindi", "fi": "finnish", "vi": "vietnamese",
    "he": "hebrew", "uk": "ukrainian", "el": "greek", "ms": "malay", "cs": "czech",
    "ro": "romanian", "da": "danish", "hu": "hungarian", "ta": "tamil", "no": "norwegian",
    "th": "thai", "ur": "urdu", "hr": "croatian", "bg": "bulgarian", "lt": "lithuanian",
    "la": "latin", "mi": "maori", "ml": "malayalam", "cy": "welsh", "sk": "slovak",
    "te": "telugu", "fa": "persian", "lv": "latvian", "bn": "bengali", "sr": "serbian",
    "az": "azerbaijani", "sl": "slovenian", "kn": "kannada", "et": "estonian",
    "mk": "macedonian", "br": "breton", "eu": "basque", "is": "icelandic", "hy": "armenian",
    "ne": "nepali", "mn": "mongolian", "bs": "bosnian", "kk": "kazakh", "sq": "albanian",
    "sw": "swahili", "gl": "galician", "mr": "marathi", "pa": "punjabi", "si": "sinhala",
    "km": "khmer", "sn": "shona", "yo": "yoruba", "so": "somali", "af": "afrikaans",
    "oc": "occitan", "ka": "georgian", "be": "belarusian", "tg": "tajik", "sd": "sindhi",
    "gu": "gujarati", "am": "amharic", "yi": "yiddish", "lo": "lao", "uz": "uzbek",
    "fo": "faroese", "ht": "haitian creole", "ps": "pashto", "tk": "turkmen",
    "nn": "nynorsk", "mt": "maltese", "sa": "sanskrit", "lb": "luxembourgish",
    "my": "myanmar", "bo": "tibetan", "tl": "tagalog", "mg": "malagasy", "as": "assamese",
    "tt": "tatar", "haw": "hawaiian", "ln": "lingala", "ha": "hausa", "ba": "bashkir",
    "jw": "javanese", "su": "sundanese", "yue": "cantonese",
}
"""Whisper's language codes and the English names it gives them (as OpenAI's
`verbose_json` reports a transcription's language)."""
_BY_NAME = {name: code for code, name in NAMES.items()}


class LanguageError(CosyvoicedError):
    """A language the model does not transcribe, or a model whose languages cannot be read."""

    code = "unsupported_language"

    def __init__(self, message: str, *, code: str | None = None) -> None:
        super().__init__(message)
        if code is not None:
            self.code = code


def language_name(code: str) -> str:
    """Whisper's English name for `code` (`de` -> `german`); the code if it has none."""
    return NAMES.get(code, code)


def read_lang_ids(model_dir: Path) -> list[int]:
    """`config.json`'s `lang_ids` (LanguageError `asr_model_config` if unreadable)."""
    path = model_dir / "config.json"
    try:
        ids = json.loads(path.read_text()).get("lang_ids") or []
    except (OSError, ValueError, AttributeError) as exc:
        raise LanguageError(f"cannot read {path}: {exc}", code="asr_model_config") from exc
    if not isinstance(ids, list) or not all(isinstance(i, int) for i in ids):
        raise LanguageError(f"{path}: lang_ids is no list of token ids", code="asr_model_config")
    return ids


def special_ids(tokenizer_json: Path) -> dict[str, int]:
    """The added (special) tokens of a tokenizer.json, by content: Whisper's language and
    task tokens are among them, so no tokenizer object is needed to spell them."""
    with open(tokenizer_json, encoding="utf-8") as f:
        added = json.load(f).get("added_tokens") or []
    return {str(t["content"]): int(t["id"]) for t in added}


def language_tokens(lang_ids: Sequence[int], special: Mapping[str, int]) -> dict[str, int]:
    """Language code -> token id: each of `lang_ids` spelled by the model's special tokens
    (`special_ids`), `<|de|>` -> `de`."""
    spelled = {tid: token for token, tid in special.items()}
    out: dict[str, int] = {}
    for tid in lang_ids:
        token = spelled.get(tid)
        if token is None or not (token.startswith("<|") and token.endswith("|>")):
            raise LanguageError(f"lang_ids {tid} is no language token ({token!r})",
                                code="asr_model_config")
        out[token[2:-2]] = tid
    return out


def read_special_ids(model_dir: Path) -> dict[str, int]:
    """`special_ids` of the model's tokenizer.json (LanguageError `asr_model_config` if
    unreadable)."""
    try:
        return special_ids(model_dir / "tokenizer.json")
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise LanguageError(f"cannot read {model_dir / 'tokenizer.json'}: {exc}",
                            code="asr_model_config") from exc


def vocabulary_size(model_dir: Path) -> int:
    """Tokens in the model's CTranslate2 vocabulary (`vocabulary.json`, else `.txt`)."""
    try:
        if (model_dir / "vocabulary.json").is_file():
            return len(json.loads((model_dir / "vocabulary.json").read_text()))
        return len((model_dir / "vocabulary.txt").read_bytes().rstrip(b"\n").split(b"\n"))
    except (OSError, ValueError, TypeError) as exc:
        raise LanguageError(f"cannot read the vocabulary of {model_dir}: {exc}",
                            code="asr_model_config") from exc


@functools.cache
def model_languages(model_dir: Path) -> tuple[str, ...]:
    """The language codes the model in `model_dir` transcribes, in its token order:
    `("en",)` for an English-only model. Read once per directory (the pre-flight check
    reads it before the workers start; `asr.model_dir` changes only with a restart)."""
    if vocabulary_size(model_dir) < MULTILINGUAL_VOCAB:
        return ("en",)
    codes = tuple(language_tokens(read_lang_ids(model_dir), read_special_ids(model_dir)))
    if not codes:
        raise LanguageError(f"{model_dir / 'config.json'} names no languages (lang_ids) for "
                            "a multilingual model", code="asr_model_config")
    return codes


def resolve_language(asked: str, available: Sequence[str]) -> str:
    """The code of the language a request asks for (`""`: none asked), or LanguageError
    naming the languages the model has."""
    want = asked.strip().lower().replace("_", "-")
    if not want:
        return ""
    if not available:
        raise LanguageError("speech recognition is off (asr.enabled)", code="asr_disabled")
    code = _BY_NAME.get(want, want)
    if code not in available and "-" in code:
        code = code.split("-", 1)[0]  # a language tag: its primary subtag
    if code in available:
        return code
    listed = ", ".join(available) if len(available) <= 12 else (
        f"{len(available)} languages: {', '.join(available)}")
    raise LanguageError(f"the ASR model does not transcribe {asked.strip()!r}; it "
                        f"transcribes {listed}")


def spoken_language(finals: Sequence[Transcript], asked: str,
                    available: Sequence[str]) -> str:
    """A transcription's language: the one asked, else the one most of its speech was
    transcribed in (detected per utterance), else the model's only one ("": unknown)."""
    if asked:
        return asked
    heard: dict[str, int] = {}
    for t in finals:
        if t.language:
            heard[t.language] = heard.get(t.language, 0) + max(1, t.end_ms - t.start_ms)
    if heard:
        return max(heard, key=heard.__getitem__)
    return available[0] if len(available) == 1 else ""
