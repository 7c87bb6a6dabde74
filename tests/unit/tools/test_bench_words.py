"""The words bench's pairing of our words with faster-whisper's, and its onset finder."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
from tools.bench.report import cpu_flags
from tools.bench.words import RATE_HZ, onset_s, paired_deltas

from cosyvoiced.listen.events import Word


def test_words_pair_by_normalized_text_and_skip_what_one_side_missed():
    mine = [Word("Please", 0.50, 0.8, 0.9), Word("enter", 0.80, 1.0, 0.9),
            Word("your", 1.02, 1.2, 0.9), Word("pin.", 1.3, 1.6, 0.9)]
    theirs = [SimpleNamespace(word=" please", start=0.0), SimpleNamespace(word=" your",
                                                                          start=1.0),
              SimpleNamespace(word=" PIN", start=1.32)]
    got = paired_deltas(mine, theirs)
    assert [i for i, _ in got] == [0, 2, 3]
    assert np.allclose([d for _, d in got], [0.5, 0.02, -0.02])


def test_onset_is_where_the_sound_begins():
    x = np.zeros(RATE_HZ, np.float32)
    x[int(0.42 * RATE_HZ):] = 0.3 * np.sin(np.arange(x.size - int(0.42 * RATE_HZ)) * 0.3)
    assert onset_s(x) == 0.42
    assert "flags:" in cpu_flags() or cpu_flags() == "unknown"
