"""A worker's live figures in a small shared array: written by the worker, read by the pool.

One float64 per figure, each written with a single aligned store (never torn on x86-64),
so the pool and the watchdog read them without a message round trip or a lock. A
stopped or dead worker simply stops updating its heartbeat.
"""

from __future__ import annotations

import multiprocessing
import time
from collections.abc import Callable
from multiprocessing.context import BaseContext
from typing import Any

FIELDS = ("heartbeat_s", "busy", "rtf", "vad_us", "tts_streams", "listen_streams",
          "clauses", "windows", "queued", "prompt_hits", "prompt_misses", "prompt_bytes",
          "asr_rtf", "speech_share", "ahead", "owed", "owed_at_s", "late")
_I = {name: i for i, name in enumerate(FIELDS)}


class WorkerStats:
    """View over a `RawArray('d')`; pass `.array` to the worker process at spawn."""

    __slots__ = ("array",)

    def __init__(self, array: Any) -> None:
        self.array = array

    @classmethod
    def create(cls, ctx: BaseContext | None = None) -> WorkerStats:
        ctx = ctx or multiprocessing.get_context("spawn")
        stats = cls(ctx.RawArray("d", len(FIELDS)))
        stats.array[_I["heartbeat_s"]] = time.monotonic()
        return stats

    def get(self, name: str) -> float:
        return float(self.array[_I[name]])

    def set(self, name: str, value: float) -> None:
        self.array[_I[name]] = value

    def beat(self, now_s: float) -> None:
        self.array[0] = now_s

    def heartbeat_s(self) -> float:
        """Monotonic time of the worker's last loop turn (a Health probe)."""
        return float(self.array[0])

    def snapshot(self) -> dict[str, float]:
        return {name: float(self.array[i]) for i, name in enumerate(FIELDS)}


SPEECH_SHARE_PRIOR = 0.5
"""Share of a listen stream's time that is speech to decode, assumed until measured (a
caller in a dialogue speaks ~35% of the time; 0.5 errs on the side of refusing)."""
SHARE_PRIOR_S = 30.0
"""Listen-stream seconds the prior is worth: measured speech outweighs it within a minute
of a few calls."""


class LoadMeter:
    """A worker's load in one currency, core-seconds per second, measured in the worker.

    * `busy`: the larger of the CPU time of the whole process (every thread: the loop's
      TTS steps and VAD ticks, the Whisper decode threads) per second of wall time over
      its CPUs, and the share of wall time its loop spent working (`add_busy`: that one
      also counts the time other processes took the core while a step ran, so a worker
      that cannot keep up on a shared box shows it);
    * `ahead`: the part of `busy` spent on TTS steps served ahead of every deadline (the
      scheduler's work-conserving steps, `add_ahead`): work the worker would have put
      off had anything been due (shown apart; admission counts it as load);
    * `rtf`: TTS synthesis seconds per second of speech made;
    * `asr_rtf`: Whisper decode CPU seconds per second of speech decoded;
    * `speech_share`: seconds of speech decoded per second of listen stream, so that a
      listen stream's expected ASR cost is `asr_rtf x speech_share`.
    """

    RTF_DECAY = 0.1
    """Weight of each new TTS step in the RTF: ~10 steps (~10 s of speech) count."""
    ASR_DECAY = 0.1
    """Weight of each new Whisper batch in `asr_rtf`."""
    SHARE_DECAY = 0.03
    """Weight of each busy window (~1 s) in `speech_share`: about the last half minute."""

    def __init__(self, window_s: float = 1.0, alpha: float = 0.3, cpus: int = 1,
                 cpu_clock: Callable[[], float] = time.process_time,
                 start_s: float | None = None) -> None:
        self.window_s = window_s
        self.alpha = alpha
        self.cpus = max(1, cpus)
        self.cpu_clock = cpu_clock
        self.busy = 0.0
        self.ahead = 0.0
        self._busy_s = 0.0
        self._ahead_s = 0.0
        self._ahead_cpu_s = 0.0
        self._cpu0 = cpu_clock()
        self._start_s = time.monotonic() if start_s is None else start_s
        self._synth_s = 0.0
        self._audio_s = 0.0
        self._asr_s = 0.0
        self._decoded_s = 0.0
        self._heard_s = SPEECH_SHARE_PRIOR * SHARE_PRIOR_S
        self._listened_s = SHARE_PRIOR_S
        self._heard_now_s = 0.0

    @property
    def rtf(self) -> float:
        """Synthesis seconds per second of speech over the last steps (0 until measured).
        A ratio of decayed sums, not an average of ratios: a sentence's first step carries
        its text front with a small chunk, the rest are vocoder only."""
        return self._synth_s / self._audio_s if self._audio_s > 0 else 0.0

    @rtf.setter
    def rtf(self, value: float) -> None:
        """Start from a measured figure (the warm-up), worth one second of speech."""
        self._synth_s, self._audio_s = value, 1.0

    @property
    def asr_rtf(self) -> float:
        """Decode CPU seconds per second of speech over the last batches (0: no ASR)."""
        return self._asr_s / self._decoded_s if self._decoded_s > 0 else 0.0

    @asr_rtf.setter
    def asr_rtf(self, value: float) -> None:
        """Start from a measured figure (the warm-up), worth one second of speech."""
        self._asr_s, self._decoded_s = value, 1.0

    @property
    def speech_share(self) -> float:
        """Speech decoded per second of listen stream (`SPEECH_SHARE_PRIOR` at first)."""
        return self._heard_s / self._listened_s

    def add_busy(self, seconds: float) -> None:
        """The loop worked `seconds` of wall time (a VAD tick, a TTS step)."""
        self._busy_s += seconds

    def add_ahead(self, seconds: float, cpu_s: float) -> None:
        """Of the loop's work, a TTS step served ahead of every deadline took `seconds` of
        wall time and `cpu_s` of its thread's CPU time."""
        self._ahead_s += seconds
        self._ahead_cpu_s += cpu_s

    def add_clause(self, synth_s: float, audio_s: float) -> None:
        if audio_s <= 0:
            return
        keep = 1.0 - self.RTF_DECAY
        self._synth_s = self._synth_s * keep + synth_s
        self._audio_s = self._audio_s * keep + audio_s

    def add_decoded(self, cpu_s: float, speech_s: float) -> None:
        """A Whisper batch took `cpu_s` of CPU for `speech_s` of speech."""
        if speech_s <= 0:
            return
        keep = 1.0 - self.ASR_DECAY
        self._asr_s = self._asr_s * keep + cpu_s
        self._decoded_s = self._decoded_s * keep + speech_s

    def add_heard(self, speech_s: float) -> None:
        """An utterance of `speech_s` went to the decoder."""
        self._heard_now_s += speech_s

    def roll(self, now_s: float, listening: int = 0) -> bool:
        """Close the busy window if it is over (`listening`: listen streams open during
        it); True when `busy` was updated."""
        elapsed = now_s - self._start_s
        if elapsed < self.window_s:
            return False
        cpu = self.cpu_clock()
        cpu_frac = (cpu - self._cpu0) / elapsed / self.cpus
        frac = min(1.0, max(cpu_frac, self._busy_s / elapsed))
        due = min(frac, max(cpu_frac - self._ahead_cpu_s / elapsed / self.cpus,
                            (self._busy_s - self._ahead_s) / elapsed))
        self._busy_s = self._ahead_s = self._ahead_cpu_s = 0.0
        self.busy = self.busy + self.alpha * (frac - self.busy)
        self.ahead = self.ahead + self.alpha * (frac - max(0.0, due) - self.ahead)
        if listening:
            keep = 1.0 - self.SHARE_DECAY
            self._heard_s = self._heard_s * keep + self._heard_now_s
            self._listened_s = self._listened_s * keep + listening * elapsed
        self._heard_now_s = 0.0
        self._cpu0 = cpu
        self._start_s = now_s
        return True
