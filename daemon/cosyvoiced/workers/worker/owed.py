"""What a worker's TTS streams owe it: admission's load (`WorkerLoad.owed`).

For each stream with work, the synthesis of what it still has to say over the time until
its listener has heard it (the audio ahead of the listener plus that speech), summed.
Above 1 some listener will run dry whatever the order; a stream with everything made
(only playing out) owes nothing. A request whose first audio is not out has until its
first-audio budget to start playing (the scheduler's own deadline,
`TtsStream.deadline_s`): a burst of new requests is started one after another, not
refused. Figures: docs/performance.md ("Figures behind the code").
"""

from __future__ import annotations

from collections.abc import Iterable

from cosyvoiced.workers.worker.clause_cost import ClauseCosts
from cosyvoiced.workers.worker.tts_stream import SayJob, TtsStream

SPEECH_S_PER_CHAR = 0.065
"""Speech per character of a request not started yet, until the worker has measured it."""


def owed(streams: Iterable[TtsStream], costs: ClauseCosts, now_s: float, rtf: float,
         budget_s: float) -> float:
    """The share of the worker's time `streams` need from now on (`rtf`: the worker's
    measured TTS RTF, for steps `costs` cannot price yet; `budget_s`: first audio)."""
    total = 0.0
    for stream in streams:
        if not stream.has_work():
            continue
        cost_s = speech_s = 0.0
        for job in ([stream.job] if stream.job is not None else []) + list(stream.jobs):
            c, t = _left(job, stream.rate_hz, costs, rtf)
            cost_s, speech_s = cost_s + c, speech_s + t
        if speech_s > 0.0:
            until_s = stream.deadline_s(now_s, stream.ahead_s(now_s), budget_s)
            total += cost_s / (speech_s + max(0.0, until_s))
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
