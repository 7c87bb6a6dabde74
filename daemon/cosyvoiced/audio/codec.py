"""G.711 μ-law / A-law and int16 <-> float32 conversion into caller-owned buffers.

audioop left the standard library in Python 3.13, so the G.711 codecs are lookup tables
built once at import with numpy from the same algorithm audioop used (Sun's g711.c):
encoding indexes a 65536-entry table with the int16 sample reinterpreted as uint16,
decoding indexes a 256-entry table. Results are bit-exact with audioop's
`lin2ulaw`/`ulaw2lin`/`lin2alaw`/`alaw2lin` on 16-bit samples.

Encoders take int16 samples (exact G.711) or float32 in [-1, 1] (scaled by 32768,
clipped and rounded to int16 first, so both give the same codes).
Every function accepts `out=`; with it, the steady state allocates no data buffers:
numpy's `take` wants intp indices, so the index (and float scaling) scratch lives in
per-thread buffers that grow to the largest chunk seen and are then reused.

Float convention: int16 `s` maps to `s / 32768`; float `x` maps to
`clip(rint(x * 32768), -32768, 32767)`, so int16 -> float32 -> int16 is exact.
"""

from __future__ import annotations

import threading

import numpy as np
import numpy.typing as npt

from cosyvoiced.errors import CosyvoicedError

__all__ = [
    "CodecError",
    "alaw_decode",
    "alaw_encode",
    "f32_to_s16",
    "mulaw_decode",
    "mulaw_encode",
    "s16_to_f32",
]

_S16_SCALE = 32768.0


class CodecError(CosyvoicedError, ValueError):
    """Bad input to a codec (wrong dtype or shape)."""

    code = "codec_bad_input"


def _segment(mag: np.ndarray, seg_end: tuple[int, ...]) -> np.ndarray:
    """Index of the first segment end >= mag (8 when above the last one), as g711.c search()."""
    return np.searchsorted(np.asarray(seg_end, dtype=np.int64), mag, side="left")


def _build_ulaw_encode() -> np.ndarray:
    val = np.arange(-32768, 32768, dtype=np.int64) >> 2  # 14-bit, arithmetic shift
    mask = np.where(val < 0, 0x7F, 0xFF)
    mag = np.minimum(np.abs(val), 8159) + (0x84 >> 2)
    seg = _segment(mag, (0x3F, 0x7F, 0xFF, 0x1FF, 0x3FF, 0x7FF, 0xFFF, 0x1FFF))
    uval = np.where(seg >= 8, 0x7F, (seg << 4) | ((mag >> (seg + 1)) & 0xF))
    codes = (uval ^ mask).astype(np.uint8)
    # Index by the uint16 bit pattern of the int16 sample.
    return np.ascontiguousarray(np.roll(codes, -32768))


def _build_ulaw_decode() -> np.ndarray:
    u = (~np.arange(256, dtype=np.int64)) & 0xFF
    t = (((u & 0xF) << 3) + 0x84) << ((u & 0x70) >> 4)
    return np.where(u & 0x80, 0x84 - t, t - 0x84).astype(np.int16)


def _build_alaw_encode() -> np.ndarray:
    val = np.arange(-32768, 32768, dtype=np.int64) >> 3  # 13-bit
    mask = np.where(val >= 0, 0xD5, 0x55)
    mag = np.where(val >= 0, val, -val - 1)
    seg = _segment(mag, (0x1F, 0x3F, 0x7F, 0xFF, 0x1FF, 0x3FF, 0x7FF, 0xFFF))
    quant = np.where(seg < 2, (mag >> 1) & 0xF, (mag >> np.minimum(seg, 7)) & 0xF)
    aval = np.where(seg >= 8, 0x7F, (np.minimum(seg, 7) << 4) | quant)
    codes = (aval ^ mask).astype(np.uint8)
    return np.ascontiguousarray(np.roll(codes, -32768))


def _build_alaw_decode() -> np.ndarray:
    a = np.arange(256, dtype=np.int64) ^ 0x55
    t = a & 0xF
    seg = (a & 0x70) >> 4
    t = np.where(seg > 0, (t + t + 1 + 32) << (seg + 2), (t + t + 1) << 3)
    return np.where(a & 0x80, t, -t).astype(np.int16)


_ULAW_ENC = _build_ulaw_encode()
_ULAW_DEC_S16 = _build_ulaw_decode()
_ULAW_DEC_F32 = (_ULAW_DEC_S16 / _S16_SCALE).astype(np.float32)
_ALAW_ENC = _build_alaw_encode()
_ALAW_DEC_S16 = _build_alaw_decode()
_ALAW_DEC_F32 = (_ALAW_DEC_S16 / _S16_SCALE).astype(np.float32)
for _table in (_ULAW_ENC, _ULAW_DEC_S16, _ULAW_DEC_F32, _ALAW_ENC, _ALAW_DEC_S16, _ALAW_DEC_F32):
    _table.flags.writeable = False


class _Scratch(threading.local):
    def __init__(self) -> None:
        self.index = np.empty(0, dtype=np.intp)
        self.f32 = np.empty(0, dtype=np.float32)


_scratch = _Scratch()


def _index_buf(n: int) -> np.ndarray:
    if _scratch.index.size < n:
        _scratch.index = np.empty(max(n, 2 * _scratch.index.size), dtype=np.intp)
    return _scratch.index[:n]


def _f32_buf(n: int) -> np.ndarray:
    if _scratch.f32.size < n:
        _scratch.f32 = np.empty(max(n, 2 * _scratch.f32.size), dtype=np.float32)
    return _scratch.f32[:n]


def s16_to_f32(src: npt.NDArray[np.int16], out: npt.NDArray[np.float32]) -> np.ndarray:
    """int16 -> float32 in [-1, 1) into `out` (same shape); returns `out`."""
    if src.dtype != np.int16:
        raise CodecError(f"s16_to_f32 wants int16, got {src.dtype}")
    np.copyto(out, src, casting="safe")
    np.multiply(out, np.float32(1.0 / _S16_SCALE), out=out)
    return out


def f32_to_s16(src: npt.NDArray[np.float32], out: npt.NDArray[np.int16],
               scratch: npt.NDArray[np.float32] | None = None) -> np.ndarray:
    """float32 -> int16 with clipping into `out`; returns `out`.

    `scratch` (float32, same shape) holds the scaled values; without it a per-thread
    buffer is used.
    """
    if src.dtype != np.float32:
        raise CodecError(f"f32_to_s16 wants float32, got {src.dtype}")
    if scratch is None:
        scratch = _f32_buf(src.size).reshape(src.shape)
    _scale_clip(src, scratch)
    np.copyto(out, scratch, casting="unsafe")
    return out


def _scale_clip(src: np.ndarray, dst: np.ndarray) -> None:
    np.multiply(src, np.float32(_S16_SCALE), out=dst)
    np.clip(dst, -32768.0, 32767.0, out=dst)
    np.rint(dst, out=dst)


def _encode(table: np.ndarray, x: np.ndarray, out: np.ndarray | None,
            scratch: np.ndarray | None) -> np.ndarray:
    x = np.asarray(x)
    idx = _index_buf(x.size).reshape(x.shape)
    if x.dtype == np.int16:
        np.copyto(idx, x, casting="safe")
    elif x.dtype == np.float32:
        f32 = scratch if scratch is not None else _f32_buf(x.size).reshape(x.shape)
        _scale_clip(x, f32)
        np.copyto(idx, f32, casting="unsafe")
    else:
        raise CodecError(f"G.711 encode wants int16 or float32 samples, got {x.dtype}")
    np.bitwise_and(idx, 0xFFFF, out=idx)  # the int16's uint16 bit pattern
    if out is None:
        out = np.empty(x.shape, dtype=np.uint8)
    # mode="clip": every index is valid, and "raise" would buffer `out`.
    return table.take(idx, out=out, mode="clip")


def _decode(s16_table: np.ndarray, f32_table: np.ndarray, codes: np.ndarray,
            out: np.ndarray | None, dtype: npt.DTypeLike) -> np.ndarray:
    codes = np.asarray(codes)
    if codes.dtype != np.uint8:
        raise CodecError(f"G.711 decode wants uint8 codes, got {codes.dtype}")
    want = np.dtype(out.dtype if out is not None else dtype)
    if want == np.int16:
        table = s16_table
    elif want == np.float32:
        table = f32_table
    else:
        raise CodecError(f"G.711 decode produces int16 or float32, not {want}")
    if out is None:
        out = np.empty(codes.shape, dtype=want)
    idx = _index_buf(codes.size).reshape(codes.shape)
    np.copyto(idx, codes, casting="safe")
    return table.take(idx, out=out, mode="clip")


def mulaw_encode(x: np.ndarray, out: np.ndarray | None = None,
                 scratch: np.ndarray | None = None) -> np.ndarray:
    """int16 (exact) or float32 [-1, 1] samples -> μ-law codes (uint8)."""
    return _encode(_ULAW_ENC, x, out, scratch)


def mulaw_decode(codes: np.ndarray, out: np.ndarray | None = None,
                 dtype: npt.DTypeLike = np.int16) -> np.ndarray:
    """μ-law codes (uint8) -> int16 or float32 samples (dtype of `out` if given)."""
    return _decode(_ULAW_DEC_S16, _ULAW_DEC_F32, codes, out, dtype)


def alaw_encode(x: np.ndarray, out: np.ndarray | None = None,
                scratch: np.ndarray | None = None) -> np.ndarray:
    """int16 (exact) or float32 [-1, 1] samples -> A-law codes (uint8)."""
    return _encode(_ALAW_ENC, x, out, scratch)


def alaw_decode(codes: np.ndarray, out: np.ndarray | None = None,
                dtype: npt.DTypeLike = np.int16) -> np.ndarray:
    """A-law codes (uint8) -> int16 or float32 samples (dtype of `out` if given)."""
    return _decode(_ALAW_DEC_S16, _ALAW_DEC_F32, codes, out, dtype)
