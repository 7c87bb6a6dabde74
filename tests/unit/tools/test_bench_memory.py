"""The memory suite is registered and reads smaps_rollup as the kernel writes it."""

from __future__ import annotations

import os

import pytest
from tools.bench import memory
from tools.bench.cli import SUITES


def test_memory_is_a_suite():
    assert "memory" in SUITES


@pytest.mark.skipif(not os.path.exists("/proc/self/smaps_rollup"), reason="needs Linux smaps")
def test_rollup_reads_this_process_and_nothing_for_a_gone_one():
    mine = memory.rollup_kb("self")
    assert mine["Pss"] > 0 and mine["Pss"] >= mine["Pss_Anon"] > 0
    assert abs(mine["Pss"] - mine["Pss_Anon"] - mine["Pss_File"] - mine.get("Pss_Shmem", 0)) <= 8
    assert memory.rollup_kb(2**22 + 7) == {}
