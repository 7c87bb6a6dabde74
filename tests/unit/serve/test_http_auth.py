"""The bearer token check: any wrong `Authorization` is 401 `unauthorized`, never a 500."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest
from aiohttp import ClientSession
from aiohttp.test_utils import TestServer

from cosyvoiced.serve.http.app import make_app
from tests.fakes.daemon import FakeDaemon


@pytest.mark.parametrize("header", ["Bearer é", "Bearer s3cr€t", "é", "Bearer s3cret\u00e9"])
def test_non_ascii_authorization_is_401(header):
    async def main() -> tuple[int, dict[str, Any], int]:
        server = TestServer(make_app(FakeDaemon(), token="s3cret"))
        await server.start_server()
        try:
            async with ClientSession(base_url=str(server.make_url(""))) as http:
                async with http.get("/v1/voices", headers={"Authorization": header}) as r:
                    status, body = r.status, await r.json()
                async with http.get("/v1/voices",
                                    headers={"Authorization": "Bearer s3cret"}) as r:
                    return status, body, r.status
        finally:
            await server.close()

    status, body, good = asyncio.run(main())
    assert (status, body["error"]["code"]) == (401, "unauthorized")
    assert good == 200


@pytest.mark.parametrize("raw", [b"Bearer \xe9", b"Bearer s3cret\xff", b"\xc3\xa9"])
def test_raw_non_utf8_authorization_bytes_are_401(raw):
    """Bytes a client library would not send (Latin-1, invalid UTF-8), over a bare socket."""
    async def main() -> bytes:
        server = TestServer(make_app(FakeDaemon(), token="s3cret"))
        await server.start_server()
        try:
            reader, writer = await asyncio.open_connection(server.host, server.port)
            writer.write(b"GET /v1/voices HTTP/1.1\r\nHost: x\r\nConnection: close\r\n"
                         b"Authorization: " + raw + b"\r\n\r\n")
            await writer.drain()
            data = await asyncio.wait_for(reader.read(), 10)
            writer.close()
            return data
        finally:
            await server.close()

    data = asyncio.run(main())
    head, _, body = data.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 401"), data
    assert json.loads(body)["error"]["code"] == "unauthorized"
