"""Golden tests for each supported SSML tag, and malformed SSML errors with positions."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from cosyvoiced.tts.errors import BadSsml, PausesTooLong, TtsError
from cosyvoiced.tts.frontend.segments import Pause, Phonemes, Speech, without_spans
from cosyvoiced.tts.frontend.ssml import DEFAULT_MAX_PAUSE_MS, parse_rate, parse_ssml
from cosyvoiced.tts.request import SPEED_RANGE


def test_speak_plain_text_is_normalized():
    assert without_spans(parse_ssml("<speak>Pay $5 now.</speak>")) == [Speech("Pay five dollars now.")]


@pytest.mark.parametrize(("tag", "ms"), [
    ('<break time="300ms"/>', 300), ('<break time="1.5s"/>', 1500),
    ('<break strength="strong"/>', 700), ("<break/>", 400), ('<break strength="none"/>', 0),
])
def test_break(tag, ms):
    assert without_spans(parse_ssml(f"<speak>Hello {tag} world</speak>")) == [
        Speech("Hello"), Pause(ms), Speech("world")]


@pytest.mark.parametrize(("kind", "text", "spoken"), [
    ("digits", "4071", "four zero seven one"),
    ("telephone", "555-867-5309", "five five five, eight six seven, five three zero nine"),
    ("date", "11/29/2026", "November twenty ninth, twenty twenty six"),
    ("currency", "$49.99", "forty nine dollars and ninety nine cents"),
    ("currency", "12.50", "twelve dollars and fifty cents"),
    ("characters", "AB1", "A, B, one"),
    ("cardinal", "1,250", "one thousand two hundred fifty"),
    ("ordinal", "3", "third"),
    ("telephone", "1-800-555-0199 ext. 42",
     "one, eight hundred, five five five, zero one nine nine, extension four two"),
    ("time", "5:30 PM EST", "five thirty P M Eastern Standard Time"),
    ("verbatim", "X7-B", "X, seven, B"),
])
def test_say_as(kind, text, spoken):
    doc = f'<speak><say-as interpret-as="{kind}">{text}</say-as></speak>'
    assert without_spans(parse_ssml(doc)) == [Speech(spoken)]


def test_say_as_date_format():
    doc = '<speak><say-as interpret-as="date" format="dmy">29/11/2026</say-as></speak>'
    assert without_spans(parse_ssml(doc)) == [Speech("November twenty ninth, twenty twenty six")]


def test_prosody_rate_applies_to_its_content_only():
    segs = parse_ssml('<speak>a b c <prosody rate="slow">d e f</prosody> g h i</speak>')
    assert without_spans(segs) == [Speech("a b c"), Speech("d e f", 0.8), Speech("g h i")]


@pytest.mark.parametrize(("value", "rate"), [
    ("x-slow", 0.6), ("fast", 1.25), ("150%", 1.5), ("+20%", 1.2), ("-10%", 0.9), ("1.1", 1.1)])
def test_prosody_rate_values(value, rate):
    assert parse_rate(value) == pytest.approx(rate)


def test_nested_prosody_multiplies():
    segs = parse_ssml('<speak><prosody rate="200%"><prosody rate="50%">x y</prosody></prosody></speak>')
    assert without_spans(segs) == [Speech("x y", 1.0)]


def test_phoneme_passthrough_inside_ssml():
    segs = parse_ssml("<speak>Say [[ həlˈoʊ ]] now</speak>")
    assert without_spans(segs) == [Speech("Say"), Phonemes("həlˈoʊ"), Speech("now")]


def test_sub_and_sentence_tags():
    # the alias stays in its sentence (one segment: planned and spoken as one)
    segs = parse_ssml('<speak><s>We are <sub alias="Acme Insurance">AI</sub></s><p>Bye</p></speak>')
    assert without_spans(segs) == [Speech("We are Acme Insurance. Bye.")]


@pytest.mark.parametrize(("doc", "line", "column"), [
    ("<speak>hi", 1, 10),                                   # unclosed
    ("<speak>\n  <break time='x'/></speak>", 2, 3),          # bad break time
    ("<speak>\n<foo/></speak>", 2, 1),                       # unknown element
    ("<prosody>hi</prosody>", 1, 1),                         # wrong root
    ('<speak><say-as interpret-as="nope">1</say-as></speak>', 1, 8),
    ('<speak><prosody rate="fastest">x</prosody></speak>', 1, 8),
    ("<speak>a & b</speak>", 1, 11),                         # bare ampersand (expat points past it)
    ("<speak><break>x</break></speak>", 1, 15),
])
def test_malformed_ssml_says_where(doc, line, column):
    with pytest.raises(BadSsml) as err:
        parse_ssml(doc)
    assert (err.value.line, err.value.column) == (line, column)
    assert err.value.code == "bad_ssml"
    assert f"line {line}, column {column}" in str(err.value)
    assert isinstance(err.value, TtsError)


def test_entity_declarations_are_refused():
    doc = ('<?xml version="1.0"?><!DOCTYPE speak [<!ENTITY x SYSTEM "file:///etc/passwd">]>'
           "<speak>&x;</speak>")
    with pytest.raises(BadSsml, match="document type"):
        parse_ssml(doc)


def test_billion_laughs_refused():
    doc = ('<!DOCTYPE lolz [<!ENTITY lol "lol"><!ENTITY lol2 "&lol;&lol;&lol;">]>'
           "<speak>&lol2;</speak>")
    with pytest.raises(BadSsml):
        parse_ssml(doc)


# --- hostile documents: bounded, or refused with a typed error ---------------------------


def test_nested_prosody_is_clamped_to_the_api_speed_range():
    # regression: 8 levels of 25% multiplied to 1/65536 (65,536x durations: gigabytes of
    # audio from one ONNX run)
    slow = "<speak>" + '<prosody rate="25%">' * 8 + "x y" + "</prosody>" * 8 + "</speak>"
    assert without_spans(parse_ssml(slow)) == [Speech("x y", SPEED_RANGE[0])]
    fast = "<speak>" + '<prosody rate="400%">' * 8 + "[[ a ]]" + "</prosody>" * 8 + "</speak>"
    assert without_spans(parse_ssml(fast)) == [Phonemes("a", SPEED_RANGE[1])]
    inner = ('<speak><prosody rate="25%"><prosody rate="25%"><prosody rate="400%">a'
             "</prosody></prosody></prosody></speak>")
    assert without_spans(parse_ssml(inner)) == [Speech("a", 1.0)]  # clamped at each level, as it nests


def test_breaks_add_up_to_a_cap_then_refuse():
    # regression: a few kB of <break time="10s"/> added up to a 200 MB np.zeros
    many = "<speak>a" + '<break time="10s"/>' * 400 + "b</speak>"
    assert len(many) < 8000
    with pytest.raises(PausesTooLong) as err:
        parse_ssml(many)
    assert err.value.code == "pauses_too_long" and isinstance(err.value, TtsError)
    assert err.value.max_ms == DEFAULT_MAX_PAUSE_MS
    assert "line 1" in str(err.value)
    six = "<speak>a" + '<break time="10s"/>' * 6 + "b</speak>"  # exactly at the cap
    assert sum(s.duration_ms for s in parse_ssml(six) if isinstance(s, Pause)) == 60_000
    with pytest.raises(PausesTooLong):
        parse_ssml(six, max_pause_ms=59_999)


@pytest.mark.parametrize("kind", ["cardinal", "number", "ordinal", "currency", "date"])
def test_say_as_with_thousands_of_digits_is_a_typed_error_or_words(kind):
    # regression: int() of 5000 digits (over Python's 4300-digit limit) or num2words'
    # OverflowError escaped as a ValueError: a 500
    doc = f'<speak><say-as interpret-as="{kind}">{"9" * 5000}</say-as></speak>'
    try:
        segs = parse_ssml(doc)
    except BadSsml as exc:
        assert exc.code == "bad_ssml" and "digits" in str(exc)
    else:
        assert all(isinstance(s, Speech) and s.text for s in segs)


def test_say_as_digits_reads_thousands_of_digits():
    doc = f'<speak><say-as interpret-as="digits">{"7" * 5000}</say-as></speak>'
    [seg] = parse_ssml(doc)
    assert seg.text == " ".join(["seven"] * 5000)


@pytest.mark.parametrize("kind", ["digits", "telephone", "characters", "spell-out", "ordinal",
                                  "cardinal", "date", "currency"])
@pytest.mark.parametrize("text", ["²", "4²", "³⁴", "12²3", "٣٤"])
def test_say_as_with_non_ascii_digits_never_raises_untyped(kind, text):
    # regression: "²".isdigit() is true but int("²") raises ValueError: a 500
    doc = f'<speak>x <say-as interpret-as="{kind}">{text}</say-as></speak>'
    try:
        segs = parse_ssml(doc)
    except TtsError:
        return
    assert isinstance(segs[0], Speech) and segs[0].text.split()[0] == "x"  # one sentence


def test_say_as_digits_skips_superscripts_and_reads_other_decimal_digits():
    assert without_spans(parse_ssml('<speak><say-as interpret-as="digits">4²٣</say-as></speak>')) == [
        Speech("four three")]


_TAG = st.sampled_from(["speak", "break", "say-as", "prosody", "p", "s", "sub", "foo"])
_ATTR = st.sampled_from(['', ' time="300ms"', ' time="10s"', ' time="99999999999999s"',
                         ' strength="strong"', ' rate="25%"', ' rate="400%"', ' rate="-100%"',
                         ' rate="1e9"', ' interpret-as="digits"', ' interpret-as="cardinal"',
                         ' interpret-as="ordinal"', ' interpret-as="date"',
                         ' interpret-as="currency"', ' interpret-as="telephone"',
                         ' interpret-as="characters"', ' format="dmy"', ' alias="A B"',
                         ' alias="[[ a ]]"'])
_TEXT = st.one_of(st.text(max_size=12),
                  st.sampled_from(["9" * 400, "1,000," * 40 + "5", "²", "$" + "9" * 500, "&amp;",
                                   "&#0;", "&#xD800;", "[[", "]]", "3.5", "12/31/99999", "<",
                                   "]]>", "<!--", "-->", "<![CDATA[x]]>"]))


@st.composite
def _tag_soup(draw: st.DrawFn) -> str:
    """Tags, text and ends in any order: mostly malformed."""
    parts = []
    for _ in range(draw(st.integers(0, 12))):
        kind = draw(st.integers(0, 3))
        tag, attr = draw(_TAG), draw(_ATTR)
        parts.append(draw(_TEXT) if kind == 0 else f"<{tag}{attr}>" if kind == 1
                     else f"</{tag}>" if kind == 2 else f"<{tag}{attr}/>")
    body = "".join(parts)
    return f"<speak>{body}</speak>" if draw(st.booleans()) else body


def _element(children: st.SearchStrategy[str]) -> st.SearchStrategy[str]:
    return st.tuples(_TAG, _ATTR, st.lists(children, max_size=3)).map(
        lambda t: f"<{t[0]}{t[1]}>{''.join(t[2])}</{t[0]}>")


_TREE = st.lists(st.recursive(_TEXT | _ATTR.map(lambda a: f"<break{a}/>"), _element,
                              max_leaves=8), max_size=4).map(
    lambda nodes: "<speak>" + "".join(nodes) + "</speak>")
"""Well-formed documents of any tags, attributes and (hostile) text: they reach the
rules (say-as, prosody, breaks, the normalizer), not just expat."""


@settings(max_examples=500, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.too_slow])
@given(st.one_of(_TREE, _tag_soup()))
def test_random_markup_only_ever_raises_typed_errors(doc):
    try:
        segs = parse_ssml(doc)
    except TtsError:
        return
    rates = [s.rate for s in segs if isinstance(s, Speech | Phonemes)]
    assert all(SPEED_RANGE[0] <= r <= SPEED_RANGE[1] for r in rates)
    assert sum(s.duration_ms for s in segs if isinstance(s, Pause)) <= DEFAULT_MAX_PAUSE_MS


@settings(max_examples=200, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.too_slow])
@given(st.text(max_size=300))
def test_random_text_in_speak_only_ever_raises_typed_errors(text):
    try:
        parse_ssml(f"<speak>{text}</speak>")
    except TtsError:
        pass
