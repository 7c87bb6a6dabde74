"""The one mapping from an error's stable `code` to the HTTP status it is answered with.

Every HTTP route turns a typed error (or a code of its own) into `ApiError` here, so one
code means one status on every route. A code not in `STATUS` is the client's mistake:
400. The daemon's own trouble is 503 whatever its code: a `WorkerError` (overloaded, a
lost worker, a stopped pool, or whatever code a worker reported mid-stream) and a
`Refused` admission. Wyoming and AudioSocket send the same codes, with no status.
"""

from __future__ import annotations

from cosyvoiced.errors import CosyvoicedError
from cosyvoiced.serve.http.errors import ApiError
from cosyvoiced.serve.streams import Refused
from cosyvoiced.workers.errors import WorkerError

__all__ = ["DEFAULT_STATUS", "STATUS", "UNAVAILABLE_STATUS", "api_error", "as_api_error",
           "status_for", "status_of"]

DEFAULT_STATUS = 400
"""A code not in the table: the request was wrong (bad field, bad text, unknown voice)."""
UNAVAILABLE_STATUS = 503
"""A request that was fine but cannot be served now."""

STATUS: dict[str, int] = {
    "unauthorized": 401,
    # the named thing does not exist
    "unknown_call": 404,
    "unknown_device": 404,
    "no_playback_device": 404,
    # too slow to send
    "request_timeout": 408,
    # too much to take
    "text_too_long": 413,
    "request_entity_too_large": 413,
    "upload_too_long": 413,
    # a body the route does not read
    "unsupported_media_type": 415,
    "unsupported_audio": 415,
    # a WebSocket route asked without the upgrade handshake
    "websocket_required": 426,
    "internal": 500,
    # fine, but not now
    "draining": UNAVAILABLE_STATUS,
    "overloaded": UNAVAILABLE_STATUS,
    "duplicate_stream": UNAVAILABLE_STATUS,
    "device_unavailable": UNAVAILABLE_STATUS,
    "pool_not_running": UNAVAILABLE_STATUS,
    "worker_lost": UNAVAILABLE_STATUS,
    "stream_closed": UNAVAILABLE_STATUS,
    "worker_error": UNAVAILABLE_STATUS,
    "asr_disabled": UNAVAILABLE_STATUS,
}
"""Code -> status, for the codes that are not `DEFAULT_STATUS`."""

UNAVAILABLE_BASES: tuple[type[CosyvoicedError], ...] = (WorkerError, Refused)
"""Errors answered 503 whatever their code (a worker may report any code)."""


def status_of(code: str) -> int:
    """The HTTP status for `code`."""
    return STATUS.get(code, DEFAULT_STATUS)


def status_for(exc: CosyvoicedError) -> int:
    """The HTTP status `exc` is answered with."""
    if isinstance(exc, ApiError):
        return exc.status
    if isinstance(exc, UNAVAILABLE_BASES):
        return UNAVAILABLE_STATUS
    return status_of(exc.code)


def api_error(code: str, message: str) -> ApiError:
    """A route's own error `code`, with its status from the table."""
    return ApiError(status_of(code), code, message)


def as_api_error(exc: CosyvoicedError) -> ApiError:
    """A typed error as the API error it is answered with: its status, code and message."""
    return ApiError(status_for(exc), exc.code, str(exc))
