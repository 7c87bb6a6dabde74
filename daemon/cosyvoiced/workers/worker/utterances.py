"""A listen stream's ASR side inside a worker: a tap on the VAD's ring reads, log-mel while
speech is open, and the finished utterance handed to the ASR queue.

The hot path stays the batched VAD tick (`vad_tick`): the tick reads each stream's window
from its capture ring through a `ListenTap`, which copies the window into a short
history (`preroll_ms` + detection delay, at the stream's own rate) and, only while the
endpointer says speech is open, feeds it (resampled to 16 kHz for 8 kHz telephony) to a
streaming Whisper log-mel extractor. At `voice_started` the extractor is fed from
`start - preroll_ms` out of the history; at `voice_stopped` the frames up to
`end + 200 ms` become an `Utterance`, so decoding can start at once.

Early decode: once the silence after speech reaches `EARLY_MS` (less than `stop_ms`),
the utterance so far goes out as `Provisional` and is decoded while the endpointer waits
out `stop_ms`. If the silence lasts, the stop `Confirm`s it (its transcript is ready, or
on its way, the moment `voice_stopped` is sent); if speech resumes first, `Retract`
voids it and the utterance goes on. That takes up to `stop_ms - EARLY_MS` off every
transcript's latency, for one wasted decode per pause between `EARLY_MS` and `stop_ms`.

Every window read is cleaned first (`SampleGuard`: clipped to [-1, 1], NaN -> 0, in
place), so NaN/inf/huge samples never reach the history, the mel or the VAD state; then
the stream's DC offset is subtracted (`DcRemover`, ~1 s average), so the VAD, the history
and the mel all get the same zero-mean samples.

Extractors and their frame buffers (about 1 MB each for a 30 s cap) are leased from a
`MelPool` at voice start and returned at voice stop: memory grows with the utterances
open at once, not with the streams listened to.

Latency base: the tap notes, per window, when that window was probably written
(`read time - samples still queued behind it / rate`), so a worker that fell behind
(busy with a decode) still measures latency from the caller's end of speech.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from cosyvoiced.audio.buffers import SampleHistory
from cosyvoiced.audio.resample import StreamResampler
from cosyvoiced.config.schema import VadConfig
from cosyvoiced.listen.asr import Utterance
from cosyvoiced.listen.events import VoiceStarted, VoiceStopped
from cosyvoiced.listen.features.spec import WHISPER
from cosyvoiced.listen.features.stream import MelFrames, MelStream
from cosyvoiced.listen.vad import WINDOW_MS, Endpointer
from cosyvoiced.workers.worker.vad_tick import DcRemover, SampleGuard

__all__ = ["ASR_RATE_HZ", "EARLY_MS", "Confirm", "ListenTap", "MelLease", "MelPool",
           "Provisional", "Retract"]

ASR_RATE_HZ = 16000
TAIL_MS = 200
"""Audio after the end of speech kept in the utterance (as `cosyvoiced.listen` does)."""
_HISTORY_EXTRA_MS = 1000
"""History beyond preroll + start detection (windows read late in a backlogged tick)."""
_ARRIVALS = 512
"""Windows whose arrival estimate is remembered (16 s at 32 ms)."""
EARLY_MS = 256
"""Silence (8 windows) after which the utterance so far is decoded provisionally; at
least `TAIL_MS`, so its tail is already in the mel frames."""


@dataclass(frozen=True)
class Provisional:
    """The utterance so far, decoded ahead of the end of speech (`Confirm`/`Retract`)."""

    utterance: Utterance


@dataclass(frozen=True)
class Confirm:
    """The stream's provisional utterance ended as it was: send its transcript."""

    stream: str


@dataclass(frozen=True)
class Retract:
    """Speech resumed: the stream's provisional utterance is void."""

    stream: str


class MelLease:
    """One streaming extractor and the frames of the utterance it is working on."""

    def __init__(self, frames_cap: int, cache_dir: str | None = None) -> None:
        self.mel = MelStream(WHISPER, cache_dir=cache_dir)
        self.frames = MelFrames(frames_cap, WHISPER.n_mels)

    def reset(self) -> None:
        self.mel.reset()
        self.frames.clear()


class MelPool:
    """Leases of extractors, made on demand and reused."""

    def __init__(self, vad_cfg: VadConfig, cache_dir: str | None = None) -> None:
        self.cache_dir = cache_dir
        utt_s = vad_cfg.max_utterance_s + (vad_cfg.preroll_ms + vad_cfg.stop_ms
                                           + TAIL_MS) / 1000.0 + 1.0
        self.frames_cap = int(utt_s * WHISPER.frames_per_s)
        self._free: list[MelLease] = []
        self.made = 0

    def acquire(self) -> MelLease:
        if self._free:
            lease = self._free.pop()
            lease.reset()
            return lease
        self.made += 1
        return MelLease(self.frames_cap, self.cache_dir)

    def release(self, lease: MelLease) -> None:
        self._free.append(lease)

    @property
    def in_use(self) -> int:
        return self.made - len(self._free)


Emit = Callable[[Any], None]
"""Receives voice events and `Utterance`s, in order."""


class ListenTap:
    """A listen stream in a worker: ring tap for the VAD tick, endpointer, utterance mel.

    `read_into`/`available` make it the ring `VadTicker` reads from; `on_prob` is its
    probability sink. Events (`VoiceStarted`, `VoiceStopped`) and finished `Utterance`s
    go to `emit` in stream order.
    """

    def __init__(self, stream_id: str, rate_hz: int, ring: Any, vad_cfg: VadConfig,
                 pool: MelPool | None, emit: Emit, language: str = "", *,
                 words: bool = False) -> None:
        self.id = stream_id
        self.language = language
        """The stream's language code, for each of its utterances ("": the model's choice)."""
        self.words = words
        """Its utterances are transcribed with word times."""
        self.rate_hz = rate_hz
        self.ring = ring
        self.available = ring.available  # bound once: the tick calls it per round
        self.cfg = vad_cfg
        self.pool = pool
        """None: ASR is off (events only; the VAD tick may read the ring directly)."""
        self.emit = emit
        self.endpointer = Endpointer(vad_cfg, WINDOW_MS)
        hist_ms = vad_cfg.preroll_ms + vad_cfg.start_ms + _HISTORY_EXTRA_MS
        self.history = SampleHistory(hist_ms * rate_hz // 1000)
        self._arrival = np.zeros(_ARRIVALS, dtype=np.float64)
        self.windows = 0
        self.guard = SampleGuard()
        self.dc = DcRemover(rate_hz)
        self.lease: MelLease | None = None
        self._rs: StreamResampler | None = None
        self._origin_ms = 0
        self.utterances = 0
        self.early_ms = EARLY_MS if vad_cfg.stop_ms > EARLY_MS + WINDOW_MS else None
        """Silence before a provisional decode (None: off, `stop_ms` is too short)."""
        self._early_end: int | None = None
        """End (ms) of the provisional utterance out, if any."""

    # --- the VAD tick's ring ---------------------------------------------------------

    def read_into(self, out: np.ndarray) -> int:
        n = self.ring.read_into(out)
        if n:
            x = out[:n]
            self.guard.clean(x)
            self.dc.remove_one(x, self.guard.dirty)
            self.history.push(x)
            if self.lease is not None:
                self._feed_mel(x)
            self._arrival[self.windows % _ARRIVALS] = (time.monotonic()
                                                       - self.ring.available() / self.rate_hz)
            self.windows += 1
        return n

    def on_prob(self, prob: float) -> None:
        ep = self.endpointer
        event = ep.update(prob)
        if event is not None:
            self._on_event(event)
        elif self._early_end is None:
            if (self.early_ms is not None and self.lease is not None
                    and ep.silence_ms >= self.early_ms):
                self._early()
        elif ep.silence_ms == 0:  # speech resumed: the provisional utterance is void
            self._early_end = None
            self.emit(Retract(self.id))

    # --- utterances ------------------------------------------------------------------

    def _feed_mel(self, x: np.ndarray) -> None:
        assert self.lease is not None
        y = x if self._rs is None else self._rs.process(x)
        if y.shape[0]:
            self.lease.mel.push(y, self.lease.frames)

    def _on_event(self, event: VoiceStarted | VoiceStopped) -> None:
        if isinstance(event, VoiceStarted):
            self.emit(VoiceStarted(event.start_ms, stream=self.id))
            self._start(event.start_ms)
            return
        stop = VoiceStopped(event.start_ms, event.end_ms, event.reason, stream=self.id)
        self.emit(stop)
        early, self._early_end = self._early_end, None
        if early is not None and early == stop.end_ms and self.lease is not None:
            self._release()
            self.utterances += 1
            self.emit(Confirm(self.id))
            return
        if early is not None:
            self.emit(Retract(self.id))
        utt = self._finish(stop)
        if utt is not None:
            self.emit(utt)

    def _release(self) -> None:
        if self.lease is not None and self.pool is not None:
            self.pool.release(self.lease)
        self.lease, self._rs = None, None

    def _early(self) -> None:
        """Send the utterance so far (to its end + tail) for a provisional decode."""
        lease = self.lease
        assert lease is not None
        ep = self.endpointer
        end = ep.speech_end_ms
        n = max(0, min((end + TAIL_MS - self._origin_ms) // 10, lease.frames.count))
        frames = np.zeros((n, WHISPER.n_mels), dtype=np.float32)
        lease.frames.copy_out(0, n, frames)
        self._early_end = end
        self.emit(Provisional(Utterance(frames, ep.speech_start_ms, end, self.arrival_s(end),
                                        self.id, self.language, self.words, self._origin_ms)))

    def _start(self, start_ms: int) -> None:
        if self.pool is None:
            return
        if self.lease is not None:  # a cut utterance never released (defensive)
            self.pool.release(self.lease)
        self._early_end = None
        origin = max(0, (start_ms - self.cfg.preroll_ms) * self.rate_hz // 1000)
        backlog = self.history.read(origin)
        self._origin_ms = (self.history.count - backlog.shape[0]) * 1000 // self.rate_hz
        self.lease = self.pool.acquire()
        self._rs = None if self.rate_hz == ASR_RATE_HZ else StreamResampler(self.rate_hz,
                                                                            ASR_RATE_HZ)
        self._feed_mel(backlog)

    def _finish(self, stop: VoiceStopped) -> Utterance | None:
        lease = self.lease
        if lease is None or self.pool is None:
            return None
        stop_frame = (stop.end_ms + TAIL_MS - self._origin_ms) // 10
        if stop_frame > lease.frames.count:  # the stream ended (or was cut) before the tail
            if self._rs is not None:
                tail = self._rs.flush()
                if tail.shape[0]:
                    lease.mel.push(tail, lease.frames)
            lease.mel.flush(lease.frames)
        n = max(0, min(stop_frame, lease.frames.count))
        frames = np.zeros((n, WHISPER.n_mels), dtype=np.float32)
        lease.frames.copy_out(0, n, frames)
        self.pool.release(lease)
        self.lease, self._rs = None, None
        self.utterances += 1
        return Utterance(frames, stop.start_ms, stop.end_ms, self.arrival_s(stop.end_ms),
                         self.id, self.language, self.words, self._origin_ms)

    def arrival_s(self, at_ms: int) -> float:
        """When the audio at stream time `at_ms` was (probably) written to the ring."""
        j = max(0, (at_ms - 1) // WINDOW_MS)
        if j >= self.windows or j < self.windows - _ARRIVALS:
            return time.monotonic()
        return float(self._arrival[j % _ARRIVALS])

    # --- end of stream ---------------------------------------------------------------

    def close(self, run_vad: Callable[[np.ndarray], float]) -> None:
        """End of stream: decide on the full windows left in the ring (`run_vad` gives a
        window's probability), feed the last partial window to an open utterance, end it."""
        window = WINDOW_MS * self.rate_hz // 1000
        buf = np.zeros(window, dtype=np.float32)
        while self.ring.available() >= window:
            self.read_into(buf)
            self.on_prob(run_vad(buf))
        left = self.ring.available()
        if left and self.lease is not None:
            n = self.ring.read_into(buf[:left])
            x = buf[:n]
            self.guard.clean(x)
            self.dc.remove_one(x, self.guard.dirty)
            self.history.push(x)
            self._feed_mel(x)
        stop = self.endpointer.close()
        if stop is not None:
            self._on_event(stop)
        else:  # no stop: release the lease (a provisional utterance cannot be out)
            self._release()
