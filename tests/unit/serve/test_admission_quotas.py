"""A flood of one kind cannot refuse another: the last streams are kept for calls, and
each HTTP listener bounds its own open connections."""

from __future__ import annotations

import asyncio
import json

import pytest
from aiohttp import web

from cosyvoiced.serve.http.conncap import CappedTCPSite, ConnectionCap
from cosyvoiced.serve.streams import Refused, Streams


def test_the_last_streams_are_kept_for_calls():
    s = Streams(10, reserved_for_calls=3)
    for i in range(7):
        s.open("tts", f"t{i}")
    for kind in ("tts", "wyoming", "transcribe", "play"):
        with pytest.raises(Refused) as exc:
            s.open(kind)
        assert exc.value.code == "overloaded"
    for i in range(3):
        s.open("call", f"c{i}")
    with pytest.raises(Refused):
        s.open("call")  # the hard cap still holds for calls
    s.close("t0")
    with pytest.raises(Refused):
        s.open("wyoming")  # 9 open: still inside the reserve (calls count too)
    for sid in ("c0", "c1", "t1"):
        s.close(sid)
    s.open("wyoming")  # 6 were open, below the reserve: other kinds again


def test_a_reserve_as_large_as_the_cap_still_leaves_one_slot():
    s = Streams(2, reserved_for_calls=5)
    s.open("tts")
    with pytest.raises(Refused):
        s.open("tts")
    s.open("call")


async def _count_answers(port: int, n: int) -> tuple[list, list[bytes]]:
    held = []
    for _ in range(n):
        held.append(await asyncio.open_connection("127.0.0.1", port))
    await asyncio.sleep(0.1)
    answers = []
    for r, _ in held:  # the ones over the cap were answered and closed at once
        try:
            answers.append(await asyncio.wait_for(r.read(), 0.3))
        except TimeoutError:
            answers.append(b"")
    return held, answers


def test_connections_past_the_cap_get_503_and_the_count_comes_back_down():
    async def main() -> None:
        app = web.Application()

        async def hello(_: web.Request) -> web.Response:
            return web.json_response({"ok": True})

        app.router.add_get("/", hello)
        runner = web.AppRunner(app, handle_signals=False)
        await runner.setup()
        cap = ConnectionCap("test", 5)
        site = CappedTCPSite(runner, "127.0.0.1", 0, cap)
        await site.start()
        port = site.port
        try:
            held, answers = await _count_answers(port, 8)
            refused = [a for a in answers if a]
            assert len(refused) == 3 and cap.open == 5 and cap.refused == 3
            head, _, body = refused[0].partition(b"\r\n\r\n")
            assert head.startswith(b"HTTP/1.1 503")
            assert json.loads(body)["error"]["code"] == "overloaded"
            for _, w in held:
                w.close()
            await asyncio.sleep(0.2)
            assert cap.open == 0
            r, w = await asyncio.open_connection("127.0.0.1", port)  # served again
            w.write(b"GET / HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
            assert (await asyncio.wait_for(r.read(), 5)).startswith(b"HTTP/1.1 200")
            w.close()
        finally:
            await runner.cleanup()

    asyncio.run(main())


def test_a_websocket_through_a_capped_site_works_and_is_counted():
    from aiohttp import ClientSession, WSMsgType

    async def main() -> None:
        app = web.Application()

        async def echo(request: web.Request) -> web.WebSocketResponse:
            ws = web.WebSocketResponse()
            await ws.prepare(request)
            async for msg in ws:
                await ws.send_bytes(msg.data)
            return ws

        app.router.add_get("/ws", echo)
        runner = web.AppRunner(app, handle_signals=False)
        await runner.setup()
        cap = ConnectionCap("test", 2)
        site = CappedTCPSite(runner, "127.0.0.1", 0, cap)
        await site.start()
        try:
            async with ClientSession() as http, \
                    http.ws_connect(f"http://127.0.0.1:{site.port}/ws") as ws:
                await ws.send_bytes(b"x" * 100_000)
                msg = await ws.receive()
                assert msg.type == WSMsgType.BINARY and msg.data == b"x" * 100_000
                assert cap.open == 1
            await asyncio.sleep(0.2)
            assert cap.open == 0
        finally:
            await runner.cleanup()

    asyncio.run(main())
