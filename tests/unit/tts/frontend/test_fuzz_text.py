"""Property-based fuzzing of the text a client sends: SSML and plain-text normalization
raise only typed TtsErrors (answered 400), never anything else. Derandomized."""

from __future__ import annotations

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from cosyvoiced.tts.errors import TtsError
from cosyvoiced.tts.frontend.normalize import normalize_text
from cosyvoiced.tts.frontend.ssml import parse_ssml

FUZZ = settings(derandomize=True, database=None, deadline=None, max_examples=400,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much])

_words = st.sampled_from(["call", "12", "3.5", "$4,000", "1/2", "2026-12-02", "Dr.", "St.",
                          "10:30", "1st", "²", "½", "٣", "１２", "Ⅻ", "%", "#", "&", "'",
                          "9" * 40, "1e308", "-0", "0x1F", "…", "—", "\u200b", "🙂"])
_chars = st.text(st.characters(blacklist_categories=("Cs", "Cc")), max_size=12)  # XML-safe
_text = st.lists(_words | _chars, max_size=12).map(" ".join)
_attr = st.sampled_from(["", "1", "-5", "25%", "500%", "x-slow", "fast", "1e9", "nan", "inf",
                         "3s", "20000ms", "-1ms", "digits", "cardinal", "ordinal", "date",
                         "characters", "telephone", "mdy", "ymd", "\"", "&amp;"])


_rate = st.sampled_from(["x-slow", "slow", "medium", "fast", "x-fast", "25%", "50%", "150%",
                         "400%", "+20%", "-30%"]) | _attr
_time = st.sampled_from(["0ms", "250ms", "1s", "1.5s", "9s", "9999ms"]) | _attr
_kind = st.sampled_from(["digits", "telephone", "date", "currency", "characters", "spell-out",
                         "cardinal", "number", "ordinal"]) | _attr
_fmt = st.sampled_from(["mdy", "dmy", "ymd", "md", "y", ""]) | _attr


def _element(children: st.SearchStrategy[str]) -> st.SearchStrategy[str]:
    valid = st.one_of(
        st.builds(lambda r, c: f'<prosody rate="{r}">{c}</prosody>', _rate, children),
        st.builds(lambda t: f'<break time="{t}"/>', _time),
        st.builds(lambda s: f'<break strength="{s}"/>',
                  st.sampled_from(["none", "x-weak", "weak", "medium", "strong", "x-strong"])),
        st.builds(lambda k, f, c: f'<say-as interpret-as="{k}" format="{f}">{c}</say-as>',
                  _kind, _fmt, _text.map(_escape)),
        st.builds(lambda a, c: f'<sub alias="{a}">{c}</sub>', _text.map(_escape), children),
        st.builds(lambda c: f"<p>{c}</p>", children),
        st.builds(lambda c: f"<s>{c}</s>", children),
    )
    broken = st.one_of(  # rarer: a document a client got wrong
        st.builds(lambda c: f"<unknown>{c}</unknown>", children),
        st.builds(lambda c: f"<p>{c}", children),
        st.builds(lambda s: f'<break strength="{s}"/>', _attr),
    )
    return st.one_of(valid, valid, valid, broken)


def _escape(s: str) -> str:
    return s.replace("&", "&amp;").replace("<", "&lt;").replace('"', "&quot;")


_body = st.recursive(_text.map(_escape),
                     lambda c: st.lists(_element(c) | c, max_size=4).map("".join),
                     max_leaves=10)
_ssml = st.integers(0, 9).flatmap(  # mostly documents, some fragments and raw text
    lambda i: st.builds(lambda b: f"<speak>{b}</speak>", _body) if i < 8
    else _body if i == 8 else st.text(max_size=200))


@FUZZ
@given(_ssml)
def test_parse_ssml_only_tts_errors(doc):
    try:
        parse_ssml(doc, max_pause_ms=10_000)
    except TtsError:
        pass


@FUZZ
@given(_text | st.text(max_size=300), st.sampled_from(["en", "en_US", "de", "xx"]))
def test_normalize_text_only_tts_errors(text, language):
    try:
        out = normalize_text(text, language)
    except TtsError:
        return
    assert isinstance(out, str) and len(out) <= 40 * len(text) + 100  # no blow-up
