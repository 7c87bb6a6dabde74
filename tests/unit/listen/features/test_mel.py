"""Streaming features: equality with librosa and faster-whisper, zero allocations per hop."""

from __future__ import annotations

import librosa.filters
import numpy as np
import pytest
import scipy.fft
from faster_whisper.feature_extractor import FeatureExtractor
from tools.bench.npalloc import counting

from cosyvoiced.listen.features.spec import WHISPER, generic_spec
from cosyvoiced.listen.features.stream import MelError, MelFrames, MelStream, whisper_normalize
from cosyvoiced.testing.prompts import prompt_samples


def stream(spec, samples, chunk_sizes):
    ms = MelStream(spec)
    ring = MelFrames(samples.shape[0] // spec.hop + 8, spec.n_features)
    pos = 0
    for k in chunk_sizes:
        if pos >= samples.shape[0]:
            break
        ms.push(samples[pos: pos + k], ring)
        pos += k
    assert pos >= samples.shape[0]
    ms.flush(ring)
    assert ring.count == ms.expected_frames()
    return ring.buf[: ring.count].T


def librosa_mel(y, sr, n_fft, hop, n_mels):
    """`librosa.feature.melspectrogram(y=y, sr=sr, n_fft=n_fft, hop_length=hop,
    n_mels=n_mels)` as librosa (>= 0.10) computes it: its own window and filterbank
    (`librosa.filters`, float32 as `melspectrogram` asks for it) on its STFT written out:
    frames centred (the signal zero-padded by n_fft // 2 each side: `pad_mode="constant"`),
    `rfft` of each windowed frame, power 2. `librosa.feature` and `librosa.core` are not
    imported: importing them compiles numba functions this path never calls (~30 s on a
    fresh virtualenv, before the first call)."""
    window = librosa.filters.get_window("hann", n_fft, fftbins=True)
    padded = np.pad(y, n_fft // 2)
    frames = np.lib.stride_tricks.sliding_window_view(padded, n_fft)[::hop]
    power = np.abs(np.fft.rfft(frames * window, axis=-1)) ** 2
    return np.einsum("tf,mf->mt", power, librosa.filters.mel(sr=sr, n_fft=n_fft, n_mels=n_mels))


def librosa_power_to_db(mel):
    """`librosa.power_to_db(mel, top_db=None)`: ref 1.0, amin 1e-10."""
    return 10.0 * np.log10(np.maximum(1e-10, mel))


def librosa_mfcc(db, n_mfcc):
    """`librosa.feature.mfcc(S=db, n_mfcc=n_mfcc)`: DCT-II, orthonormal, no lifter."""
    return scipy.fft.dct(db, axis=-2, type=2, norm="ortho")[:n_mfcc]


def random_chunks(seed=0):
    rng = np.random.default_rng(seed)
    return [int(k) for k in rng.integers(1, 900, size=100000)]


@pytest.mark.parametrize("name", ["agent-pass", "vm-goodbye", "conf-adminmenu-162"])
def test_whisper_preset_equals_faster_whisper(name):
    y = prompt_samples(name, 16000)
    ours = whisper_normalize(stream(WHISPER, y, random_chunks()))
    ref = FeatureExtractor()(y)
    assert ours.shape == ref.shape
    np.testing.assert_allclose(ours, ref, rtol=0, atol=1e-4)


@pytest.mark.parametrize("n", [1, 150, 200, 201, 399, 400, 1601, 16000])
def test_whisper_preset_short_and_odd_lengths(n):
    y = prompt_samples("agent-pass", 16000)[8000: 8000 + n]
    ours = whisper_normalize(stream(WHISPER, y, [7] * 100000))
    ref = FeatureExtractor()(y)
    assert ours.shape == ref.shape
    np.testing.assert_allclose(ours, ref, rtol=0, atol=1e-4)


@pytest.mark.parametrize("n_fft,hop,n_mels", [(400, 160, 80), (512, 160, 40), (256, 128, 64)])
def test_mel_power_equals_librosa_relative(n_fft, hop, n_mels):
    """Every mel power value within 1e-4 relative (silences included)."""
    y = prompt_samples("agent-pass", 16000)
    spec = generic_spec(n_fft=n_fft, hop=hop, n_mels=n_mels, log="power")
    ours = stream(spec, y, random_chunks(1))
    ref = librosa_mel(y.astype(np.float64), 16000, n_fft, hop, n_mels)
    assert ours.shape == ref.shape
    np.testing.assert_allclose(ours, ref, rtol=1e-4, atol=0)


def test_db_and_mfcc_equal_librosa():
    y = prompt_samples("vm-goodbye", 16000)
    mel = librosa_mel(y.astype(np.float64), 16000, 512, 160, 40)
    db_ref = librosa_power_to_db(mel)
    db = stream(generic_spec(n_fft=512, n_mels=40, log="db"), y, random_chunks(2))
    np.testing.assert_allclose(db, db_ref, rtol=0, atol=1e-4)  # dB
    mfcc_ref = librosa_mfcc(db_ref, 13)
    mfcc = stream(generic_spec(n_fft=512, n_mels=40, n_mfcc=13), y, random_chunks(3))
    # MFCC reach a few hundred; float32 storage keeps ~7 digits: 1e-4 relative to the range.
    np.testing.assert_allclose(mfcc, mfcc_ref, rtol=0, atol=1e-4 * np.abs(mfcc_ref).max())


def test_chunking_does_not_change_frames():
    y = prompt_samples("agent-pass", 16000)
    a = stream(WHISPER, y, [y.shape[0]])
    b = stream(WHISPER, y, [1] * y.shape[0])
    np.testing.assert_array_equal(a, b)


def test_zero_numpy_allocations_per_hop_in_steady_state():
    rng = np.random.default_rng(5)
    y = (rng.standard_normal(16000 * 15) * 0.1).astype(np.float32)
    for spec in (WHISPER, generic_spec(n_mfcc=13)):
        ms = MelStream(spec)
        ring = MelFrames(3000, spec.n_features)
        ms.push(y[:16000], ring)  # warm up
        hops = [y[i: i + spec.hop] for i in range(16000, y.shape[0], spec.hop)]
        assert len(hops) >= 1000
        with counting() as c:
            for h in hops:
                ms.push(h, ring)
        assert ms.frames_out > 1000
        assert c.calls == 0, f"{c.calls} numpy allocations over {len(hops)} hops"


def test_allocation_counter_sees_temporaries():
    """The counter must catch what the zero-allocation test claims is absent."""
    x = np.ones(400, dtype=np.float32)
    with counting() as c:
        for _ in range(10):
            np.fft.rfft(x)
    assert c.calls >= 10


def test_bad_parameters_are_typed_errors():
    with pytest.raises(MelError):
        MelStream(generic_spec(n_mels=10, n_mfcc=20))
    with pytest.raises(MelError):
        MelStream(generic_spec(n_fft=100, hop=200))
    with pytest.raises(MelError):
        MelStream(WHISPER).push(np.zeros((10, 2), dtype=np.float32), MelFrames(10, 80))


def test_frames_copy_out_wraps():
    ring = MelFrames(5, 2)
    for i in range(8):
        ring.append(np.array([i, -i], dtype=np.float64))
    out = np.zeros((10, 2), dtype=np.float32)
    n = ring.copy_out(0, 8, out)  # frames 0..2 were overwritten
    assert n == 5 and ring.first == 3
    np.testing.assert_array_equal(out[:5, 0], [3, 4, 5, 6, 7])
