"""Word timestamps from Whisper's own alignment, as faster-whisper makes them.

CTranslate2's `Whisper.align` runs the decoder over the transcript's tokens once more,
reads the cross-attention of the model's alignment heads, median-filters it and walks
the DTW path (C++), returning `(text index, time index)` pairs and each token's
probability. What faster-whisper (`transcribe.py`: `find_alignment`,
`add_word_timestamps`, `merge_punctuations`; `tokenizer.py`: `split_to_word_tokens`)
does around that call is ported here:

* tokens are grouped into words: tokens join until their bytes are whole UTF-8
  characters, and a piece starting with a space, a punctuation piece or a special token
  starts a new word (the byte-level token strings CTranslate2 returns are read directly:
  the worker keeps no tokenizer, see listen/asr.py);
* a word starts at the time of the DTW path's first step on its first token and ends at
  its successor's start (the end-of-text token closes the last word); its probability is
  the mean of its tokens';
* a word over twice the median length at a sentence end is cut to that, the first word
  after a long pause too; leading punctuation (`"'“¿([{-`) joins the next word, trailing
  (`"'.。,，!！?？:：”)]}、`) the previous one.

One change: the utterance's first word starts no earlier than `VAD_LEAD_S` before the VAD
heard speech. The alignment path starts at the first frame, so without it the first word
takes in the VAD's pre-roll: on the Asterisk prompts it started ~270 ms before the
speech's energy onset, and 24 ms (median) from it with the VAD's start (tools/bench
`words`). faster-whisper, which decodes whole windows, puts it at its segment's start
(0.00 on a clip with leading silence) instead.

Times are seconds from the utterance's first mel frame (50 encoder steps per second),
kept inside the frames the utterance has and never decreasing.
"""

from __future__ import annotations

import string
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from cosyvoiced.listen.events import Word

__all__ = ["TOKENS_PER_S", "WordPiece", "align_words", "split_words"]

TOKENS_PER_S = 50.0
"""Encoder steps per second: Whisper's 10 ms mel frames, halved by its strided conv."""
MEDIAN_FILTER_WIDTH = 7
PREPEND = "\"'“¿([{-"
APPEND = "\"'.。,，!！?？:：”)]}、"
_SENTENCE_END = ".。!！?？"
VAD_LEAD_S = 0.03
"""How far before the VAD's speech start the first word may begin (the VAD's windows
start late on a soft onset by about this much)."""


@dataclass
class WordPiece:
    """A word as the tokens that spell it (`text` keeps its leading space)."""

    text: str
    tokens: list[int]


def split_words(tokens: Sequence[str], ids: Sequence[int], eot: int,
                byte_of_char: dict[str, int]) -> list[WordPiece]:
    """Whisper's text tokens (byte-level strings and their ids) grouped into words, as
    faster-whisper's `split_tokens_on_spaces` groups them."""
    pieces: list[WordPiece] = []
    raw = bytearray()
    ids_now: list[int] = []
    for tok, tid in zip(tokens, ids, strict=True):
        ids_now.append(tid)
        raw += bytes(byte_of_char[c] for c in tok)
        try:
            text = raw.decode("utf-8")
        except UnicodeDecodeError:
            continue  # a character split across tokens: wait for the rest of its bytes
        pieces.append(WordPiece(text, ids_now))
        raw, ids_now = bytearray(), []
    if ids_now:
        pieces.append(WordPiece(raw.decode("utf-8", errors="replace"), ids_now))
    words: list[WordPiece] = []
    for p in pieces:
        special = p.tokens[0] >= eot
        if special or p.text.startswith(" ") or p.text.strip() in string.punctuation or not words:
            words.append(WordPiece(p.text, list(p.tokens)))
        else:
            words[-1].text += p.text
            words[-1].tokens.extend(p.tokens)
    return words


@dataclass
class _Timed:
    text: str
    tokens: list[int]
    start: float
    end: float
    probability: float


def _timings(result: Any, words: list[WordPiece]) -> list[_Timed]:
    """faster-whisper's `find_alignment` after the `align` call: word start/end times
    from the DTW path's jumps. `words` ends with the end-of-text token's piece."""
    pairs = np.asarray(result.alignments, dtype=np.int64).reshape(-1, 2)
    if len(words) <= 1 or pairs.shape[0] == 0:
        return []
    text_idx, time_idx = pairs[:, 0], pairs[:, 1]
    bounds = np.pad(np.cumsum([len(w.tokens) for w in words[:-1]]), (1, 0))
    jumps = np.pad(np.diff(text_idx), (1, 0), constant_values=1).astype(bool)
    jump_times = time_idx[jumps] / TOKENS_PER_S
    if jump_times.shape[0] <= bounds[-1]:
        return []
    probs = np.asarray(result.text_token_probs, dtype=np.float64)
    out = []
    for w, i, j in zip(words[:-1], bounds[:-1], bounds[1:], strict=True):
        p = float(np.mean(probs[i:j])) if j > i and probs.shape[0] >= j else 0.0
        out.append(_Timed(w.text, list(w.tokens), float(jump_times[i]),
                          float(jump_times[j]), p))
    return out


def _merge_punctuations(timed: list[_Timed]) -> None:
    """faster-whisper's `merge_punctuations` (in place: merged entries become "")."""
    i, j = len(timed) - 2, len(timed) - 1
    while i >= 0:
        prev, nxt = timed[i], timed[j]
        if prev.text.startswith(" ") and prev.text.strip() in PREPEND:
            nxt.text, nxt.tokens = prev.text + nxt.text, prev.tokens + nxt.tokens
            prev.text, prev.tokens = "", []
        else:
            j = i
        i -= 1
    i, j = 0, 1
    while j < len(timed):
        prev, nxt = timed[i], timed[j]
        if not prev.text.endswith(" ") and nxt.text in APPEND:
            prev.text, prev.tokens = prev.text + nxt.text, prev.tokens + nxt.tokens
            nxt.text, nxt.tokens = "", []
        else:
            i = j
        j += 1


def align_words(result: Any, words: list[WordPiece], frames: int, speech_start_s: float,
                speech_end_s: float, offset_s: float = 0.0) -> list[Word]:
    """Timed words of one utterance from its `align` result. `words`: `split_words` of
    its text tokens plus the end-of-text token; `frames`: its mel frames (10 ms each);
    `speech_*_s`: where the VAD heard speech, in the same timeline (seconds from the
    first frame), the segment bounds faster-whisper falls back on for a first or last
    word the alignment stretched into silence. `offset_s` is added to every time (the
    first frame's time in the stream)."""
    timed = _timings(result, words)
    if not timed:
        return []
    lengths = np.array([t.end - t.start for t in timed])
    lengths = lengths[lengths.nonzero()]
    median = min(0.7, float(np.median(lengths))) if lengths.shape[0] else 0.0
    longest = median * 2
    if lengths.shape[0]:  # words at sentence ends no longer than twice the median
        for i in range(1, len(timed)):
            if timed[i].end - timed[i].start > longest:
                if timed[i].text in _SENTENCE_END:
                    timed[i].end = timed[i].start + longest
                elif timed[i - 1].text in _SENTENCE_END:
                    timed[i].start = timed[i].end - longest
    _merge_punctuations(timed)
    kept = [t for t in timed if t.text]
    if not kept:
        return []
    first = kept[0]
    if first.end > median * 4 and (first.end - first.start > longest or (
            len(kept) > 1 and kept[1].end - first.start > longest * 2)):
        if len(kept) > 1 and kept[1].end - kept[1].start > longest:
            boundary = max(kept[1].end / 2, kept[1].end - longest)
            first.end = kept[1].start = boundary
        first.start = max(0.0, first.end - longest)
    if speech_start_s < first.end and speech_start_s - 0.5 > first.start:
        first.start = max(0.0, min(first.end - median, speech_start_s))
    if speech_start_s - VAD_LEAD_S < first.end:  # not in the pre-roll
        first.start = max(first.start, speech_start_s - VAD_LEAD_S)
    last = kept[-1]
    if speech_end_s > last.start and speech_end_s + 0.5 < last.end:
        last.end = max(last.start + median, speech_end_s)
    limit = frames / 100.0
    out: list[Word] = []
    floor = 0.0
    for t in kept:
        start = min(max(t.start, floor), limit)
        end = min(max(t.end, start), limit)
        floor = start
        out.append(Word(t.text.strip(), round(offset_s + start, 3), round(offset_s + end, 3),
                        round(t.probability, 3)))
    return out
