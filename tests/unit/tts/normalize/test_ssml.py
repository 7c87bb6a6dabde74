"""Golden tests for each supported SSML tag, and malformed SSML errors with positions."""

from __future__ import annotations

import pytest

from cosyvoiced.tts.errors import BadSsml, TtsError
from cosyvoiced.tts.normalize.segments import Pause, Phonemes, Speech
from cosyvoiced.tts.normalize.ssml import parse_rate, parse_ssml


def test_speak_plain_text_is_normalized():
    assert parse_ssml("<speak>Pay $5 now.</speak>") == [Speech("Pay five dollars now.")]


@pytest.mark.parametrize(("tag", "ms"), [
    ('<break time="300ms"/>', 300), ('<break time="1.5s"/>', 1500),
    ('<break strength="strong"/>', 700), ("<break/>", 400), ('<break strength="none"/>', 0),
])
def test_break(tag, ms):
    assert parse_ssml(f"<speak>Hello {tag} world</speak>") == [
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
])
def test_say_as(kind, text, spoken):
    doc = f'<speak><say-as interpret-as="{kind}">{text}</say-as></speak>'
    assert parse_ssml(doc) == [Speech(spoken)]


def test_say_as_date_format():
    doc = '<speak><say-as interpret-as="date" format="dmy">29/11/2026</say-as></speak>'
    assert parse_ssml(doc) == [Speech("November twenty ninth, twenty twenty six")]


def test_prosody_rate_applies_to_its_content_only():
    segs = parse_ssml('<speak>a b c <prosody rate="slow">d e f</prosody> g h i</speak>')
    assert segs == [Speech("a b c"), Speech("d e f", 0.8), Speech("g h i")]


@pytest.mark.parametrize(("value", "rate"), [
    ("x-slow", 0.6), ("fast", 1.25), ("150%", 1.5), ("+20%", 1.2), ("-10%", 0.9), ("1.1", 1.1)])
def test_prosody_rate_values(value, rate):
    assert parse_rate(value) == pytest.approx(rate)


def test_nested_prosody_multiplies():
    segs = parse_ssml('<speak><prosody rate="200%"><prosody rate="50%">x y</prosody></prosody></speak>')
    assert segs == [Speech("x y", 1.0)]


def test_phoneme_passthrough_inside_ssml():
    segs = parse_ssml("<speak>Say [[ həlˈoʊ ]] now</speak>")
    assert segs == [Speech("Say"), Phonemes("həlˈoʊ"), Speech("now")]


def test_sub_and_sentence_tags():
    segs = parse_ssml('<speak><s>We are <sub alias="Acme Insurance">AI</sub></s><p>Bye</p></speak>')
    assert segs == [Speech("We are"), Speech("Acme Insurance."), Speech("Bye.")]


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
