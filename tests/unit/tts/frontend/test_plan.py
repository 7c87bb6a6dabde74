"""Clause planning, request checks and fades: unit tests (no model)."""

from __future__ import annotations

import numpy as np
import pytest

from cosyvoiced.tts import errors
from cosyvoiced.tts.frontend.plan import Clause, PlanLimits, cut_long, plan
from cosyvoiced.tts.frontend.segments import Pause, Phonemes, Speech
from cosyvoiced.tts.request import SynthesisOptions, check_text
from cosyvoiced.tts.streaming.synthesis import encode, fade_edges, trim_trailing_silence
from cosyvoiced.tts.voice.catalog import validate_name

LIMITS = PlanLimits(min_clause_chars=12, max_clause_chars=60, first_clause_max_chars=30,
                    clause_silence_ms=100, sentence_silence_ms=300)


def texts(clauses):
    return [c.text for c in clauses]


def test_sentences_then_clauses_with_their_pauses():
    clauses = plan([Speech("Hello there, how are you today? I am fine now; thanks for asking.")],
                   LIMITS)
    assert texts(clauses) == ["Hello there,", "how are you today?", "I am fine now;",
                              "thanks for asking."]
    assert [c.pause_after_ms for c in clauses] == [100, 300, 100, 0]


SENTENCES = PlanLimits(min_clause_chars=12, max_clause_chars=80, first_clause_max_chars=80,
                      clause_silence_ms=100, sentence_silence_ms=300, whole_sentences=True)


def test_whole_sentences_are_cut_only_at_their_ends():
    text = ("Our main office is open from eight thirty A M to five P M, Monday to Friday. "
            "Yes, no, maybe so. Bye.")
    clauses = plan([Speech(text)], SENTENCES)
    assert texts(clauses) == ["Our main office is open from eight thirty A M to five P M, "
                              "Monday to Friday.", "Yes, no, maybe so.", "Bye."]
    assert [c.pause_after_ms for c in clauses] == [300, 300, 0]
    assert not any(c.cut for c in clauses)


def test_a_sentence_over_the_limit_is_cut_at_punctuation_then_at_words():
    sentence = ("When you call back, please have your policy number ready, along with the "
                "claim number from the letter; an agent will then confirm the repair date "
                "and the name of the contractor who will be visiting your home next week.")
    clauses = plan([Speech(sentence)], SENTENCES)
    assert " ".join(texts(clauses)) == sentence
    assert all(len(c.text) <= 80 for c in clauses)
    # as many clauses as fit are packed together; the stretch without punctuation that
    # is still too long is cut at a word (marked, no pause)
    assert texts(clauses)[0] == "When you call back, please have your policy number ready,"
    assert clauses[1].text.endswith("letter;") and not clauses[1].cut
    assert clauses[1].pause_after_ms == 100
    assert clauses[2].cut and clauses[2].pause_after_ms == 0
    assert not clauses[-1].cut


def test_short_clauses_merge_with_the_next():
    clauses = plan([Speech("Yes, no, maybe so, I think that is right.")], LIMITS)
    assert texts(clauses) == ["Yes, no, maybe so,", "I think that is right."]


def test_first_clause_is_cut_short_then_normal_limit():
    sentence = ("Your appointment with the doctor has been moved to the morning of the "
                "twenty third because the clinic will be closed for the holiday that week.")
    clauses = plan([Speech(sentence)], LIMITS)
    assert len(clauses[0].text) <= 30
    assert all(len(c.text) <= 60 for c in clauses)
    assert " ".join(texts(clauses)) == sentence
    # Cuts carry no pause and are marked (their trailing silence gets trimmed).
    assert [c.cut for c in clauses] == [True] * (len(clauses) - 1) + [False]
    assert all(c.pause_after_ms == 0 for c in clauses)


def test_trailing_silence_trim_keeps_a_short_tail():
    audio = np.zeros(1000, dtype=np.float32)
    audio[100:400] = 0.5
    assert trim_trailing_silence(audio, keep=50).shape == (450,)
    assert trim_trailing_silence(np.zeros(10, dtype=np.float32), keep=5).shape == (10,)


def test_cut_prefers_before_function_words():
    assert cut_long("Please hold the line and an agent will answer", 30) == [
        "Please hold the line", "and an agent will answer"]


def test_cut_never_splits_a_word():
    pieces = cut_long("a" * 50 + " b", 20)
    assert pieces == ["a" * 50, "b"]


def test_breaks_and_phonemes():
    clauses = plan([Pause(200), Speech("Hi there friend."), Pause(500), Phonemes("həlˈoʊ"),
                    Pause(50)], LIMITS)
    assert clauses == [Clause("", False, 1.0, 200), Clause("Hi there friend.", False, 1.0, 800),
                       Clause("həlˈoʊ", True, 1.0, 50)]


def test_rate_is_carried():
    assert plan([Speech("Slowly now.", 0.8)], LIMITS)[0].rate == 0.8


@pytest.mark.parametrize(("text", "error", "code"), [
    ("", errors.EmptyText, "empty_text"),
    (" \n\t ", errors.EmptyText, "empty_text"),
    ("x" * 101, errors.TextTooLong, "text_too_long"),
    (b"caf\xc3", errors.InvalidUtf8, "invalid_utf8"),
    (b"\xffabc", errors.InvalidUtf8, "invalid_utf8"),
    ("a\x00b", errors.ControlCharacters, "control_characters"),
    ("a\x1bb", errors.ControlCharacters, "control_characters"),
])
def test_bad_text(text, error, code):
    with pytest.raises(error) as err:
        check_text(text, max_chars=100)
    assert err.value.code == code


def test_good_text_passes():
    assert check_text("Línea 1\nline 2\ttab".encode(), 100) == "Línea 1\nline 2\ttab"


@pytest.mark.parametrize(("options", "code"), [
    (SynthesisOptions(rate_hz=11025), "unsupported_rate"),
    (SynthesisOptions(format="mp3"), "unsupported_format"),
    (SynthesisOptions(length_scale=0.0), "bad_parameter"),
    (SynthesisOptions(volume=-1.0), "bad_parameter"),
])
def test_bad_options(options, code):
    with pytest.raises(errors.TtsError) as err:
        options.check()
    assert err.value.code == code


@pytest.mark.parametrize("name", ["../etc/passwd", "a/b", "..", "", ".hidden", "x\\y", "a b"])
def test_voice_names_are_not_paths(name):
    with pytest.raises(errors.InvalidVoiceName):
        validate_name(name)


def test_fade_removes_the_step_at_a_loud_edge():
    rate = 22050
    tone = (0.8 * np.sin(2 * np.pi * 440 * np.arange(rate // 10) / rate + 1.0)).astype(np.float32)
    assert abs(tone[0]) > 0.5  # starts mid-waveform: a click without a fade
    fade_edges(tone, 88)
    assert tone[0] == 0.0 and tone[-1] == 0.0
    # No step larger than the tone's own steepest slope (0.8 * 2 pi * 440 / 22050 = 0.1).
    assert np.abs(np.diff(tone[:100])).max() <= 0.101


def test_encode_formats():
    x = np.array([0.0, 0.5, -0.5, 1.0, -1.0], dtype=np.float32)
    assert np.frombuffer(encode(x, "float32"), "<f4").tolist() == x.tolist()
    assert np.frombuffer(encode(x, "s16le"), "<i2").tolist() == [0, 16384, -16384, 32767, -32768]
    assert len(encode(x, "mulaw")) == 5


def _multi_speaker_voice():
    from piper.config import PhonemeType, PiperConfig

    from cosyvoiced.tts.voice.catalog import Voice

    cfg = PiperConfig(num_symbols=10, num_speakers=3, sample_rate=22050, espeak_voice="en-us",
                      phoneme_id_map={}, phoneme_type=PhonemeType.ESPEAK,
                      speaker_id_map={"alice": 0, "bob": 1, "carol": 2}, default_speaker_id=1)
    return Voice("multi", cfg, session=None, precision="fp32", language="en_US")


@pytest.mark.parametrize(("speaker", "sid"), [(None, 1), ("", 1), ("carol", 2), (0, 0),
                                              ("2", 2)])
def test_multi_speaker_by_id_or_name(speaker, sid):
    assert _multi_speaker_voice().speaker_id(speaker) == sid


@pytest.mark.parametrize("speaker", ["dave", 3, -1, "7"])
def test_unknown_speaker(speaker):
    with pytest.raises(errors.UnknownSpeaker):
        _multi_speaker_voice().speaker_id(speaker)
