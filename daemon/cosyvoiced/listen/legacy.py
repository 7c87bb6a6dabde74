"""Per-stream listening pipeline: samples -> VAD windows -> endpointer -> mel -> ASR -> events.

A `ListenStream` is driven synchronously by its single owner (a worker):
`feed(samples)` sanitizes and buffers audio and returns how many VAD windows are ready;
`ListenBatch.tick()` runs ONE batched Silero `run()` per rate over every stream with a
full window (repeating while some stream still has one), advances each endpointer, and
decodes the finished utterances (from all streams) in batched Whisper calls.

Rates: VAD runs at the stream's own rate when it is 8 or 16 kHz (no resampling for
telephony VAD), else on the stream resampled to 16 kHz. With ASR on, the stream is also
resampled to 16 kHz into a short audio ring (preroll plus detection lag); log-mel is
computed only while an utterance is open: at voice start the extractor is fed from
`start - preroll_ms` out of that ring, then with each new chunk, so its frames are ready
the moment the endpointer says stop.

Bad input: NaN/inf samples become 0 and floats beyond [-1, 1] are clipped (both counted
in `stats`); a DC offset is tracked (mean over ~1 s) and subtracted; unsupported rates raise
`UnsupportedRate` at open; an utterance reaching `max_utterance_s` is cut, transcribed and
listening goes on; `close()` ends an open utterance and transcribes it.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass
from typing import Any

import numpy as np
import structlog

from cosyvoiced.audio.buffers import AudioRing, SampleFifo
from cosyvoiced.audio.resample import SUPPORTED_RATES_HZ, StreamResampler, UnsupportedRate
from cosyvoiced.config.schema import AsrConfig, VadConfig
from cosyvoiced.listen.asr import Utterance, WhisperAsr
from cosyvoiced.listen.events import Transcript, VoiceStarted, VoiceStopped
from cosyvoiced.listen.features.stream import WHISPER, FrameRing, MelStream
from cosyvoiced.listen.vad import WINDOW_MS, Endpointer, SileroBatch, window_samples

__all__ = ["ListenBatch", "ListenError", "ListenStats", "ListenStream", "UnsupportedRate"]

log = structlog.get_logger(__name__)

ASR_RATE_HZ = 16000
_LAG_S = 2.0
"""Audio kept for the VAD decision lag (batched ticks may run late)."""
_DC_TAU_S = 1.0
"""Time constant of the DC-offset tracker."""
_ARRIVALS = 1024
"""Feeds remembered for latency measurement (about 20 s of 20 ms frames)."""
_TAIL_MS = 200
"""Audio after the last speech window kept in the utterance (Whisper likes a little tail)."""


class ListenError(ValueError):
    """Misuse of a listening stream (closed, bad samples)."""

    code = "listen_error"


@dataclass
class ListenStats:
    samples_in: int = 0
    sanitized: int = 0
    """NaN/inf samples replaced by 0."""
    clipped: int = 0
    """Samples beyond [-1, 1] clipped."""
    windows: int = 0
    utterances: int = 0
    cut: int = 0
    """Utterances cut at max_utterance_s."""


class ListenStream:
    """One stream's listening state (see the module docstring); use via `ListenBatch.open`."""

    def __init__(self, stream_id: str, rate_hz: int, vad: SileroBatch, vad_cfg: VadConfig,
                 asr: bool) -> None:
        if rate_hz not in SUPPORTED_RATES_HZ:
            raise UnsupportedRate(rate_hz)
        self.id = stream_id
        self.rate_hz = rate_hz
        self.vad_cfg = vad_cfg
        self.stats = ListenStats()
        self.closed = False
        self._drained = False
        self._vad = vad
        self.slot = vad.open()
        self.window = window_samples(vad.rate_hz)
        self._vad_rs = None if vad.rate_hz == rate_hz else StreamResampler(rate_hz, vad.rate_hz)
        self._pending = SampleFifo(self.window * 64)
        self.endpointer = Endpointer(vad_cfg, WINDOW_MS)
        self._dc = 0.0
        self._scratch = np.zeros(rate_hz // 10, dtype=np.float32)
        self.asr = asr
        if asr:
            self._asr_rs = None if rate_hz == ASR_RATE_HZ else StreamResampler(rate_hz, ASR_RATE_HZ)
            lag_s = (vad_cfg.preroll_ms + vad_cfg.start_ms) / 1000.0 + _LAG_S
            self._audio = AudioRing(int(lag_s * ASR_RATE_HZ))
            self._mel = MelStream(WHISPER)
            utt_s = vad_cfg.max_utterance_s + (vad_cfg.preroll_ms + vad_cfg.stop_ms
                                               + _TAIL_MS) / 1000.0 + 1.0
            self._frames = FrameRing(int(utt_s * 100), WHISPER.n_mels)
            self._mel_from = -1  # absolute 16 kHz sample where the open utterance's mel starts
        self.utterances: list[Utterance] = []
        # When each recent feed arrived, to measure latency from the end of speech.
        self._arrival_end = np.zeros(_ARRIVALS, dtype=np.int64)
        self._arrival_t = np.zeros(_ARRIVALS, dtype=np.float64)
        self._arrivals_n = 0

    # ---- input ---------------------------------------------------------------------
    def _check(self, samples: np.ndarray) -> np.ndarray:
        x = np.asarray(samples)
        if x.ndim != 1:
            raise ListenError(f"expected mono 1-D samples, got shape {x.shape}")
        if x.dtype != np.int16 and x.dtype.kind != "f":
            raise ListenError(f"samples must be float or int16, got {x.dtype}")
        return x

    def _clean(self, x: np.ndarray) -> None:
        """In place: NaN/inf -> 0, clip to [-1, 1] (both counted), remove the DC offset."""
        total = float(np.add.reduce(x))  # finite unless some sample is NaN/inf (or huge)
        if not math.isfinite(total):
            bad = ~np.isfinite(x)
            self.stats.sanitized += int(np.count_nonzero(bad))
            x[bad] = 0.0
            total = float(np.add.reduce(x))
        if x.max() > 1.0 or x.min() < -1.0:
            self.stats.clipped += int(np.count_nonzero(np.abs(x) > 1.0))
            np.clip(x, -1.0, 1.0, out=x)
            total = float(np.add.reduce(x))
        # DC tracker: exponential average of chunk means (~1 s), subtracted in place.
        n = x.shape[0]
        keep = math.exp(-n / (self.rate_hz * _DC_TAU_S))
        self._dc = keep * self._dc + (1.0 - keep) * (total / n)
        np.subtract(x, self._dc, out=x)

    def feed(self, samples: np.ndarray) -> int:
        """Add samples at the stream's rate; returns the number of VAD windows ready."""
        if self.closed:
            raise ListenError(f"stream {self.id} is closed")
        src = self._check(samples)
        n = src.shape[0]
        if n == 0:
            return len(self._pending) // self.window
        # Write straight into the VAD FIFO when no resampling is needed, else a scratch.
        if self._vad_rs is None:
            x = self._pending.reserve(n)
        else:
            if self._scratch.shape[0] < n:
                self._scratch = np.zeros(2 * n, dtype=np.float32)
            x = self._scratch[:n]
        if src.dtype == np.int16:
            np.multiply(src, np.float32(1.0 / 32768.0), out=x)
        else:
            np.copyto(x, src, casting="same_kind")
        self._clean(x)
        self.stats.samples_in += n
        i = self._arrivals_n % _ARRIVALS
        self._arrival_end[i] = self.stats.samples_in
        self._arrival_t[i] = time.monotonic()
        self._arrivals_n += 1
        if self._vad_rs is not None:
            self._pending.push(self._vad_rs.process(x))
        if self.asr:
            y = x if self._asr_rs is None else self._asr_rs.process(x)
            self._audio.push(y)
            if self._mel_from >= 0:
                self._mel.push(y, self._frames)
        return len(self._pending) // self.window

    def arrival_s(self, at_ms: int) -> float:
        """`time.monotonic()` when the sample at stream time `at_ms` was fed (latency base)."""
        want = at_ms * self.rate_hz // 1000
        n = self._arrivals_n
        best = time.monotonic()
        for k in range(n - 1, max(n - _ARRIVALS, 0) - 1, -1):
            i = k % _ARRIVALS
            if self._arrival_end[i] < want:
                break
            best = float(self._arrival_t[i])
        return best

    @property
    def ready(self) -> int:
        return len(self._pending) // self.window

    def next_window(self) -> np.ndarray:
        """The oldest full window (a view, valid until the next feed)."""
        p = self._pending
        return p.buf[p.r: p.r + self.window]

    # ---- decisions ------------------------------------------------------------------
    def on_prob(self, prob: float) -> list[Any]:
        """Consume the oldest window with its speech probability; returns events."""
        self._pending.r += self.window
        self.stats.windows += 1
        event = self.endpointer.update(prob)
        if event is None:
            return []
        return self._on_event(event)

    def _on_event(self, event: VoiceStarted | VoiceStopped) -> list[Any]:
        if isinstance(event, VoiceStarted):
            event = VoiceStarted(event.start_ms, stream=self.id)
            if self.asr:
                self._start_mel(event.start_ms)
            log.info("voice_started", stream=self.id, start_ms=event.start_ms)
            return [event]
        event = VoiceStopped(event.start_ms, event.end_ms, event.reason, stream=self.id)
        self.stats.utterances += 1
        self.stats.cut += event.reason == "max_length"
        log.info("voice_stopped", stream=self.id, start_ms=event.start_ms,
                 end_ms=event.end_ms, reason=event.reason)
        if self.asr:
            self._finish_utterance(event)
        return [event]

    def _start_mel(self, start_ms: int) -> None:
        origin = max(0, (start_ms - self.vad_cfg.preroll_ms) * ASR_RATE_HZ // 1000)
        backlog = self._audio.read(origin)
        self._mel_from = self._audio.count - backlog.shape[0]
        self._mel.reset()
        self._frames.clear()
        self._mel.push(backlog, self._frames)

    def _finish_utterance(self, event: VoiceStopped) -> None:
        if self._mel_from < 0:
            return
        origin_ms = self._mel_from * 1000 // ASR_RATE_HZ
        stop_frame = (event.end_ms + _TAIL_MS - origin_ms) // 10
        have = self._frames.count
        if stop_frame > have:  # stream ended before the tail: pad like the reference
            self._mel.flush(self._frames)
        n = min(stop_frame, self._frames.count)
        frames = np.zeros((n, WHISPER.n_mels), dtype=np.float32)
        self._frames.copy_out(0, n, frames)
        self.utterances.append(Utterance(frames, event.start_ms, event.end_ms,
                                         self.arrival_s(event.end_ms), self.id))
        self._mel_from = -1

    def drain(self) -> None:
        """End of input: push what the resamplers still hold (idempotent)."""
        if self._drained:
            return
        self._drained = True
        if self._vad_rs is not None:
            self._pending.push(self._vad_rs.flush())
        if self.asr and self._asr_rs is not None:
            tail = self._asr_rs.flush()
            self._audio.push(tail)
            if self._mel_from >= 0:
                self._mel.push(tail, self._frames)

    def close(self) -> list[Any]:
        """End of stream: decide on the windows still buffered, end an open utterance."""
        if self.closed:
            return []
        events: list[Any] = []
        self.drain()
        stop = self.endpointer.close()
        if stop is not None:
            events += self._on_event(stop)
        self.closed = True
        self._vad.close(self.slot)
        return events


class ListenBatch:
    """The listening streams of one worker: batched VAD per tick, batched ASR."""

    def __init__(self, vad_cfg: VadConfig | None = None, asr_cfg: AsrConfig | None = None, *,
                 capacity: int = 256, threads: int = 1, cache_dir: str | None = None,
                 bus: Any = None, asr: WhisperAsr | None = None) -> None:
        self.vad_cfg = vad_cfg or VadConfig()
        self.asr_cfg = asr_cfg or AsrConfig()
        self.capacity = capacity
        self._threads = threads
        self._cache_dir = cache_dir
        self._vads: dict[int, SileroBatch] = {}
        self._gathers: dict[int, np.ndarray] = {}
        self.streams: dict[str, ListenStream] = {}
        self.bus = bus
        self._asr = asr
        if self.asr_cfg.enabled and self._asr is None:
            self._asr = WhisperAsr(self.asr_cfg, threads=threads)

    def _vad_for(self, rate_hz: int) -> SileroBatch:
        vad_rate = rate_hz if rate_hz in (8000, 16000) else 16000
        batch = self._vads.get(vad_rate)
        if batch is None:
            batch = SileroBatch(vad_rate, self.capacity, threads=self._threads,
                                cache_dir=self._cache_dir)
            self._vads[vad_rate] = batch
        return batch

    def _gather(self, batch: SileroBatch, n: int) -> np.ndarray:
        buf = self._gathers.get(batch.rate_hz)
        if buf is None:
            buf = np.zeros((batch.capacity, batch.window), dtype=np.float32)
            self._gathers[batch.rate_hz] = buf
        return buf[:n]

    def open(self, stream_id: str, rate_hz: int) -> ListenStream:
        if stream_id in self.streams:
            raise ListenError(f"stream {stream_id} is already open")
        if rate_hz not in SUPPORTED_RATES_HZ:
            raise UnsupportedRate(rate_hz)
        stream = ListenStream(stream_id, rate_hz, self._vad_for(rate_hz), self.vad_cfg,
                              self.asr_cfg.enabled)
        self.streams[stream_id] = stream
        return stream

    def close(self, stream_id: str, *, transcribe: bool = True) -> list[Any]:
        """Close a stream; its open utterance is ended and (by default) transcribed now."""
        stream = self.streams.pop(stream_id)
        events: list[Any] = []
        stream.drain()  # resampler tails into the VAD buffer
        while stream.ready:  # decide on what is buffered before ending the utterance
            prob = stream._vad.run([stream.slot], stream.next_window()[None])[0]
            events += stream.on_prob(float(prob))
        events = self._emit(events + stream.close())
        if transcribe:
            events += self.transcribe_pending([stream])
        return events

    def _emit(self, events: list[Any]) -> list[Any]:
        if self.bus is not None:
            for e in events:
                self.bus.publish(e)
        return events

    def vad_tick(self) -> list[Any]:
        """One batched Silero run per rate over every stream with a full window (repeated
        while any stream still has one); returns voice events."""
        events: list[Any] = []
        streams = list(self.streams.values())
        for batch in self._vads.values():
            mine = [s for s in streams if s._vad is batch]
            while True:
                ready = [s for s in mine if s.ready]
                if not ready:
                    break
                windows = self._gather(batch, len(ready))
                for j, s in enumerate(ready):
                    windows[j] = s.next_window()
                probs = batch.run([s.slot for s in ready], windows)
                for s, p in zip(ready, probs.tolist(), strict=True):
                    events += s.on_prob(p)
        return self._emit(events)

    def transcribe_pending(self, streams: list[ListenStream] | None = None) -> list[Any]:
        """Decode every finished utterance (all streams, batched); returns transcripts."""
        pending: list[Utterance] = []
        for s in streams if streams is not None else list(self.streams.values()):
            pending += s.utterances
            s.utterances = []
        if not pending or self._asr is None:
            return []
        transcripts: list[Transcript] = self._asr.transcribe(pending)
        for t in transcripts:
            log.info("transcript", stream=t.stream, start_ms=t.start_ms, end_ms=t.end_ms,
                     latency_ms=t.latency_ms, rtf=t.rtf, text=t.text)
        return self._emit(list(transcripts))

    def tick(self) -> list[Any]:
        """VAD for every ready stream, then ASR for every finished utterance."""
        return self.vad_tick() + self.transcribe_pending()
