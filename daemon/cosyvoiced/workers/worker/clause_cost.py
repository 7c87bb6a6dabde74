"""What a TTS step is expected to cost, and the deadline check a held first audio must
pass before it starts (used by `tts_sched.TtsScheduler`).

A step is one `next()` of a request's synthesis: a vocoder chunk, the first one of a
sentence after its text front, or (whole-graph voices) one clause. The engine says what
each next step will be (`Synthesis.upcoming()`: characters through the front, seconds of
speech), and each chunk it yields says how long its front took. Per worker, moving
averages of front seconds per character and of the rest's seconds per second of speech
then give the cost of each next step before it runs, so a sentence's front is scheduled
early enough.

`fits` is the EDF demand bound: taking the steps due (deadline, cost) in deadline order,
the synthesis due by each deadline, plus a margin for the step that may be running, must
fit before it.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from typing import Any, Protocol

EWMA = 0.2
HOLD_MARGIN_S = 0.05
"""Slack kept in the demand bound for timing noise, beyond the longest step that may be
running when a deadline comes (a step cannot be interrupted: the caller adds it)."""
FIT_HORIZON_S = 4.0
"""How far ahead a first-audio release checks that every stream's steps still fit."""


class Step(Protocol):
    """What the engine says of a next step (`cosyvoiced.tts.streaming.synthesis.Step`)."""

    front_chars: int
    speech_s: float
    pause_s: float


Steps = Callable[[], Iterable[Step]]


def _ewma(old: float, new: float) -> float:
    return new if old == 0.0 else old + EWMA * (new - old)


class ClauseCosts:
    """Moving averages of step cost on one worker."""

    def __init__(self) -> None:
        self.first_step_s = 0.0
        """How long a request's first step takes (the guess when nothing else is known)."""
        self.front_s_per_char = 0.0
        """Text-front seconds per character of sentence text."""
        self.s_per_speech_s = 0.0
        """The rest of a step (vocoder, or a whole-graph run): seconds per second of speech."""
        self.speech_s_per_char = 0.0
        """Seconds of speech per character through the front (a sentence's whole speech)."""

    def learn(self, synth_s: float, speech_s: float, front_chars: int = 0,
              front_s: float = 0.0, sentence_speech_s: float = 0.0,
              first: bool = False) -> None:
        """One step took `synth_s` for `speech_s` of speech, of which `front_s` for the
        front of a `front_chars`-character sentence of `sentence_speech_s` in all."""
        if first:
            self.first_step_s = _ewma(self.first_step_s, synth_s)
        if front_chars and front_s > 0:
            self.front_s_per_char = _ewma(self.front_s_per_char, front_s / front_chars)
        if front_chars and sentence_speech_s > 0:
            self.speech_s_per_char = _ewma(self.speech_s_per_char,
                                           sentence_speech_s / front_chars)
        if speech_s > 0:
            self.s_per_speech_s = _ewma(self.s_per_speech_s,
                                        max(0.0, synth_s - front_s) / speech_s)

    def rtf(self) -> float:
        """Seconds of synthesis per second of speech, fronts included (0 until measured)."""
        front = self.front_s_per_char / self.speech_s_per_char if self.speech_s_per_char else 0.0
        return self.s_per_speech_s + front

    def cost_s(self, step: Step) -> float:
        if getattr(step, "cached", False):  # a copy from the prompt cache
            return 0.0
        return step.front_chars * self.front_s_per_char + step.speech_s * self.s_per_speech_s

    def _first(self, job: Any) -> Step | None:
        steps: Steps | None = job.steps
        return next(iter(steps()), None) if steps is not None else None

    def expected_s(self, job: Any, last_synth_s: float) -> float:
        """Synthesis time of `job`'s next step (`last_synth_s`: the stream's last one)."""
        step = self._first(job) if self.s_per_speech_s > 0 else None
        if step is not None:
            return self.cost_s(step)
        return last_synth_s if job.audio_samples else self.first_step_s

    def clauses_due(self, job: Any, ahead_s: float, last_synth_s: float,
                    out: list[tuple[float, float]]) -> None:
        """Append (deadline from now, expected synthesis) of `job`'s next steps within
        the horizon, for a stream with `ahead_s` of audio ahead of its listener."""
        if job.steps is None or self.s_per_speech_s <= 0:
            out.append((ahead_s, self.expected_s(job, last_synth_s)))
            return
        t = ahead_s
        for step in job.steps():
            if t > FIT_HORIZON_S:
                break
            out.append((t, self.cost_s(step)))
            t += step.speech_s + step.pause_s


def fits(due: Sequence[tuple[float, float]], margin_s: float = HOLD_MARGIN_S) -> bool:
    """EDF demand bound: in deadline order, the cost due by each deadline (plus
    `margin_s`: blocking by a running step) fits before it."""
    need = 0.0
    for deadline, cost in sorted(due):
        need += cost
        if need + margin_s > deadline:
            return False
    return True
