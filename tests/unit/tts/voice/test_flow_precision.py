"""Padding a flow window with masked frames: the inputs the runtime sees, the output cut back."""

from __future__ import annotations

import numpy as np

from cosyvoiced.tts.voice.flow_precision import PaddedFlow, pad_frames, timed_inputs


class Session:
    """Records what it is fed; its output is its first input doubled."""

    def __init__(self) -> None:
        self.fed: list[dict[str, np.ndarray]] = []

    def get_inputs(self) -> list[str]:
        return ["z", "mask", "g"]

    def get_outputs(self) -> list[str]:
        return ["latent"]

    def run(self, outputs, feeds):
        self.fed.append(dict(feeds))
        return [feeds["z"] * 2]


def window(frames: int) -> dict[str, np.ndarray]:
    return {"z": np.arange(4 * frames, dtype=np.float32).reshape(1, 4, frames) + 1,
            "mask": np.ones((1, 1, frames), np.float32),
            "g": np.ones((1, 3, 1), np.float32)}  # broadcast over time: left alone


def test_windows_are_padded_with_masked_frames_to_a_multiple_and_cut_back():
    session = Session()
    flow = PaddedFlow(session, ("z", "mask"), pad=32)
    for frames, to in ((1, 32), (31, 32), (32, 32), (33, 64), (100, 128)):
        feeds = window(frames)
        out = flow.run(None, feeds)[0]
        fed = session.fed[-1]
        assert fed["z"].shape == (1, 4, to) and fed["mask"].shape == (1, 1, to)
        assert not fed["mask"][..., frames:].any() and not fed["z"][..., frames:].any()
        assert fed["g"].shape == (1, 3, 1)
        np.testing.assert_array_equal(out, feeds["z"] * 2)
        assert out.flags.c_contiguous
    assert flow.get_inputs() == ["z", "mask", "g"] and flow.get_outputs() == ["latent"]


def test_the_inputs_over_time_are_told_from_a_long_window():
    assert timed_inputs(window(100), 100) == ("z", "mask")
    feeds = window(64)
    assert pad_frames(feeds, ("z", "mask"), 64)["z"] is feeds["z"]  # long enough already
