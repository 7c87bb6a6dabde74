"""Where a worker's threads run and how many there are: pinning, thread limits, nice; and
that it dies with the daemon.

Linux applies affinity and priority per thread, so these walk `/proc/<pid>/task`. Only
the standard library: the worker's entry uses them before anything heavy is imported,
and the loop again when a spare adopts a slot.
"""

from __future__ import annotations

import ctypes
import os
import resource
import signal
import threading
from collections.abc import Iterable, Iterator, Mapping
from contextlib import contextmanager

THREAD_ENV = ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS",
              "NUMEXPR_NUM_THREADS")
"""OMP/MKL get the ONNX thread count; numpy's own BLAS pool stays at one thread (its
threads would only compete with ONNX Runtime's for the worker's cores)."""

SPARE_NICE = 19
"""A spare warms up at the lowest priority so it never slows the serving workers (only
where it may return to 0 when it adopts a slot: `may_renice_to`)."""
CAP_SYS_NICE = 23
"""Its bit in the CapEff line of /proc/<pid>/status (linux/capability.h)."""
STATUS = "/proc/self/status"
ASR_NICE = 5
"""How much lower than the workers' loops the ASR process runs (`asr_serve`): on a shared
core the kernel gives a TTS step or a VAD tick ~3/4 of the CPU while a batch decodes
(equal weights gave them half, and replies started late), and the decode gets the rest
and every idle moment."""


def thread_env(threads: int) -> dict[str, str]:
    """The `THREAD_ENV` values for a worker running `threads` ONNX threads."""
    return {"OMP_NUM_THREADS": str(threads), "MKL_NUM_THREADS": str(threads),
            "OPENBLAS_NUM_THREADS": "1", "NUMEXPR_NUM_THREADS": "1"}


_START_LOCK = threading.Lock()


@contextmanager
def starting_pinned(cpus: Iterable[int], env: Mapping[str, str]) -> Iterator[None]:
    """Run the body (a child process started) with `env` in the environment and this
    thread pinned to `cpus`, then put both back: a child started here has them from its
    first instruction. One at a time in the process (the environment is shared)."""
    with _START_LOCK:
        saved_env = {k: os.environ.get(k) for k in env}
        saved_cpus = os.sched_getaffinity(0)
        os.environ.update(env)
        os.sched_setaffinity(0, set(cpus))
        try:
            yield
        finally:
            os.sched_setaffinity(0, saved_cpus)
            for k, v in saved_env.items():
                if v is None:
                    os.environ.pop(k, None)
                else:
                    os.environ[k] = v


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


def may_renice_to(nice: int) -> bool:
    """Whether this process may lower its threads' nice value to `nice` later: with
    CAP_SYS_NICE, or an RLIMIT_NICE of at least 20 - nice (systemd's `LimitNICE=+0`).
    Root in a container without CAP_SYS_NICE may not: a spare niced there would serve at
    nice 19 after adopting a slot, starved by anything else on its core."""
    soft, _ = resource.getrlimit(resource.RLIMIT_NICE)
    if soft == resource.RLIM_INFINITY or soft >= 20 - nice:
        return True
    with open(STATUS) as f:
        caps = next((line.split()[1] for line in f if line.startswith("CapEff:")), "0")
    return bool(int(caps, 16) >> CAP_SYS_NICE & 1)


def thread_count(pid: int | str = "self") -> int:
    """OS threads in process `pid`."""
    return len(os.listdir(f"/proc/{pid}/task"))


PR_SET_PDEATHSIG = 1


def die_with_parent() -> None:
    """Ask the kernel to SIGKILL this process when its parent (the thread that started
    it) dies: no orphans."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    except (OSError, AttributeError):
        pass
