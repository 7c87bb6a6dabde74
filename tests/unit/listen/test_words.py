"""Word timestamps: tokens grouped into words, times from an alignment path, the
faster-whisper clean-ups, and the real tiny.en aligning real telephone speech."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pytest

from cosyvoiced.config.schema import AsrConfig
from cosyvoiced.listen.asr import WhisperAsr, _byte_of_char
from cosyvoiced.listen.events import Transcript, Word
from cosyvoiced.listen.words import WordPiece, align_words, split_words

EOT = 50256


def pieces(*tokens: str) -> list[WordPiece]:
    return split_words(list(tokens), list(range(len(tokens))), EOT, _byte_of_char())


def test_tokens_join_into_words_on_spaces_and_punctuation():
    # "Ġ" is the byte-level space; "Ã©" the two bytes of "é", split over two tokens
    words = pieces("ĠHello", ",", "Ġcaf", "Ã", "©", "Ġnum", "ber", ".")
    assert [w.text for w in words] == [" Hello", ",", " café", " number", "."]
    assert [w.tokens for w in words] == [[0], [1], [2, 3, 4], [5, 6], [7]]


@dataclass
class Aligned:
    alignments: list[tuple[int, int]]
    text_token_probs: list[float]


def path(steps: list[int]) -> Aligned:
    """A DTW path that enters text token i at encoder step steps[i] (50 per second)."""
    pairs = []
    for i, (a, b) in enumerate(zip(steps, [*steps[1:], steps[-1] + 1], strict=True)):
        pairs += [(i, t) for t in range(a, max(a + 1, b))]
    return Aligned(pairs, [0.5] * len(steps))


def test_times_come_from_the_path_and_punctuation_joins_its_word():
    words = [*pieces("ĠThank", "Ġyou", ".", "ĠBye"), WordPiece("", [EOT])]
    # tokens enter at 0.1 s, 0.4 s, 0.6 s, 0.8 s; end of text at 1.0 s
    got = align_words(path([5, 20, 30, 40, 50]), words, frames=120, speech_start_s=0.1,
                      speech_end_s=1.0, offset_s=2.0)
    assert [w.word for w in got] == ["Thank", "you.", "Bye"]
    assert [(w.start_s, w.end_s) for w in got] == [(2.1, 2.4), (2.4, 2.6), (2.8, 3.0)]
    assert all(w.probability == 0.5 for w in got)


def test_the_first_word_does_not_start_in_the_vad_pre_roll():
    words = [*pieces("ĠHello", "Ġthere"), WordPiece("", [EOT])]
    got = align_words(path([0, 40, 60]), words, frames=100, speech_start_s=0.5,
                      speech_end_s=1.0)
    assert [(w.start_s, w.end_s) for w in got] == [(0.47, 0.8), (0.8, 1.0)]


def test_times_stay_inside_the_frames_and_never_go_back():
    words = [*pieces("ĠA", "Ġlong", "Ġend"), WordPiece("", [EOT])]
    got = align_words(path([0, 10, 20, 90]), words, frames=100, speech_start_s=0.0,
                      speech_end_s=1.0)
    starts = [w.start_s for w in got]
    assert starts == sorted(starts)
    assert all(0.0 <= w.start_s <= w.end_s <= 1.0 for w in got)
    assert align_words(Aligned([], []), words, 100, 0.0, 1.0) == []


def test_transcript_wire_form_has_words_only_when_asked():
    plain = Transcript("hi", 0, 500, 10.0, 0.1, stream="s", language="en")
    assert "words" not in plain.to_dict()
    assert set(plain.to_dict()) == {"type", "text", "start_ms", "end_ms", "latency_ms", "rtf",
                                    "stream", "language"}
    timed = Transcript("hi", 0, 500, 10.0, 0.1, words=(Word("hi", 0.1, 0.4, 0.9),))
    assert timed.to_dict()["words"] == [{"word": "hi", "start": 0.1, "end": 0.4,
                                         "probability": 0.9}]
    assert hash(timed)  # transcripts are kept in sets


@pytest.fixture(scope="module")
def asr():
    return WhisperAsr(AsrConfig())


def test_real_speech_words_are_the_text_in_order_inside_the_clip(asr):
    from cosyvoiced.testing.prompts import prompt_samples

    audio = prompt_samples("agent-pass", 16000)  # "Please enter your password, followed ..."
    t = asr.transcribe_audio(audio, words=True)
    assert t.words and " ".join(w.word for w in t.words) == t.text
    starts = [w.start_s for w in t.words]
    assert starts == sorted(starts) and starts[0] < starts[-1]
    assert all(0.0 <= w.start_s <= w.end_s <= audio.size / 16000 for w in t.words)
    assert all(0.0 < w.probability <= 1.0 for w in t.words)
    assert asr.transcribe_audio(audio).words is None  # not asked: not computed
    # frames that start 1.2 s into a stream: the words move with them
    late = asr.transcribe([type(u := _utt(audio))(u.frames, 1500, 4500, 0.0, words=True,
                                                  origin_ms=1200)])[0]
    assert [w.word for w in late.words] == [w.word for w in t.words]
    assert np.allclose([w.start_s for w in late.words[1:]], np.array(starts[1:]) + 1.2,
                       atol=0.021)
    assert late.words[0].start_s == 1.47  # not in the pre-roll: from 30 ms before the VAD's start


def _utt(audio):
    from cosyvoiced.listen.asr import Utterance, clip_frames

    return Utterance(clip_frames(audio), 0, 3000, 0.0)


def test_only_the_utterances_that_ask_are_aligned(asr):
    from cosyvoiced.listen.asr import Utterance, clip_frames
    from cosyvoiced.testing.prompts import prompt_samples

    frames = clip_frames(prompt_samples("agent-user", 16000))
    out = asr.transcribe([Utterance(frames, 0, 4900, 0.0),
                          Utterance(frames, 0, 4900, 0.0, words=True),
                          Utterance(np.zeros((0, 80), np.float32), 0, 0, 0.0, words=True)])
    assert out[0].words is None and out[1].words and out[2].words == ()
    assert out[0].text == out[1].text
