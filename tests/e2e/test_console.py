"""The web console in headless Chromium (Debian's, driven by Playwright) on a real daemon
with a token: the login, speech heard as it streams with its words lit in order, the voice
from the daemon's list, bad input answered in the page, the microphone (a prompt as
Chromium's fake capture) and an uploaded file transcribed, a live call listed, spoken
into, barged in on and hung up, a daemon restart told and recovered from without a
reload, and not one request anywhere but the daemon."""

from __future__ import annotations

import asyncio
import base64
import json
import re
import signal
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from urllib.parse import urlsplit

import numpy as np
import pytest
import soundfile
from playwright.sync_api import Browser, Page, sync_playwright
from tools.wer import edit_distance, scoring_text

from cosyvoiced.testing.audiosocket_peer import Peer
from cosyvoiced.testing.prompts import SOUNDS, prompt_samples, prompts
from cosyvoiced.tts.request import WordTime
from cosyvoiced.tts.streaming.subtitles import subtitles
from tests.fixtures.daemon import DaemonProcess, ready_daemon

TOKEN = "console-e2e-token"
CHROMIUM = "/usr/bin/chromium"
TEXT = ("Hello. Thank you for calling. Your order will arrive on Tuesday afternoon, "
        "between two and four.")
RATE_HZ = 24000
WAIT_MS = 30_000
MIC_PROMPT = "conf-getconfno"
"""What Chromium's fake microphone says (one sentence, no pause inside it)."""
UPLOAD_PROMPT = "auth-incorrect"


def wer(ref: str, hyp: str) -> float:
    return edit_distance(words := scoring_text(ref).split(), scoring_text(hyp).split()) / len(words)


def text_of(name: str) -> str:
    return next(p.text for p in prompts() if p.name == name)


@pytest.fixture(scope="module")
def daemon(tmp_path_factory: pytest.TempPathFactory) -> Iterator[DaemonProcess]:
    yield from ready_daemon(tmp_path_factory, "console-daemon", (f'api.token="{TOKEN}"',))


@pytest.fixture(scope="module")
def origin(daemon: DaemonProcess) -> str:
    return next(x for x in daemon.listeners() if x.startswith("tcp://")).replace("tcp:", "http:")


REQUESTS: list[str] = []
"""Every URL any page of the module asked for (the offline test reads it last)."""


@pytest.fixture(scope="module")
def mic_wav(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The microphone prompt as a WAV Chromium's fake capture reads (16-bit, 48 kHz), with
    1 s of silence before and 2.5 s after (it loops the file)."""
    rate = 48000
    speech = prompt_samples(MIC_PROMPT, rate)
    audio = np.concatenate([np.zeros(rate), speech, np.zeros(rate * 5 // 2)])
    path = tmp_path_factory.mktemp("mic") / "mic.wav"
    soundfile.write(path, np.clip(audio, -1, 1), rate, subtype="PCM_16")
    return path


@pytest.fixture(scope="module")
def browser(mic_wav: Path) -> Iterator[Browser]:
    with sync_playwright() as p:
        b = p.chromium.launch(executable_path=CHROMIUM,
                              args=["--autoplay-policy=no-user-gesture-required",
                                    "--use-fake-device-for-media-stream",
                                    "--use-fake-ui-for-media-stream",
                                    f"--use-file-for-fake-audio-capture={mic_wav}"])
        yield b
        b.close()


def open_page(browser: Browser, origin: str) -> Page:
    page = browser.new_context(permissions=["microphone"]).new_page()
    page.on("request", lambda r: REQUESTS.append(r.url))
    page.goto(origin + "/")
    return page


@pytest.fixture(scope="module")
def page(browser: Browser, origin: str) -> Page:
    """Signed in, its panels shown."""
    page = open_page(browser, origin)
    page.fill("#token", TOKEN)
    page.press("#token", "Enter")
    page.wait_for_selector("body[data-ready='1']", timeout=WAIT_MS)
    return page


def speak(page: Page, text: str, voice: str = "") -> dict[str, str]:
    """Type, pick the voice, press Speak, wait for it to end; the panel's figures. A
    voice not in the list is added (one the daemon no longer has since the list came)."""
    page.fill("#text", text)
    page.evaluate("""(name) => { const pick = document.getElementById("voice");
      if (![...pick.options].some((o) => o.value === name)) pick.add(new Option(name, name)); }""",
                  voice)
    page.select_option("#voice", voice)
    page.click("#speak-go")
    page.wait_for_selector("#speak[data-state='done'], #speak[data-state='error']",
                           timeout=WAIT_MS)
    return page.evaluate("({...document.getElementById('speak').dataset})")


SOCKET = """(path) => new Promise((done) => {
  const ws = new WebSocket(location.origin.replace("http", "ws") + path);
  ws.onopen = () => { done("open"); ws.close(); };
  ws.onclose = () => done("closed");
})"""
"""Open a WebSocket from the page: "open" or "closed"."""


def sse_events(body: bytes) -> list[dict]:
    return [json.loads(x[5:]) for x in body.decode().split("\n") if x.startswith("data:")]


def logged_engine(daemon: DaemonProcess) -> str:
    """The variant the workers' `voice_loaded` lines say the default voice runs as."""
    loaded = [e for e in daemon.log_events() if e.get("event") == "voice_loaded"]
    assert loaded, "no voice_loaded in the log"
    variants = {"int8" if e["precision"] == "int8" else
                "bf16" if e.get("vocoder") == "bf16" else "fp32" for e in loaded}
    return ", ".join(sorted(variants))


def test_without_the_token_the_page_shows_the_login_and_every_call_is_401(browser, origin,
                                                                          daemon):
    page = open_page(browser, origin)
    answers: list[tuple[str, int]] = []
    page.on("response", lambda r: answers.append((urlsplit(r.url).path, r.status)))
    page.wait_for_selector("#login:not([hidden])", timeout=WAIT_MS)
    page.wait_for_timeout(500)  # whatever else it would ask
    assert page.is_hidden("#panels")
    api = [(path, status) for path, status in answers if path.startswith("/v1/")]
    assert api and all(status == 401 for _, status in api), answers
    for query in ("", f"?token={TOKEN}"):  # a WebSocket without the token (URLs never carry it)
        assert page.evaluate(SOCKET, f"/v1/calls/events{query}") == "closed"
    page.fill("#token", "wrong")
    page.press("#token", "Enter")
    page.wait_for_selector("#notice:has-text('refused')", timeout=WAIT_MS)
    assert page.is_hidden("#panels")
    page.fill("#token", TOKEN)
    page.press("#token", "Enter")
    page.wait_for_selector("#status[data-polls]", timeout=WAIT_MS)
    assert page.inner_text("#st-state") == "ready"
    assert re.fullmatch(r"1/1 up, restarts 0", page.inner_text("#st-workers"))
    assert re.fullmatch(r"\d+% spare, \d+ calls max", page.inner_text("#st-capacity"))
    assert page.inner_text("#st-engine") == logged_engine(daemon)
    assert page.evaluate("sessionStorage.getItem('cosyvoiced.token')") == TOKEN
    page.context.close()


def test_speech_is_heard_as_it_streams_with_its_words_lit_in_order(page):
    with page.expect_response(lambda r: r.url.endswith("/v1/audio/speech")) as sent:
        got = speak(page, TEXT)
    assert got["state"] == "done", (got, page.inner_text("#speak-msg"))
    events = sse_events(sent.value.body())
    pcm_bytes = sum(len(base64.b64decode(e["audio"])) for e in events
                    if e["type"] == "speech.audio.delta")
    sent_s = pcm_bytes / 2 / RATE_HZ
    words = [e["text"] for e in events if e["type"] == "speech.word"]
    assert sent_s > 3.0 and " ".join(words) == TEXT
    # first sound before the last byte: streamed, not downloaded then played
    assert float(got["audioStartedMs"]) < float(got["responseEndedMs"]), got
    assert abs(float(got["synthS"]) - sent_s) < 1e-3
    assert abs(float(got["playedS"]) - sent_s) <= 0.05 * sent_s, (got, sent_s)
    assert got["heard"] == ",".join(str(i) for i in range(len(words)))
    assert page.inner_text("#words").split() == words
    assert re.fullmatch(r"\d+ ms", page.inner_text("#fig-first"))
    assert 0 < float(page.inner_text("#fig-rtf")) < 1.0
    with page.expect_download() as dl:
        page.click("#subtitles")
    vtt = Path(dl.value.path()).read_text(encoding="utf-8")
    assert vtt == subtitles([WordTime(e["text"], e["char_start"], e["char_end"], e["start"],
                                      e["end"]) for e in events if e["type"] == "speech.word"],
                            vtt=True)  # the cues `cosyvoiced say --subtitles` makes
    assert "\nThank you for calling.\n" in vtt
    with page.expect_download() as dl:
        page.click("#download")  # WAV: what was played
    wav = Path(dl.value.path()).read_bytes()
    assert wav[:4] == b"RIFF" and len(wav) - 44 == pcm_bytes
    page.select_option("#format", "mp3")  # the same request again, as mp3
    with page.expect_download() as dl:
        page.click("#download")
    mp3 = Path(dl.value.path()).read_bytes()
    assert dl.value.suggested_filename == "speech.mp3"
    assert mp3[:3] == b"ID3" or (mp3[0] == 0xFF and mp3[1] & 0xE0 == 0xE0), mp3[:8]
    page.select_option("#format", "wav")
    # the status panel's first-audio p95 comes from /metrics' histogram between two polls
    page.wait_for_selector("#plot-first-now:not(:empty)", timeout=WAIT_MS)
    assert re.fullmatch(r"\(≤ \d+\)", page.inner_text("#plot-first-now"))
    assert re.fullmatch(r"\d+ / \d+", page.inner_text("#st-xruns"))


def test_the_voice_is_picked_from_the_daemons_list(page, origin):
    listed = page.eval_on_selector_all("#voice option", "os => os.map((o) => o.value)")
    answer = page.request.get(origin + "/v1/audio/voices",
                              headers={"Authorization": f"Bearer {TOKEN}"})
    voices = [v["id"] for v in answer.json()["voices"]]
    assert listed == ["", *voices] and "alloy" in voices, listed
    installed = voices[0]  # the daemon's own voices come before OpenAI's names
    with page.expect_request(lambda r: r.url.endswith("/v1/audio/speech")) as sent:
        got = speak(page, "Picked from the list.", installed)
    assert got["state"] == "done", got
    assert json.loads(sent.value.post_data or "{}")["voice"] == installed


@pytest.mark.parametrize(("text", "voice", "code"), [
    ("", "", "missing_field|empty_text"),
    ("All work and no play. " * 4700, "", "audio_too_long|text_too_long|request_entity"),
    ("Hello there.", "no-such-voice", "unknown_voice"),
])
def test_bad_input_is_a_clear_message_and_the_page_keeps_working(page, text, voice, code):
    got = speak(page, text, voice)
    assert got["state"] == "error" and re.fullmatch(code, got["error"]), got
    message = page.inner_text("#speak-msg")
    assert message.startswith("Could not speak:") and got["error"] in message
    assert speak(page, "Still here.")["state"] == "done"
    assert page.inner_text("#speak-msg").startswith("Done:")


def test_every_control_is_labelled_and_the_page_fits_a_phone(page):
    unlabelled = page.evaluate("""[...document.querySelectorAll(
        'input, select, textarea, button, canvas')].filter((el) => {
          const named = el.labels?.length || el.getAttribute('aria-label')
            || (el.tagName === 'BUTTON' && el.textContent.trim());
          return !named;
        }).map((el) => el.outerHTML.slice(0, 80))""")
    assert unlabelled == []
    page.set_viewport_size({"width": 360, "height": 740})
    try:
        assert page.evaluate("document.documentElement.scrollWidth") <= 360
        page.select_option("#voice", "")
        page.fill("#text", "By keyboard.")  # the keyboard alone: Ctrl+Enter in the text speaks
        assert page.evaluate("document.activeElement.id") == "text"
        page.keyboard.press("Control+Enter")
        page.wait_for_selector("#speak[data-state='done']", timeout=WAIT_MS)
        page.keyboard.press("Tab")
        assert page.evaluate("document.activeElement.id") == "voice"
    finally:
        page.set_viewport_size({"width": 1280, "height": 720})


def test_the_microphone_is_transcribed_live_and_a_file_on_upload(page):
    page.click("#listen-go")  # Chromium's fake microphone says MIC_PROMPT, then silence
    page.wait_for_selector("#listen[data-state='live']", timeout=WAIT_MS)
    page.wait_for_selector("#listen[data-sound='1']", timeout=WAIT_MS)  # the meter moved
    page.wait_for_selector("#vad.on", timeout=WAIT_MS)  # the daemon's VAD heard speech
    page.wait_for_selector("#transcript li", timeout=WAIT_MS)
    page.click("#listen-stop")
    page.wait_for_selector("#listen[data-state='stopped']", timeout=WAIT_MS)
    heard = page.inner_text("#transcript li:first-child")
    assert wer(text_of(MIC_PROMPT), heard) <= 0.10, heard
    times = page.eval_on_selector_all("#transcript li:first-child span", "s => s.map(x => x.title)")
    starts = [float(t.split("–")[0]) for t in times]  # word times on hover, in stream time
    assert len(times) == len(heard.split()) and starts == sorted(starts) and starts[0] > 0.5
    with page.expect_response(lambda r: r.url.endswith("/v1/audio/transcriptions")) as sent:
        page.set_input_files("#upload", str(SOUNDS / f"{UPLOAD_PROMPT}.wav"))
        page.click("#upload-go")
    assert sent.value.status == 200
    page.wait_for_selector("#listen[data-upload='done']", timeout=WAIT_MS)
    assert wer(text_of(UPLOAD_PROMPT), page.inner_text("#upload-text")) <= 0.10
    assert page.get_attribute("#upload-text span", "title")


@pytest.fixture
def peer_loop() -> Iterator[asyncio.AbstractEventLoop]:
    """An event loop on its own thread for AudioSocket peers (the page's calls are sync)."""
    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()
    yield loop
    loop.call_soon_threadsafe(loop.stop)
    thread.join(5)
    loop.close()


def call_peer(daemon: DaemonProcess, loop: asyncio.AbstractEventLoop) -> tuple[Peer, Callable]:
    """An AudioSocket peer for the daemon, and `run(coro)` on the peers' loop."""
    host, port = next(x for x in daemon.listeners() if x.startswith("audiosocket://")
                      ).removeprefix("audiosocket://").rsplit(":", 1)
    return Peer(host, int(port)), lambda coro, timeout_s=20.0: asyncio.run_coroutine_threadsafe(
        coro, loop).result(timeout_s)


def test_a_call_is_listed_and_hung_up_from_the_page(page, daemon, peer_loop):
    peer, run = call_peer(daemon, peer_loop)
    run(peer.connect())
    talking = asyncio.run_coroutine_threadsafe(  # keeps the call alive until hung up
        peer.play(np.zeros(8000 * 20, dtype=np.int16)), peer_loop)
    try:
        row = f"#calls-rows tr[data-call='{peer.call.call_id}']"
        page.wait_for_selector(row, timeout=WAIT_MS)
        # the calls' events came over a WebSocket that carried the token as a subprotocol
        assert page.get_attribute("#calls", "data-live") == "1"
        assert page.inner_text(f"{row} td:nth-child(2)").startswith("slin")
        page.click(f"{row} button:has-text('Hang up')")
        assert run(peer.wait_closed(10.0)), "the call was not ended"
        page.wait_for_selector(row, state="detached", timeout=WAIT_MS)
        assert page.inner_text("#calls-msg") == "No call right now."
    finally:
        talking.cancel()
        run(peer.close())


def test_a_say_is_barged_in_on_and_call_text_shows_only_when_asked(page, daemon, peer_loop):
    peer, run = call_peer(daemon, peer_loop)
    prompt = next(p for p in prompts() if p.name == "agent-user")
    speech = np.concatenate([(prompt.samples() * 32767).astype(np.int16),
                             np.zeros(8000, dtype=np.int16)])

    run(peer.connect())
    quiet = asyncio.run_coroutine_threadsafe(peer.play(np.zeros(8000 * 30, dtype=np.int16)),
                                             peer_loop)
    try:
        assert not page.is_checked("#call-text")
        page.wait_for_selector("#say-form:not([hidden])", timeout=WAIT_MS)
        page.fill("#say-text", "Your order ships today, and it should arrive on Tuesday "
                  "afternoon, between two and four, at the front desk.")
        page.click("#say-go")
        page.wait_for_selector("#calls-rows td:has-text('speaking')", timeout=WAIT_MS)
        quiet.cancel()
        run(peer.play(speech))  # the caller talks over it
        page.wait_for_selector("#call-notes li[data-kind='barge']", timeout=WAIT_MS)
        heard = page.inner_text("#call-notes li[data-kind='heard']")
        assert re.search(r"\(barge_in\): the caller heard \d+\.\d s, \d+ words?$", heard), heard
        page.wait_for_selector("#calls[data-transcripts]", timeout=WAIT_MS)
        assert page.query_selector("#call-notes li[data-kind='transcript']") is None
        page.check("#call-text")  # the operator asks (the page holds the token)
        run(peer.play(speech))
        page.wait_for_selector("#call-notes li[data-kind='transcript']", timeout=WAIT_MS)
        said = page.inner_text("#call-notes li[data-kind='transcript']")
        assert wer(prompt.text, said.split("“", 1)[1].rstrip("”")) <= 0.25, said
        page.fill("#say-text", "Please hold while I look that up for you, it may take a while.")
        page.click("#say-go")
        page.wait_for_selector("#calls-rows td:has-text('speaking')", timeout=WAIT_MS)
        page.wait_for_timeout(1500)  # its first words go out
        page.click("#say-stop")
        page.wait_for_selector("#call-notes li[data-kind='heard']:has-text('(stopped)')",
                               timeout=WAIT_MS)
        assert "“Please" in page.inner_text("#call-notes li[data-kind='heard']")
    finally:
        quiet.cancel()
        run(peer.close())


def test_a_daemon_restart_is_told_and_the_page_recovers_without_reload(
        page, daemon, origin, tmp_path_factory):
    """The last test on the module's daemon: it stops it (SIGTERM, as systemd does) and
    starts another on the same port with the same token, which it stops after."""
    page.wait_for_selector("#calls[data-socket='open']", timeout=WAIT_MS)
    page.evaluate("window.notReloaded = true")  # a reload would lose it
    daemon.signal(signal.SIGTERM)
    assert daemon.wait(30) == 0
    assert base64.urlsafe_b64encode(TOKEN.encode()).decode().rstrip("=") not in \
        daemon.log_path.read_text(), "the token offered on a WebSocket was logged"
    page.wait_for_selector("body[data-daemon='lost']", timeout=WAIT_MS)
    assert "not answering" in page.inner_text("#notice") and page.is_visible("#notice")
    page.wait_for_selector("#calls[data-socket='closed'] ~ #status #status-msg.error",
                           timeout=WAIT_MS)
    assert speak(page, "Is anyone there?")["error"] == "unreachable"
    assert "did not answer" in page.inner_text("#speak-msg")
    polls = int(page.get_attribute("#status", "data-polls") or 0)
    again = DaemonProcess(tmp_path_factory.mktemp("console-restarted"), overrides=(
        f'api.token="{TOKEN}"', f'api.listen=["tcp://127.0.0.1:{urlsplit(origin).port}"]'))
    try:
        again.start().wait_ready()
        page.wait_for_selector("body[data-daemon='up'] #calls[data-socket='open']",
                               timeout=WAIT_MS)
        assert page.inner_text("#notice") == "The daemon is back."
        page.wait_for_function("(n) => Number(document.getElementById('status').dataset.polls) > n",
                               arg=polls, timeout=WAIT_MS)
        assert page.inner_text("#st-state") == "ready" and page.inner_text("#status-msg") == ""
        assert speak(page, "Back again.")["state"] == "done"
        assert page.evaluate("window.notReloaded") is True
        page.wait_for_selector("#notice", state="hidden", timeout=WAIT_MS)
    finally:
        again.stop()


def test_every_request_goes_to_the_daemon(origin):
    assert REQUESTS, "no page was opened"
    assert {f"{urlsplit(u).scheme}://{urlsplit(u).netloc}" for u in REQUESTS
            if not u.startswith(("data:", "blob:"))} == {origin}
