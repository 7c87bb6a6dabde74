"""What a worker's TTS streams owe it: admission's load (`WorkerLoad.owed`).

Each stream with synthesis left owes its own rate, the synthesis of what it still has to
say per second of that speech (its RTF over what is left: fronts counted, copies from the
prompt cache free); a stream with all its audio made (only playing out) owes nothing.
The audio a stream has ahead of its listener, and a new request's first-audio budget, are
not counted as room: they are slack for the order of the steps (the scheduler's
deadlines, `TtsStream.deadline_s`), spent once, while a stream with speech left needs its
rate for as long as it speaks. Counted as room (the synthesis left over the time until
its listener has heard it), a burst of long streams was admitted past what the worker
carries and each of them underran; a worker whose streams owe more than `busy_max`
of it cannot keep them in real time with the margin admission keeps. Figures:
docs/performance.md ("Figures behind the code").
"""

from __future__ import annotations

from collections.abc import Iterable

from cosyvoiced.workers.worker.clause_cost import ClauseCosts
from cosyvoiced.workers.worker.tts_stream import SayJob, TtsStream

SPEECH_S_PER_CHAR = 0.065
"""Speech per character of a request not started yet, until the worker has measured it."""


def owed(streams: Iterable[TtsStream], costs: ClauseCosts, rtf: float) -> float:
    """The share of the worker's time `streams` need while they speak (`rtf`: the worker's
    measured TTS RTF, for steps `costs` cannot price yet)."""
    total = 0.0
    for stream in streams:
        if not stream.has_work():
            continue
        cost_s = speech_s = 0.0
        for job in ([stream.job] if stream.job is not None else []) + list(stream.jobs):
            c, t = _left(job, stream.rate_hz, costs, rtf)
            cost_s, speech_s = cost_s + c, speech_s + t
        if speech_s > 0.0:
            total += cost_s / speech_s
    return total


def _left(job: SayJob, rate_hz: int, costs: ClauseCosts, rtf: float) -> tuple[float, float]:
    """(synthesis seconds, seconds of speech) `job` has left to make: from the steps the
    engine says are next, else from its text."""
    if job.steps is None:
        per_char = costs.speech_s_per_char or SPEECH_S_PER_CHAR
        left = max(0.0, per_char * len(job.text) - job.audio_samples / rate_hz)
        return rtf * left, left
    cost_s = speech_s = 0.0
    for step in job.steps():
        speech_s += step.speech_s + step.pause_s
        if costs.s_per_speech_s > 0:
            cost_s += costs.cost_s(step)
        elif not getattr(step, "cached", False):
            cost_s += rtf * step.speech_s
    return cost_s, speech_s
