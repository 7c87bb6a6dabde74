"""Subtitle cues from word times."""

from __future__ import annotations

from cosyvoiced.tts.request import WordTime
from cosyvoiced.tts.streaming.subtitles import cues, subtitles


def w(text: str, start: float, end: float) -> WordTime:
    return WordTime(text, 0, len(text), start, end)


WORDS = [w("It", 0.05, 0.2), w("costs", 0.2, 0.5), w("$5.", 0.5, 1.2),
         w("Press", 2.4, 2.7), w("one.", 2.7, 3.0)]


def test_a_cue_ends_with_its_sentence_and_runs_from_first_start_to_last_end() -> None:
    assert cues(WORDS) == [(0.05, 1.2, "It costs $5."), (2.4, 3.0, "Press one.")]


def test_a_long_pause_or_a_long_line_starts_a_new_cue() -> None:
    assert len(cues([w("a", 0, 0.1), w("b", 1.0, 1.1)])) == 2
    many = [w("word", i * 0.3, i * 0.3 + 0.2) for i in range(20)]
    assert all(len(text) <= 42 for _, _, text in cues(many))


def test_webvtt_and_srt() -> None:
    vtt = subtitles(WORDS, vtt=True)
    assert vtt.startswith("WEBVTT\n\n00:00:00.050 --> 00:00:01.200\nIt costs $5.\n")
    srt = subtitles(WORDS, vtt=False)
    assert srt.splitlines()[:3] == ["1", "00:00:00,050 --> 00:00:01,200", "It costs $5."]
    assert "\n2\n00:00:02,400 --> 00:00:03,000\nPress one.\n" in srt
