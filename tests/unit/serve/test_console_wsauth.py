"""A browser's WebSocket carries the API token as a subprotocol (it cannot set
Authorization): accepted and answered `cosyvoiced`; a wrong, missing or query-string
token is 401 before the handshake."""

from __future__ import annotations

import asyncio
import base64
import logging

import pytest
from aiohttp import ClientSession, WSServerHandshakeError, web
from aiohttp.test_utils import TestServer

from cosyvoiced.serve.http.app import make_app
from tests.fakes.daemon import FakeDaemon

TOKEN = "s3cret/+=ü"  # not a valid subprotocol as it is: base64url makes it one


def b64url(text: str) -> str:
    return base64.urlsafe_b64encode(text.encode()).decode().rstrip("=")


async def _probe(request: web.Request) -> web.WebSocketResponse:
    ws = web.WebSocketResponse()
    await ws.prepare(request)
    await ws.send_str("hello")
    await ws.close()
    return ws


def handshake(path: str, protocols: tuple[str, ...] = (),
              headers: dict[str, str] | None = None) -> tuple[int, str | None]:
    """(101 or the refusal's status, the subprotocol the answer named)."""
    async def main():
        app = make_app(FakeDaemon(), token=TOKEN)
        app.router.add_get("/ws-probe", _probe)
        server = TestServer(app)
        await server.start_server()
        try:
            async with ClientSession(base_url=str(server.make_url(""))) as http:
                try:
                    async with http.ws_connect(path, protocols=protocols,
                                               headers=headers or {}) as ws:
                        assert (await ws.receive_str()) == "hello"
                        return 101, ws.protocol
                except WSServerHandshakeError as exc:
                    return exc.status, None
        finally:
            await server.close()

    return asyncio.run(main())


def test_token_as_a_subprotocol_opens_the_socket_and_is_answered_cosyvoiced():
    got = handshake("/ws-probe", ("cosyvoiced", f"cosyvoiced.token.{b64url(TOKEN)}"))
    assert got == (101, "cosyvoiced")


def test_authorization_header_still_opens_it():
    assert handshake("/ws-probe", headers={"Authorization": f"Bearer {TOKEN}"})[0] == 101


@pytest.mark.parametrize(("path", "protocols"), [
    ("/ws-probe", ()),
    ("/ws-probe", ("cosyvoiced",)),
    ("/ws-probe", ("cosyvoiced", f"cosyvoiced.token.{b64url('wrong')}")),
    ("/ws-probe", ("cosyvoiced", "cosyvoiced.token.!!not-base64!!")),
    ("/ws-probe", ("cosyvoiced", f"cosyvoiced.token.{b64url(TOKEN)}x")),
    (f"/ws-probe?token={b64url(TOKEN)}", ("cosyvoiced",)),  # never from the URL
])
def test_without_the_right_token_the_handshake_is_401(path, protocols):
    assert handshake(path, protocols) == (401, None)


def test_token_subprotocol_opens_no_plain_request():
    async def main():
        server = TestServer(make_app(FakeDaemon(), token=TOKEN))
        await server.start_server()
        try:
            async with ClientSession(base_url=str(server.make_url(""))) as http, \
                    http.get("/v1/status", headers={
                        "Sec-WebSocket-Protocol": f"cosyvoiced.token.{b64url(TOKEN)}"}) as r:
                return r.status
        finally:
            await server.close()

    assert asyncio.run(main()) == 401


def test_the_offered_token_is_not_logged(caplog):
    """aiohttp logged the offer its route did not take (token and all) at warning level."""
    with caplog.at_level("DEBUG"):
        got = handshake("/ws-probe", ("cosyvoiced", f"cosyvoiced.token.{b64url(TOKEN)}"))
    assert got == (101, "cosyvoiced")
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING
                or b64url(TOKEN) in r.getMessage()], caplog.text
