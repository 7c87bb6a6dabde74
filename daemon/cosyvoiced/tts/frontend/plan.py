"""Segments to clauses: what each run of the voice's text front speaks, and the silence
after it.

Sentences are split at `. ! ?`. With `whole_sentences` (chunked decoding) a sentence is
one clause; one longer than `max_clause_chars` is cut at `, ; :` (packing as much as fits),
at a word boundary only where a stretch has no such mark. Otherwise (one whole-graph run
per clause) clauses are split at `, ; :`; clauses shorter than `min_clause_chars` are
merged with the next (tiny runs sound choppy and cost a run each); clauses longer than
`max_clause_chars` are cut at a word boundary, preferring the place before a function
word, and the first clause of a request is cut shorter (`first_clause_max_chars`) so the
first audio leaves early.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from cosyvoiced.tts.frontend.segments import Pause, Phonemes, Segment, SourceSpan, Speech

SENTENCE_RE = re.compile(r"(?<=[.!?])[\"')\]]*\s+")
CLAUSE_RE = re.compile(r"(?<=[,;:])\s+")
BREAK_BEFORE = frozenset(
    "and or but so because then to for with at on in of from that which when while if "
    "as your our the a".split())


@dataclass(frozen=True)
class Clause:
    text: str
    """Words to speak, or IPA when `phonemes`; "" for silence only."""
    phonemes: bool
    rate: float
    """Speaking-rate multiplier (divides the length scale)."""
    pause_after_ms: int
    """Silence appended after this clause."""
    cut: bool = False
    """Ends mid-phrase (a length cut, no punctuation): no pause, trailing silence trimmed."""
    spans: tuple[SourceSpan, ...] = ()
    """The Speech's spans that fall in this clause, rebased to `text` (a span a cut
    divides is in both clauses, each part pointing at the same input)."""


@dataclass(frozen=True)
class PlanLimits:
    min_clause_chars: int = 12
    max_clause_chars: int = 160
    first_clause_max_chars: int = 30
    clause_silence_ms: int = 0
    sentence_silence_ms: int = 100
    whole_sentences: bool = False
    """A sentence is cut only when longer than `max_clause_chars` (at punctuation first)."""


def cut_long(text: str, limit: int) -> list[str]:
    """Cut `text` into pieces of at most `limit` chars at word boundaries."""
    pieces: list[str] = []
    while len(text) > limit:
        words = text.split(" ")
        best, pos, best_score = 0, 0, -1.0
        for i, word in enumerate(words[:-1]):
            pos += len(word) + 1
            if pos - 1 > limit:
                break
            # Prefer cutting late, and before a function word.
            score = pos / limit + (0.6 if words[i + 1].lower() in BREAK_BEFORE else 0.0)
            if pos - 1 >= limit // 3 and score > best_score:
                best, best_score = pos, score
        if best == 0:  # one very long word or nothing fits: cut at the first space
            space = text.find(" ", limit // 3)
            if space < 0:
                break
            best = space + 1
        pieces.append(text[:best].strip())
        text = text[best:].strip()
    if text:
        pieces.append(text)
    return pieces


def _pack(parts: list[str], limit: int) -> list[str]:
    """Consecutive `parts` joined while they fit in `limit`; a part too long alone is cut
    at word boundaries."""
    out: list[str] = []
    for part in parts:
        if out and len(out[-1]) + 1 + len(part) <= limit:
            out[-1] = f"{out[-1]} {part}"
        else:
            out.extend(cut_long(part, limit))
    return out


def _pieces(sentence: str, limits: PlanLimits, first: bool) -> list[tuple[str, bool]]:
    """(text, cut mid-phrase) of each clause of one sentence."""
    if limits.whole_sentences:
        if len(sentence) <= limits.max_clause_chars:
            return [(sentence, False)]
        parts = _pack(CLAUSE_RE.split(sentence), limits.max_clause_chars)
        # a piece that does not end at punctuation was cut at a word
        return [(p, n < len(parts) - 1 and not p.endswith((",", ";", ":")))
                for n, p in enumerate(parts)]
    pieces: list[tuple[str, bool]] = []
    for part in _merge_short(CLAUSE_RE.split(sentence), limits.min_clause_chars):
        head_first = first and not pieces
        limit = limits.first_clause_max_chars if head_first else limits.max_clause_chars
        head = cut_long(part, limit)
        if head_first and len(head) > 1:  # the rest of it at the normal limit
            head = head[:1] + cut_long(" ".join(head[1:]), limits.max_clause_chars)
        pieces.extend((h, i < len(head) - 1) for i, h in enumerate(head))
    return pieces


def _merge_short(parts: list[str], min_chars: int) -> list[str]:
    out: list[str] = []
    carry = ""
    for part in parts:
        carry = f"{carry} {part}".strip() if carry else part
        if len(carry) >= min_chars:
            out.append(carry)
            carry = ""
    if carry:
        if out:
            out[-1] = f"{out[-1]} {carry}"
        else:
            out.append(carry)
    return out


def rebase(text: str, spans: tuple[SourceSpan, ...], clause: str,
           cursor: int) -> tuple[tuple[SourceSpan, ...], int]:
    """The `spans` of `text` that fall in `clause` (its words, in order, from `cursor` on:
    planning only cuts and re-joins at whitespace), as offsets in `clause`; and where the
    next clause starts in `text`."""
    where: list[int] = []  # per character of clause: its offset in text (-1: a space)
    pos = cursor
    for ch in clause:
        if ch.isspace():
            where.append(-1)
            continue
        while pos < len(text) and text[pos] != ch:
            pos += 1
        where.append(pos)
        pos += 1
    out: list[SourceSpan] = []
    for span in spans:
        inside = [i for i, w in enumerate(where) if span.start <= w < span.end]
        if inside:
            out.append(SourceSpan(inside[0], inside[-1] + 1, span.src_start, span.src_end))
    return tuple(out), pos


def plan(segments: list[Segment], limits: PlanLimits) -> list[Clause]:
    """Clauses in speaking order; the last one carries no trailing silence."""
    clauses: list[Clause] = []
    explicit_tail_ms = 0  # <break>s after the last spoken clause are kept, implicit pauses not

    def add_pause(ms: int) -> None:
        if clauses:
            last = clauses[-1]
            clauses[-1] = Clause(last.text, last.phonemes, last.rate, last.pause_after_ms + ms,
                                 last.cut, last.spans)
        else:
            clauses.append(Clause("", False, 1.0, ms))

    for seg in segments:
        if isinstance(seg, Pause):
            add_pause(seg.duration_ms)
            explicit_tail_ms += seg.duration_ms
            continue
        explicit_tail_ms = 0
        if isinstance(seg, Phonemes):
            clauses.append(Clause(seg.phonemes, True, seg.rate, limits.clause_silence_ms))
        elif isinstance(seg, Speech):
            cursor = 0  # where the next clause's text starts in seg.text
            for sentence in SENTENCE_RE.split(seg.text.strip()):
                if not sentence.strip():
                    continue
                pieces = _pieces(sentence.strip(), limits, not clauses)
                for n, (piece, cut) in enumerate(pieces):
                    end = n == len(pieces) - 1
                    pause = (limits.sentence_silence_ms if end else
                             0 if cut else limits.clause_silence_ms)
                    spans, cursor = rebase(seg.text, seg.spans, piece, cursor)
                    clauses.append(Clause(piece, False, seg.rate, pause, cut, spans))
    if clauses:
        last = clauses[-1]
        if last.text:
            clauses[-1] = Clause(last.text, last.phonemes, last.rate, explicit_tail_ms, last.cut,
                                 last.spans)
    return clauses
