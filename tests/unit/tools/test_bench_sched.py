"""The sched suite is registered, reuses the streams suite's priorities, and reports a
round the workers were too busy for as not run."""

from __future__ import annotations

from tools.bench import sched
from tools.bench.cli import SUITES


def test_sched_is_a_suite_and_reuses_the_streams_suite():
    import tools.bench.streams as streams

    assert "sched" in SUITES
    for name in ("_prioritize", "_autogroup_nice", "_stop", "BENCH_NICE"):
        assert getattr(streams, name) is getattr(sched, name), name


def test_rounds_are_rows_with_fifo_split_short_and_long():
    ran = {"rtf": 0.11, "short_clause_s": 0.89, "long_clause_s": 3.77, "long_per_worker": 4,
           "demand_per_worker": 0.56, "short_streams": 2, "edf": [0, 1, 0, 0],
           "fifo": [235, 163, 7, 0]}
    assert sched._row(0, ran) == [1, 0.11, "0.89 / 3.77", 4, 0.56, 1, 398, 7]
    busy = {k: ran[k] for k in ("rtf", "short_clause_s", "long_clause_s", "long_per_worker")}
    assert sched._row(1, {**busy, "demand_per_worker": 0.9})[5:] == ["not run", "", ""]
