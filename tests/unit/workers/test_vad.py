"""The VAD tick: batched runs over ragged real streams equal each stream run alone."""

from __future__ import annotations

import numpy as np
import pytest

from cosyvoiced.audio.ring import Ring
from cosyvoiced.listen.vad import SileroBatch
from cosyvoiced.testing.prompts import prompt_samples
from cosyvoiced.workers.worker.vad_tick import DcRemover, VadGroup

NAMES = ["activated", "agent-loggedoff", "auth-thankyou", "conf-getpin", "vm-goodbye",
         "queue-thankyou", "vm-intro", "pbx-invalid"]


def alone(audio: np.ndarray, rate_hz: int) -> list[float]:
    vad = SileroBatch(rate_hz, 1)
    slot = vad.open()
    w = vad.window
    dc = DcRemover(rate_hz)  # as the group does: each stream's DC offset removed
    out = []
    for i in range(0, audio.shape[0] - w + 1, w):
        x = audio[i:i + w].copy()
        dc.remove_one(x)
        out.append(float(vad.run([slot], x[None, :])[0]))
    return out


@pytest.mark.parametrize("rate_hz", [8000, 16000])
def test_batched_tick_equals_each_stream_alone(rate_hz):
    rng = np.random.default_rng(5)
    streams = {name: prompt_samples(name, rate_hz) for name in NAMES}
    streams["noise"] = (rng.standard_normal(rate_hz * 2) * 0.05).astype(np.float32)
    group = VadGroup(SileroBatch(rate_hz, 16))
    got: dict[str, list[float]] = {name: [] for name in streams}
    rings = {name: Ring.create(rate_hz * 2) for name in streams}
    try:
        for name, ring in rings.items():
            group.add(name, ring, got[name].append)
        pos = dict.fromkeys(streams, 0)
        # ragged feeding: each stream its own chunk size and start delay (in rounds)
        chunk = {name: 80 * (i + 1) for i, name in enumerate(streams)}
        start = {name: i % 4 for i, name in enumerate(streams)}
        for rnd in range(2000):
            for name, audio in streams.items():
                if rnd >= start[name] and pos[name] < audio.shape[0]:
                    piece = audio[pos[name]:pos[name] + chunk[name]]
                    assert rings[name].write(piece) == piece.shape[0]
                    pos[name] += piece.shape[0]
            group.tick()
            if all(pos[n] >= a.shape[0] for n, a in streams.items()) and not group.tick():
                break
        assert group.runs < group.windows  # windows really were batched
        for name, audio in streams.items():
            ref = alone(audio, rate_hz)
            assert len(got[name]) == len(ref), name
            np.testing.assert_allclose(got[name], ref, atol=1e-4, rtol=0, err_msg=name)
        assert max(max(p) for p in got.values()) > 0.9  # real speech was found
    finally:
        for ring in rings.values():
            ring.close()
            ring.unlink()
