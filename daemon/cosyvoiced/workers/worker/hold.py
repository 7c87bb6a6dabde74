"""Whether a new request's held first audio may start playing now (`TtsScheduler._release`):
the worker must still make every speaking stream's next steps in time with it playing."""

from __future__ import annotations

from collections.abc import Iterable

from cosyvoiced.workers.worker.clause_cost import HOLD_MARGIN_S, ClauseCosts, fits
from cosyvoiced.workers.worker.tts_stream import TtsStream

SUSTAINABLE_LOAD = 1.5
"""Above this modelled load (speaking streams x RTF) first audio is never held."""


def sustainable(streams: Iterable[TtsStream], costs: ClauseCosts) -> bool:
    """Can the worker carry its speaking streams in real time at all? If clearly not
    (it was admitted beyond capacity), holding first audio gains nothing but latency.
    (The RTF counts fronts per second of speech, not per first chunk.)"""
    speaking = sum(1 for st in streams if st.has_work() or st.pending)
    return speaking * costs.rtf() <= SUSTAINABLE_LOAD


def fits_playing(candidate: TtsStream, held_s: float, now_s: float,
                 streams: Iterable[TtsStream], costs: ClauseCosts) -> bool:
    """Would every speaking stream (`candidate` playing from now with `held_s` held) still
    get each step it needs over the next seconds before it runs dry, even with the longest
    next step of another stream running when a deadline comes? (`clause_cost.fits`)"""
    due: list[tuple[float, float]] = []
    costs.clauses_due(candidate.next_job(), held_s, candidate.last_synth_s, due)
    blocking = 0.0
    for st in streams:
        if st is candidate or not st.has_work():
            continue
        job = st.next_job()
        blocking = max(blocking, costs.expected_s(job, st.last_synth_s))
        if st.hold_until_s is not None:
            continue
        ahead = st.ahead_s(now_s)
        if ahead <= 0.0 and not job.first_sent:
            continue  # not started: its own first-audio budget, not a deadline
        costs.clauses_due(job, ahead, st.last_synth_s, due)
    return fits(due, blocking + HOLD_MARGIN_S)
