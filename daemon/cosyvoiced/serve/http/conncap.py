"""At most `api.max_connections` open connections per HTTP listener.

aiohttp has no such bound (its `web.Server` makes a `RequestHandler` per accepted
connection, without limit), so each site's protocol factory is wrapped: past the cap a
new connection is answered `503 overloaded` (the API's JSON error) and closed before any
of it is read; below it, the handler is wrapped by a protocol that counts it until its
connection is lost. Each listener counts on its own: a flood on one TCP listener leaves
the control socket (and every other listener) its own connections. Hand-written because
neither aiohttp nor asyncio offer a per-server connection limit (asyncio's `backlog` only
bounds connections not yet accepted).
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from typing import Any

import structlog
from aiohttp import web

log = structlog.get_logger(__name__)

_BODY = json.dumps({"error": {"code": "overloaded", "message":
                              "too many connections to this listener"}}).encode()
REFUSAL = (b"HTTP/1.1 503 Service Unavailable\r\nContent-Type: application/json\r\n"
           b"Connection: close\r\nRetry-After: 1\r\nContent-Length: "
           + str(len(_BODY)).encode() + b"\r\n\r\n" + _BODY)


class ConnectionCap:
    """One listener's count of open connections and its limit."""

    def __init__(self, name: str, limit: int) -> None:
        self.name = name
        self.limit = limit
        self.open = 0
        self.refused = 0

    def factory(self, make: Callable[[], Any]) -> Callable[[], asyncio.Protocol]:
        def protocol() -> asyncio.Protocol:
            if self.open >= self.limit:
                self.refused += 1
                if self.refused in (1, 10, 100) or self.refused % 1000 == 0:
                    log.warning("http_connections_capped", listener=self.name,
                                limit=self.limit, refused=self.refused)
                return _Refuse()
            self.open += 1  # counted from accept, not from connection_made (called soon)
            return _Counted(make(), self)
        return protocol


class _Refuse(asyncio.Protocol):
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        transport.write(REFUSAL)
        transport.close()


class _Counted(asyncio.Protocol):
    """The aiohttp handler, counted while its connection is open (calls pass through)."""

    def __init__(self, inner: Any, cap: ConnectionCap) -> None:
        self._inner = inner
        self._cap: ConnectionCap | None = cap

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self._inner.connection_made(transport)

    def connection_lost(self, exc: Exception | None) -> None:
        if self._cap is not None:
            self._cap.open -= 1
            self._cap = None
        self._inner.connection_lost(exc)

    def data_received(self, data: bytes) -> None:
        self._inner.data_received(data)

    def eof_received(self) -> bool | None:
        return self._inner.eof_received()

    def pause_writing(self) -> None:
        self._inner.pause_writing()

    def resume_writing(self) -> None:
        self._inner.resume_writing()


class CappedTCPSite(web.TCPSite):
    """`web.TCPSite` whose connections are bounded by `cap`."""

    def __init__(self, runner: web.BaseRunner, host: str, port: int, cap: ConnectionCap,
                 **kw: Any) -> None:
        super().__init__(runner, host, port, **kw)
        self.cap = cap

    async def start(self) -> None:
        await web.BaseSite.start(self)  # registers the site with the runner
        server = self._runner.server
        assert server is not None
        self._server = await asyncio.get_running_loop().create_server(
            self.cap.factory(server), self._host, self._port, backlog=self._backlog,
            reuse_address=self._reuse_address)
        if self._server.sockets:
            self._bound_port = self._server.sockets[0].getsockname()[1]


class CappedUnixSite(web.UnixSite):
    """`web.UnixSite` whose connections are bounded by `cap`."""

    def __init__(self, runner: web.BaseRunner, path: str, cap: ConnectionCap) -> None:
        super().__init__(runner, path)
        self.cap = cap

    async def start(self) -> None:
        await web.BaseSite.start(self)
        server = self._runner.server
        assert server is not None
        self._server = await asyncio.get_running_loop().create_unix_server(
            self.cap.factory(server), self._path, backlog=self._backlog)
