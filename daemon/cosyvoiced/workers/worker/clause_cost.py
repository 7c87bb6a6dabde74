"""What a TTS clause is expected to cost, and the deadline check a held first audio
must pass before it starts (used by `tts_sched.TtsScheduler`).

Per worker, moving averages of synthesis seconds and of speech seconds per character of
clause text (clause length predicts both well for one voice: ~0.045 s of speech per
character here). A request's clause plan (`SayJob.clause_chars`, filled in by the
worker from the engine's own planner) then gives the cost of each next clause before
it runs, so a long clause after a short first one is scheduled early enough.

`fits` is the EDF demand bound: taking the clauses due (deadline, cost) in deadline
order, the synthesis due by each deadline, plus a margin for the clause that may be
running, must fit before it.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

EWMA = 0.2
HOLD_MARGIN_S = 0.2
"""Slack kept in the demand bound (a clause already running cannot be interrupted)."""
FIT_HORIZON_S = 4.0
"""How far ahead a first-audio release checks that every stream's clauses still fit."""


def _ewma(old: float, new: float) -> float:
    return new if old == 0.0 else old + EWMA * (new - old)


class ClauseCosts:
    """Moving averages of clause cost on one worker."""

    def __init__(self) -> None:
        self.first_clause_s = 0.0
        """How long a request's first clause takes (the guess when nothing else is known)."""
        self.s_per_char = 0.0
        """Synthesis seconds per character of clause text."""
        self.audio_per_char = 0.0
        """Seconds of speech per character of clause text."""

    def learn(self, synth_s: float, chars: int, audio_s: float, first: bool) -> None:
        if first:
            self.first_clause_s = _ewma(self.first_clause_s, synth_s)
        if chars:
            self.s_per_char = _ewma(self.s_per_char, synth_s / chars)
            self.audio_per_char = _ewma(self.audio_per_char, audio_s / chars)

    def rtf(self) -> float:
        """Seconds of synthesis per second of speech (0 until measured)."""
        return self.s_per_char / self.audio_per_char if self.audio_per_char > 0 else 0.0

    def expected_s(self, job: Any, last_synth_s: float) -> float:
        """Synthesis time of `job`'s next clause (`last_synth_s`: the stream's last one)."""
        chars = job.clause_chars
        if chars is not None and job.clauses_done < len(chars) and self.s_per_char > 0:
            return chars[job.clauses_done] * self.s_per_char
        return last_synth_s if job.audio_samples else self.first_clause_s

    def clauses_due(self, job: Any, ahead_s: float, last_synth_s: float,
                    out: list[tuple[float, float]]) -> None:
        """Append (deadline from now, expected synthesis) of `job`'s next clauses within
        the horizon, for a stream with `ahead_s` of audio ahead of its listener."""
        chars = job.clause_chars
        if chars is None or self.s_per_char <= 0 or self.audio_per_char <= 0:
            out.append((ahead_s, self.expected_s(job, last_synth_s)))
            return
        t = ahead_s
        for n in chars[job.clauses_done:]:
            if t > FIT_HORIZON_S:
                break
            out.append((t, n * self.s_per_char))
            t += n * self.audio_per_char


def fits(due: Sequence[tuple[float, float]], margin_s: float = HOLD_MARGIN_S) -> bool:
    """EDF demand bound: in deadline order, the cost due by each deadline fits before it."""
    need = 0.0
    for deadline, cost in sorted(due):
        need += cost
        if need + margin_s > deadline:
            return False
    return True
