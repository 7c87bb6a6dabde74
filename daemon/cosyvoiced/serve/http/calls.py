"""Live calls: `POST /v1/calls/{id}/say` speaks into a call, `.../stop` flushes it."""

from __future__ import annotations

from dataclasses import dataclass

from aiohttp import web

from cosyvoiced.serve.audiosocket.server import AudioSocketServer, UnknownCall
from cosyvoiced.serve.errors import api_error, as_api_error
from cosyvoiced.serve.http.errors import read_json
from cosyvoiced.serve.speech import Unavailable
from cosyvoiced.tts.errors import TtsError


@dataclass(frozen=True)
class CallRoutes:
    server: AudioSocketServer

    def add_to(self, app: web.Application) -> None:
        app.router.add_get("/v1/calls", self.list_calls)
        app.router.add_post("/v1/calls/{id}/say", self.say)
        app.router.add_post("/v1/calls/{id}/stop", self.stop)

    def _call(self, request: web.Request):  # noqa: ANN202 - a Call
        try:
            return self.server.call(request.match_info["id"])
        except UnknownCall as exc:
            raise as_api_error(exc) from None

    async def list_calls(self, _request: web.Request) -> web.Response:
        return web.json_response({"calls": [
            {"id": c.id, "speaking": c.speaking, "frames_sent": c.frames_sent,
             "barge_ins": c.barge_ins} for c in self.server.calls.values()]})

    async def say(self, request: web.Request) -> web.Response:
        call = self._call(request)
        body = await read_json(request)
        text = body.get("text")
        if not isinstance(text, str):
            raise api_error("missing_field", "'text' (a string) is required")
        try:
            await call.say(text)
        except (TtsError, Unavailable) as exc:
            raise as_api_error(exc) from None
        return web.json_response({"call": call.id, "speaking": True}, status=202)

    async def stop(self, request: web.Request) -> web.Response:
        call = self._call(request)
        was = call.speaking
        call.stop_speaking()
        return web.json_response({"call": call.id, "was_speaking": was})
