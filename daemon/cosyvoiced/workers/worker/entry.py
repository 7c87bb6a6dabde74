"""Worker process entry: pin, limit threads, then import the inference stack.

The pool forks workers from the worker template (`preload`: the voices loaded once,
shared copy-on-write), or starts them with the `spawn` method (a fresh interpreter: no
onnxruntime thread pools inherited from the parent). It sets `OMP_NUM_THREADS`/`MKL_NUM_THREADS`
in the environment the child is spawned with and spawns from a thread pinned to the
worker's CPUs, so both hold from the child's first instruction; here they are applied
again to every thread before onnxruntime is imported, and before the worker allocates
its own buffers: Linux places a page on the node of the CPU that first touches it, so on
a NUMA box a worker's memory lands on the node the plan (`pool/placement`) put it on. At
the top this module imports only the standard library and the stdlib-only `setup` and
`affinity`: the loop (and the inference stack under it) is imported after pinning, so
the import points one way.
"""

from __future__ import annotations

import os
import signal
from typing import Any

from cosyvoiced.workers.setup import WorkerSetup
from cosyvoiced.workers.worker import preload
from cosyvoiced.workers.worker.affinity import (
    SPARE_NICE,
    die_with_parent,
    may_renice_to,
    pin_all_threads,
    renice_all,
    thread_env,
)


def worker_main(index: int, cpus: tuple[int, ...], conn: Any, stats_array: Any,
                setup: WorkerSetup, parent_pid: int) -> None:
    """Child entry point (runs in the spawned interpreter, or in the process forked from
    the worker template: then its parent is the template, not `parent_pid`)."""
    die_with_parent()
    if os.getppid() != (preload.SERVER_PID or parent_pid):  # died before prctl took effect
        os._exit(1)
    preloaded = preload.adopt(setup)
    # The daemon decides when workers stop (systemd signals the whole cgroup on stop).
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    os.environ.update(thread_env(setup.onnx_threads))
    pin_all_threads(cpus)
    if index < 0 and may_renice_to(0):  # else it would serve at 19 once it adopts a slot
        renice_all(SPARE_NICE)  # before any thread exists: they all inherit it
    from cosyvoiced.workers.worker.loop import Worker

    Worker(index, cpus, conn, stats_array, setup, preloaded).run()
