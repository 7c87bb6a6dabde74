"""The hostile mix of a soak window: slowloris on each listener, oversize frames and
messages, garbage peers, a faster-than-real-time AudioSocket feeder, SSML amplifiers, a
plain GET on the WebSocket route and clients vanishing mid-stream (the shapes of
tests/e2e/test_hostile_http.py, test_connection_caps.py and the parser fuzz tests).

Each action returns its outcome as the client saw it: `typed:CODE` (the API's JSON error,
or a Wyoming `error` event), `http:STATUS` (a 4xx from the HTTP layer itself), `hangup`
(an AudioSocket hangup frame), `closed` (the daemon closed the connection), `bounded`
(an SSML amplifier answered with audio of bounded length), `served` (a fast feeder's call
went on and ended when it hung up), `vanished` (we left mid-stream, as planned). The bad
ones: `hung` (nothing by the action's deadline), `5xx:STATUS` (a server error other than
a typed 503 refusal) and `unexpected:...`.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import random
import time
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

import numpy as np
from aiohttp import ClientError

from cosyvoiced.serve.audiosocket.frames import HEADER, Audio, CallId, Hangup, Kind
from tools.loadgen.streams import Endpoints
from tools.soak.answers import (
    Outcome,
    http_outcome,
    read_all,
    split_response,
    trickle,
)

MARGIN_S = 10.0
"""Beyond its own timeout, how long an action may wait for the daemon's answer on a
loaded 2-core box before it counts as hung."""
LONG_TEXT = ("This reply goes on for a long while, so that the client can leave in the "
             "middle of it without waiting for its end. ") * 8


@dataclass(frozen=True)
class Limits:
    """The daemon's timeouts the soak sets (they bound each action's deadline)."""

    http_timeout_s: float
    first_frame_timeout_s: float
    wyoming_idle_s: float
    flood_s: float
    """How long a fast feeder floods its call."""


class Hostile:
    """The actions against one daemon's listeners."""

    def __init__(self, ends: Endpoints, limits: Limits, corpus: list[np.ndarray],
                 rng: random.Random) -> None:
        assert ends.http and ends.audiosocket and ends.wyoming
        host, port = ends.http.removeprefix("http://").rsplit(":", 1)
        self.http = (host, int(port))
        self.url = ends.http
        self.audiosocket = ends.audiosocket
        self.wyoming = ends.wyoming
        self.limits = limits
        self.corpus = corpus
        self.rng = rng

    def actions(self) -> list[tuple[str, Callable[[], Awaitable[str]], float]]:
        """(name, action, its own length in s) for every hostile action; the daemon's
        answer is due within that length + MARGIN_S."""
        lim = self.limits
        return [
            ("http_slowloris", self.http_slowloris, lim.http_timeout_s),
            ("http_garbage", self.http_garbage, 0.0),
            ("http_huge_header", self.http_huge_header, 0.0),
            ("http_oversize_text", self.http_oversize_text, 0.0),
            ("ssml_nested_prosody", self.ssml_nested, 5.0),
            ("ssml_huge_breaks", self.ssml_breaks, 0.0),
            ("ws_plain_get", self.ws_plain_get, 0.0),
            ("http_vanish", self.http_vanish, 2.0),
            ("as_slowloris", self.as_slowloris, lim.first_frame_timeout_s),
            ("as_garbage", self.as_garbage, 0.0),
            ("as_oversize_frame", self.as_oversize, 0.0),
            ("as_fast_feeder", self.as_fast_feeder, lim.flood_s),
            ("as_vanish", self.as_vanish, 5.0),
            ("wy_slowloris", self.wy_slowloris, lim.wyoming_idle_s),
            ("wy_garbage", self.wy_garbage, 0.0),
            ("wy_oversize", self.wy_oversize, 0.0),
            ("wy_vanish", self.wy_vanish, 2.0),
        ]

    async def run(self, name: str, action: Callable[[], Awaitable[str]],
                  length_s: float) -> Outcome:
        t0 = time.monotonic()
        try:
            outcome = await asyncio.wait_for(action(), length_s + MARGIN_S)
        except TimeoutError:
            outcome = "hung"
        except (ConnectionError, asyncio.IncompleteReadError, ClientError):
            outcome = "closed"
        except Exception as exc:  # noqa: BLE001 - the client's own surprise, kept as data
            outcome = f"unexpected:{type(exc).__name__}: {exc}"[:120]
        return Outcome(name, outcome, t0, time.monotonic() - t0)

    # --- HTTP ----------------------------------------------------------------------

    async def _raw_http(self, data: bytes) -> str:
        reader, writer = await asyncio.open_connection(*self.http)
        try:
            with contextlib.suppress(ConnectionError):
                writer.write(data)
                await writer.drain()
            return http_outcome(*split_response(await read_all(reader)))
        finally:
            writer.close()

    async def http_slowloris(self) -> str:
        """A request head trickled a byte a second: never whole."""
        reader, writer = await asyncio.open_connection(*self.http)

        async def answer() -> str:
            return http_outcome(*split_response(await read_all(reader)))

        try:
            writer.write(b"POST /v1/tts HTTP/1.1\r\nHost: soak\r\n")
            return await trickle(writer, b"X-Slow: " + b"a" * 10_000,
                                  asyncio.create_task(answer()))
        finally:
            writer.close()

    async def http_garbage(self) -> str:
        return await self._raw_http(os.urandom(300) + b"\r\n\r\n")

    async def http_huge_header(self) -> str:
        return await self._raw_http(b"GET /healthz HTTP/1.1\r\nHost: soak\r\nX-Big: "
                                    + b"b" * 70_000 + b"\r\nConnection: close\r\n\r\n")

    async def _post(self, path: str, doc: dict) -> tuple[int, bytes]:
        from aiohttp import ClientSession, ClientTimeout

        async with ClientSession(timeout=ClientTimeout(total=None)) as s, \
                s.post(f"{self.url}{path}", json=doc) as r:
            return r.status, await r.read()

    async def _post_outcome(self, path: str, doc: dict) -> str:
        status, body = await self._post(path, doc)
        return http_outcome(f"HTTP/1.1 {status} x".encode(), body)

    async def http_oversize_text(self) -> str:
        body = json.dumps({"text": "word " * 400_000}).encode()
        return await self._raw_http(b"POST /v1/tts HTTP/1.1\r\nHost: soak\r\nContent-Type: "
                                    b"application/json\r\nConnection: close\r\n"
                                    b"Content-Length: " + str(len(body)).encode()
                                    + b"\r\n\r\n" + body)

    async def ssml_nested(self) -> str:
        nested = ("<speak>" + '<prosody rate="25%">' * 8 + "hello" + "</prosody>" * 8
                  + "</speak>")
        status, body = await self._post("/v1/tts", {"text": nested, "ssml": True,
                                                    "format": "s16le"})
        if status != 200:
            return http_outcome(f"HTTP/1.1 {status} x".encode(), body)
        seconds = len(body) / 2 / 22050
        return "bounded" if seconds < 10 else f"unexpected:{seconds:.0f}s"

    async def ssml_breaks(self) -> str:
        doc = "<speak>a" + '<break time="10s"/>' * 260 + "b</speak>"
        return await self._post_outcome("/v1/tts", {"text": doc, "ssml": True})

    async def ws_plain_get(self) -> str:
        return await self._raw_http(b"GET /v1/stream?rate_hz=16000 HTTP/1.1\r\nHost: soak\r\n"
                                    b"Connection: close\r\n\r\n")

    async def http_vanish(self) -> str:
        """A TTS stream left after its first audio, the socket aborted."""
        from aiohttp import ClientSession, ClientTimeout

        async with ClientSession(timeout=ClientTimeout(total=None)) as s:
            r = await s.post(f"{self.url}/v1/tts", json={"text": LONG_TEXT,
                                                         "format": "s16le"})
            if r.status != 200:
                body = await r.read()
                r.release()
                return http_outcome(f"HTTP/1.1 {r.status} x".encode(), body)
            await r.content.readany()
            r.close()  # the connection is dropped, not returned to the pool
        return "vanished"

    # --- AudioSocket ---------------------------------------------------------------

    async def _as_answer(self, reader: asyncio.StreamReader) -> str:
        return "hangup" if Hangup().encode() in await read_all(reader) else "closed"

    async def as_slowloris(self) -> str:
        """The UUID frame trickled a byte a second."""
        reader, writer = await asyncio.open_connection(*self.audiosocket)
        try:
            return await trickle(writer, CallId(uuid.uuid4()).encode(),
                                  asyncio.create_task(self._as_answer(reader)))
        finally:
            writer.close()

    async def as_garbage(self) -> str:
        reader, writer = await asyncio.open_connection(*self.audiosocket)
        try:
            data = os.urandom(200)
            writer.write(bytes([0x42]) + data)  # not a UUID frame, whatever follows
            await writer.drain()
            return await self._as_answer(reader)
        finally:
            writer.close()

    async def as_oversize(self) -> str:
        reader, writer = await asyncio.open_connection(*self.audiosocket)
        try:
            writer.write(CallId(uuid.uuid4()).encode() + HEADER.pack(Kind.SLIN, 0xFFFF))
            await writer.drain()
            return await self._as_answer(reader)
        finally:
            writer.close()

    async def as_fast_feeder(self) -> str:
        """A call fed 4 KiB frames as fast as the daemon reads them, then hung up."""
        reader, writer = await asyncio.open_connection(*self.audiosocket)
        frame = Audio(os.urandom(4096)).encode()
        try:
            writer.write(CallId(uuid.uuid4()).encode())
            end = time.monotonic() + self.limits.flood_s
            try:
                while (left_s := end - time.monotonic()) > 0:
                    writer.write(frame * 8)
                    try:  # the daemon reads at its own pace (TCP backpressure): fine
                        await asyncio.wait_for(writer.drain(), left_s)
                    except TimeoutError:
                        break
                writer.write(Hangup().encode())
            except ConnectionError:
                return "closed"
            data = await read_all(reader)
            return "hangup" if data.endswith(Hangup().encode()) else "served"
        finally:
            writer.close()

    async def as_vanish(self) -> str:
        """A call that speaks a prompt, then its socket is aborted (no hangup frame)."""
        from cosyvoiced.testing.audiosocket_peer import Peer

        peer = Peer(*self.audiosocket)
        await peer.connect()
        await peer.play(self.corpus[self.rng.randrange(len(self.corpus))])
        await peer.play(np.zeros(8000, dtype=np.int16))
        closed = peer.closed
        if peer._writer is not None:  # no hangup() and no FIN: the socket is reset
            peer._writer.transport.abort()
        await peer.close()
        return "hangup" if closed else "vanished"

    # --- Wyoming -------------------------------------------------------------------

    async def _wy_answer(self, reader: asyncio.StreamReader) -> str:
        from wyoming.error import Error
        from wyoming.event import async_read_event

        try:
            event = await async_read_event(reader)
        except (ValueError, ConnectionError):
            return "closed"
        if event is None:
            return "closed"
        if Error.is_type(event.type):
            return f"typed:{Error.from_event(event).code}"
        return f"unexpected:{event.type}"

    async def wy_slowloris(self) -> str:
        reader, writer = await asyncio.open_connection(*self.wyoming)
        try:
            return await trickle(writer, b'{"type": "describe", "data": {"x": "'
                                  + b"a" * 10_000,
                                  asyncio.create_task(self._wy_answer(reader)))
        finally:
            writer.close()

    async def wy_garbage(self) -> str:
        reader, writer = await asyncio.open_connection(*self.wyoming)
        try:
            writer.write(os.urandom(300).replace(b"\n", b" ") + b"\n")
            await writer.drain()
            return await self._wy_answer(reader)
        finally:
            writer.close()

    async def wy_oversize(self) -> str:
        reader, writer = await asyncio.open_connection(*self.wyoming)
        try:
            header = {"type": "audio-chunk", "data": {"rate": 16000, "width": 2,
                                                      "channels": 1},
                      "payload_length": 200 * 1024 * 1024}
            writer.write(json.dumps(header).encode() + b"\n" + b"\x00" * 65536)
            await writer.drain()
            return await self._wy_answer(reader)
        finally:
            writer.close()

    async def wy_vanish(self) -> str:
        from wyoming.audio import AudioChunk
        from wyoming.event import async_read_event, async_write_event
        from wyoming.tts import Synthesize

        reader, writer = await asyncio.open_connection(*self.wyoming)
        try:
            await async_write_event(Synthesize(text=LONG_TEXT).event(), writer)
            while (event := await async_read_event(reader)) is not None:
                if AudioChunk.is_type(event.type):
                    writer.transport.abort()
                    return "vanished"
                if event.type == "error":
                    from wyoming.error import Error

                    return f"typed:{Error.from_event(event).code}"
            return "closed"
        finally:
            writer.close()


async def hostile_loop(h: Hostile, end_s: float, lanes: int, pause_s: float,
                       out: list[Outcome]) -> None:
    """`lanes` lanes, each running the actions in turn (a different order per lane, a
    pause between two) until `end_s` (time.monotonic()); an action that would not end by
    then is left for the next window. Returns once the actions in flight have ended."""
    actions = h.actions()

    async def lane(i: int) -> None:
        order = actions[:]
        h.rng.shuffle(order)
        await asyncio.sleep(i * pause_s / max(1, lanes))
        for n in range(10**9):
            name, action, length_s = order[n % len(order)]
            left_s = end_s - time.monotonic()
            if left_s <= 0:
                return
            if length_s <= left_s:
                out.append(await h.run(name, action, length_s))
            await asyncio.sleep(pause_s)

    await asyncio.gather(*(lane(i) for i in range(lanes)))
