"""The aiohttp application: status, health and readiness routes; JSON errors."""

from __future__ import annotations

import asyncio
import hmac
import time
from typing import Any, Protocol

import structlog
from aiohttp import web

from cosyvoiced.config.listeners import ApiConfig, OpenAIConfig
from cosyvoiced.listen.events import EventBus
from cosyvoiced.runtime.metrics import CONTENT_TYPE, Metrics
from cosyvoiced.serve.agent import Capacity
from cosyvoiced.serve.audiosocket.server import AudioSocketServer
from cosyvoiced.serve.devices import Devices
from cosyvoiced.serve.errors import status_for, status_of
from cosyvoiced.serve.http.calls import CallRoutes
from cosyvoiced.serve.http.console.routes import ConsoleRoutes, is_console_path
from cosyvoiced.serve.http.console.wsauth import answer_protocol, hide_offer, offered_token
from cosyvoiced.serve.http.errors import REQUEST_TIMEOUT, ApiError
from cosyvoiced.serve.http.openai import OpenAIRoutes
from cosyvoiced.serve.http.play import PlayRoutes
from cosyvoiced.serve.http.transcribe import MAX_UPLOAD_BYTES, ListenRoutes
from cosyvoiced.serve.http.tts import TtsRoutes
from cosyvoiced.serve.speech import Speech
from cosyvoiced.serve.streams import Refused, Streams

log = structlog.get_logger(__name__)


class DaemonView(Protocol):
    """What the HTTP layer may see of the daemon."""

    ready: bool
    debug: bool
    streams: Streams
    metrics: Metrics
    bus: EventBus
    speech: Speech | None
    audiosocket: AudioSocketServer | None
    devices: Devices | None

    def status(self) -> dict[str, Any]: ...

    def healthy(self) -> tuple[bool, list[str]]: ...

    def capacity(self) -> Capacity: ...


def error_response(status: int, code: str, message: str) -> web.Response:
    return web.json_response({"error": {"code": code, "message": message}}, status=status)


@web.middleware
async def json_errors(request: web.Request, handler: Any) -> web.StreamResponse:
    """Every error leaves as {"error": {"code", "message"}}, never a stack trace."""
    try:
        return await handler(request)
    except ApiError as exc:
        return error_response(exc.status, exc.code, str(exc))
    except web.HTTPException as exc:
        if exc.status < 400:
            raise
        code = exc.reason.lower().replace(" ", "_")
        return error_response(exc.status, code, exc.text or exc.reason)
    except ConnectionError:  # the client went away mid-response (its handler logged it)
        log.debug("http_client_gone", path=request.path)
        return web.Response(status=499, reason="Client Closed Request")  # never sent
    except Exception:
        log.exception("http_handler_failed", path=request.path)
        return error_response(status_of("internal"), "internal",
                              "internal error; see the daemon log")


OPEN_PATHS = frozenset({"/healthz", "/readyz"})
"""Answered without a token (probes from the box's own monitoring)."""


def over_tcp(request: web.Request) -> bool:
    """Did `request` come over TCP (any address, loopback too), not the control socket?"""
    return isinstance(request.transport.get_extra_info("sockname"), tuple) \
        if request.transport else False


def bearer_auth(token: str) -> Any:
    """Requests over TCP need `Authorization: Bearer TOKEN` (a browser's WebSocket: the
    token as a subprotocol, console/wsauth.py); the control socket is guarded by its file
    permissions instead."""
    expected = f"Bearer {token}".encode()

    @web.middleware
    async def check(request: web.Request, handler: Any) -> web.StreamResponse:
        if over_tcp(request) and request.path not in OPEN_PATHS \
                and not is_console_path(request.path):  # the page shows its own login
            # back to the bytes sent: a header that is not UTF-8 arrives with surrogates
            got = request.headers.get("Authorization", "").encode("utf-8", "surrogateescape")
            ws_token = offered_token(request)
            if not hmac.compare_digest(got, expected) and (
                    ws_token is None or not hmac.compare_digest(b"Bearer " + ws_token, expected)):
                return error_response(status_of("unauthorized"), "unauthorized",
                                      "send Authorization: Bearer <api.token>")
        return await handler(request)

    return check


def make_app(daemon: DaemonView, token: str = "",
             request_timeout_s: float = 15.0) -> web.Application:
    middlewares = [json_errors, *([bearer_auth(token)] if token else []), hide_offer]
    app = web.Application(middlewares=middlewares, client_max_size=MAX_UPLOAD_BYTES)
    app[REQUEST_TIMEOUT] = request_timeout_s
    app.on_response_prepare.append(answer_protocol)
    routes = web.RouteTableDef()
    if daemon.speech is not None:
        tts = TtsRoutes(daemon.speech, daemon.streams, daemon.metrics)
        listen = ListenRoutes(daemon.speech, daemon.streams, daemon.bus)
        tts.add_to(app)
        listen.add_to(app)
        OpenAIRoutes(tts, listen, lambda: getattr(getattr(daemon, "config", None), "openai",
                                                  OpenAIConfig())).add_to(app)
    if daemon.audiosocket is not None:
        CallRoutes(daemon.audiosocket).add_to(app)
    devices = getattr(daemon, "devices", None)  # views without local devices omit it
    if devices is not None:
        PlayRoutes(devices).add_to(app)
    ConsoleRoutes.make(lambda: getattr(getattr(daemon, "config", None), "api",
                                       ApiConfig()).console).add_to(app)

    @routes.get("/healthz")
    async def healthz(_request: web.Request) -> web.Response:
        ok, stalled = daemon.healthy()
        return web.json_response({"ok": ok, "stalled": stalled}, status=200 if ok else 503)

    @routes.get("/readyz")
    async def readyz(_request: web.Request) -> web.Response:
        """200 while ready with room for one more call (the HAProxy agent's weight 100%);
        503 while starting, draining, stalled or full."""
        cap = daemon.capacity()
        ok = daemon.ready and cap.serving
        return web.json_response({"ready": ok, "state": cap.state, "spare": round(cap.spare, 3),
                                  "weight_percent": cap.percent, "max_calls": cap.max_calls,
                                  "agent": cap.agent_line().strip()},
                                 status=200 if ok else 503)

    @routes.get("/metrics")
    async def metrics(_request: web.Request) -> web.Response:
        m = daemon.metrics
        m.active_streams.clear()
        for s in daemon.streams.snapshot():
            m.active_streams.labels(s.kind).inc()
        return web.Response(body=m.render(), headers={"Content-Type": CONTENT_TYPE})

    @routes.get("/v1/streams")
    async def streams(_request: web.Request) -> web.Response:
        now = time.monotonic()
        return web.json_response({"streams": [
            {"id": s.id, "kind": s.kind, "age_s": round(now - s.started_s, 3)}
            for s in daemon.streams.snapshot()]})

    @routes.get("/v1/status")
    async def status(_request: web.Request) -> web.Response:
        return web.json_response(daemon.status())

    async def debug_seconds(request: web.Request) -> float:
        if not daemon.debug or over_tcp(request):  # local users may not stall the loop
            raise web.HTTPNotFound(text="debug endpoints are off (service.debug) and only on "
                                        "the control socket")
        try:
            seconds = float((await request.json()).get("seconds", 1.0))
        except (ValueError, TypeError, AttributeError):
            raise web.HTTPBadRequest(text='expected {"seconds": N}') from None
        if not 0 < seconds <= 600:
            raise web.HTTPBadRequest(text="seconds must be in (0, 600]")
        return seconds

    @routes.post("/v1/debug/stall")
    async def stall(request: web.Request) -> web.Response:
        """Freeze the event loop for a while: proves the watchdog stops pinging."""
        seconds = await debug_seconds(request)
        log.warning("debug_stall", component="event_loop", seconds=seconds)
        asyncio.get_running_loop().call_later(0.05, time.sleep, seconds)
        return web.json_response({"stalling": "event_loop", "seconds": seconds}, status=202)

    @routes.post("/v1/debug/hold-stream")
    async def hold_stream(request: web.Request) -> web.Response:
        """Keep a placeholder stream active for a while: exercises drain on shutdown."""
        seconds = await debug_seconds(request)
        try:
            info = daemon.streams.open("debug")
        except Refused as exc:
            return error_response(status_for(exc), exc.code, str(exc))
        loop = asyncio.get_running_loop()
        loop.call_later(seconds, daemon.streams.close, info.id)
        return web.json_response({"stream": info.id, "seconds": seconds}, status=202)

    app.add_routes(routes)
    return app
