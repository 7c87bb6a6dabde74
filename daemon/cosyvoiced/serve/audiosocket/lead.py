"""How far a call's incoming audio may run ahead of the wall clock.

Asterisk sends a call's audio at real-time pace; a burst after a network hiccup runs a
little ahead. What a peer sends more than `LEAD_S` ahead is dropped as it is read, so a
peer sending faster than real time costs the workers what an honest call costs (VAD,
ASR), not the CPU of the calls beside it. Reading goes on at the peer's pace: its hangup
is not queued behind its flood.
"""

from __future__ import annotations

import time

import structlog

log = structlog.get_logger(__name__)

LEAD_S = 1.0


class CallerLead:
    """One call's audio taken so far against its clock (a few float ops per frame)."""

    def __init__(self, call_id: str, rate_hz: int) -> None:
        self.call_id = call_id
        self.rate_hz = rate_hz
        self.started_s = time.monotonic()
        self.taken_s = 0.0
        self.dropped = 0
        """Samples dropped for running more than `LEAD_S` ahead of real time."""

    def take(self, samples: int) -> bool:
        """Whether a frame of `samples` goes on to the listener (False: dropped, counted;
        logged once per call)."""
        if self.taken_s - (time.monotonic() - self.started_s) > LEAD_S:
            if not self.dropped:
                log.info("call_audio_ahead", call_id=self.call_id, lead_s=LEAD_S,
                         note="the peer sends faster than real time: the excess is dropped")
            self.dropped += samples
            return False
        self.taken_s += samples / self.rate_hz
        return True
