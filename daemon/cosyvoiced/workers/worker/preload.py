"""What a worker loads (its TTS engine, the voice warmed up, the VAD graphs), and the
worker template that loads it once for every worker of the box.

The template is a process that loads these pieces as a worker would, then forks the
workers and the spare (`workers.template`; the main process's side is
`workers.pool.template`). A forked worker's weights, compiled kernels and code are the
template's pages, shared copy-on-write: what it adds is what it writes (activation
buffers, its streams), ~55 MB against ~165 MB for a worker that loads its own bf16 voice
(docs/performance.md). The template is a multiprocessing forkserver whose preload is this
module: importing it in a process whose environment names a pickled `WorkerSetup`
(`TEMPLATE_ENV`, set only for the template) does the loading. A worker forked from it
takes what was loaded (`adopt`) where the setup it was given loads the same things;
otherwise, or where the loading failed (logged), it loads its own, as a spawned worker
does.

Forking needs the template's thread pools to be of no use to the child: with one
inference thread per worker (`workers.onnx_threads = 1`) neither ONNX Runtime nor
OpenVINO starts one for a run; with more, the pool spawns workers instead.
"""

from __future__ import annotations

import gc
import os
import pickle
import signal
import time
from dataclasses import dataclass, replace
from typing import Any

from cosyvoiced.workers.setup import WorkerSetup

TEMPLATE_ENV = "COSYVOICED_WORKER_TEMPLATE"
"""Path of the pickled `WorkerSetup` the template loads for (its environment only)."""
WARMUP_TEXT = "Hello, this is a warm up sentence for the speech worker."
VAD_RATES = (8000, 16000)
"""Calls are 8 kHz, most else 16 kHz: a worker loads both at start."""


def make_engine(setup: WorkerSetup) -> Any:
    """The worker's `TtsEngine`. Whole-graph voices: clauses cut shorter here than
    `tts.max_clause_chars` may: one clause is one ONNX run that no other stream on the
    worker can interrupt."""
    from cosyvoiced.tts.engine import TtsEngine

    tts = replace(setup.tts, max_clause_chars=min(setup.tts.max_clause_chars,
                                                  setup.clause_max_chars))
    return TtsEngine(tts, threads=setup.onnx_threads, cache_dir=setup.cache_dir,
                     state_dir=setup.state_dir, lexicon=setup.lexicon)


def make_vad(setup: WorkerSetup, rate_hz: int) -> Any:
    """The VAD batch of one rate (each its own flat graph)."""
    from cosyvoiced.listen.vad import SileroBatch

    return SileroBatch(rate_hz, setup.vad_capacity, threads=setup.onnx_threads,
                       cache_dir=setup.cache_dir)


def template_key(setup: WorkerSetup) -> tuple[Any, ...]:
    """What decides the pieces loaded: equal keys load the same engine and graphs."""
    return (setup.tts, setup.cache_dir, setup.state_dir, setup.onnx_threads,
            setup.clause_max_chars, setup.vad_capacity, setup.warm_up)


@dataclass
class Preloaded:
    """The template's pieces, for a worker forked from it to take."""

    key: tuple[Any, ...]
    engine: Any
    """`TtsEngine`, its default voice loaded and run once (where `warm_up`)."""
    vads: dict[int, Any]
    """`SileroBatch` per rate in `VAD_RATES`, each run once."""


PRELOADED: Preloaded | None = None
"""Set in the template (and so in every worker forked from it) once loaded."""
SERVER_PID: int | None = None
"""The template's pid, as its forked workers see it (None elsewhere)."""


def _load(setup: WorkerSetup) -> Preloaded:
    """Load and run once what a worker's warm-up loads, then hand back what the runs
    allocated (each worker makes its own buffers) and freeze the objects made so far out
    of the garbage collector (a collection in a worker would write to every page that
    holds one, and copy it)."""
    import numpy as np

    from cosyvoiced.runtime.openvino import release_memory
    from cosyvoiced.workers.worker.heap import malloc_trim

    engine = make_engine(setup)
    if setup.warm_up:  # loaded and run once (`TtsEngine.voice`); its prompt cache stays
        engine.voice()  # empty: each worker's warm-up and prompts fill its own, as spawned
    vads = {}
    for rate_hz in VAD_RATES:
        batch = vads[rate_hz] = make_vad(setup, rate_hz)
        slot = batch.open()
        batch.run([slot], np.zeros((1, batch.window), dtype=np.float32))
        batch.close(slot)
    release_memory()
    malloc_trim()
    gc.collect()
    gc.freeze()
    return Preloaded(template_key(setup), engine, vads)


def _load_template(path: str) -> None:
    """The template's preload: ignore the signals a worker ignores (systemd signals the
    whole cgroup on stop; the daemon decides when the workers go), then load."""
    global PRELOADED, SERVER_PID
    import structlog

    from cosyvoiced.runtime.log import setup_logging
    from cosyvoiced.workers.worker.affinity import die_with_parent

    die_with_parent()
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    SERVER_PID = os.getpid()
    with open(path, "rb") as f:
        setup: WorkerSetup = pickle.load(f)
    setup_logging(setup.log_level, setup.log_sink, setup.journal_socket)  # type: ignore[arg-type]
    log = structlog.get_logger(__name__)
    t0 = time.monotonic()
    try:
        PRELOADED = _load(setup)
    except Exception as exc:  # each worker then loads its own, and says what fails
        log.error("worker_template_failed", error=str(exc), kind=type(exc).__name__)
        return
    log.info("worker_template_ready", pid=SERVER_PID, seconds=round(time.monotonic() - t0, 2))


def adopt(setup: WorkerSetup) -> Preloaded | None:
    """In a worker: the template's pieces if it was forked from one that loaded them for
    the same key, else None (load your own). Closes the template's "alive" pipe end the
    fork handed down, so that the daemon's exit alone stops the template (and with it,
    through PR_SET_PDEATHSIG, its workers)."""
    if SERVER_PID is None:
        return None
    from multiprocessing import forkserver

    server = forkserver._forkserver  # noqa: SLF001 (where the forked child keeps the fd)
    if server._forkserver_alive_fd is not None:  # noqa: SLF001
        os.close(server._forkserver_alive_fd)  # noqa: SLF001
        server._forkserver_alive_fd = None  # noqa: SLF001
    if PRELOADED is None or PRELOADED.key != template_key(setup):
        return None
    return PRELOADED


if path := os.environ.get(TEMPLATE_ENV):
    _load_template(path)
