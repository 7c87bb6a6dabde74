"""The vocoder's precision choice, from what the CPU has and what was measured at load."""

from __future__ import annotations

import numpy as np

from cosyvoiced.runtime.onnx import cpu_flags
from cosyvoiced.tts.voice.vocoder_precision import MAX_TIME_RATIO, MIN_SNR_DB, choose, window

AMX = frozenset({"avx512f", "amx_bf16", "amx_tile"})
NO_AMX = frozenset({"avx512f", "avx512_bf16"})
NO_BF16 = frozenset({"avx512f", "avx512_vnni"})


def test_fp32_is_taken_as_configured_whatever_the_cpu():
    assert choose("fp32", AMX, 40.0, 0.5) == ("fp32", "configured")


def test_auto_without_native_bf16_says_so():
    precision, reason = choose("auto", NO_BF16, 40.0, 0.5)
    assert precision == "fp32" and "amx_bf16" in reason and "avx512_bf16" in reason


def test_auto_with_native_bf16_takes_it_only_if_close_and_faster():
    for flags, flag in ((AMX, "amx_bf16"), (NO_AMX, "avx512_bf16"), (AMX | NO_AMX, "amx_bf16")):
        assert choose("auto", flags, 40.0, 0.6) == ("bf16", f"{flag}, measured faster")
        assert choose("auto", flags, MIN_SNR_DB - 1, 0.6)[0] == "fp32"  # too far from fp32
        assert choose("auto", flags, 40.0, MAX_TIME_RATIO + 0.05)[0] == "fp32"  # not faster
        assert choose("auto", flags, None, None)[0] == "fp32"  # could not be built


def test_bf16_asked_for_skips_the_timing_not_the_snr():
    assert choose("bf16", NO_BF16, 40.0, 1.3) == ("bf16", "configured")
    assert choose("bf16", NO_BF16, MIN_SNR_DB - 1, 0.5)[0] == "fp32"


def test_cpu_flags_are_read_from_cpuinfo(tmp_path):
    info = tmp_path / "cpuinfo"
    info.write_text("processor\t: 0\nflags\t\t: fpu sse2 amx_bf16\n\nprocessor\t: 1\n")
    assert cpu_flags(str(info)) == {"fpu", "sse2", "amx_bf16"}
    assert cpu_flags(str(tmp_path / "absent")) == frozenset()


def test_a_window_is_cut_or_repeated_to_its_size():
    x = np.arange(10, dtype=np.float32).reshape(1, 1, 10)
    assert window({"z": x, "g": x[..., :1]}, "z", 4)["z"].tolist() == [[[0, 1, 2, 3]]]
    long = window({"z": x}, "z", 25)["z"]
    assert long.shape == (1, 1, 25) and long[0, 0, 24] == 4
