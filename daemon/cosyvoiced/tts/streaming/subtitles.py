"""Subtitle cues (WebVTT, SRT) built from a synthesis' word times.

A cue holds consecutive words up to `MAX_CUE_CHARS` characters, and ends after a word
that ends a sentence or before a pause longer than `MAX_GAP_S`; it runs from its first
word's start to its last word's end.
"""

from __future__ import annotations

from collections.abc import Sequence

from cosyvoiced.tts.request import WordTime

MAX_CUE_CHARS = 42
"""Longest cue line (the common broadcast limit)."""
MAX_GAP_S = 0.6
"""A longer silence between two words starts a new cue."""


def cues(words: Sequence[WordTime]) -> list[tuple[float, float, str]]:
    """(start_s, end_s, text) of each cue, in order."""
    out: list[tuple[float, float, str]] = []
    group: list[WordTime] = []

    def close() -> None:
        if group:
            out.append((group[0].start_s, group[-1].end_s,
                        " ".join(" ".join(w.text.split()) for w in group)))
            group.clear()

    for w in words:
        text = " ".join(w.text.split())
        if group and (w.start_s - group[-1].end_s > MAX_GAP_S or
                      len(" ".join(x.text for x in group)) + 1 + len(text) > MAX_CUE_CHARS):
            close()
        group.append(w)
        if text.endswith((".", "!", "?")):
            close()
    close()
    return out


def stamp(seconds: float, sep: str) -> str:
    ms = max(0, round(seconds * 1000))
    h, rest = divmod(ms, 3_600_000)
    m, rest = divmod(rest, 60_000)
    s, ms = divmod(rest, 1000)
    return f"{h:02d}:{m:02d}:{s:02d}{sep}{ms:03d}"


def subtitles(words: Sequence[WordTime], *, vtt: bool) -> str:
    """WebVTT (`vtt`) or SRT text of the cues `cues` makes of `words`."""
    sep = "." if vtt else ","
    blocks = [f"{stamp(a, sep)} --> {stamp(b, sep)}\n{text}\n" for a, b, text in cues(words)]
    if vtt:
        return "WEBVTT\n\n" + "\n".join(blocks)
    return "\n".join(f"{n}\n{block}" for n, block in enumerate(blocks, 1))
