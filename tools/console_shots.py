"""Screenshots of the web console's panels for the docs: `python -m tools.console_shots`.

Starts the daemon (with an API token, so the Calls panel may show call text), opens the
console in headless Chromium (Debian's; a prompt recording as its microphone), uses each
panel once — speaks, listens, places an AudioSocket call that is spoken into and talked
over, lets Status poll — and saves one PNG per panel, 1000 px wide, reduced to a 64-colour
palette, in docs/console/.
"""

from __future__ import annotations

import asyncio
import tempfile
import threading
import wave
from pathlib import Path

import numpy as np
from PIL import Image

from cosyvoiced.testing.audiosocket_peer import Peer
from cosyvoiced.testing.prompts import SOUNDS, prompt_samples
from tools.bench.calls import REPO, Daemon

OUT = REPO / "docs" / "console"
TOKEN = "console-screenshots"
CHROMIUM = "/usr/bin/chromium"
WIDTH = 1000
WAIT_MS = 60_000
MAX_BYTES = 80_000


def write_mic(path: Path, prompt: str = "conf-getconfno", rate_hz: int = 48000) -> None:
    audio = np.concatenate([np.zeros(rate_hz), prompt_samples(prompt, rate_hz),
                            np.zeros(rate_hz * 3)])
    with wave.open(str(path), "wb") as w:
        w.setnchannels(1)
        w.setsampwidth(2)
        w.setframerate(rate_hz)
        w.writeframes((np.clip(audio, -1, 1) * 32767).astype("<i2").tobytes())


def save(page, selector: str, name: str) -> Path:  # noqa: ANN001 - a Playwright Page
    path = OUT / f"{name}.png"
    page.locator(selector).screenshot(path=str(path))
    Image.open(path).convert("RGB").quantize(64).save(path, optimize=True)
    size = path.stat().st_size
    print(f"{path.relative_to(REPO)}: {size} bytes")
    if size > MAX_BYTES:
        raise SystemExit(f"{path} is over {MAX_BYTES} bytes")
    return path


def call_peer(host: str, port: int) -> tuple[Peer, asyncio.AbstractEventLoop]:
    loop = asyncio.new_event_loop()
    threading.Thread(target=loop.run_forever, daemon=True).start()
    peer = Peer(host, port)
    asyncio.run_coroutine_threadsafe(peer.connect(), loop).result(10)
    return peer, loop


def main() -> None:
    from playwright.sync_api import sync_playwright

    OUT.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        mic = Path(tmp) / "mic.wav"
        write_mic(mic)
        d = Daemon(Path(tmp), (f'api.token="{TOKEN}"',))
        try:
            with sync_playwright() as p:
                browser = p.chromium.launch(executable_path=CHROMIUM, args=[
                    "--autoplay-policy=no-user-gesture-required",
                    "--use-fake-device-for-media-stream", "--use-fake-ui-for-media-stream",
                    f"--use-file-for-fake-audio-capture={mic}"])
                page = browser.new_context(viewport={"width": WIDTH, "height": 900},
                                           permissions=["microphone"]).new_page()
                page.goto(d.http + "/")
                page.fill("#token", TOKEN)
                page.press("#token", "Enter")
                page.wait_for_selector("body[data-ready='1']", timeout=WAIT_MS)
                page.click("#speak-go")
                page.wait_for_selector("#speak[data-state='done']", timeout=WAIT_MS)
                save(page, "#speak", "speak")
                page.click("#listen-go")
                page.wait_for_selector("#transcript li", timeout=WAIT_MS)
                page.click("#listen-stop")
                page.set_input_files("#upload", str(SOUNDS / "auth-incorrect.wav"))
                page.click("#upload-go")
                page.wait_for_selector("#listen[data-upload='done']", timeout=WAIT_MS)
                save(page, "#listen", "listen")
                shoot_calls(page, d)
                page.wait_for_timeout(3500)  # one more poll, with the call's stream in it
                save(page, "#status", "status")
                browser.close()
        finally:
            d.stop()


def shoot_calls(page, d: Daemon) -> None:  # noqa: ANN001 - a Playwright Page
    peer, loop = call_peer(d.host, d.port)
    speech = (prompt_samples("agent-user") * 32767).astype(np.int16)
    quiet = asyncio.run_coroutine_threadsafe(peer.play(np.zeros(8000 * 60, dtype=np.int16)),
                                             loop)  # a caller on the line, silent
    try:
        page.check("#call-text")
        page.wait_for_selector("#say-form:not([hidden])", timeout=WAIT_MS)
        page.fill("#say-text", "Your order ships today, and it should arrive on Tuesday "
                  "afternoon, between two and four.")
        page.click("#say-go")
        page.wait_for_timeout(1500)
        quiet.cancel()
        asyncio.run_coroutine_threadsafe(peer.play(np.concatenate(
            [speech, np.zeros(8000, dtype=np.int16)])), loop).result(30)
        page.wait_for_selector("#call-notes li[data-kind='transcript']", timeout=WAIT_MS)
        page.fill("#say-text", "One moment, please.")
        page.wait_for_timeout(1000)
        save(page, "#calls", "calls")
    finally:
        quiet.cancel()
        asyncio.run_coroutine_threadsafe(peer.close(), loop).result(10)
        loop.call_soon_threadsafe(loop.stop)


if __name__ == "__main__":
    main()
