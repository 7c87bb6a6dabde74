"""Bad samples on the worker listen path: NaN/inf/huge values are made harmless where
they enter the worker (the VAD state and the log-mel never see them), without allocating
on clean audio (in a real worker: tests/e2e/test_listen_input.py)."""

from __future__ import annotations

import numpy as np
from tools.bench.npalloc import counting

from cosyvoiced.audio.ring import Ring
from cosyvoiced.listen.vad import SileroBatch
from cosyvoiced.testing.prompts import load_wav, prompts
from cosyvoiced.workers.worker.vad_tick import SampleGuard, VadGroup

RATE_HZ = 8000


def bad_burst(n: int) -> np.ndarray:
    x = np.full(n, np.nan, dtype=np.float32)
    x[::3] = np.inf
    x[1::5] = -np.inf
    x[2::7] = 3e38
    return x


def test_guard_clips_and_zeroes_nan_in_place():
    g = SampleGuard()
    x = np.array([0.5, np.nan, np.inf, -np.inf, 3e38, -2.0, np.nan], dtype=np.float32)
    assert g.clean(x) == 2
    assert x.tolist() == [0.5, 0.0, 1.0, -1.0, 1.0, -1.0, 0.0]
    assert g.nan == 2 and g.bad_windows == 1
    y = np.array([[0.25, -0.5], [1.5, -1.5]], dtype=np.float32)  # a tick's matrix
    assert g.clean(y) == 0 and y.tolist() == [[0.25, -0.5], [1.0, -1.0]]


def test_guard_allocates_nothing_on_clean_audio():
    g = SampleGuard()
    win = (np.random.default_rng(0).standard_normal((32, 256)) * 0.3).astype(np.float32)
    g.clean(win)
    with counting() as c:
        for i in range(200):
            g.clean(win[i % 32])
            g.clean(win)
    assert c.calls == 0


def test_a_nan_burst_does_not_poison_the_batched_vad_state():
    speech = load_wav(prompts()[3].path)
    silence = np.zeros(RATE_HZ // 2, dtype=np.float32)
    dirty = np.concatenate([silence, bad_burst(RATE_HZ // 4), silence, speech, silence])
    clean = np.concatenate([silence, np.zeros(RATE_HZ // 4, np.float32), silence, speech,
                            silence])
    group = VadGroup(SileroBatch(RATE_HZ, 4))
    probs: dict[str, list[float]] = {"dirty": [], "clean": []}
    rings = {k: Ring.create(dirty.shape[0] + 1024) for k in probs}
    try:
        for k, ring in rings.items():
            group.add(k, ring, probs[k].append)
        rings["dirty"].write(dirty)
        rings["clean"].write(clean)
        while group.tick():
            pass
        got, ref = np.array(probs["dirty"]), np.array(probs["clean"])
        assert np.isfinite(got).all()
        assert got.max() > 0.9  # the speech after the burst is heard
        # From the burst on, the same decisions as without it (unguarded, the burst itself
        # reads as speech: ~10 windows at p > 0.5), give or take a few windows at its edges.
        start = (RATE_HZ // 2) // 256
        differ = int(np.sum((got[start:] > 0.5) != (ref[start:] > 0.5)))
        assert differ <= 5, differ
        assert group.guard.nan > 0
    finally:
        for ring in rings.values():
            ring.close()
            ring.unlink()
