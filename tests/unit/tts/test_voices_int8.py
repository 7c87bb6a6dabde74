"""Which precision a voice loads when an INT8 variant passed the gate (`take_int8`)."""

from __future__ import annotations

import pytest

from cosyvoiced.tts.voices import take_int8

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
