"""The listen bench's pure logic: callers built from real prompts, matching transcripts to
prompts, latency percentiles and the ramp."""

from __future__ import annotations

import math

import numpy as np
import pytest
from tools.bench.callmix import (
    MIN_GAP_S,
    TAIL_S,
    CallPlan,
    CallRamp,
    Clip,
    Heard,
    Span,
    clips,
    judge,
    pctl,
    plan_call,
    search,
    trim,
)

from cosyvoiced.testing.prompts import prompts


@pytest.fixture(scope="module")
def corpus() -> list[Clip]:
    return clips(prompts()[:60])


def test_trim_drops_quiet_edges_only():
    rate = 8000
    tone = (0.3 * np.sin(np.arange(rate) * 0.3)).astype(np.float32)
    x = np.concatenate([np.zeros(800, np.float32) + 1e-4, tone, np.zeros(1600, np.float32)])
    y = trim(x, rate)
    assert abs(y.shape[0] - rate) <= 80 and np.abs(y).max() == np.abs(tone).max()


def test_silence_files_are_not_speech_clips():
    every = prompts()
    silent = [p for p in every if p.name.startswith("silence/")]
    assert len(silent) >= 5
    kept = {c.text for c in clips(silent + every[:20])}
    assert kept and not any(t.startswith("(") for t in kept)


def test_a_call_is_about_35_percent_speech_with_separated_prompts(corpus):
    fractions = []
    for seed in range(20):
        plan = plan_call(corpus, 30.0, seed=seed)
        assert plan.audio.shape == (30 * 8000,) and plan.audio.dtype == np.float32
        fractions.append(plan.speech_s / plan.seconds)
        ends = [0.0] + [s.end_s for s in plan.spans]
        for prev_end, span in zip(ends, plan.spans, strict=False):
            assert span.start_s - prev_end >= MIN_GAP_S - 1e-3
        assert plan.seconds - plan.spans[-1].end_s >= TAIL_S - 1e-3
        # the prompt's audio is where the plan says, noise elsewhere
        s = plan.spans[0]
        inside = plan.audio[int(s.start_s * 8000):int(s.end_s * 8000)]
        before = plan.audio[:int(s.start_s * 8000)]
        assert np.abs(inside).max() > 0.05 > np.abs(before).max()
    assert 0.28 <= float(np.mean(fractions)) <= 0.40


def test_judge_matches_by_overlap_and_times_from_the_prompt_end():
    plan = CallPlan(np.zeros(80000, np.float32), 8000,
                    [Span(1.0, 2.0, "one two"), Span(4.0, 6.0, "three four"),
                     Span(8.0, 9.0, "five")])
    t0 = 100.0
    heard = [Heard(950, 2050, "one two", t0 + 2.9),
             Heard(3980, 5000, "three", t0 + 5.8),      # a prompt split in two
             Heard(5100, 6040, "four", t0 + 6.9),
             Heard(6500, 7000, "cough", t0 + 7.5)]      # overlaps no prompt
    v = judge(plan, heard, t0)
    assert v.latencies_s[0] == pytest.approx(0.9)
    assert v.latencies_s[1] == pytest.approx(0.9)  # from the last piece's arrival
    assert math.isinf(v.latencies_s[2]) and v.missed == 1
    assert v.hyps == ["one two", "three four", ""] and v.spurious == 1


def test_pctl_is_nearest_rank_and_counts_misses_as_late():
    xs = [0.5] * 19 + [math.inf]
    assert pctl(xs, 95) == 0.5
    assert math.isinf(pctl(xs + [math.inf], 95))
    assert pctl([3.0, 1.0, 2.0], 50) == 2.0 and math.isnan(pctl([], 50))


@pytest.mark.parametrize("limit", [0, 1, 5, 13, 40, 100])
def test_the_ramp_finds_the_limit(limit):
    tried: list[int] = []

    def trial(n: int) -> bool:
        tried.append(n)
        return n <= limit

    best, fail = search(trial, 4, 12, resolution=0.0)
    assert best == limit
    assert fail == limit + 1 or (limit == 0 and fail == 1)
    assert len(tried) == len(set(tried)) <= 12


def test_the_ramp_stops_at_its_resolution_and_trial_budget():
    best, fail = search(lambda n: n <= 100, 10, 12, resolution=0.1)
    assert fail is not None and best <= 100 < fail and fail - best <= 10
    r = CallRamp(10, 3)
    seen = []
    while (n := r.next()) is not None:
        seen.append(n)
        r.report(True)
    assert seen == [10, 20, 40] and r.best == 40


def test_the_streams_suite_still_offers_what_the_listen_suite_reuses():
    import tools.bench.streams as streams

    for name in ("_pool", "_stop", "_vad_run", "_speech16k", "_prioritize", "_autogroup_nice",
                 "_cpu_s"):
        assert callable(getattr(streams, name)), name
