"""The API token on a WebSocket opened by a browser, which cannot set `Authorization` on
one: the page offers two subprotocols, `cosyvoiced` and `cosyvoiced.token.<the token,
base64url without padding>`; the token one is checked like the header, and the answer
names `cosyvoiced` (a browser drops a handshake whose answer names none it offered).
Never a query string: URLs land in logs. Nor the offer: once the token is checked, the
route's request offers none of ours (aiohttp logs an offer its route does not take, at
warning level, token and all).
"""

from __future__ import annotations

import base64
import binascii
from typing import Any

from aiohttp import hdrs, web
from multidict import CIMultiDict

PROTOCOL = "cosyvoiced"
"""The subprotocol the handshake's answer names."""
TOKEN_PREFIX = "cosyvoiced.token."
MAX_OFFER_CHARS = 4096
"""A longer Sec-WebSocket-Protocol header is not read for a token."""
ANSWER = web.RequestKey("cosyvoiced.ws_answer", bool)
"""Set on a request whose offer was taken off: it offered `cosyvoiced`."""


def _ours(proto: str) -> bool:
    return proto == PROTOCOL or proto.startswith(TOKEN_PREFIX)


def _offered(request: web.Request) -> list[str]:
    if request.headers.get(hdrs.UPGRADE, "").lower() != "websocket":
        return []
    offer = request.headers.get(hdrs.SEC_WEBSOCKET_PROTOCOL, "")
    if len(offer) > MAX_OFFER_CHARS:
        return []
    return [p.strip() for p in offer.split(",") if p.strip()]


def offered_token(request: web.Request) -> bytes | None:
    """The token a WebSocket handshake offers as a subprotocol, or None."""
    for proto in _offered(request):
        if proto.startswith(TOKEN_PREFIX):
            b64 = proto.removeprefix(TOKEN_PREFIX)
            try:
                return base64.urlsafe_b64decode(b64 + "=" * (-len(b64) % 4))
            except (binascii.Error, ValueError):
                return None
    return None


@web.middleware
async def hide_offer(request: web.Request, handler: Any) -> web.StreamResponse:
    """After the token check: the route gets the request without our subprotocols (and
    with any others a client offered), marked to be answered `cosyvoiced`."""
    offered = _offered(request)
    if not any(_ours(p) for p in offered):
        return await handler(request)
    headers = CIMultiDict(request.headers)
    del headers[hdrs.SEC_WEBSOCKET_PROTOCOL]
    if others := [p for p in offered if not _ours(p)]:
        headers[hdrs.SEC_WEBSOCKET_PROTOCOL] = ", ".join(others)
    route = request.clone(headers=headers)
    route[ANSWER] = PROTOCOL in offered
    return await handler(route)


async def answer_protocol(request: web.Request, response: web.StreamResponse) -> None:
    """`on_response_prepare`: a handshake that offered `cosyvoiced` is answered with it
    (unless its route chose a subprotocol of its own)."""
    if isinstance(response, web.WebSocketResponse) and response.status == 101 \
            and hdrs.SEC_WEBSOCKET_PROTOCOL not in response.headers \
            and (request.get(ANSWER) or PROTOCOL in _offered(request)):
        response.headers[hdrs.SEC_WEBSOCKET_PROTOCOL] = PROTOCOL
