"""Binds the HTTP application to the control socket and the configured listeners."""

from __future__ import annotations

import ipaddress
import os
import stat
from dataclasses import dataclass
from pathlib import Path

import structlog
from aiohttp import web

from cosyvoiced.config import Config
from cosyvoiced.serve.http.app import DaemonView, make_app

log = structlog.get_logger(__name__)


class ListenError(Exception):
    """A listener address is malformed or cannot be bound."""

    code = "listen_failed"


@dataclass(frozen=True)
class Listener:
    kind: str
    """"unix" or "tcp"."""
    path: str = ""
    host: str = ""
    port: int = 0

    @classmethod
    def parse(cls, spec: str) -> Listener:
        """"unix:/run/x.sock" or "tcp://127.0.0.1:8080" ("[::1]:8080" for IPv6)."""
        if spec.startswith("unix:"):
            path = spec.removeprefix("unix:")
            if not path:
                raise ListenError(f"{spec!r}: empty socket path")
            return cls("unix", path=path)
        if spec.startswith("tcp://"):
            host, sep, port = spec.removeprefix("tcp://").rpartition(":")
            if not sep or not port.isdigit() or not 0 <= int(port) <= 65535:
                raise ListenError(f"{spec!r}: expected tcp://HOST:PORT")
            return cls("tcp", host=host.strip("[]"), port=int(port))
        raise ListenError(f"{spec!r}: expected unix:PATH or tcp://HOST:PORT")

    @property
    def loopback(self) -> bool:
        if self.kind == "unix":
            return True
        if self.host == "localhost":
            return True
        try:
            return ipaddress.ip_address(self.host).is_loopback
        except ValueError:
            return False


def config_problems(config: Config) -> list[tuple[str, str]]:
    """Cross-field checks of `[api]` for the config loader: (dotted key, message)."""
    out: list[tuple[str, str]] = []
    for i, spec in enumerate(config.api.listen):
        try:
            lis = Listener.parse(spec)
        except ListenError as exc:
            out.append((f"api.listen[{i}]", str(exc)))
            continue
        if not lis.loopback and not config.api.token:
            out.append(("api.token", f"api.listen {spec!r} is beyond loopback: set api.token "
                                     f"(clients then send Authorization: Bearer TOKEN)"))
    return out


class HttpServer:
    """The control socket plus `api.listen`; one aiohttp runner for all of them."""

    def __init__(self, daemon: DaemonView, config: Config) -> None:
        self._app = make_app(daemon, token=config.api.token)
        self._runner = web.AppRunner(self._app, handle_signals=False, access_log=None,
                                     shutdown_timeout=2.0)
        self._listeners = [Listener("unix", path=config.service.control_socket)]
        self._listeners += [Listener.parse(s) for s in config.api.listen]
        self.bound: list[str] = []

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
                    site: web.BaseSite = web.UnixSite(self._runner, lis.path)
                    await site.start()
                    os.chmod(lis.path, 0o660)
                    self.bound.append(f"unix:{lis.path}")
                else:
                    site = web.TCPSite(self._runner, lis.host, lis.port, reuse_address=True)
                    await site.start()
                    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
                    self.bound.append(f"tcp://{lis.host}:{port}")
            except OSError as exc:
                raise ListenError(f"cannot listen on {lis}: {exc.strerror or exc}") from exc
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
        raise ListenError(f"{path} exists and is not a socket")
    os.unlink(path)
