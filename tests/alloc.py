"""Memory a loop allocates, as tracemalloc sees it, without what other threads did meanwhile.

tracemalloc traces every thread: a thread left running by an earlier test (a pool's
supervisor, an event loop) allocates during the window too. The bytes still held at the
end are counted only for allocations whose traceback passes through `files`; the peak is
the whole process's, so keep its bound well above such background churn.
"""

from __future__ import annotations

import tracemalloc
from collections.abc import Callable
from dataclasses import dataclass


@dataclass(frozen=True)
class Traced:
    retained_bytes: int
    """Still allocated after the loop, by code in `files`."""
    peak_bytes: int
    """Largest transient above the start, whole process."""


def traced(cycle: Callable[[], object], repeats: int, *files: str) -> Traced:
    """Run `cycle` `repeats` times under tracemalloc (the caller warms it up first)."""
    only = [tracemalloc.Filter(True, f, all_frames=True) for f in files]
    tracemalloc.start(25)  # traces only what is allocated from here on
    try:
        base, _ = tracemalloc.get_traced_memory()
        tracemalloc.reset_peak()
        for _ in range(repeats):
            cycle()
        _, peak = tracemalloc.get_traced_memory()
        held = tracemalloc.take_snapshot().filter_traces(only)
    finally:
        tracemalloc.stop()
    retained = sum(stat.size for stat in held.statistics("filename"))
    return Traced(retained_bytes=retained, peak_bytes=peak - base)
