"""Load-based admission: who takes a new stream or request, or a typed `Overloaded`.

Every figure is in one currency, core-seconds per second (a fraction of the worker's
CPUs). A worker's load is what its streams need of it while they speak: what its TTS
streams owe (`TtsScheduler.owed`: each stream with speech left to make at its own RTF
over that speech; audio ahead of a listener and a new request's first-audio budget are
not room; a stream with all its audio made owes nothing), `rtf` for each stream that
began to speak since that figure was published, and for each listen stream `VAD windows
per second x cost + speech share x Whisper RTF`. A call is the sum of its listen stream
and its replies. Each worker measures its TTS real-time factor (RTF: synthesis seconds
per second of speech, wall time, so a core shared with other work shows; at start on a
warm run of the variant it loaded, then on every step it makes), its VAD cost per window,
its Whisper RTF (decode CPU seconds per second of speech) and how much of a listen
stream's time is speech to decode.

The measured CPU busy fraction (`busy`, with the steps made ahead of every deadline
shown apart as `ahead`) is reported, not admitted by: once requests queue for their
first audio a worker reads 1.0 whether the box carries 32 TTS streams or 46, and cannot
tell them apart; what is owed can (figures: docs/performance.md, "Figures behind the
code").

New work goes to the least loaded live worker whose load with one more stream stays
within `busy_max`; if none, the request is refused rather than letting every stream on
the worker fall behind. A worker speaking for no one always takes one TTS stream (its
RTF figure may be stale; speaking measures it again).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from cosyvoiced.workers.errors import Overloaded

VAD_WINDOW_S = 0.032


@dataclass(frozen=True)
class WorkerLoad:
    index: int
    alive: bool
    busy: float
    """Measured busy fraction (moving average)."""
    rtf: float
    """Measured clause RTF (moving average): CPU seconds per second of speech."""
    vad_us: float
    """Measured cost of one VAD window in a batched run (moving average)."""
    speaking: int
    """TTS streams with requests in flight."""
    listening: int
    streams: int
    asr_rtf: float = 0.0
    """Measured Whisper decode CPU seconds per second of speech (0: ASR off)."""
    speech_share: float = 0.0
    """Measured seconds of speech decoded per second of a listen stream."""
    ahead: float = 0.0
    """The part of `busy` spent on work-conserving steps ahead of every deadline (a
    figure for operators)."""
    owed: float = 0.0
    """What its TTS streams owe (`TtsScheduler.owed`), as last published."""
    new: int = 0
    """Streams that began to speak since `owed` was published (not in it yet)."""

    def listen_cost(self) -> float:
        """What one listen stream costs: its VAD windows and its expected Whisper decodes."""
        return self.vad_us * 1e-6 / VAD_WINDOW_S + self.asr_rtf * self.speech_share

    def load(self) -> float:
        return self.owed + self.new * self.rtf + self.listening * self.listen_cost()

    def tts_capacity(self, busy_max: float) -> int:
        """Concurrent speaking streams this worker can carry in real time beside its
        listen streams."""
        if not self.alive or self.rtf <= 0:
            return 0
        return max(0, int((busy_max - self.listening * self.listen_cost()) / self.rtf))


class Admission:
    def __init__(self, busy_max: float, max_streams: int) -> None:
        self.busy_max = busy_max
        self.max_streams = max_streams
        self.refused = 0

    def _refuse(self, message: str) -> Overloaded:
        self.refused += 1
        return Overloaded(message)

    def check_cap(self, open_streams: int) -> None:
        if open_streams >= self.max_streams:
            raise self._refuse(f"at the workers.max_streams cap ({self.max_streams})")

    def cost(self, load: WorkerLoad, kind: str) -> float:
        if kind == "tts":
            return load.rtf
        return load.listen_cost()

    def choose(self, loads: Sequence[WorkerLoad], kind: str) -> int:
        """Index of the worker with the fewest streams among those that can take one
        more `kind` in real time; Overloaded if none can."""
        live = [w for w in loads if w.alive]
        if not live:
            raise self._refuse("no inference worker is running")
        fits = [w for w in live if w.load() + self.cost(w, kind) <= self.busy_max]
        if not fits and kind == "tts":
            fits = [w for w in live if self._idle_voice(w)]
        if not fits:
            least = min(live, key=lambda w: (w.load(), w.index))
            raise self._refuse(
                f"every worker is at its real-time capacity (least loaded: worker "
                f"{least.index} at {least.load():.2f} of {self.busy_max:.2f})")
        # Spread streams evenly (an open stream may speak any moment), then by load.
        return min(fits, key=lambda w: (w.streams, w.load(), w.index)).index

    def spare(self, loads: Sequence[WorkerLoad], open_streams: int) -> float:
        """The spare real-time capacity of all the workers, 0..1, from the figures `choose`
        admits by: the room each live worker has left under `busy_max` (none on a dead or
        restarting worker, none on one that would refuse one more speaking stream), over
        `busy_max` x all workers, and never more than the room left under the
        `max_streams` cap. 0: a new call (listening and speaking) would be refused."""
        if not loads or self.max_streams <= 0:
            return 0.0
        room = sum(self._room(w) for w in loads)
        by_load = room / (self.busy_max * len(loads))
        by_cap = max(0, self.max_streams - open_streams) / self.max_streams
        return max(0.0, min(1.0, by_load, by_cap))

    def _room(self, load: WorkerLoad) -> float:
        if not load.alive:
            return 0.0
        if load.load() + load.rtf > self.busy_max and not self._idle_voice(load):
            return 0.0  # `choose` and `can_speak` refuse it one more speaking stream
        return max(0.0, self.busy_max - load.load())

    def _idle_voice(self, load: WorkerLoad) -> bool:
        """A worker speaking for no one takes one TTS stream whatever its RTF figure says:
        that figure is only re-measured by speaking, and one taken while the box was busy
        (wall time) would otherwise refuse every request from then on."""
        return load.speaking == 0 and load.load() < self.busy_max

    def can_speak(self, load: WorkerLoad) -> None:
        """A stream that is idle now asks to speak on its worker: fits, or Overloaded."""
        if not load.alive:
            raise self._refuse(f"worker {load.index} is restarting")
        if load.load() + load.rtf > self.busy_max and not self._idle_voice(load):
            raise self._refuse(
                f"worker {load.index} is at its real-time capacity "
                f"({load.load():.2f} of {self.busy_max:.2f})")
