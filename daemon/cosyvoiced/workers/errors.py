"""Typed errors of the inference workers; each has a stable `code` clients can match on."""

from __future__ import annotations

from cosyvoiced.errors import CosyvoicedError


class WorkerError(CosyvoicedError):
    """Base of every error the worker pool raises or reports."""

    code = "worker_error"

    def __init__(self, message: str, *, code: str | None = None) -> None:
        super().__init__(message)
        if code is not None:
            self.code = code


class Overloaded(WorkerError):
    """The measured load says a new stream or request cannot be served in real time."""

    code = "overloaded"


class WorkerLost(WorkerError):
    """The worker serving a stream died; the stream's in-flight work is gone."""

    code = "worker_lost"


class PoolNotRunning(WorkerError):
    code = "pool_not_running"


class StreamClosed(WorkerError):
    code = "stream_closed"


class CpuConfigError(WorkerError):
    """A bad `workers.cpus` list, or more ONNX threads than CPUs."""

    code = "bad_cpus"


class TemplateError(WorkerError):
    """The worker template did not fork a worker (dead, or stuck past its deadline): the
    pool spawns that one instead."""

    code = "worker_template"
