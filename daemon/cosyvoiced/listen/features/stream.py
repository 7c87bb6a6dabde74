"""Streaming STFT -> mel -> log-mel / MFCC, fed hop by hop, allocating nothing per hop.

A `MelStream` turns samples into feature frames (kept in `MelFrames`) as soon as each
frame's samples are in, so an utterance's log-mel is ready the moment its end is known.
What it computes is a `features.spec.MelSpec`; the filterbank comes from
`features.filterbank`. Frame `t` is centred on sample `t * hop` (librosa's and Whisper's `center=True`), so it is
ready once sample `t * hop + n_fft // 2` has arrived. Everything is precomputed at
construction: the periodic Hann window, a real DFT folded on the frame's symmetry (two
float64 matrices of about `[n_fft/2, n_fft/2]`: half the multiplies of a plain DFT
matrix and half its memory, so it stays in cache), the mel filterbank (designed once with
`librosa.filters.mel`, Slaney scale and norm, as librosa and Whisper use) and the
orthonormal DCT-II matrix for MFCC. A hop is
`np.dot(..., out=)` and ufuncs with `out=` into preallocated buffers: no numpy array is
allocated per hop in steady state (`np.fft.rfft(out=)` still allocates per call; a DFT
matrix applied with `np.dot` does not, at similar cost for 400-point frames). The DFT runs
in float64 so that low-energy bins stay exact (a float32 DFT by matrix product is off by
up to 40 % on the near-empty 4-8 kHz bins of upsampled telephone audio; float64 by < 1e-6).

librosa is imported only to design the filterbank (`features.filterbank`, cached on disk
with a `cache_dir`: librosa is imported at most once per machine); within a process the
window, DFT matrices and filterbank are made once and shared, read-only, by every
`MelStream`.

Accuracy (tests/unit/listen/features/test_mel.py): mel power equals
`librosa.feature.melspectrogram` with the same parameters within 1e-4 *relative* on every
element; dB mel and MFCC equal librosa's `power_to_db(..., top_db=None)` / `mfcc` within
1e-4 dB / 1e-4 absolute; the Whisper preset equals faster-whisper's `FeatureExtractor`
within 1e-4 after `whisper_normalize`.

Whisper's scaling is `log10(max(mel, 1e-10))`, then `max(x, x.max() - 8)`, then
`(x + 4) / 4`, where `x.max()` is over the whole segment. A stream cannot know that
maximum in advance, so the Whisper preset stores raw `log10` frames and
`whisper_normalize` applies the clamp and scale over the utterance when it is handed to
ASR. Likewise librosa's `top_db` clamp in `power_to_db` (used by `librosa.feature.mfcc`)
is global and is not applied here (`top_db=None` semantics).
"""

from __future__ import annotations

import functools
import os

import numpy as np

from cosyvoiced.errors import CosyvoicedError
from cosyvoiced.listen.features.filterbank import mel_filterbank
from cosyvoiced.listen.features.spec import WHISPER, MelSpec

__all__ = ["MelError", "MelFrames", "MelStream", "whisper_normalize"]

LOG_FLOOR = 1e-10
"""Power floor before the logarithm (Whisper's clamp and librosa's `amin`)."""


class MelError(CosyvoicedError, ValueError):
    """Bad feature parameters or misuse of a feature stream."""

    code = "mel_error"


def _check(spec: MelSpec) -> None:
    if spec.n_fft < 2 or spec.hop < 1 or spec.n_mels < 1 or spec.rate_hz < 1:
        raise MelError(f"bad feature parameters: {spec}")
    if spec.n_fft % 2:
        raise MelError(f"n_fft must be even, got {spec.n_fft}")
    if spec.hop > spec.n_fft:
        raise MelError(f"hop {spec.hop} longer than the frame {spec.n_fft}")
    if spec.n_mfcc > spec.n_mels:
        raise MelError(f"n_mfcc {spec.n_mfcc} > n_mels {spec.n_mels}")
    if spec.n_mfcc and spec.log != "db":
        raise MelError("MFCC are computed from dB mel: use log='db'")


@functools.lru_cache(maxsize=16)
def _shared(n_fft: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Window and folded DFT matrices for `n_fft`, made once per process (read-only)."""
    out = (hann(n_fft), *folded_dft(n_fft))
    for a in out:
        a.setflags(write=False)
    return out  # type: ignore[return-value]


def hann(n_fft: int) -> np.ndarray:
    """Periodic Hann window (librosa's `get_window("hann", n, fftbins=True)`, Whisper's)."""
    return 0.5 - 0.5 * np.cos(2.0 * np.pi * np.arange(n_fft) / n_fft)


def folded_dft(n_fft: int) -> tuple[np.ndarray, np.ndarray]:
    """Real DFT of an even-length frame folded on its symmetry (half the multiplies).

    With h = n_fft / 2, s = [x_0, x_n + x_(N-n) for n in 1..h-1, x_h] and
    d = [x_n - x_(N-n) for n in 1..h-1]: Re X = C @ s (`[h+1, h+1]`) and
    Im X[1:h] = S @ d (`[h-1, h-1]`); Im X[0] = Im X[h] = 0.
    """
    h = n_fft // 2
    k = np.arange(h + 1)[:, None]
    n = np.arange(h + 1)[None, :]
    cos = np.cos(2.0 * np.pi * k * n / n_fft)
    k1 = np.arange(1, h)[:, None]
    n1 = np.arange(1, h)[None, :]
    sin = -np.sin(2.0 * np.pi * k1 * n1 / n_fft)
    return np.ascontiguousarray(cos), np.ascontiguousarray(sin)


def dct_matrix(n_mfcc: int, n_mels: int) -> np.ndarray:
    """`[n_mfcc, n_mels]` orthonormal DCT-II (scipy's `dct(type=2, norm="ortho")`)."""
    k = np.arange(n_mfcc)[:, None]
    n = np.arange(n_mels)[None, :]
    d = np.cos(np.pi * k * (2 * n + 1) / (2 * n_mels)) * np.sqrt(2.0 / n_mels)
    d[0] *= np.sqrt(0.5)
    return d


class MelFrames:
    """The last `capacity` feature frames of a stream, preallocated (`[capacity, n]` float32).

    Frames are addressed by their absolute index since the stream began (`count` is the
    number ever written); older frames are overwritten.
    """

    def __init__(self, capacity: int, n_features: int) -> None:
        if capacity < 1:
            raise MelError(f"frame capacity must be >= 1, got {capacity}")
        self.buf = np.zeros((capacity, n_features), dtype=np.float32)
        self.capacity = capacity
        self.count = 0

    def append(self, frame: np.ndarray) -> None:
        np.copyto(self.buf[self.count % self.capacity], frame, casting="same_kind")
        self.count += 1

    @property
    def first(self) -> int:
        """Oldest frame index still held."""
        return max(0, self.count - self.capacity)

    def copy_out(self, start: int, stop: int, out: np.ndarray) -> int:
        """Copy frames `[start, stop)` (clipped to what is held) into `out[:n]`; returns n."""
        start = max(start, self.first)
        stop = min(stop, self.count, start + out.shape[0])
        if stop <= start:
            return 0
        a, b = start % self.capacity, (stop - 1) % self.capacity + 1
        if a < b:
            out[: stop - start] = self.buf[a:b]
        else:
            head = self.capacity - a
            out[:head] = self.buf[a:]
            out[head: stop - start] = self.buf[:b]
        return stop - start

    def clear(self) -> None:
        self.count = 0


class MelStream:
    """One stream's streaming feature extractor; see the module docstring.

    `push(samples, frames)` appends every frame that became complete to `frames`;
    `flush(frames)` ends the stream with the preset's end padding; `reset()` starts a new
    stream.
    """

    _HOPS_PER_COMPACTION = 64

    def __init__(self, spec: MelSpec = WHISPER, *,
                 cache_dir: str | os.PathLike[str] | None = None) -> None:
        _check(spec)
        self.spec = spec
        self._half = spec.n_fft // 2
        bins = spec.n_fft // 2 + 1
        self._win, self._cos, self._sin = _shared(spec.n_fft)
        self._fb = mel_filterbank(spec.rate_hz, spec.n_fft, spec.n_mels, spec.fmin_hz,
                                  spec.fmax_hz, cache_dir=cache_dir)
        self._dct = dct_matrix(spec.n_mfcc, spec.n_mels) if spec.n_mfcc else None
        length = spec.n_fft + self._HOPS_PER_COMPACTION * spec.hop
        self._sig = np.zeros(max(length, 3 * spec.n_fft), dtype=np.float64)
        h = self._half
        self._xw = np.zeros(spec.n_fft, dtype=np.float64)
        self._lo = self._xw[1:h]  # x_1 .. x_(h-1)
        self._hi = self._xw[: h: -1][: h - 1]  # x_(N-1) .. x_(h+1)
        self._sum = np.zeros(h + 1, dtype=np.float64)
        self._sum_mid = self._sum[1:h]
        self._diff = np.zeros(h - 1, dtype=np.float64)
        self._re = np.zeros(h + 1, dtype=np.float64)
        self._im = np.zeros(h - 1, dtype=np.float64)
        self._power = np.zeros(bins, dtype=np.float64)
        self._power_mid = self._power[1:h]
        self._mel = np.zeros(spec.n_mels, dtype=np.float64)
        self._mfcc = np.zeros(spec.n_mfcc, dtype=np.float64)
        self._out = self._mfcc if spec.n_mfcc else self._mel
        # Python floats passed to ufuncs become fresh 0-d arrays on every call: keep ours.
        self._floor = np.array(LOG_FLOOR)
        self._ten = np.array(10.0)
        self.reset()

    def reset(self) -> None:
        """Forget the stream: the next sample is sample 0 of a new stream."""
        self._w = 0  # write position in _sig
        self._next = 0  # start of the next frame in _sig
        self._primed = False
        self.samples_in = 0
        self.frames_out = 0

    # ---- input -------------------------------------------------------------------
    def push(self, samples: np.ndarray, frames: MelFrames) -> int:
        """Feed samples (1-D float); append completed frames to `frames`; returns their count."""
        if samples.ndim != 1:
            raise MelError(f"expected mono 1-D samples, got shape {samples.shape}")
        before = self.frames_out
        n = samples.shape[0]
        self.samples_in += n
        pos = 0
        if not self._primed:
            pos = self._prime(samples)
        while pos < n:
            if self._w == self._sig.shape[0]:
                self._compact()
            take = min(n - pos, self._sig.shape[0] - self._w)
            np.copyto(self._sig[self._w: self._w + take], samples[pos: pos + take],
                      casting="same_kind")
            self._w += take
            pos += take
            self._emit(frames, -1)
        if self._primed:
            self._emit(frames, -1)
        return self.frames_out - before

    def _prime(self, samples: np.ndarray) -> int:
        """Write the start padding; reflect padding needs the first n_fft/2 + 1 samples."""
        half = self._half
        if self.spec.pad_mode == "constant":
            self._sig[:half] = 0.0
            self._w = half
            self._primed = True
            return 0
        # Reflect: stage samples right after the (not yet known) padding.
        have = self._w - half if self._w else 0
        take = min(samples.shape[0], half + 1 - have)
        np.copyto(self._sig[half + have: half + have + take], samples[:take],
                  casting="same_kind")
        self._w = half + have + take
        if self._w - half >= half + 1:
            self._sig[:half] = self._sig[2 * half: half: -1]
            self._primed = True
        return take

    def _compact(self) -> None:
        keep = self._w - self._next
        self._sig[:keep] = self._sig[self._next: self._w]
        self._w = keep
        self._next = 0

    def _emit(self, frames: MelFrames, limit: int) -> None:
        n_fft, hop = self.spec.n_fft, self.spec.hop
        while self._w - self._next >= n_fft and self.frames_out != limit:
            self._frame(self._sig[self._next: self._next + n_fft])
            frames.append(self._out)
            self._next += hop
            self.frames_out += 1

    def _frame(self, frame: np.ndarray) -> None:
        h = self._half
        np.multiply(frame, self._win, out=self._xw)
        np.add(self._lo, self._hi, out=self._sum_mid)
        self._sum[0] = self._xw[0]
        self._sum[h] = self._xw[h]
        np.subtract(self._lo, self._hi, out=self._diff)
        np.dot(self._cos, self._sum, out=self._re)
        np.dot(self._sin, self._diff, out=self._im)
        np.multiply(self._re, self._re, out=self._power)
        np.multiply(self._im, self._im, out=self._im)
        np.add(self._power_mid, self._im, out=self._power_mid)
        np.dot(self._fb, self._power, out=self._mel)
        log = self.spec.log
        if log != "power":
            np.maximum(self._mel, self._floor, out=self._mel)
            np.log10(self._mel, out=self._mel)
            if log == "db":
                np.multiply(self._mel, self._ten, out=self._mel)
        if self._dct is not None:
            np.dot(self._dct, self._mel, out=self._mfcc)

    # ---- end of stream --------------------------------------------------------------
    def expected_frames(self) -> int:
        """Frames the whole stream yields once flushed (librosa's / Whisper's count)."""
        n = self.samples_in
        return n // self.spec.hop + 1

    def flush(self, frames: MelFrames) -> int:
        """End of stream: pad like the preset's reference and emit the last frames."""
        before = self.frames_out
        target = self.expected_frames()
        half = self._half
        tail_zeros = self.spec.hop if self.spec.whisper_tail else 0
        if not self._primed:  # stream shorter than the start padding: pad it whole
            body = np.concatenate([self._sig[half: self._w] if self._w else np.zeros(0),
                                   np.zeros(tail_zeros)])
            mode = self.spec.pad_mode if body.shape[0] > 1 else "constant"
            padded = np.pad(body, half, mode=mode)
            self._sig[: padded.shape[0]] = padded
            self._w, self._next, self._primed = padded.shape[0], 0, True
        else:
            held = self._sig[self._next: self._w]
            body = np.concatenate([held, np.zeros(tail_zeros)])
            mode = self.spec.pad_mode if body.shape[0] > half else "constant"
            tail = np.pad(body, (0, half), mode=mode)[held.shape[0]:]
            if self._w + tail.shape[0] > self._sig.shape[0]:
                self._compact()
            self._sig[self._w: self._w + tail.shape[0]] = tail
            self._w += tail.shape[0]
        self._emit(frames, target)
        return self.frames_out - before


def whisper_normalize(frames: np.ndarray, out: np.ndarray | None = None) -> np.ndarray:
    """Whisper's clamp and scale over one segment of raw log10 frames (any layout).

    `max(x, x.max() - 8)`, then `(x + 4) / 4`; `out` may be `frames` itself.
    """
    if out is None:
        out = np.empty_like(frames)
    top = float(frames.max()) if frames.size else 0.0
    np.maximum(frames, top - 8.0, out=out)
    np.add(out, 4.0, out=out)
    np.multiply(out, 0.25, out=out)
    return out

