"""The console's page and its assets: `GET /` and `GET /console/NAME`.

The files in `static/` (plain HTML, CSS and ES modules, shipped as package data) are read
once, when the routes are made, and served from memory with a strong ETag each; a client
revalidates on every load (`Cache-Control: no-cache`) and a matching `If-None-Match` gets
304 with no body, so an upgraded daemon never runs a stale page. The page is open (it
holds nothing secret and must show its login without a token); every API call it makes
is checked like any client's. Its Content-Security-Policy lets it load and connect to
nothing but this origin.
"""

from __future__ import annotations

import hashlib
import mimetypes
from collections.abc import Callable
from dataclasses import dataclass
from importlib import resources

from aiohttp import web

PREFIX = "/console/"
"""Where the assets are; `/` is the page itself."""
CSP = ("default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
       "media-src 'self' blob:; connect-src 'self'; object-src 'none'; base-uri 'none'; "
       "frame-ancestors 'none'; form-action 'self'")
TYPES = {".html": "text/html", ".css": "text/css", ".js": "text/javascript",
         ".svg": "image/svg+xml", ".json": "application/json"}


def is_console_path(path: str) -> bool:
    """Served without a token: the page and its assets (never an API route)."""
    return path == "/" or path.startswith(PREFIX)


@dataclass(frozen=True)
class Asset:
    body: bytes
    content_type: str
    etag: str


def load_assets() -> dict[str, Asset]:
    """Every file of `static/` by name, with its type and ETag."""
    out: dict[str, Asset] = {}
    for entry in resources.files(__package__).joinpath("static").iterdir():
        if not entry.is_file() or entry.name.startswith("."):
            continue
        body = entry.read_bytes()
        suffix = "." + entry.name.rsplit(".", 1)[-1]
        ctype = TYPES.get(suffix) or mimetypes.guess_type(entry.name)[0] or "application/octet-stream"
        out[entry.name] = Asset(body, ctype, '"' + hashlib.sha256(body).hexdigest()[:32] + '"')
    return out


@dataclass(frozen=True)
class ConsoleRoutes:
    enabled: Callable[[], bool]
    """`api.console` as it is now (it changes on reload)."""
    assets: dict[str, Asset]

    @classmethod
    def make(cls, enabled: Callable[[], bool]) -> ConsoleRoutes:
        return cls(enabled, load_assets())

    def add_to(self, app: web.Application) -> None:
        app.router.add_get("/", self.index)
        app.router.add_get(PREFIX + "{name}", self.asset)

    def page_weight_bytes(self) -> int:
        return sum(len(a.body) for a in self.assets.values())

    async def index(self, request: web.Request) -> web.Response:
        return self.serve(request, "index.html")

    async def asset(self, request: web.Request) -> web.Response:
        return self.serve(request, request.match_info["name"])

    def serve(self, request: web.Request, name: str) -> web.Response:
        asset = self.assets.get(name)
        if not self.enabled() or asset is None:
            raise web.HTTPNotFound(text="no such page" if self.enabled()
                                   else "the console is off (api.console)")
        headers = {"ETag": asset.etag, "Cache-Control": "no-cache",
                   "X-Content-Type-Options": "nosniff", "Referrer-Policy": "no-referrer"}
        if name == "index.html":
            headers |= {"Content-Security-Policy": CSP, "X-Frame-Options": "DENY"}
        tags = _etags(request.headers.get("If-None-Match", ""))
        if asset.etag in tags or "*" in tags:
            return web.Response(status=304, headers=headers)
        return web.Response(body=asset.body, headers=headers,
                            content_type=asset.content_type,
                            charset="utf-8" if asset.content_type.startswith("text/") else None)


def _etags(header: str) -> set[str]:
    """The entity tags of an If-None-Match header (weak ones compared as strong)."""
    return {t.strip().removeprefix("W/") for t in header.split(",") if t.strip()}
