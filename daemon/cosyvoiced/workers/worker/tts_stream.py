"""What the TTS scheduler keeps per stream and per request (`tts_sched.TtsScheduler`).

A `TtsStream` is one playback ring and its queue of `SayJob`s: the request being
synthesized (its generator of steps), the audio made but not yet in the ring, and when
that audio ends if played in real time, which is what the scheduler's deadlines are
computed from (`ahead_s`).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any, Protocol

import numpy as np

from cosyvoiced.workers.worker.clause_cost import Steps

LATE_MIN_S = 0.005
"""A step counts as late when its listener had been out of audio longer than this (a gap
a listener hears; the load ramp counts gaps from 5 ms)."""


class ProducerRing(Protocol):
    def write(self, samples: np.ndarray) -> int: ...
    def available(self) -> int: ...
    def room(self) -> int: ...
    def set_playing(self, playing: bool) -> None: ...
    def request_flush(self) -> None: ...


class Chunk(Protocol):
    audio: np.ndarray


@dataclass
class SayJob:
    request_id: int
    text: str
    options: Any
    received_s: float
    synth_s: float = 0.0
    audio_samples: int = 0
    written: int = 0
    synth_done: bool = False
    first_sent: bool = False
    first_made_s: float = 0.0
    """When its first audio was synthesized (it may then be held: `TtsScheduler`)."""
    queued_s: float = 0.0
    """The expected synthesis of its first step and of the first steps of the requests
    ahead of it on the worker when it came: how long its first audio may be held counts
    from then (`TtsScheduler.say`)."""
    steps: Steps | None = None
    """What its next steps will be, once its synthesis started (`make_gen` fills it in
    from the engine's `Synthesis.upcoming`): the scheduler's guess of each one's cost."""


@dataclass
class TtsStream:
    id: str
    ring: ProducerRing
    rate_hz: int
    jobs: deque[SayJob] = field(default_factory=deque)
    job: SayJob | None = None
    gen: Iterator[Chunk] | None = None
    pending: deque[list[Any]] = field(default_factory=deque)
    """[job, audio, offset] entries not yet in the ring (it was full)."""
    pending_samples: int = 0
    play_end_s: float = 0.0
    """When the audio produced so far ends if played in real time from its first sample."""
    ready_seq: int = 0
    last_synth_s: float = 0.0
    """How long this stream's last step took: the guess for its next one."""
    hold_until_s: float | None = None
    """A new request's first audio is held back (not in the ring yet) until then, or
    until it has `prebuffer_s` of audio, so a loaded worker starts it with a buffer."""

    def has_work(self) -> bool:
        return self.gen is not None or bool(self.jobs)

    def next_job(self) -> SayJob:
        """The request its next step belongs to: the one in synthesis, else the first
        queued (only while it has work)."""
        return self.job if self.job is not None else self.jobs[0]

    def ahead_s(self, now_s: float) -> float:
        held = (self.ring.available() + self.pending_samples) / self.rate_hz
        return max(held, self.play_end_s - now_s)

    def late_s(self, job: SayJob, now_s: float) -> float:
        """How long its listener has been out of `job`'s audio at `now_s`, mid-request
        (0 before the request's first audio is out: it has not begun to play)."""
        if not job.first_sent or self.hold_until_s is not None:
            return 0.0
        return max(0.0, now_s - self.play_end_s)

    def deadline_s(self, now_s: float, ahead_s: float, budget_s: float) -> float:
        """Seconds until its listener needs audio it does not have yet (`ahead_s`: its
        `ahead_s(now_s)`). Before a request's first audio is made, it is due `budget_s`
        after the request came; once made and held, it plays at the latest from
        `hold_until_s` (counted from when it could first have audio: `SayJob.queued_s`)."""
        if self.hold_until_s is not None:
            return self.hold_until_s + self.pending_samples / self.rate_hz - now_s
        if ahead_s <= 0.0:
            job = self.next_job()
            if not job.first_sent:
                return job.received_s + budget_s - now_s
        return ahead_s
