"""The console's page and assets as the HTTP app serves them: ETags and 304s, off by
`api.console` (live), open without the token while the API stays closed, and a page that
loads nothing but its own files, under 250 KB."""

from __future__ import annotations

import asyncio
import re
from dataclasses import replace

from aiohttp import ClientSession
from aiohttp.test_utils import TestServer
from multidict import CIMultiDict

from cosyvoiced.config import Config
from cosyvoiced.config.listeners import ApiConfig
from cosyvoiced.serve.http.app import make_app
from cosyvoiced.serve.http.console.routes import ConsoleRoutes, load_assets
from tests.fakes.daemon import FakeDaemon

MAX_PAGE_BYTES = 250 * 1024


def fetch(daemon: FakeDaemon, requests: list[tuple[str, dict[str, str]]], token: str = "",
          between=None) -> list[tuple[int, CIMultiDict[str], bytes]]:
    """GET each (path, headers) in turn; `between(i)` runs before request i."""
    async def main():
        server = TestServer(make_app(daemon, token=token))
        await server.start_server()
        out = []
        try:
            async with ClientSession(base_url=str(server.make_url(""))) as http:
                for i, (path, headers) in enumerate(requests):
                    if between:
                        between(i)
                    async with http.get(path, headers=headers) as r:
                        out.append((r.status, r.headers.copy(), await r.read()))
        finally:
            await server.close()
        return out

    return asyncio.run(main())


def test_page_and_assets_carry_etags_and_revalidate_to_304():
    first = fetch(FakeDaemon(), [("/", {}), ("/console/main.js", {})])
    (page_status, page, html), (js_status, js, body) = first
    assert page_status == 200 and page["Content-Type"].startswith("text/html")
    assert js_status == 200 and js["Content-Type"].startswith("text/javascript")
    assert b'<script type="module" src="/console/main.js">' in html and b"import" in body
    for h in (page, js):
        assert re.fullmatch(r'"[0-9a-f]{32}"', h["ETag"]) and h["Cache-Control"] == "no-cache"
    assert "connect-src 'self'" in page["Content-Security-Policy"]
    assert "Access-Control-Allow-Origin" not in page
    again = fetch(FakeDaemon(), [("/", {"If-None-Match": page["ETag"]}),
                                 ("/console/main.js", {"If-None-Match": f'W/{js["ETag"]}'}),
                                 ("/console/main.js", {"If-None-Match": page["ETag"]}),
                                 ("/console/main.js", {"If-None-Match": "*"})])
    assert [(s, b) for s, _, b in again[:2]] == [(304, b""), (304, b"")]
    assert again[0][1]["ETag"] == page["ETag"]
    assert again[2][0] == 200 and again[2][2] == body  # another file's tag does not match
    assert again[3][0] == 304


def test_unknown_asset_is_404():
    (status, _, body), = fetch(FakeDaemon(), [("/console/nope.js", {})])
    assert status == 404 and b"no such page" in body


def test_console_false_is_404_and_applies_on_reload():
    daemon = FakeDaemon(config=replace(Config(), api=ApiConfig(console=False)))

    def reload(i: int) -> None:
        if i == 2:  # what a SIGHUP with console = true does to daemon.config
            daemon.config = Config()

    got = fetch(daemon, [("/", {}), ("/console/console.css", {}), ("/", {})], between=reload)
    assert [s for s, _, _ in got] == [404, 404, 200]
    assert b"api.console" in got[0][2]


def test_page_is_open_without_the_token_and_the_api_is_not():
    got = fetch(FakeDaemon(), [("/", {}), ("/console/api.js", {}), ("/v1/status", {}),
                               ("/v1/status", {"Authorization": "Bearer s3cret"})],
                token="s3cret")
    assert [s for s, _, _ in got] == [200, 200, 401, 200]


def test_page_loads_only_its_own_files_and_weighs_under_250_kb():
    assets = load_assets()
    routes = ConsoleRoutes(lambda: True, assets)
    assert routes.page_weight_bytes() <= MAX_PAGE_BYTES, routes.page_weight_bytes()
    wanted = set()
    for name, asset in assets.items():
        text = asset.body.decode()
        assert not re.search(r"(https?:)?//[a-z0-9.-]+\.[a-z]{2,}", text, re.I), name
        wanted |= set(re.findall(r'(?:src|href)="/console/([\w.-]+)"', text))
        wanted |= set(re.findall(r'from "\./([\w.-]+)"', text))
        wanted |= set(re.findall(r'addModule\("/console/([\w.-]+)"\)', text))  # worklets
    assert wanted and wanted <= set(assets), wanted - set(assets)
    assert set(assets) - wanted == {"index.html"}  # nothing shipped that nothing loads
