"""No personal data in the log above debug: transcripts, DTMF digits, spoken text, SSML.

Callers read card numbers and PINs into calls and press them as DTMF; what the daemon
hears and says goes to journald, kept long and read widely. At info and above the log
carries ids, lengths and counts; the content itself only at debug. Checked twice: the
real code paths (with fakes for the models) log nothing secret at info, and no log call
at info or above passes a field named like content.
"""

from __future__ import annotations

import ast
import asyncio
import json
import re
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import numpy as np
import pytest
from aiohttp import ClientSession
from aiohttp.test_utils import TestServer
from structlog.testing import capture_logs

import cosyvoiced
from cosyvoiced.config.listeners import AudioSocketConfig
from cosyvoiced.config.schema import VadConfig
from cosyvoiced.listen.events import EventBus, Transcript
from cosyvoiced.runtime.metrics import Metrics
from cosyvoiced.serve.audiosocket.server import AudioSocketServer
from cosyvoiced.serve.http.app import make_app
from cosyvoiced.serve.streams import Streams
from cosyvoiced.testing.audiosocket_peer import Peer
from cosyvoiced.workers.worker.asr_sched import AsrQueue
from cosyvoiced.workers.worker.listeners import WorkerListening
from cosyvoiced.workers.worker.utterances import MelPool
from cosyvoiced.workers.worker.vad_tick import VadTicker
from tests.fakes.asr import FakeDecoder
from tests.fakes.daemon import FakeDaemon, wav_bytes
from tests.fakes.ring import ListRing
from tests.fakes.speech import FakeListening, FakeSpeech
from tests.fakes.vad import FakeBatch

PACKAGE = Path(cosyvoiced.__file__).parent
SECRET = "4111-1111-1111-1111"
"""Stands for what a caller says or is told: a card number."""
DIGITS = ("#", "*")
"""DTMF keys that cannot turn up by chance in ids, numbers or event names at info."""
QUIET = ("debug",)


def _loud(entries: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [e for e in entries if e.get("log_level") not in QUIET]


def _rendered(entries: list[dict[str, Any]]) -> str:
    return "\n".join(json.dumps(e, default=str) for e in entries)


def _assert_no_secret(entries: list[dict[str, Any]], *secrets: str) -> None:
    loud = _rendered(_loud(entries))
    for secret in secrets:
        assert secret not in loud, f"{secret!r} logged above debug:\n{loud}"


# --- the real paths, with fakes for the models ----------------------------------------


def test_a_transcript_is_logged_by_length_at_info_and_in_full_only_at_debug():
    """The worker's transcript log (what /v1/transcribe, calls and devices all go through)."""
    sent: list = []
    cfg = VadConfig(start_ms=64, stop_ms=320, preroll_ms=256, max_utterance_s=5.0)
    ticker = VadTicker(lambda rate: FakeBatch(0.9), 0.0)
    wl = WorkerListening(SimpleNamespace(vad=cfg, asr=None, cache_dir=None), ticker,
                         sent.append)
    decoder = FakeDecoder(text=f"my card is {SECRET}")
    wl.decoder, wl.pool = decoder, MelPool(cfg)
    wl.asr = AsrQueue(decoder, wl._transcribed, on_idle=wl._ack)
    with capture_logs() as logs:
        wl.open("c1", 8000, ListRing(np.full(20 * 256, 0.05)))
        ticker.tick(0.0)
        wl.close("c1")
        wl.run_batch()
    assert any(getattr(x, "event", None) is not None and getattr(x.event, "text", "")
               .endswith(SECRET) for x in sent)  # the client still gets the text
    _assert_no_secret(logs, SECRET)
    info = [e for e in logs if e["event"] == "transcript"]
    assert info and info[0]["log_level"] == "info" and info[0]["chars"] == len(
        f"my card is {SECRET}")
    assert SECRET in _rendered([e for e in logs if e["log_level"] == "debug"])


class _SecretListening(FakeListening):
    """The fake listener, its transcripts saying the secret."""

    def _end(self) -> None:
        super()._end()
        last = self.transcripts[-1]
        secret = Transcript(f"my card is {SECRET}", last.start_ms, last.end_ms,
                            last.latency_ms, last.rtf)
        self.transcripts[-1] = secret
        self.queue.put_nowait(secret)


class _SecretSpeech(FakeSpeech):
    async def listen(self, rate_hz: int, stream_id: str, backlog_s: float | None = 30.0,
                     language: str = "", words: bool = False) -> FakeListening:
        lis = _SecretListening(rate_hz)
        self.listens.append(lis)
        return lis


def test_http_speech_and_transcripts_stay_out_of_the_info_log():
    audio = np.zeros(8000, dtype=np.int16)
    audio[2000:4000] = 12000

    async def main() -> dict[str, Any]:
        server = TestServer(make_app(FakeDaemon(speech=_SecretSpeech())))
        await server.start_server()
        try:
            async with ClientSession(base_url=str(server.make_url(""))) as http:
                async with http.post("/v1/tts", json={"text": f"your card {SECRET}"}) as r:
                    assert r.status == 200
                    await r.read()
                ssml = f"<speak>your PIN <say-as interpret-as='digits'>{SECRET}</say-as></speak>"
                async with http.post("/v1/tts", json={"text": ssml, "ssml": True}) as r:
                    await r.read()
                async with http.post("/v1/tts", json={"text": SECRET * 400}) as r:
                    assert r.status == 413  # an error names the length, not the text
                async with http.post("/v1/transcribe", data=wav_bytes(audio, 8000),
                                     headers={"Content-Type": "audio/wav"}) as r:
                    assert r.status == 200
                    return await r.json()
        finally:
            await server.close()

    with capture_logs() as logs:
        out = asyncio.run(main())
    assert SECRET in out["text"]
    _assert_no_secret(logs, SECRET)


def test_dtmf_digits_and_text_spoken_into_a_call_stay_out_of_the_info_log():
    async def main() -> list[str]:
        config = AudioSocketConfig(enabled=True, listen="127.0.0.1:0",
                                   greeting=f"hello {SECRET}")
        server = AudioSocketServer(FakeSpeech(), Streams(100), EventBus(), Metrics(), config)
        await server.start()
        sub = server.bus.subscribe(types=["dtmf"])  # not the call lifecycle events
        peer = Peer("127.0.0.1", int(server.bound.rsplit(":", 1)[1]))
        await peer.connect()
        pressed = []
        for digit in DIGITS:
            await peer.dtmf(digit)
            pressed.append((await asyncio.wait_for(sub.get(), 5)).digit)
        server_app = TestServer(make_app(FakeDaemon(speech=FakeSpeech(), audiosocket=server)))
        await server_app.start_server()
        try:
            async with ClientSession(base_url=str(server_app.make_url(""))) as http:
                url = f"/v1/calls/{peer.call.call_id}/say"
                async with http.post(url, json={"text": f"your PIN is {SECRET}"}) as r:
                    assert r.status == 202
        finally:
            await server_app.close()
        await asyncio.sleep(0.2)
        await peer.hangup()
        await server.stop()
        return pressed

    with capture_logs() as logs:
        pressed = asyncio.run(main())
    assert pressed == list(DIGITS)  # the events still carry the digits
    _assert_no_secret(logs, SECRET, *DIGITS)
    loud = _loud(logs)
    assert not [e for e in loud if {"digit", "digits"} & e.keys()]
    assert [e for e in loud if e["event"] == "dtmf"]  # the press itself is still logged
    assert {e.get("digit") for e in logs if e["log_level"] == "debug"} >= set(DIGITS)


# --- every log call in the package ------------------------------------------------------

LEVELS_ABOVE_DEBUG = frozenset({"info", "warning", "warn", "error", "exception", "critical",
                                "fatal", "msg"})
CONTENT_FIELD = re.compile(r"(^|_)(text|texts|transcript|transcripts|digit|digits|ssml|"
                           r"greeting|words?|phonemes?)($|_)")
"""A field named like the content itself (`text`, `transcript_text`, `digits`, ...)."""
LENGTH_FIELD = re.compile(r"_(chars|len|length|count|bytes|size)$")
"""... unless it names the content's length (`text_chars`): that is fine at info."""
ALLOWED: dict[tuple[str, str], str] = {
    ("workers/worker/listeners.py", "**"):
        "VoiceStarted/VoiceStopped fields, filtered to *_ms and reason",
    ("runtime/log.py", "**"): "the stdlib bridge: the library logger's name and exc_info",
    ("workers/pool/pool.py", "**"): "cpu_plan: CpuPlan.fields(), CPU lists and topology counts",
    ("workers/pool/placement.py", "**"): "a NUMA refusal's node, pid and note",
}
"""(file, field) pairs that look like content or cannot be read, and why they are fine.
"**" stands for a `**mapping` whose keys the check cannot see."""


def _log_calls() -> list[tuple[str, int, str, list[str]]]:
    out = []
    for path in sorted(PACKAGE.rglob("*.py")):
        rel = path.relative_to(PACKAGE).as_posix()
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if not isinstance(node, ast.Call):
                continue
            func = node.func
            if isinstance(func, ast.Attribute) and func.attr in LEVELS_ABOVE_DEBUG:
                receiver, level = ast.unparse(func.value), func.attr
            elif (isinstance(func, ast.Call) and isinstance(func.func, ast.Name)
                  and func.func.id == "getattr" and func.args):  # getattr(log, level)(...)
                receiver, level = ast.unparse(func.args[0]), "getattr"
            else:
                continue
            if "log" not in receiver.lower():
                continue
            names = [k.arg if k.arg is not None else "**" for k in node.keywords]
            out.append((rel, node.lineno, level, names))
    return out


def test_the_check_sees_the_package_log_calls():
    calls = _log_calls()
    assert len(calls) > 50
    assert any(rel == "service.py" and "exit_status" in names for rel, _, _, names in calls)
    assert any(rel == "serve/audiosocket/call.py" and level == "getattr"
               for rel, _, level, _ in calls)  # getattr(log, level)("call_ended", ...)


def test_no_log_call_above_debug_passes_content():
    bad = [f"{rel}:{line}: log.{level}(..., {name}=...)"
           for rel, line, level, names in _log_calls() for name in names
           if (name == "**" or (CONTENT_FIELD.search(name) and not LENGTH_FIELD.search(name)))
           and (rel, name) not in ALLOWED]
    assert bad == [], "content goes to log.debug only; at info log its length:\n" + \
        "\n".join(bad)


@pytest.mark.parametrize("name", ["text", "transcript", "digit", "digits", "ssml",
                                  "greeting", "transcript_text", "text_preview",
                                  "phonemes"])
def test_content_names_are_caught(name):
    assert CONTENT_FIELD.search(name) and not LENGTH_FIELD.search(name)


@pytest.mark.parametrize("name", ["chars", "call_id", "stream", "latency_ms", "context",
                                  "textures", "error", "text_chars", "ssml_len"])
def test_other_names_pass(name):
    assert not CONTENT_FIELD.search(name) or LENGTH_FIELD.search(name)
