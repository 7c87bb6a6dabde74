"""Binds the HTTP application to the control socket and the configured listeners.

`api.listen` entries are parsed by `cosyvoiced.config.addr` (the config checks use the
same parser); a bind failure raises its `AddressError` (code `listen_failed`).
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

import structlog
from aiohttp import web

from cosyvoiced.config import Config
from cosyvoiced.config.addr import API_FORMS, AddressError, ListenAddress
from cosyvoiced.serve.http.app import DaemonView, make_app
from cosyvoiced.serve.http.conncap import CappedTCPSite, CappedUnixSite, ConnectionCap

log = structlog.get_logger(__name__)


class HttpServer:
    """The control socket plus `api.listen`; one aiohttp runner for all of them."""

    def __init__(self, daemon: DaemonView, config: Config) -> None:
        self._app = make_app(daemon, token=config.api.token,
                             request_timeout_s=config.api.request_timeout_s)
        # aiohttp closes a connection that has not sent a whole request head by then
        # (its keep-alive timer runs from connect while no request is being handled)
        self._runner = web.AppRunner(self._app, handle_signals=False, access_log=None,
                                     shutdown_timeout=2.0,
                                     keepalive_timeout=config.api.request_timeout_s)
        self._listeners = [ListenAddress("unix", path=config.service.control_socket)]
        self._listeners += [ListenAddress.parse(s, API_FORMS) for s in config.api.listen]
        self.bound: list[str] = []
        self._max_connections = config.api.max_connections
        self.caps: list[ConnectionCap] = []
        """Each listener's open-connection count (`api.max_connections` each)."""

    @property
    def app(self) -> web.Application:
        return self._app

    async def start(self) -> None:
        await self._runner.setup()
        for lis in self._listeners:
            try:
                if lis.kind == "unix":
                    _remove_stale_socket(lis.path)
                    Path(lis.path).parent.mkdir(parents=True, exist_ok=True)
                    cap = ConnectionCap(f"unix:{lis.path}", self._max_connections)
                    site: web.BaseSite = CappedUnixSite(self._runner, lis.path, cap)
                    await site.start()
                    os.chmod(lis.path, 0o660)
                    self.bound.append(f"unix:{lis.path}")
                else:
                    cap = ConnectionCap(f"tcp://{lis.host}:{lis.port}", self._max_connections)
                    site = CappedTCPSite(self._runner, lis.host, lis.port, cap,
                                         reuse_address=True)
                    await site.start()
                    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
                    self.bound.append(f"tcp://{lis.host}:{port}")
                self.caps.append(cap)
            except OSError as exc:
                raise AddressError(f"cannot listen on {lis}: {exc.strerror or exc}") from exc
        log.info("http_listening", listeners=self.bound)

    async def stop(self) -> None:
        await self._runner.cleanup()


def _remove_stale_socket(path: str) -> None:
    """Remove a socket left by a crashed run; refuse to touch anything else."""
    try:
        mode = os.lstat(path).st_mode
    except FileNotFoundError:
        return
    if not stat.S_ISSOCK(mode):
        raise AddressError(f"{path} exists and is not a socket")
    os.unlink(path)
