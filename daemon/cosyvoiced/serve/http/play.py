"""Local devices: `POST /v1/play` speaks on a playback device, `POST /v1/play/stop` stops
it, `GET /v1/devices` lists the devices with their negotiated parameters and counters."""

from __future__ import annotations

from dataclasses import dataclass

from aiohttp import web

from cosyvoiced.serve.devices import Devices, DeviceUnavailable, NoPlaybackDevice, UnknownDevice
from cosyvoiced.serve.errors import api_error, as_api_error
from cosyvoiced.serve.http.errors import read_json
from cosyvoiced.serve.speech import Unavailable
from cosyvoiced.serve.streams import Refused
from cosyvoiced.tts.errors import TtsError
from cosyvoiced.tts.request import SynthesisOptions


def _optional_str(body: dict, key: str) -> str | None:
    value = body.get(key)
    if value is not None and not isinstance(value, str):
        raise api_error("bad_parameter", f"'{key}' must be a string")
    return value or None


@dataclass(frozen=True)
class PlayRoutes:
    devices: Devices

    def add_to(self, app: web.Application) -> None:
        app.router.add_post("/v1/play", self.play)
        app.router.add_post("/v1/play/stop", self.stop)
        app.router.add_get("/v1/devices", self.list_devices)

    async def play(self, request: web.Request) -> web.Response:
        body = await read_json(request)
        text = body.get("text")
        if not isinstance(text, str):
            raise api_error("missing_field", "'text' (a string) is required")
        device = _optional_str(body, "device")
        options = SynthesisOptions(voice=_optional_str(body, "voice"))
        try:
            started = await self.devices.play(text, options, device)
        except (UnknownDevice, NoPlaybackDevice, DeviceUnavailable, Refused, TtsError,
                Unavailable) as exc:
            raise as_api_error(exc) from None
        return web.json_response(started, status=202)

    async def stop(self, request: web.Request) -> web.Response:
        device = None
        if request.can_read_body:
            device = _optional_str(await read_json(request), "device")
        try:
            stopped = self.devices.stop_playing(device)
        except (UnknownDevice, NoPlaybackDevice) as exc:
            raise as_api_error(exc) from None
        return web.json_response({"stopped": stopped})

    async def list_devices(self, _request: web.Request) -> web.Response:
        return web.json_response(self.devices.status())
