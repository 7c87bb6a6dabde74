"""The INT8 gate: a variant the judge hears worse than the bound is refused, FP32 is the
always-valid fallback, and of the variants that pass the fastest faster one is kept. The
judge is faked at its interface (its transcripts per seed, tools.wer.score)."""

from __future__ import annotations

import pytest

REFS = [f"please call me back at {n} tomorrow morning about the order" for n in
        ("nine", "ten", "eleven", "twelve", "one", "two", "three", "four", "five", "six")]


def hyps(broken: int) -> list[str]:
    """A judge's transcripts: the first `broken` sentences mangled (what a variant with a
    broken calibration sounds like to Whisper), the rest as spoken."""
    return ["uh the the order" if i < broken else r for i, r in enumerate(REFS)]


@pytest.fixture(scope="module")
def gate(repo_root):
    from tools.quantize import gate

    return gate


def variant(gate, broken: int, time_ratio: float, seeds: int = 3, dnsmos_diff: float = 0.0
            ) -> dict:
    from tools.wer import score

    base = score(REFS, [hyps(0)] * seeds)
    return {"time_ratio": time_ratio} | gate.judged(score(REFS, [hyps(broken)] * seeds), base,
                                                    dnsmos_diff)


def test_gate_bounds(gate):
    assert gate.passes_gate((0.3, -0.4, 1.5))
    assert not gate.passes_gate((0.31, -0.4, 1.2))  # mean too high
    assert not gate.passes_gate((0.2, -0.4, 1.51))  # interval too wide
    assert gate.passes_gate((-0.3, -1.2, 0.6), dnsmos_diff=-0.05)
    assert not gate.passes_gate((-0.3, -1.2, 0.6), dnsmos_diff=-0.06)  # a noise floor


def test_a_noise_floor_whisper_does_not_hear_is_refused(gate):
    hiss = variant(gate, broken=0, time_ratio=0.5, dnsmos_diff=-0.4)
    assert hiss["wer_diff"][0] == 0.0 and not hiss["passed"]
    assert gate.kept_variant({"fp32": {"time_ratio": 1.0}, "hiss": hiss}) is None


def test_broken_calibration_is_refused_and_fp32_kept(gate):
    broken = variant(gate, broken=4, time_ratio=0.4)
    assert broken["wer_diff"][0] > gate.WER_MEAN_MAX and not broken["passed"]
    variants = {"fp32": {"time_ratio": 1.0}, "int8_broken": broken}
    assert gate.kept_variant(variants) is None  # no manifest: the voice runs FP32


def test_fp32_alone_is_a_valid_outcome(gate):
    assert gate.kept_variant({"fp32": {"time_ratio": 1.0}}) is None


def test_fastest_passing_variant_faster_than_fp32_is_kept(gate):
    same = variant(gate, broken=0, time_ratio=0.7)
    assert same["wer_diff"] == (0.0, 0.0, 0.0) and same["passed"]
    variants = {"fp32": {"time_ratio": 1.0}, "good": same,
                "faster_broken": variant(gate, broken=4, time_ratio=0.4),
                "slower_than_fp32": variant(gate, broken=0, time_ratio=1.02),
                "good_faster": variant(gate, broken=0, time_ratio=0.55)}
    assert gate.kept_variant(variants) == "good_faster"
    del variants["good_faster"]
    assert gate.kept_variant(variants) == "good"
    variants["good"]["time_ratio"] = 1.0  # no faster than FP32: not worth keeping
    assert gate.kept_variant(variants) is None
