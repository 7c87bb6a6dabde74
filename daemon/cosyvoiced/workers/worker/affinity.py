"""Where a worker's threads run and how many there are: pinning, thread limits, nice.

Linux applies affinity and priority per thread, so these walk `/proc/<pid>/task`. Only
the standard library: the worker's entry uses them before anything heavy is imported,
and the loop again when a spare adopts a slot.
"""

from __future__ import annotations

import os
from collections.abc import Iterable

THREAD_ENV = ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS",
              "NUMEXPR_NUM_THREADS")
"""OMP/MKL get the ONNX thread count; numpy's own BLAS pool stays at one thread (its
threads would only compete with ONNX Runtime's for the worker's cores)."""

SPARE_NICE = 19
"""A spare warms up at the lowest priority so it never slows the serving workers."""
ASR_NICE = 5
"""How much lower than the worker's loop the Whisper decode threads run: on a shared
core the kernel gives a TTS step or a VAD tick ~3/4 of the CPU while a batch decodes
(equal weights gave them half, and replies started late), and the decode gets the rest
and every idle moment."""


def thread_env(threads: int) -> dict[str, str]:
    """The `THREAD_ENV` values for a worker running `threads` ONNX threads."""
    return {"OMP_NUM_THREADS": str(threads), "MKL_NUM_THREADS": str(threads),
            "OPENBLAS_NUM_THREADS": "1", "NUMEXPR_NUM_THREADS": "1"}


def pin_all_threads(cpus: Iterable[int]) -> None:
    """Pin every thread of this process (sched_setaffinity(0) pins only the caller)."""
    mask = set(cpus)
    for tid in os.listdir("/proc/self/task"):
        try:
            os.sched_setaffinity(int(tid), mask)
        except (ProcessLookupError, FileNotFoundError):
            pass  # a thread that just ended


def renice_all(nice: int, pid: int | str = "self") -> bool:
    """Set every thread's nice value (Linux priorities are per thread); False if denied."""
    try:
        for tid in os.listdir(f"/proc/{pid}/task"):
            try:
                os.setpriority(os.PRIO_PROCESS, int(tid), nice)
            except ProcessLookupError:
                pass
    except PermissionError:
        return False
    return True


def thread_count(pid: int | str = "self") -> int:
    """OS threads in process `pid`."""
    return len(os.listdir(f"/proc/{pid}/task"))


def thread_ids() -> set[int]:
    """This process's threads now (diff two calls to find the threads a library made)."""
    return {int(tid) for tid in os.listdir("/proc/self/task")}


def lower_threads(tids: Iterable[int], by: int) -> None:
    """Run `tids` `by` nice steps below this (the calling) thread; raising a nice value
    needs no privilege. Threads that ended meanwhile are skipped."""
    nice = min(19, os.getpriority(os.PRIO_PROCESS, 0) + by)
    for tid in tids:
        try:
            os.setpriority(os.PRIO_PROCESS, tid, nice)
        except (ProcessLookupError, PermissionError):
            pass
