"""G.711 tables against audioop (bit-exact) and int16 <-> float32 conversion."""

from __future__ import annotations

import warnings

import numpy as np
import pytest

from cosyvoiced.audio import codec
from cosyvoiced.audio.codec import (
    CodecError,
    alaw_decode,
    alaw_encode,
    f32_to_s16,
    mulaw_decode,
    mulaw_encode,
    s16_to_f32,
)
from tests.alloc import traced

with warnings.catch_warnings():
    warnings.simplefilter("ignore", DeprecationWarning)
    import audioop  # stdlib in 3.11 (removed in 3.13): the reference implementation

ALL_S16 = np.arange(-32768, 32768, dtype=np.int16)
ALL_CODES = np.arange(256, dtype=np.uint8)


def test_mulaw_encode_matches_audioop_for_every_int16():
    ref = np.frombuffer(audioop.lin2ulaw(ALL_S16.tobytes(), 2), dtype=np.uint8)
    np.testing.assert_array_equal(mulaw_encode(ALL_S16), ref)


def test_alaw_encode_matches_audioop_for_every_int16():
    ref = np.frombuffer(audioop.lin2alaw(ALL_S16.tobytes(), 2), dtype=np.uint8)
    np.testing.assert_array_equal(alaw_encode(ALL_S16), ref)


def test_mulaw_decode_matches_audioop_for_every_code():
    ref = np.frombuffer(audioop.ulaw2lin(ALL_CODES.tobytes(), 2), dtype=np.int16)
    np.testing.assert_array_equal(mulaw_decode(ALL_CODES), ref)


def test_alaw_decode_matches_audioop_for_every_code():
    ref = np.frombuffer(audioop.alaw2lin(ALL_CODES.tobytes(), 2), dtype=np.int16)
    np.testing.assert_array_equal(alaw_decode(ALL_CODES), ref)


def test_g711_reference_points():
    # G.711 facts: μ-law silence is 0xFF, A-law silence 0xD5; full-scale codes.
    assert mulaw_encode(np.array([0], np.int16))[0] == 0xFF
    assert alaw_encode(np.array([0], np.int16))[0] == 0xD5
    assert mulaw_encode(np.array([32767], np.int16))[0] == 0x80
    assert mulaw_encode(np.array([-32768], np.int16))[0] == 0x00
    assert alaw_encode(np.array([32767], np.int16))[0] == 0xAA
    assert mulaw_decode(np.array([0x80], np.uint8))[0] == 32124
    assert alaw_decode(np.array([0xAA], np.uint8))[0] == 32256


def test_float_decode_equals_int_decode_scaled():
    f = mulaw_decode(ALL_CODES, dtype=np.float32)
    assert f.dtype == np.float32
    np.testing.assert_array_equal(f * 32768.0, mulaw_decode(ALL_CODES).astype(np.float32))
    out = np.empty(256, np.float32)
    assert alaw_decode(ALL_CODES, out=out) is out
    np.testing.assert_array_equal(out * 32768.0, alaw_decode(ALL_CODES).astype(np.float32))


def test_float_encode_equals_int_encode():
    f = np.empty(ALL_S16.shape, np.float32)
    s16_to_f32(ALL_S16, f)
    np.testing.assert_array_equal(mulaw_encode(f), mulaw_encode(ALL_S16))
    np.testing.assert_array_equal(alaw_encode(f), alaw_encode(ALL_S16))


def test_roundtrip_s16_f32_exact_and_clipping():
    f = np.empty(ALL_S16.shape, np.float32)
    back = np.empty_like(ALL_S16)
    assert s16_to_f32(ALL_S16, f) is f
    assert f.min() == -1.0 and f.max() < 1.0
    assert f32_to_s16(f, back) is back
    np.testing.assert_array_equal(back, ALL_S16)
    loud = np.array([2.0, -2.0, 1.0, -1.0, np.float32(0.5 / 32768)], np.float32)
    out = np.empty(5, np.int16)
    f32_to_s16(loud, out)
    assert out.tolist() == [32767, -32768, 32767, -32768, 0]


def test_bad_dtypes_raise_typed_errors():
    with pytest.raises(CodecError):
        mulaw_encode(np.zeros(4, np.int32))
    with pytest.raises(CodecError):
        mulaw_decode(np.zeros(4, np.int16))
    with pytest.raises(CodecError):
        s16_to_f32(np.zeros(4, np.float32), np.zeros(4, np.float32))
    with pytest.raises(CodecError):
        alaw_decode(np.zeros(4, np.uint8), dtype=np.float64)
    assert CodecError.code == "codec_bad_input"


def test_steady_state_with_out_allocates_nothing():
    # Large enough that any per-call data buffer (>= n bytes) stands out from the few
    # transient Python objects (array views, bound methods, numpy's dispatch caches: up
    # to ~4 KB, depending on what ran before in the process) a call creates.
    n = 65536
    rng = np.random.default_rng(1)
    s16 = rng.integers(-32768, 32767, n, dtype=np.int16)
    f32 = np.empty(n, np.float32)
    s16b = np.empty(n, np.int16)
    scratch = np.empty(n, np.float32)
    codes = np.empty(n, np.uint8)
    dec = np.empty(n, np.int16)

    def cycle():
        mulaw_encode(s16, out=codes)
        mulaw_decode(codes, out=dec)
        alaw_encode(dec, out=codes)
        alaw_decode(codes, out=f32)
        s16_to_f32(s16, f32)
        f32_to_s16(f32, s16b, scratch)

    for _ in range(50):
        cycle()
    t = traced(cycle, 2000, codec.__file__, __file__)
    # Any per-call array would show as a transient peak of at least n bytes.
    assert t.peak_bytes < n // 4, t
    assert t.retained_bytes < 1024, t
