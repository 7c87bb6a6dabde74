"""The box's one ASR process: Whisper loaded once, every worker's batches decoded there.

A Whisper copy in each inference worker cost every worker ~60 MB PSS loaded and ~22 MB
more after its first decodes (docs/performance.md, memory); this process holds the one
copy of the box. The pool starts it before the workers (`workers/pool/asr_proc.py`),
pinned to all the inference CPUs and `ASR_NICE` below the workers' loops, so a TTS step
or a VAD tick that comes while a batch decodes on the same core takes the CPU first, as
when Whisper ran on a helper thread inside each worker.

Wire: a worker's `RemoteAsr` connects to `AsrLink.address` (a Unix socket in a directory
only the daemon's user may enter; `multiprocessing.connection` with the daemon's random
`authkey`, so a stray local process cannot feed it), sends a `DecodeBatch`
and reads a `Decoded`, one batch at a time. One thread per connection (at most
`MAX_CONNECTIONS`); Whisper runs `replicas` batches at once on one copy of its weights
(CTranslate2's `inter_threads`), the rest wait in its queue. A batch is charged the
process's CPU since the last batch ended over the speech decoded since (CTranslate2 runs
batches on its own threads, so no one thread's clock is the batch's).
"""

from __future__ import annotations

import os
import signal
import threading
import time
from multiprocessing import AuthenticationError
from multiprocessing.connection import Connection, Listener
from typing import Any

import structlog

from cosyvoiced.workers import messages as m
from cosyvoiced.workers.setup import WorkerSetup
from cosyvoiced.workers.worker.affinity import (
    ASR_NICE,
    die_with_parent,
    pin_all_threads,
    renice_all,
    thread_env,
)
from cosyvoiced.workers.worker.heap import malloc_trim

log = structlog.get_logger(__name__)

MAX_CONNECTIONS = 64
TRIM_EVERY_S = 30.0
"""At most this often, after a batch, freed heap goes back to the kernel (`malloc_trim`:
glibc keeps what each connection thread's arena freed)."""
"""Connections served at once (workers, a spare, a restarted worker's new one, probes)."""


class CpuCharge:
    """Process CPU seconds per second of speech decoded, charged batch by batch."""

    def __init__(self, clock: Any = time.process_time) -> None:
        self.clock = clock
        self._lock = threading.Lock()
        self._cpu0 = clock()

    def charge(self) -> float:
        """CPU seconds for a batch just decoded: the process's CPU since the last charge
        (batches decoding side by side split it by when they end)."""
        with self._lock:
            now = self.clock()
            used, self._cpu0 = now - self._cpu0, now
        return max(0.0, used)


class AsrServer:
    """Decodes `DecodeBatch`es from any number of connections with one decoder."""

    def __init__(self, decoder: Any, listener: Listener) -> None:
        self.decoder = decoder
        self.listener = listener
        self.charge = CpuCharge()
        self._conns: set[Connection] = set()
        self._lock = threading.Lock()
        self.batches = 0
        self.closed = False
        self._trimmed_at = time.monotonic()

    def close(self) -> None:
        self.closed = True
        self.listener.close()

    def serve_forever(self) -> None:
        while not self.closed:
            try:
                conn = self.listener.accept()
            except (OSError, EOFError, AuthenticationError):  # a peer without the key
                continue
            with self._lock:
                if len(self._conns) >= MAX_CONNECTIONS:
                    conn.close()
                    continue
                self._conns.add(conn)
            threading.Thread(target=self._serve, args=(conn,), name="asr-conn",
                             daemon=True).start()

    def _serve(self, conn: Connection) -> None:
        try:
            while True:
                req = m.recv(conn, (m.DecodeBatch,))
                conn.send(self.decode(req))
        except (EOFError, OSError, m.WorkerProtocolError):
            pass  # the worker went away (or spoke nonsense): only its connection ends
        finally:
            with self._lock:
                self._conns.discard(conn)
            conn.close()

    def decode(self, req: m.DecodeBatch) -> m.Decoded:
        utts = list(req.utterances)
        if not utts:  # the pool's probe: answered at once, charged nothing
            return m.Decoded((), 0.0)
        try:
            results: list[Any] = list(self.decoder.transcribe(utts, req.cfg))
        except Exception as exc:  # a typed AsrError fails this batch, never the process
            if not isinstance(getattr(exc, "code", None), str):
                log.exception("asr_batch_failed", jobs=len(utts))
            results = [exc] * len(utts)
        self.batches += 1
        done = m.Decoded(tuple(results), self.charge.charge())
        if time.monotonic() - self._trimmed_at >= TRIM_EVERY_S:
            self._trimmed_at = time.monotonic()
            malloc_trim()
        return done


def asr_main(cpus: tuple[int, ...], conn: Any, setup: WorkerSetup, address: str,
             authkey: bytes, threads: int, replicas: int, parent_pid: int) -> None:
    """The ASR process's entry point (runs in the spawned interpreter)."""
    die_with_parent()
    if os.getppid() != parent_pid:
        os._exit(1)
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the pool decides when it stops
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    os.environ.update(thread_env(threads))
    pin_all_threads(cpus)
    # below the daemon's priority (its workers'), before any thread exists: all inherit it
    renice_all(min(19, os.getpriority(os.PRIO_PROCESS, 0) + ASR_NICE))
    from cosyvoiced.listen.asr import WhisperAsr, warm_up_utterance
    from cosyvoiced.runtime.log import setup_logging

    setup_logging(setup.log_level, setup.log_sink, setup.journal_socket)  # type: ignore[arg-type]
    decoder = WhisperAsr(setup.asr, threads=threads, replicas=replicas)
    t0 = time.perf_counter()
    decoder.transcribe([warm_up_utterance()])
    warm_s = time.perf_counter() - t0
    malloc_trim()
    try:
        os.unlink(address)  # a killed predecessor's socket
    except FileNotFoundError:
        pass
    listener = Listener(address, family="AF_UNIX", authkey=authkey, backlog=MAX_CONNECTIONS)
    server = AsrServer(decoder, listener)
    log.info("asr_ready", pid=os.getpid(), cpus=list(cpus), replicas=replicas,
             threads=threads, languages=len(decoder.languages), warm_ms=round(warm_s * 1000))
    conn.send(m.AsrReady(os.getpid(), decoder.languages, warm_s))
    server.serve_forever()
