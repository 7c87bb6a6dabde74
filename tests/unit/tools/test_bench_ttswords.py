"""Suite `ttswords`: its sentences and how words are paired."""

from __future__ import annotations

from types import SimpleNamespace

from tools.bench.cli import SUITES
from tools.bench.ttswords import paired, sentences

from cosyvoiced.tts.request import WordTime


def test_the_suite_is_listed_and_its_sentences_cover_what_the_issue_names() -> None:
    assert "ttswords" in SUITES
    items = sentences()
    assert len(items) >= 200 and items == sentences()  # reproducible
    texts = " ".join(t for t, _ in items)
    assert sum(ssml for _, ssml in items) >= 50 and "<break time=" in texts
    assert "$" in texts and any(m in texts for m in ("January", "May")) and "%" in texts


def test_only_words_read_as_written_are_paired() -> None:
    ours = [WordTime("Pay", 0, 3, 0.10, 0.3), WordTime("$5", 4, 6, 0.35, 0.9),
            WordTime("now.", 7, 11, 1.00, 1.2)]
    theirs = [SimpleNamespace(word=" Pay", start=0.08), SimpleNamespace(word=" $5", start=0.3),
              SimpleNamespace(word=" now.", start=1.05)]
    assert [round(d, 3) for d in paired(ours, theirs)] == [0.02, -0.05]
