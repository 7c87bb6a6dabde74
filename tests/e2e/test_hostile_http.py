"""Hostile HTTP clients against the real daemon: nothing they send leaks a slot, blows up
a worker or turns into a 500; the next honest request is served."""

from __future__ import annotations

import json
import signal
import urllib.error
import urllib.request
import wave
from io import BytesIO

import pytest

PLAIN_GETS = 70
"""More than the dev config's workers.max_streams (64): a leak of one slot per request
would refuse everything after."""


def _base(d) -> str:
    for x in json.loads(d.ctl("--json", "status").stdout)["listeners"]:
        if x.startswith("tcp://"):
            return x.replace("tcp://", "http://")
    raise AssertionError("no tcp listener")


def _post(base: str, path: str, body: dict) -> tuple[int, bytes]:
    req = urllib.request.Request(f"{base}{path}", data=json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=120) as r:
            return r.status, r.read()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read()


def _code(body: bytes) -> str:
    return json.loads(body)["error"]["code"]


def _wav_seconds(body: bytes) -> float:
    with wave.open(BytesIO(body)) as w:  # streamed: the header's length is unknown
        rate, width = w.getframerate(), w.getsampwidth()
    return (len(body) - 44) / width / rate


@pytest.fixture
def daemon(daemon_factory):
    d = daemon_factory().start()
    d.wait_ready()
    yield d
    d.signal(signal.SIGTERM)
    assert d.wait() == 0


def test_plain_gets_on_the_websocket_route_leak_nothing(daemon):
    base = _base(daemon)
    for _ in range(PLAIN_GETS):
        try:
            urllib.request.urlopen(f"{base}/v1/stream?rate_hz=16000", timeout=10)
            raise AssertionError("a plain GET was answered 2xx")
        except urllib.error.HTTPError as exc:
            assert exc.code == 426 and _code(exc.read()) == "websocket_required"
    with urllib.request.urlopen(f"{base}/v1/streams", timeout=10) as r:
        assert json.loads(r.read())["streams"] == []
    status, body = _post(base, "/v1/tts", {"text": "Still here and talking."})
    assert status == 200 and body[:4] == b"RIFF" and _wav_seconds(body) > 0.5


def test_hostile_ssml_is_bounded_or_refused(daemon):
    base = _base(daemon)
    nested = "<speak>" + '<prosody rate="25%">' * 8 + "hello" + "</prosody>" * 8 + "</speak>"
    status, body = _post(base, "/v1/tts", {"text": nested, "ssml": True})
    assert status == 200, body[:200]
    assert _wav_seconds(body) < 10  # clamped to 0.25x: "hello" at quarter speed, not 65536x
    breaks = "<speak>a" + '<break time="10s"/>' * 260 + "b</speak>"  # under max_chars
    status, body = _post(base, "/v1/tts", {"text": breaks, "ssml": True})
    assert status == 400 and _code(body) == "pauses_too_long", body[:200]
    for kind in ("cardinal", "ordinal"):
        doc = f'<speak>x <say-as interpret-as="{kind}">{"9" * 4900}</say-as></speak>'
        status, body = _post(base, "/v1/tts", {"text": doc, "ssml": True})
        assert status == 400 and _code(body) == "bad_ssml", (kind, body[:200])
    for inner in ("²", "4²", "³⁴"):
        doc = f'<speak>x <say-as interpret-as="digits">{inner}</say-as></speak>'
        status, body = _post(base, "/v1/tts", {"text": doc, "ssml": True})
        assert status == 200, (inner, body[:200])
    status, body = _post(base, "/v1/tts", {"text": "Still here and talking."})
    assert status == 200 and _wav_seconds(body) > 0.5


def test_audio_cap_cuts_a_long_request_and_refuses_a_hopeless_one(daemon_factory):
    d = daemon_factory(overrides=("tts.max_audio_s=2.0",)).start()
    d.wait_ready()
    base = _base(d)
    # ~49 chars: at least 1.6 s at the fastest reading (under the cap), ~3 s when spoken
    status, body = _post(base, "/v1/tts", {"text": "Thank you for calling, how can I help "
                                                   "you today?"})
    assert status == 200 and _wav_seconds(body) == pytest.approx(2.0, abs=0.01)
    status, body = _post(base, "/v1/tts", {"text": "Thank you for calling. " * 20})
    assert status == 503 and _code(body) == "audio_too_long"  # the worker's refusal
    status, body = _post(base, "/v1/tts", {"text": "Still fine."})
    assert status == 200 and 0.3 < _wav_seconds(body) <= 2.0
    assert any(e.get("event") == "tts_audio_capped" for e in d.log_events())
    d.signal(signal.SIGTERM)
    assert d.wait() == 0
