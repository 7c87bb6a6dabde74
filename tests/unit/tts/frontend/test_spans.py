"""Source spans: every spoken word points at the piece of the caller's input it reads."""

from __future__ import annotations

import re

import pytest

from cosyvoiced.tts.frontend.lexicon import parse_lexicon
from cosyvoiced.tts.frontend.normalize import plain_segments, use_grammars
from cosyvoiced.tts.frontend.normalize.grammars import ensure
from cosyvoiced.tts.frontend.plan import PlanLimits, plan
from cosyvoiced.tts.frontend.segments import SourceSpan, Speech, merge_speech
from cosyvoiced.tts.frontend.ssml import parse_ssml

WORD_RE = re.compile(r"\ue000[^\ue001]*\ue001|\w+")


@pytest.fixture(params=["rules", "grammars"])
def reader(request):
    """Both English readers: the hand-written rules, and NeMo's grammars."""
    if request.param == "grammars":
        directory = ensure()
        assert directory is not None
        use_grammars(directory)
    yield request.param
    use_grammars(None)


def pairs(text: str, spans: tuple[SourceSpan, ...], source: str) -> list[tuple[str, str]]:
    """(spoken, written) per span, after checking that spans are sorted, do not overlap
    and hold every word of `text` exactly once."""
    for a, b in zip(spans, spans[1:], strict=False):
        assert a.end <= b.start and a.src_end <= b.src_start, spans
    for m in WORD_RE.finditer(text):
        holders = [s for s in spans if s.start <= m.start() and m.end() <= s.end]
        assert len(holders) == 1, (m.group(0), text, spans)
    return [(text[s.start:s.end], source[s.src_start:s.src_end]) for s in spans]


def speech(segments: list) -> Speech:
    [one] = [s for s in segments if isinstance(s, Speech)]
    return one


def test_plain_words_each_point_at_themselves(reader):
    text = "Thank you for calling, how may I help?"
    seg = speech(plain_segments(text))
    assert pairs(seg.text, seg.spans, text) == [
        ("Thank", "Thank"), ("you", "you"), ("for", "for"), ("calling,", "calling,"),
        ("how", "how"), ("may", "may"), ("I", "I"), ("help?", "help?")]


def test_money_date_and_phone_point_at_what_they_read(reader):
    text = "Pay $5 by 12/03/2023 or call 555-867-5309 now."
    seg = speech(plain_segments(text))
    got = dict((w, s) for s, w in pairs(seg.text, seg.spans, text))
    assert "five dollars" in got["$5"]
    assert "twenty twenty three" in got["12/03/2023"]
    assert got["555-867-5309"] == "five five five, eight six seven, five three zero nine"
    assert got["Pay"] == "Pay" and got["now."] == "now."


def test_a_card_ending_and_a_code_point_at_their_digits(reader):
    text = "Card ending in 7731, code QX4471B."
    seg = speech(plain_segments(text))
    got = dict((w, s) for s, w in pairs(seg.text, seg.spans, text))
    assert got["7731"] == "seven seven three one"
    assert got["QX4471B"] == "Q X four four seven one B"


def test_an_offset_source_maps_into_the_larger_input(reader):
    outer = "<<Pay $5 now>>"
    inner = outer[2:-2]
    seg = speech(plain_segments(inner, source=[(i + 2, i + 3) for i in range(len(inner))]))
    assert [w for _, w in pairs(seg.text, seg.spans, outer)][0] == "Pay"
    assert "$5" in [w for _, w in pairs(seg.text, seg.spans, outer)]


def test_ssml_elements_point_at_their_content_and_tags_are_never_words(reader):
    doc = ('<speak>Pay &amp; <say-as interpret-as="digits"> 123 </say-as> to '
           '<sub alias="Acme Insurance">AI</sub>, say <phoneme ph="həlˈoʊ">hello</phoneme>'
           ' at Café €5.</speak>')
    seg = speech(parse_ssml(doc))
    got = pairs(seg.text, seg.spans, doc)
    assert ("one two three", "123") in got
    assert ("Acme Insurance", "AI") in got
    assert any(w == "hello" and s.startswith("\ue000") for s, w in got)
    assert any(w == "&amp;" for _, w in got)  # an entity: all of it
    assert ("Café", "Café") in got  # offsets are characters, not UTF-8 bytes
    assert all("<" not in w and ">" not in w for _, w in got)


def test_lexicon_entries_point_at_the_word_they_replace(reader):
    lexicon = parse_lexicon('[say]\nnginx = "engine x"\n[ipa]\nQorvinta = "kɔːɹvˈiːntə"\n'
                            .encode())
    text = "Ask nginx about Qorvinta today."
    seg = speech(plain_segments(text, lexicon=lexicon))
    got = dict((w, s) for s, w in pairs(seg.text, seg.spans, text))
    assert got["nginx"] == "engine x"
    assert got["Qorvinta"].startswith("\ue000")


def test_merged_speech_keeps_both_sides_spans():
    a = Speech("Hello", 1.0, (SourceSpan(0, 5, 0, 5),))
    b = Speech(" world ", 1.0, (SourceSpan(1, 6, 10, 15),))
    [m] = merge_speech([a, b])
    assert m.text == "Hello world"
    assert m.spans == (SourceSpan(0, 5, 0, 5), SourceSpan(6, 11, 10, 15))


@pytest.mark.parametrize("whole", [False, True])
def test_sentence_and_clause_splitting_rebase_spans(reader, whole):
    text = ("Your payment of $49.99 was received. Your balance is $1,250.00, "
            "and the next bill is due on March 14, 2024, thank you for calling today!")
    limits = PlanLimits(whole_sentences=whole, max_clause_chars=60)
    clauses = [c for c in plan(plain_segments(text), limits) if c.text]
    assert len(clauses) >= 3
    seen = []
    for clause in clauses:
        seen.extend(w for _, w in pairs(clause.text, clause.spans, text))
    assert "$49.99" in seen and "$1,250.00," in seen or "$1,250.00" in seen
    assert seen[0] == "Your" and seen[-1] == "today!"
