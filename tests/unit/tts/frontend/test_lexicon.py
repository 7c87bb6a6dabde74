"""The pronunciation lexicon, SSML <phoneme>, and how inline IPA reaches the phonemes."""

from __future__ import annotations

import pickle

import pytest

from cosyvoiced.tts.errors import BadSsml
from cosyvoiced.tts.frontend.lexicon import (
    MAX_ENTRIES,
    MAX_PHONEME_CHARS,
    LexiconError,
    check_ipa,
    load_lexicon,
    parse_lexicon,
)
from cosyvoiced.tts.frontend.normalize import plain_segments
from cosyvoiced.tts.frontend.phonemize import espeak_phonemes, mixed_phonemes
from cosyvoiced.tts.frontend.plan import PlanLimits, plan
from cosyvoiced.tts.frontend.segments import (
    INLINE_OPEN,
    Pause,
    Speech,
    inline_phonemes,
    split_inline,
    without_spans,
)
from cosyvoiced.tts.frontend.ssml import parse_ssml

LEXICON = """
[ipa]
Qyxelle = "pˈɪksəl"
"New Qyx" = "nˈuː kwˈɪks"
[say]
nginx = "engine x"
US = "United States"
"""


@pytest.fixture
def lexicon():
    return parse_lexicon(LEXICON.encode(), "test.toml")


def test_words_respelled_or_made_inline_ipa(lexicon):
    text = lexicon.apply("Call Qyxelle: NGINX and nginx, us and US; qyxelle2 New Qyx.")
    assert text == (f"Call {inline_phonemes('pˈɪksəl')}: engine x and engine x, us and "
                    f"United States; qyxelle2 {inline_phonemes('nˈuː kwˈɪks')}.")


def test_plain_text_keeps_the_word_inside_its_sentence(lexicon):
    segs = plain_segments("Call Qyxelle at 5 pm.", lexicon=lexicon)
    assert without_spans(segs) == [Speech(f"Call {inline_phonemes('pˈɪksəl')} at five P M.")]
    clauses = plan(segs, PlanLimits(whole_sentences=True))
    assert len(clauses) == 1 and not clauses[0].phonemes


def test_a_phrase_entry_survives_planning_uncut(lexicon):
    long = "word " * 40 + "New Qyx " + "word " * 40
    clauses = plan(plain_segments(long, lexicon=lexicon), PlanLimits(max_clause_chars=60))
    assert sum(c.text.count(INLINE_OPEN) for c in clauses) == 1
    assert all(c.text.count(INLINE_OPEN) == c.text.count("\ue001") for c in clauses)


def test_inline_ipa_is_spliced_into_the_espeak_phonemes(lexicon):
    text = plain_segments("Call Qyxelle today.", lexicon=lexicon)[0].text
    assert split_inline(text) == [("Call ", False), ("pˈɪksəl", True), (" today.", False)]
    got = "".join(mixed_phonemes(text, "en-us"))
    want = "".join(espeak_phonemes("Call", "en-us")) + " pˈɪksəl " + \
        "".join(espeak_phonemes("today.", "en-us"))
    assert got == want


def test_markers_typed_by_a_client_are_only_spaces(lexicon):
    segs = plain_segments(f"a{INLINE_OPEN}zzz\ue001b", lexicon=lexicon)
    assert without_spans(segs) == [Speech("a zzz b")]
    assert without_spans(parse_ssml(f"<speak>a{INLINE_OPEN}zzz\ue001b</speak>")) == [Speech("a zzz b")]


def test_ssml_phoneme_and_lexicon(lexicon):
    doc = ('<speak>Welcome to <phoneme alphabet="ipa" ph="tʃˈɔɪs">Ghoyce</phoneme> and '
           'Qyxelle.<break time="200ms"/>Bye.</speak>')
    segs = parse_ssml(doc, lexicon=lexicon)
    assert without_spans(segs) == [Speech(f"Welcome to {inline_phonemes('tʃˈɔɪs')} and "
                           f"{inline_phonemes('pˈɪksəl')}."), Pause(200), Speech("Bye.")]


@pytest.mark.parametrize(("doc", "why"), [
    ('<phoneme ph="">x</phoneme>', "empty"),
    ('<phoneme>x</phoneme>', "needs a ph"),
    ('<phoneme alphabet="x-sampa" ph="h@l">x</phoneme>', "only \"ipa\""),
    ('<phoneme ph="h3llo">x</phoneme>', "U\\+0033"),
    ('<phoneme ph="a&lt;b">x</phoneme>', "U\\+003C"),
    (f'<phoneme ph="{"a" * (MAX_PHONEME_CHARS + 1)}">x</phoneme>', "limit"),
    ('<phoneme ph="a"><sub alias="b">c</sub></phoneme>', "not allowed inside"),
])
def test_bad_phoneme_is_a_typed_ssml_error(doc, why):
    with pytest.raises(BadSsml, match=why) as exc:
        parse_ssml(f"<speak>{doc}</speak>")
    assert exc.value.code == "bad_ssml"


def test_check_ipa_takes_stress_length_and_combining_marks():
    assert check_ipa(" tʃˈɔɪs ") == "tʃˈɔɪs"
    assert check_ipa("ˌɛkˈsæ̃mpəl, ɡoʊ.") == "ˌɛkˈsæ̃mpəl, ɡoʊ."


@pytest.mark.parametrize(("text", "why"), [
    ("[ipa]\nx = 1\n", "must be a string"),
    ("[ipa]\nx = \"h3\"\n", "no IPA symbol"),
    ("[words]\nx = \"y\"\n", "unknown table"),
    ("[say]\n\"a<b\" = \"y\"\n", "a key is a word"),
    ("[say]\nx = \"<speak>\"\n", "markup"),
    ("[say]\nx = \"\"\n", "empty"),
    ("[say\n", "test.toml"),
])
def test_bad_lexicon_names_the_entry(text, why):
    with pytest.raises(LexiconError, match=why):
        parse_lexicon(text.encode(), "test.toml")


def test_lexicon_size_is_capped():
    many = "[say]\n" + "".join(f"w{i} = \"x\"\n" for i in range(MAX_ENTRIES + 1))
    with pytest.raises(LexiconError, match="entries"):
        parse_lexicon(many.encode())
    with pytest.raises(LexiconError, match="bytes"):
        parse_lexicon(b"#" * (2 << 20))


def test_load_missing_file_and_none(tmp_path):
    assert len(load_lexicon("")) == 0
    with pytest.raises(LexiconError, match="No such file"):
        load_lexicon(str(tmp_path / "nope.toml"))
    (tmp_path / "l.toml").write_text(LEXICON)
    assert len(load_lexicon(str(tmp_path / "l.toml"))) == 4


def test_lexicon_pickles_for_the_workers(lexicon):
    again = pickle.loads(pickle.dumps(lexicon))
    assert again.apply("Qyxelle") == inline_phonemes("pˈɪksəl")


def test_phrases_match_across_any_whitespace_and_keep_their_punctuation():
    lx = parse_lexicon(b'[say]\n"new qyx" = "N Q"\n"node.js" = "node J S"\n'
                       b'Qy = "exact"\nqy = "folded"\n')
    assert lx.apply("a New \n Qyx b, new-qyx") == "a N Q b, new-qyx"
    assert lx.apply("Node.js and node js, node.jsx") == "node J S and node js, node.jsx"
    assert lx.apply("Qy qy QY") == "exact folded folded"
    assert lx.apply("") == "" and parse_lexicon(b"").apply("Qy") == "Qy"
