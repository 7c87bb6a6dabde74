"""Worker process entry: pin, limit threads, then import the inference stack.

The pool starts workers with the `spawn` method (a fresh interpreter: no onnxruntime
thread pools inherited from the parent). It sets `OMP_NUM_THREADS`/`MKL_NUM_THREADS`
in the environment the child is spawned with and spawns from a thread pinned to the
worker's CPUs, so both hold from the child's first instruction; here they are applied
again to every thread before onnxruntime is imported. This module imports only the
standard library at the top: heavy imports happen after pinning.
"""

from __future__ import annotations

import ctypes
import os
import signal
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

THREAD_ENV = ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS",
              "NUMEXPR_NUM_THREADS")
"""OMP/MKL get the ONNX thread count; numpy's own BLAS pool stays at one thread (its
threads would only compete with ONNX Runtime's for the worker's cores)."""
PR_SET_PDEATHSIG = 1


@dataclass(frozen=True)
class WorkerSetup:
    """Everything a worker needs besides its slot; pickled to the child at spawn."""

    tts: Any
    """`TtsConfig`."""
    vad: Any
    """`VadConfig`."""
    cache_dir: str | None
    state_dir: str | None
    onnx_threads: int = 1
    policy: str = "edf"
    lookahead_s: float = 3.0
    first_audio_s: float = 2.5
    clause_max_chars: int = 80
    vad_capacity: int = 1024
    """VAD slots per rate in one worker."""
    vad_tick_ms: float = 16.0
    log_level: str = "info"
    log_sink: str = "json"
    journal_socket: str = "/run/systemd/journal/socket"
    warm_up: bool = True
    asr: Any = None
    """`AsrConfig` (None: listen streams give VAD events only)."""


def thread_env(threads: int) -> dict[str, str]:
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


SPARE_NICE = 19
"""A spare warms up at the lowest priority so it never slows the serving workers."""


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
    return len(os.listdir(f"/proc/{pid}/task"))


_LIBC: Any = None


def malloc_trim() -> bool:
    """Hand the heap memory glibc holds freed (in every thread's arena) back to the kernel;
    False where there is no glibc."""
    global _LIBC
    if _LIBC is None:
        try:
            _LIBC = ctypes.CDLL(None).malloc_trim
        except (OSError, AttributeError):
            _LIBC = False
    if _LIBC is False:
        return False
    _LIBC(0)
    return True


def _die_with_parent() -> None:
    """Ask the kernel to SIGKILL this worker when the daemon dies (no orphans)."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    except (OSError, AttributeError):
        pass


def worker_main(index: int, cpus: tuple[int, ...], conn: Any, stats_array: Any,
                setup: WorkerSetup, parent_pid: int) -> None:
    """Child entry point (runs in the spawned interpreter)."""
    _die_with_parent()
    if os.getppid() != parent_pid:  # the parent died before prctl took effect
        os._exit(1)
    # The daemon decides when workers stop (systemd signals the whole cgroup on stop).
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    os.environ.update(thread_env(setup.onnx_threads))
    pin_all_threads(cpus)
    if index < 0:
        renice_all(SPARE_NICE)  # before any thread exists: they all inherit it
    from cosyvoiced.workers.worker.loop import Worker

    Worker(index, cpus, conn, stats_array, setup).run()
