"""The scaleout suite is registered and the calls suite still offers what it reuses."""

from __future__ import annotations

import asyncio
import time

from tools.bench import scaleout
from tools.bench.cli import SUITES


def test_scaleout_is_a_suite_and_reuses_the_calls_suite():
    import tools.bench.calls as calls

    assert "scaleout" in SUITES
    for name in ("Daemon", "CallLog", "_analyse", "_caller", "_controller", "_pct"):
        assert getattr(calls, name) is getattr(scaleout, name), name


def test_failover_times_from_the_kill_to_the_first_answer(monkeypatch):
    answers = iter([None, None, None])

    async def answered_at(port: int, timeout_s: float) -> float | None:
        got = next(answers, "now")
        if got == "now":
            return time.monotonic()
        return None

    monkeypatch.setattr(scaleout, "_answered_at", answered_at)
    killed = []
    took = asyncio.run(scaleout._failover(1, lambda: killed.append(True)))
    assert killed == [True]
    assert 0.25 <= took < 1.0  # the 4th call, 100 ms apart
