"""Typed API errors and the JSON body checks every route shares."""

from __future__ import annotations

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


async def read_json(request: web.Request) -> dict[str, Any]:
    """The body as a JSON object, or 415/400 with what was wrong."""
    ctype = request.content_type
    if ctype not in ("application/json", "text/json"):
        raise ApiError(415, "unsupported_media_type",
                       f"expected Content-Type application/json, got {ctype or 'none'}")
    raw = await request.read()
    try:
        body = json.loads(raw.decode("utf-8"))
    except UnicodeDecodeError as exc:
        raise ApiError(400, "invalid_utf8", f"body is not UTF-8 (byte {exc.start})") from None
    except json.JSONDecodeError as exc:
        raise ApiError(400, "bad_json", f"body is not JSON: {exc}") from None
    if not isinstance(body, dict):
        raise ApiError(400, "bad_json", "body must be a JSON object")
    return body
