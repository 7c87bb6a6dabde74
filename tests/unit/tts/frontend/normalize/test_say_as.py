"""`<say-as>` on NeMo's grammars: every accepted interpret-as value, its spans, and the
values and formats refused with a 400 that names the accepted ones (issue 44)."""

from __future__ import annotations

import pytest

from cosyvoiced.tts.errors import BadSsml
from cosyvoiced.tts.frontend.normalize.en_say_as import CURRENCIES, DATE_FORMATS
from cosyvoiced.tts.frontend.segments import SourceSpan, Speech
from cosyvoiced.tts.frontend.ssml import INTERPRET_AS, parse_ssml


def said(kind: str, text: str, fmt: str = "") -> Speech:
    attrs = f' format="{fmt}"' if fmt else ""
    [seg] = parse_ssml(f'<speak>Say <say-as interpret-as="{kind}"{attrs}>{text}</say-as>'
                       f" now.</speak>")
    assert isinstance(seg, Speech)
    return seg


CASES = [
    ("cardinal", "1234", "", "one thousand two hundred and thirty four"),  # not a year
    ("cardinal", "911", "", "nine hundred and eleven"),  # not the emergency number
    ("cardinal", "-1,250", "", "minus one thousand two hundred and fifty"),
    ("number", "3.75", "", "three point seven five"),
    ("ordinal", "21", "", "twenty first"),
    ("ordinal", "112th", "", "one hundred twelfth"),
    ("date", "11/29/2026", "", "november twenty ninth, twenty twenty six"),
    ("date", "1.5.2025", "mdy", "january fifth, twenty twenty five"),
    ("date", "29/11/2026", "dmy", "the twenty ninth of november twenty twenty six"),
    ("date", "2026-11-29", "ymd", "november twenty ninth, twenty twenty six"),
    ("date", "11/29", "md", "november twenty ninth"),
    ("date", "29.11", "dm", "the twenty ninth of november"),
    ("date", "11/2026", "my", "november twenty twenty six"),
    ("date", "2026-11", "ym", "november twenty twenty six"),
    ("date", "29", "d", "twenty ninth"),
    ("date", "11", "m", "November"),
    ("date", "2026", "y", "twenty twenty six"),
    ("date", "March 5, 2024", "", "march fifth, twenty twenty four"),
    ("currency", "$49.99", "", "forty nine dollars ninety nine cents"),
    ("currency", "12.5", "", "twelve dollars fifty cents"),
    ("currency", "1234", "EUR", "one thousand two hundred and thirty four euros"),
    ("currency", "GBP 1", "", "one pound"),
    ("currency", "-$5.50", "", "minus five dollars fifty cents"),
    ("currency", ".99", "USD", "ninety nine cents"),
    ("digits", "0199", "", "zero one nine nine"),
    ("telephone", "+1 (800) 555-0199 ext. 42",
     "", "plus one, eight hundred, five five five, zero one nine nine, extension four two"),
    ("time", "5:30 PM EST", "", "five thirty P M Eastern Standard Time"),
    ("characters", "QX4", "", "Q, X, four"),
    ("characters", "QX4", "phonetic", "Q as in Quebec, X as in X-ray, four"),
    ("spell-out", "AB1", "", "A, B, one"),
    ("verbatim", "X7-B", "", "X, seven, B"),
]


@pytest.mark.parametrize(("kind", "text", "fmt", "spoken"), CASES)
def test_say_as_on_the_grammars(grammars, kind, text, fmt, spoken):
    seg = said(kind, text, fmt)
    assert seg.text == f"Say {spoken} now."


def test_every_accepted_value_is_covered():
    assert {c[0] for c in CASES} == set(INTERPRET_AS)
    assert {c[2] for c in CASES if c[0] == "date"} - {""} == set(DATE_FORMATS)


@pytest.mark.parametrize(("kind", "text", "fmt"), [c[:3] for c in CASES])
def test_say_as_words_point_at_the_element_content(grammars, kind, text, fmt):
    doc = (f'<speak>Say <say-as interpret-as="{kind}"'
           f'{f" format={chr(34)}{fmt}{chr(34)}" if fmt else ""}>{text}</say-as> now.</speak>')
    [seg] = parse_ssml(doc)
    start = doc.index(">", doc.index("<say-as")) + 1
    first, middle, last = seg.spans
    assert (first.src_start, first.src_end) == (7, 10)  # "Say"
    assert middle == SourceSpan(4, len(seg.text) - 5, start, start + len(text))
    assert seg.text[middle.start:middle.end] and last.src_start == doc.index("now")


@pytest.mark.parametrize(("attrs", "names"), [
    ('interpret-as="nope"', ("cardinal", "ordinal", "date", "currency", "telephone")),
    ('interpret-as="date" format="yyyy"', DATE_FORMATS),
    ('interpret-as="currency" format="XBT"', tuple(CURRENCIES)),
])
def test_unknown_values_are_a_400_naming_the_accepted_ones(grammars, attrs, names):
    with pytest.raises(BadSsml) as err:
        parse_ssml(f"<speak><say-as {attrs}>12</say-as></speak>")
    assert err.value.code == "bad_ssml"
    assert all(n in str(err.value) for n in names), str(err.value)


def test_a_date_that_is_none_in_its_format_is_refused(grammars):
    with pytest.raises(BadSsml, match="not a date in format 'mdy'"):
        parse_ssml('<speak><say-as interpret-as="date" format="mdy">13/45/2026</say-as></speak>')
