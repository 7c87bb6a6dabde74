"""Streaming resampler: chunked equals whole, rates, flush, typed errors."""

from __future__ import annotations

import numpy as np
import pytest

from cosyvoiced.audio.resample import (
    SUPPORTED_RATES_HZ,
    ResampleError,
    StreamResampler,
    UnsupportedRate,
)


def _tone(rate_hz: int, freq_hz: float, seconds: float) -> np.ndarray:
    t = np.arange(int(rate_hz * seconds)) / rate_hz
    return (0.5 * np.sin(2 * np.pi * freq_hz * t)).astype(np.float32)


def _freq_of(x: np.ndarray, rate_hz: int) -> float:
    spec = np.abs(np.fft.rfft(x * np.hanning(len(x))))
    return float(np.argmax(spec) * rate_hz / len(x))


@pytest.mark.parametrize("src", SUPPORTED_RATES_HZ)
@pytest.mark.parametrize("dst", SUPPORTED_RATES_HZ)
def test_every_rate_pair_keeps_length_and_pitch(src, dst):
    r = StreamResampler(src, dst)
    x = _tone(src, 1000.0, 1.0)
    parts = [r.process(x[i:i + 333]) for i in range(0, len(x), 333)]
    parts.append(r.flush())
    y = np.concatenate(parts)
    assert y.dtype == np.float32
    assert abs(len(y) - dst) <= 2, len(y)
    assert abs(_freq_of(y[dst // 10:-dst // 10], dst) - 1000.0) < 15.0


def test_chunked_equals_one_shot():
    x = _tone(8000, 440.0, 0.5)
    a = StreamResampler(8000, 16000)
    whole = np.concatenate([a.process(x), a.flush()])
    b = StreamResampler(8000, 16000)
    rng = np.random.default_rng(0)
    cuts = np.sort(rng.integers(0, len(x), 20))
    chunks = [b.process(c) for c in np.split(x, cuts)]
    chunked = np.concatenate(chunks + [b.flush()])
    np.testing.assert_allclose(chunked, whole, atol=1e-6)


def test_int16_and_stereo():
    r = StreamResampler(48000, 16000, channels=2, dtype=np.int16)
    x = (np.stack([_tone(48000, 500, 0.2), _tone(48000, 900, 0.2)], axis=1) * 20000)
    y = np.concatenate([r.process(x.astype(np.int16)), r.flush()])
    assert y.dtype == np.int16 and y.shape[1] == 2
    assert abs(len(y) - 3200) <= 2
    assert abs(_freq_of(y[400:-400, 1].astype(np.float32), 16000) - 900) < 20


def test_same_rate_passthrough_copies():
    r = StreamResampler(16000, 16000)
    x = _tone(16000, 300, 0.01)
    y = r.process(x)
    np.testing.assert_array_equal(x, y)
    assert y is not x
    assert len(r.flush()) == 0


def test_flush_then_reuse_starts_a_fresh_stream():
    r = StreamResampler(8000, 24000)
    x = _tone(8000, 300, 0.1)
    first = np.concatenate([r.process(x), r.flush()])
    second = np.concatenate([r.process(x), r.flush()])
    np.testing.assert_allclose(first, second, atol=1e-6)


@pytest.mark.parametrize("rate", [0, 11025, 22000, 88200])
def test_unsupported_rates_are_typed(rate):
    with pytest.raises(UnsupportedRate) as e:
        StreamResampler(rate, 16000)
    assert e.value.code == "unsupported_rate" and str(rate) in str(e.value)
    with pytest.raises(UnsupportedRate):
        StreamResampler(16000, rate)


@pytest.mark.parametrize("rate", [12000, 32000, 44100, 96000, 192000])
def test_asterisk_slin_rates_round_trip_a_tone(rate):
    """Every AudioSocket rate converts to 16 kHz and back, chunk by chunk (20 ms)."""
    t = np.arange(rate) / rate
    x = (0.5 * np.sin(2 * np.pi * 440 * t)).astype(np.float32)
    down, up = StreamResampler(rate, 16000), StreamResampler(16000, rate)
    step = rate // 50
    mid = np.concatenate([down.process(x[i:i + step]) for i in range(0, rate, step)]
                         + [down.flush()])
    assert abs(mid.shape[0] - 16000) <= 2
    back = np.concatenate([up.process(mid), up.flush()])
    assert abs(back.shape[0] - rate) <= rate // 1000
    # a 440 Hz tone survives: same energy within 5 % (away from the filter's edges)
    core = slice(rate // 10, -rate // 10)
    assert abs(np.std(back[core]) / np.std(x[core]) - 1) < 0.05


def test_wrong_dtype_or_shape_is_typed():
    r = StreamResampler(8000, 16000)
    with pytest.raises(ResampleError):
        r.process(np.zeros(10, np.float64))
    with pytest.raises(ResampleError):
        r.process(np.zeros((10, 2), np.float32))
    with pytest.raises(ResampleError):
        StreamResampler(8000, 16000, dtype=np.float64)
