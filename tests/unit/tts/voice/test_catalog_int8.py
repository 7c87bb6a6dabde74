"""Which precision a voice loads when an INT8 variant passed the gate (`take_int8`), and
which CPUs a verdict holds for (`int8_dot`)."""

from __future__ import annotations

import pytest

from cosyvoiced.runtime.onnx import int8_dot
from cosyvoiced.tts.voice.catalog import take_int8

AVX2 = frozenset({"avx2", "fma"})
AVX512_BF16 = frozenset({"avx2", "avx512f", "avx512_bf16"})
AMX = frozenset({"avx512f", "amx_bf16", "amx_tile"})


@pytest.mark.parametrize("precision, vocoder, flags, taken", [
    ("auto", "auto", AVX2, True),  # no native bf16: INT8 is the fast path
    ("auto", "auto", AVX512_BF16, False),  # the bf16 vocoder is faster
    ("auto", "bf16", AMX, False),
    ("auto", "fp32", AMX, True),  # the vocoder kept on ONNX Runtime: INT8 again
    ("int8", "auto", AMX, True),  # asked for
    ("fp32", "auto", AVX2, False),
])
def test_int8_is_taken_where_no_bf16_vocoder_beats_it(precision, vocoder, flags, taken):
    took, why = take_int8(precision, vocoder, flags)
    assert took is taken
    if precision == "auto" and not taken:
        assert "bf16" in why


@pytest.mark.parametrize("flags, kind", [
    (AVX2, "saturating"),  # e.g. AMD Zen 2/3, Skylake: 16-bit pair sums
    (AVX512_BF16, "saturating"),
    (AVX512_BF16 | {"avx512_vnni"}, "vnni"),
    (AVX2 | {"avx_vnni"}, "vnni"),
    (AMX | {"amx_int8"}, "vnni"),
])
def test_a_gate_verdict_holds_for_cpus_whose_int8_adds_up_alike(flags, kind):
    assert int8_dot(frozenset(flags)) == kind
