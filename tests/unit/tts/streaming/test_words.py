"""Word times from phoneme durations: units, espeak's words, alignment, spans."""

from __future__ import annotations

import numpy as np

from cosyvoiced.tts.frontend.segments import SourceSpan, inline_phonemes
from cosyvoiced.tts.streaming.words import (
    align,
    clause_units,
    clause_words,
    id_frames,
    phoneme_words,
)

ID_MAP = {"^": [1], "_": [0], "$": [2], " ": [3], ",": [8], ".": [10],
          **{c: [20 + i] for i, c in enumerate("abcdefghijklmnopqrstuvwxyzˈ")}}


def _ids(phonemes: list[str]) -> int:
    return 2 + 2 * sum(p in ID_MAP for p in phonemes) + 1


def test_units_skip_punctuation_and_keep_inline_words_at_their_marker() -> None:
    text = f"hello , {inline_phonemes('tə mˈeɪtoʊ')} world."
    units = clause_units(text)
    assert [text[u.start:u.end] for u in units][0] == "hello"
    assert [u.ipa for u in units] == [None, "tə", "mˈeɪtoʊ", None]
    assert text[units[-1].start:units[-1].end] == "world."


def test_phoneme_words_split_at_spaces_without_punctuation() -> None:
    assert phoneme_words(list("ab cd, e.")) == [(0, 1), (3, 4), (7, 7)]


def test_id_frames_place_each_phoneme_after_bos_and_pads() -> None:
    phonemes = list("ab")
    durations = np.arange(1, _ids(phonemes) + 1, dtype=np.float32)  # 1..7
    starts, total = id_frames(phonemes, ID_MAP, durations)
    assert starts.tolist() == [3.0, 10.0, 21.0]  # ^ _ | a _ | b _ | $
    assert total == 28.0


def test_align_groups_words_espeak_joined() -> None:
    groups = align(["ɪn", "ðə", "ɛnd"], ["ɪnðə", "ɛnd"])
    assert groups == [(0, 2, 0, 1), (2, 3, 1, 2)]


def test_joined_words_share_their_espeak_word_and_groups_map_to_their_source() -> None:
    source = "In the end, $5."
    text = "In the end, five dollars."
    spans = (SourceSpan(0, 2, 0, 2), SourceSpan(3, 6, 3, 6), SourceSpan(7, 11, 7, 11),
             SourceSpan(12, 25, 12, 15))
    phonemes = list("inde end, faiv dalrz.")
    starts = np.arange(len(phonemes) + 1, dtype=np.float64)
    alone = {"In": "in", "the": "de", "end,": "end", "five": "faiv", "dollars.": "dalrz"}
    words = clause_words(text, spans, source, phonemes, starts, lambda ws: [alone[w] for w in ws])
    assert [(w.text, w.char_start, w.char_end) for w in words] == [
        ("In", 0, 2), ("the", 3, 6), ("end,", 7, 11), ("$5.", 12, 15)]
    assert [(w.start_s, w.end_s) for w in words] == [(0, 2), (2, 4), (5, 8), (10, 20)]
    assert all(a.end_s <= b.start_s for a, b in zip(words, words[1:], strict=False))
