"""Live calls: `POST /v1/calls/{id}/say` speaks into a call (`{"text", "speed"?}`; returns
the say's id; its `playback_done` event tells which words the caller heard),
`.../stop` flushes it, `.../hangup` ends it; `GET /v1/calls/events` is a WebSocket of the
calls' events (the same events `GET /v1/events` carries as server-sent events).
"""

from __future__ import annotations

import asyncio
import contextlib
from dataclasses import dataclass, field

from aiohttp import WSMsgType, web

from cosyvoiced.serve.audiosocket.server import AudioSocketServer, UnknownCall
from cosyvoiced.serve.errors import api_error, as_api_error
from cosyvoiced.serve.http.errors import read_json
from cosyvoiced.serve.http.transcribe import websocket_required
from cosyvoiced.serve.speech import Unavailable
from cosyvoiced.tts.errors import TtsError
from cosyvoiced.tts.request import SPEED_RANGE

HANGUP_WAIT_S = 5.0
"""`POST .../hangup` answers once the call is torn down (or after this)."""
MAX_WS_SUBSCRIBERS = 64
"""`GET /v1/calls/events` WebSockets at once (each holds a queue of up to 1024 events);
more are 503 `overloaded`."""
KEEPALIVE_S = 20.0


@dataclass(frozen=True)
class CallRoutes:
    server: AudioSocketServer
    ws: list[int] = field(default_factory=lambda: [0])
    """Open event WebSockets (a one-item counter: the routes are frozen)."""

    def add_to(self, app: web.Application) -> None:
        app.router.add_get("/v1/calls", self.list_calls)
        app.router.add_get("/v1/calls/events", self.events)
        app.router.add_post("/v1/calls/{id}/say", self.say)
        app.router.add_post("/v1/calls/{id}/stop", self.stop)
        app.router.add_post("/v1/calls/{id}/hangup", self.hangup)

    def _call(self, request: web.Request):  # noqa: ANN202 - a Call
        try:
            return self.server.call(request.match_info["id"])
        except UnknownCall as exc:
            raise as_api_error(exc) from None

    async def list_calls(self, _request: web.Request) -> web.Response:
        return web.json_response({"calls": [
            {"id": c.id, "format": c.format, "rate_hz": c.rate_hz, "speaking": c.speaking,
             "say_id": c.say_id, "frames_sent": c.frames_sent,
             "comfort_frames": c.comfort_frames, "barge_ins": c.barge_ins}
            for c in self.server.calls.values()]})

    async def say(self, request: web.Request) -> web.Response:
        call = self._call(request)
        body = await read_json(request)
        text = body.get("text")
        if not isinstance(text, str):
            raise api_error("missing_field", "'text' (a string) is required")
        speed = body.get("speed")
        if speed is not None and (isinstance(speed, bool) or not isinstance(speed, int | float)
                                  or not SPEED_RANGE[0] <= speed <= SPEED_RANGE[1]):
            raise api_error("bad_parameter", "speed must be a number within "
                            f"[{SPEED_RANGE[0]}, {SPEED_RANGE[1]}]")
        try:
            say_id = await call.say(text, float(speed) if speed is not None else None)
        except (TtsError, Unavailable) as exc:
            raise as_api_error(exc) from None
        return web.json_response({"call": call.id, "id": say_id, "speaking": True},
                                 status=202)

    async def stop(self, request: web.Request) -> web.Response:
        call = self._call(request)
        was = call.speaking
        call.stop_speaking()
        return web.json_response({"call": call.id, "was_speaking": was})

    async def hangup(self, request: web.Request) -> web.Response:
        """End the call (Asterisk gets a hangup frame); answers when it is torn down."""
        call = self._call(request)
        call.end("hangup_requested")
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(asyncio.shield(call.finished.wait()), HANGUP_WAIT_S)
        return web.json_response({"call": call.id, "ended": call.finished.is_set(),
                                  "reason": call.end_reason})

    async def events(self, request: web.Request) -> web.StreamResponse:
        """WebSocket: every event on the bus as one JSON text message (`?call=ID`: only
        that call's); the client sends nothing (a close ends it)."""
        ws = web.WebSocketResponse(heartbeat=KEEPALIVE_S, max_msg_size=4096)
        if not ws.can_prepare(request).ok:
            return websocket_required()
        if self.ws[0] >= MAX_WS_SUBSCRIBERS:
            raise api_error("overloaded", f"{MAX_WS_SUBSCRIBERS} event WebSockets already")
        want = request.query.get("call") or request.query.get("stream")
        self.ws[0] += 1
        sub = self.server.bus.subscribe(maxsize=1024)
        try:
            await ws.prepare(request)
            await ws.send_json({"type": "ready", "call": want})
            reader = asyncio.create_task(self._drain(ws))
            getter: asyncio.Future[object] | None = None
            try:
                while not reader.done():
                    getter = asyncio.ensure_future(sub.get())
                    await asyncio.wait({getter, reader}, return_when=asyncio.FIRST_COMPLETED)
                    if not getter.done():
                        break
                    event = getter.result()
                    if notice := sub.dropped_notice():
                        await ws.send_json(notice)
                    if want and event.stream != want:
                        continue
                    await ws.send_json(event.to_dict())
            finally:
                for task in (reader, getter):
                    if task is not None:
                        task.cancel()
                        with contextlib.suppress(asyncio.CancelledError, EOFError):
                            await task
        except (ConnectionError, EOFError, RuntimeError):
            pass
        finally:
            sub.close()
            self.ws[0] -= 1
            await ws.close()
        return ws

    @staticmethod
    async def _drain(ws: web.WebSocketResponse) -> None:
        """Read (and ignore) what the client sends, until it closes."""
        async for msg in ws:
            if msg.type in (WSMsgType.CLOSE, WSMsgType.ERROR):
                return
