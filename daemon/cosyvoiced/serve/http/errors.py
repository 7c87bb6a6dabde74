"""Typed API errors and the JSON body checks every route shares."""

from __future__ import annotations

import asyncio
import json
from typing import Any

from aiohttp import web

from cosyvoiced.errors import CosyvoicedError


class ApiError(CosyvoicedError):
    """Answered as `{"error": {"code", "message"}}` with `status`."""

    def __init__(self, status: int, code: str, message: str) -> None:
        self.status = status
        self.code = code
        super().__init__(message)


MAX_JSON_BYTES = 256 * 1024
"""Largest JSON body a route reads: `tts.max_chars` (5000) of text even escaped as
`\\uXXXX` is ~30 KB; SSML markup and the other fields fit in the rest. Uploads of audio
have their own limit (`transcribe.MAX_UPLOAD_BYTES`)."""


REQUEST_TIMEOUT = web.AppKey("request_timeout_s", float)
"""`api.request_timeout_s`, kept on the app."""


async def read_body(request: web.Request, limit: int, *, streaming: bool = False) -> bytes:
    """The whole body, or 413 `request_entity_too_large` as soon as it is over `limit`
    bytes (by its Content-Length before reading, or while reading a chunked one), or 408
    `request_timeout` when it has not all arrived within `api.request_timeout_s` (with
    `streaming`, a large upload: when no data came for that long)."""
    too_large = ApiError(413, "request_entity_too_large", f"request body over {limit} bytes")
    if request.content_length is not None and request.content_length > limit:
        raise too_large
    timeout_s = request.app.get(REQUEST_TIMEOUT, 15.0)
    body = bytearray()
    try:
        async with asyncio.timeout(timeout_s) as deadline:
            async for chunk in request.content.iter_any():
                body += chunk
                if len(body) > limit:
                    raise too_large
                if streaming:
                    deadline.reschedule(asyncio.get_running_loop().time() + timeout_s)
    except TimeoutError:
        raise ApiError(408, "request_timeout",
                       f"the body did not arrive within {timeout_s} s") from None
    return bytes(body)


async def read_json(request: web.Request, limit: int = MAX_JSON_BYTES) -> dict[str, Any]:
    """The body as a JSON object, or 415/413/400 with what was wrong."""
    ctype = request.content_type
    if ctype not in ("application/json", "text/json"):
        raise ApiError(415, "unsupported_media_type",
                       f"expected Content-Type application/json, got {ctype or 'none'}")
    raw = await read_body(request, limit)
    try:
        body = json.loads(raw.decode("utf-8"))
    except UnicodeDecodeError as exc:
        raise ApiError(400, "invalid_utf8", f"body is not UTF-8 (byte {exc.start})") from None
    except json.JSONDecodeError as exc:
        raise ApiError(400, "bad_json", f"body is not JSON: {exc}") from None
    except RecursionError:  # e.g. 256 KiB of "[": the decoder recurses once per level
        raise ApiError(400, "bad_json", "body is nested too deeply") from None
    if not isinstance(body, dict):
        raise ApiError(400, "bad_json", "body must be a JSON object")
    return body
