"""HTTP API routes over a real aiohttp server, with the Speech interface faked."""

from __future__ import annotations

import asyncio
import contextlib
import io
import json
import struct
import time

import numpy as np
import pytest
from aiohttp import ClientSession, WSMsgType
from aiohttp.test_utils import TestServer
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from cosyvoiced.listen.events import Transcript
from cosyvoiced.serve.http.app import make_app
from cosyvoiced.serve.streams import Streams
from tests.fakes.daemon import FakeDaemon, wav_bytes
from tests.fakes.speech import FakeListening, FakeSpeech


def run(coro_fn, daemon: FakeDaemon | None = None):
    daemon = daemon or FakeDaemon()

    async def main():
        server = TestServer(make_app(daemon))
        await server.start_server()
        try:
            async with ClientSession(base_url=str(server.make_url(""))) as http:
                return await coro_fn(http, daemon)
        finally:
            await server.close()
    return asyncio.run(main())


def test_tts_streams_wav_with_timing_header():
    async def go(http, daemon):
        async with http.post("/v1/tts", json={"text": "one two three"}) as r:
            assert r.status == 200
            assert r.headers["Content-Type"] == "audio/wav"
            assert float(r.headers["X-Time-To-First-Audio-Ms"]) >= 0
            body = await r.read()
        assert body[:4] == b"RIFF" and body[8:12] == b"WAVE"
        rate = struct.unpack("<I", body[24:28])[0]
        assert rate == 22050 and len(body) - 44 == 3 * 2205 * 2
        assert len(daemon.streams) == 0  # the stream closed
    run(go)


def test_tts_sends_rtf_and_audio_length_as_trailers():
    """A client that reads trailers (h11) gets the RTF once the audio is out; the
    connection stays usable for a second request (the chunked framing is intact)."""
    import h11

    async def main():
        server = TestServer(make_app(FakeDaemon()))
        await server.start_server()
        try:
            reader, writer = await asyncio.open_connection(server.host, server.port)
            conn = h11.Connection(h11.CLIENT)
            results = []
            for _ in range(2):
                body = json.dumps({"text": "one two three"}).encode()
                writer.write(conn.send(h11.Request(
                    method="POST", target="/v1/tts",
                    headers=[("Host", "x"), ("Content-Type", "application/json"),
                             ("Content-Length", str(len(body)))])))
                writer.write(conn.send(h11.Data(data=body)) + conn.send(h11.EndOfMessage()))
                audio, head, trailers = b"", None, None
                while trailers is None:
                    ev = conn.next_event()
                    if ev is h11.NEED_DATA:
                        conn.receive_data(await reader.read(65536))
                    elif isinstance(ev, h11.Response):
                        head = dict(ev.headers)
                    elif isinstance(ev, h11.Data):
                        audio += ev.data
                    elif isinstance(ev, h11.EndOfMessage):
                        trailers = dict(ev.headers)
                results.append((head, audio, trailers))
                conn.start_next_cycle()
            writer.close()
            return results
        finally:
            await server.close()

    for head, audio, trailers in asyncio.run(main()):
        assert head[b"trailer"] == b"X-Audio-Seconds, X-Real-Time-Factor"
        assert len(audio) == 44 + 3 * 2205 * 2
        assert float(trailers[b"x-audio-seconds"]) == pytest.approx(3 * 2205 / 22050, abs=1e-3)
        assert float(trailers[b"x-real-time-factor"]) > 0


def test_tts_options_reach_the_engine():
    async def go(http, daemon):
        body = {"text": "hi there", "voice": "en_US-joe-medium", "speed": 2.0, "rate_hz": 8000,
                "format": "mulaw", "volume": 0.5, "ssml": False}
        async with http.post("/v1/tts", json=body) as r:
            assert r.status == 200 and r.headers["Content-Type"] == "audio/basic"
        _, opts = daemon.speech.requests[-1]
        assert (opts.length_scale, opts.rate_hz, opts.format, opts.volume) == (0.5, 8000,
                                                                               "mulaw", 0.5)
    run(go)


@pytest.mark.parametrize("kwargs,status,code", [
    ({"json": {"text": "  "}}, 400, "empty_text"),
    ({"json": {"text": "x" * 6000}}, 413, "text_too_long"),
    ({"json": {"text": "hi", "voice": "../etc"}}, 400, "unknown_voice"),
    ({"json": {"text": "hi", "rate_hz": 11025}}, 400, "unsupported_rate"),
    ({"json": {"text": "hi", "format": "ogg"}}, 400, "unsupported_format"),
    ({"json": {"text": "hi", "format": "opus", "rate_hz": 22050}}, 400, "unsupported_rate"),
    ({"json": {"text": "hi", "speed": 9}}, 400, "bad_parameter"),
    ({"json": {"text": 5}}, 400, "bad_field"),
    ({"json": {}}, 400, "missing_field"),
    ({"json": [1]}, 400, "bad_json"),
    ({"data": b"{nope", "headers": {"Content-Type": "application/json"}}, 400, "bad_json"),
    ({"data": b'{"text": "\xff"}', "headers": {"Content-Type": "application/json"}}, 400,
     "invalid_utf8"),
    ({"data": b"text", "headers": {"Content-Type": "text/plain"}}, 415,
     "unsupported_media_type"),
    ({"json": {"text": "hi\x07"}}, 400, "control_characters"),
])
def test_tts_error_paths(kwargs, status, code):
    async def go(http, daemon):
        async with http.post("/v1/tts", **kwargs) as r:
            assert r.status == status, await r.text()
            assert (await r.json())["error"]["code"] == code
    run(go)


def test_overloaded_and_cap_are_503():
    async def go(http, daemon):
        async with http.post("/v1/tts", json={"text": "hi"}) as r:
            assert r.status == 503 and (await r.json())["error"]["code"] == "overloaded"
        daemon.speech.capacity = 100
        daemon.streams.max_streams = 0
        async with http.post("/v1/tts", json={"text": "hi"}) as r:
            assert r.status == 503 and (await r.json())["error"]["code"] == "overloaded"
    run(go, FakeDaemon(speech=FakeSpeech(capacity=0)))


def test_body_too_large_is_413():
    from cosyvoiced.serve.http.errors import MAX_JSON_BYTES

    async def chunked(n: int):  # no Content-Length: the limit holds while reading
        for _ in range(n):
            yield b" " * 65536

    async def go(http, daemon):
        async with http.post("/v1/transcribe", data=io.BytesIO(b"x" * (65 * 1024 * 1024)),
                             headers={"Content-Type": "audio/wav"}) as r:
            assert r.status == 413
            assert (await r.json())["error"]["code"] == "request_entity_too_large"
        # JSON routes take far less than an upload: text of max_chars fits many times over
        body = json.dumps({"text": "x" * 5000, "pad": " " * MAX_JSON_BYTES}).encode()
        for data in (body, chunked(MAX_JSON_BYTES // 65536 + 2)):
            async with http.post("/v1/tts", data=data,
                                 headers={"Content-Type": "application/json"}) as r:
                assert r.status == 413
                assert (await r.json())["error"]["code"] == "request_entity_too_large"
        async with http.post("/v1/tts", json={"text": "\u00e9" * 5000}) as r:
            assert r.status == 200  # the longest text, escaped, is well within the limit
        assert daemon.speech.active == 0
    run(go)


def test_unknown_route_is_json_404():
    async def go(http, daemon):
        async with http.get("/v1/nothing") as r:
            assert r.status == 404 and (await r.json())["error"]["code"] == "not_found"
        async with http.get("/v1/tts") as r:
            assert r.status == 405
            assert (await r.json())["error"]["code"] == "method_not_allowed"
    run(go)


def test_openai_speech_wav_and_pcm():
    async def go(http, daemon):
        body = {"model": "tts-1", "input": "a b", "voice": "alloy", "response_format": "pcm",
                "speed": 1.0}
        async with http.post("/v1/audio/speech", json=body) as r:
            assert r.status == 200 and r.headers["X-Sample-Rate"] == "22050"
            assert r.headers["Content-Type"] == "audio/L16"
            assert len(await r.read()) == 2 * 2205 * 2
        _, opts = daemon.speech.requests[-1]
        assert opts.voice is None and opts.rate_hz == 24000 and opts.format == "s16le"
        body["response_format"] = "wav"
        async with http.post("/v1/audio/speech", json=body) as r:
            assert r.status == 200 and r.headers["Content-Type"] == "audio/wav"
            assert len(await r.read()) == 44 + 2 * 2205 * 2
        body["response_format"] = "ogg"
        async with http.post("/v1/audio/speech", json=body) as r:
            assert r.status == 400
            assert (await r.json())["error"]["code"] == "unsupported_format"
    run(go)


def test_voices_and_streams():
    async def go(http, daemon):
        async with http.get("/v1/voices") as r:
            assert (await r.json())["voices"][0]["name"] == "en_US-joe-medium"
        daemon.streams.open("call", "abc")
        async with http.get("/v1/streams") as r:
            assert [s["id"] for s in (await r.json())["streams"]] == ["abc"]
    run(go)


def test_transcribe_wav_and_raw_pcm():
    audio = np.zeros(8000, dtype=np.int16)
    audio[2000:4000] = 12000

    async def go(http, daemon):
        async with http.post("/v1/transcribe", data=wav_bytes(audio, 8000),
                             headers={"Content-Type": "audio/wav"}) as r:
            out = await r.json()
            assert r.status == 200, out
        assert out["text"] == "2000 samples" and out["segments"][0]["start_ms"] == 250
        assert out["duration_s"] == 1.0
        async with http.post("/v1/transcribe?rate_hz=8000", data=audio.tobytes(),
                             headers={"Content-Type": "application/octet-stream"}) as r:
            assert (await r.json())["text"] == "2000 samples"
        for data, ctype, code in [(b"", "audio/wav", "empty_audio"),
                                  (b"RIFFjunk", "audio/wav", "bad_wav"),
                                  (b"\x00\x00\x00", "application/octet-stream", "bad_audio"),
                                  (b"\x00\x00", "text/plain", "unsupported_media_type"),
                                  (wav_bytes(audio, 11025), "audio/wav", "unsupported_rate")]:
            async with http.post("/v1/transcribe", data=data,
                                 headers={"Content-Type": ctype}) as r:
                assert r.status in (400, 415)
                assert (await r.json())["error"]["code"] == code
        assert len(daemon.streams) == 0
    run(go)


def test_transcribe_and_stream_carry_word_times_when_asked():
    audio = np.zeros(16000, dtype=np.int16)
    audio[4000:8000] = 12000

    async def go(http, daemon):
        async with http.post("/v1/transcribe?words=true", data=wav_bytes(audio, 16000),
                             headers={"Content-Type": "audio/wav"}) as r:
            out = await r.json()
            assert r.status == 200, out
        words = out["segments"][0]["words"]
        assert [w["start"] for w in words] == sorted(w["start"] for w in words)
        assert words[0]["start"] == 0.25 and words[-1]["end"] == 0.5  # stream-relative, s
        assert set(words[0]) == {"word", "start", "end", "probability"}
        async with http.post("/v1/transcribe", data=wav_bytes(audio, 16000),
                             headers={"Content-Type": "audio/wav"}) as r:
            assert "words" not in (await r.json())["segments"][0]  # the shape as it was
        async with http.post("/v1/transcribe?words=maybe", data=wav_bytes(audio, 16000),
                             headers={"Content-Type": "audio/wav"}) as r:
            assert r.status == 400 and (await r.json())["error"]["code"] == "bad_parameter"
        events = []
        for query in ("&words=true", ""):
            async with http.ws_connect(f"/v1/stream?rate_hz=16000{query}") as ws:
                assert (await ws.receive_json())["type"] == "ready"
                await ws.send_bytes(audio.tobytes())
                await ws.send_str(json.dumps({"type": "end"}))
                events.append([json.loads(m.data) async for m in ws
                               if m.type == WSMsgType.TEXT])
        timed, plain = ([e for e in got if e["type"] == "transcript"] for got in events)
        assert timed[0]["words"][0]["start"] == 0.25 and "words" not in plain[0]
        assert [lis.words for lis in daemon.speech.listens] == [True, False, True, False]
    run(go)


def test_sse_events_filtered_by_stream():
    async def go(http, daemon):
        async with http.get("/v1/events?stream=call-1") as r:
            assert r.headers["Content-Type"] == "text/event-stream"
            assert await r.content.readuntil(b"\n\n") == b": connected\n\n"
            daemon.bus.publish(Transcript("other", 0, 10, 1.0, 0.1, stream="call-2"))
            daemon.bus.publish(Transcript("mine", 0, 10, 1.0, 0.1, stream="call-1"))
            block = (await asyncio.wait_for(r.content.readuntil(b"\n\n"), 5)).decode()
        lines = block.strip().splitlines()
        assert lines[0] == "event: transcript"
        assert json.loads(lines[1].removeprefix("data: "))["text"] == "mine"
    run(go)


def test_a_subscriber_that_fell_behind_is_told_how_many_events_it_lost():
    async def go(http, daemon):
        async with http.get("/v1/events") as r:
            assert await r.content.readuntil(b"\n\n") == b": connected\n\n"
            for i in range(1100):  # in one go: the route's queue holds 1024
                daemon.bus.publish(Transcript(f"t{i}", 0, 10, 1.0, 0.1, stream="call-1"))
            blocks = [(await asyncio.wait_for(r.content.readuntil(b"\n\n"), 5)).decode()
                      for _ in range(2)]
        (kind, data), (_, first) = (b.strip().splitlines() for b in blocks)
        assert kind == "event: events_dropped"
        assert json.loads(data.removeprefix("data: "))["count"] == 76
        assert json.loads(first.removeprefix("data: "))["text"] == "t76"
    run(go)


def test_websocket_duplex_say_stop_and_events():
    audio = np.zeros(16000, dtype=np.int16)
    audio[4000:8000] = 10000

    async def go(http, daemon):
        async with http.ws_connect("/v1/stream?rate_hz=16000&out_rate_hz=22050") as ws:
            assert (await ws.receive_json())["type"] == "ready"
            await ws.send_bytes(audio.tobytes())
            got = [await ws.receive_json(), await ws.receive_json()]
            assert [g["type"] for g in got] == ["voice_started", "voice_stopped"]
            await ws.send_str(json.dumps({"type": "say", "text": "a b c"}))
            audio_bytes = 0
            while True:
                msg = await asyncio.wait_for(ws.receive(), 5)
                if msg.type == WSMsgType.BINARY:
                    audio_bytes += len(msg.data)
                elif json.loads(msg.data)["type"] == "spoken":
                    break
            assert audio_bytes == 3 * 2205 * 2
            await ws.send_str(json.dumps({"type": "stop"}))
            assert (await ws.receive_json())["type"] == "stopped"
            await ws.send_str("garbage")
            assert (await ws.receive_json())["error"]["code"] == "bad_json"
            await ws.send_bytes(b"\x01")
            assert (await ws.receive_json())["error"]["code"] == "bad_audio"
            await ws.close()
        await asyncio.sleep(0.1)
        assert len(daemon.streams) == 0
    run(go)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.recursive(st.none() | st.booleans() | st.integers() | st.floats() | st.text(),
                    lambda c: st.lists(c, max_size=3) | st.dictionaries(st.text(), c,
                                                                        max_size=4),
                    max_leaves=8),
       st.sampled_from(["/v1/tts", "/v1/audio/speech"]))
def test_fuzz_json_bodies_never_500(body, path):
    async def go(http, daemon):
        payload = body if not isinstance(body, dict) else {**body}
        async with http.post(path, data=json.dumps(payload),
                             headers={"Content-Type": "application/json"}) as r:
            assert r.status in (200, 400, 413, 503), await r.text()
            if r.status != 200:
                assert "code" in (await r.json())["error"]
    run(go)


def test_bearer_token_over_tcp():
    async def main():
        server = TestServer(make_app(FakeDaemon(), token="s3cret"))
        await server.start_server()
        try:
            async with ClientSession(base_url=str(server.make_url(""))) as http:
                async with http.get("/v1/voices") as r:
                    assert r.status == 401
                    assert (await r.json())["error"]["code"] == "unauthorized"
                async with http.get("/v1/voices",
                                    headers={"Authorization": "Bearer wrong"}) as r:
                    assert r.status == 401
                async with http.get("/v1/voices",
                                    headers={"Authorization": "Bearer s3cret"}) as r:
                    assert r.status == 200
                async with http.get("/healthz") as r:  # probes stay open
                    assert r.status == 200
        finally:
            await server.close()
    asyncio.run(main())


def test_websocket_end_sends_each_transcript_once():
    # regression: transcripts already forwarded as events were sent again at close
    audio = np.zeros(16000, dtype=np.int16)
    audio[4000:8000] = 10000
    tail = (np.ones(800, dtype=np.int16) * 9000)  # speech still open at "end"

    async def go(http, daemon):
        async with http.ws_connect("/v1/stream?rate_hz=16000") as ws:
            assert (await ws.receive_json())["type"] == "ready"
            await ws.send_bytes(audio.tobytes())
            await ws.send_bytes(tail.tobytes())
            await ws.send_str(json.dumps({"type": "end"}))
            types = []
            async for msg in ws:
                if msg.type == WSMsgType.TEXT:
                    types.append(json.loads(msg.data)["type"])
        return types
    types = run(go)
    assert types[-1] == "ended"
    assert types.count("transcript") == 2, types  # the first utterance and the open one


class _CountingSpeech(FakeSpeech):
    """Counts listening streams opened and closed (a worker listen stream and its ring)."""

    def __init__(self) -> None:
        super().__init__()
        self.closed = 0

    async def listen(self, rate_hz: int, stream_id: str, backlog_s: float | None = 30.0,
                     language: str = "", words: bool = False) -> FakeListening:
        lis = await super().listen(rate_hz, stream_id, backlog_s, language, words)
        close = lis.close

        async def counted_close() -> list[Transcript]:
            self.closed += 1
            return await close()
        lis.close = counted_close  # type: ignore[method-assign]
        return lis


def test_plain_get_on_the_websocket_route_opens_nothing():
    # regression: each GET without an upgrade leaked a stream slot, a listen stream and
    # its ring; max_streams of them refused every new request until restart
    speech = _CountingSpeech()

    async def go(http, daemon):
        for _ in range(12):
            async with http.get("/v1/stream?rate_hz=16000") as r:
                assert r.status == 426, await r.text()
                assert r.headers["Upgrade"] == "websocket"
                assert (await r.json())["error"]["code"] == "websocket_required"
        assert len(daemon.streams) == 0 and speech.listens == []
        async with http.post("/v1/tts", json={"text": "still served"}) as r:
            assert r.status == 200
            await r.read()
        async with http.ws_connect("/v1/stream?rate_hz=16000") as ws:
            assert (await ws.receive_json())["type"] == "ready"
            await ws.send_str(json.dumps({"type": "end"}))
            async for _msg in ws:
                pass
        for _ in range(50):  # the server's side finishes just after the client's
            if len(daemon.streams) == 0:
                break
            await asyncio.sleep(0.02)
        assert len(daemon.streams) == 0 and speech.closed == len(speech.listens) == 1
    run(go, FakeDaemon(speech=speech, streams=Streams(8)))


def test_websocket_prepare_failure_releases_the_stream(monkeypatch):
    # the handshake can still fail after the upgrade check (client gone mid-handshake):
    # what was opened for it is closed again
    from aiohttp import web

    speech = _CountingSpeech()

    async def failing_prepare(self, request):
        raise ConnectionResetError("client went away during the handshake")
    monkeypatch.setattr(web.WebSocketResponse, "prepare", failing_prepare)

    async def go(http, daemon):
        for _ in range(3):
            with contextlib.suppress(Exception):
                async with http.ws_connect("/v1/stream?rate_hz=16000"):
                    pass
        assert len(daemon.streams) == 0
        assert speech.closed == len(speech.listens) == 3
    run(go, FakeDaemon(speech=speech, streams=Streams(8)))


def test_slow_clients_are_cut_off_after_the_request_timeout(tmp_path):
    """A connection that sends nothing, or trickles its head or a JSON body, is closed
    (408 for a body) after `api.request_timeout_s`; a prompt client is served meanwhile."""
    from cosyvoiced.config.listeners import ApiConfig
    from cosyvoiced.config.schema import Config, ServiceConfig
    from cosyvoiced.serve.http.server import HttpServer

    config = Config(api=ApiConfig(listen=("tcp://127.0.0.1:0",), request_timeout_s=0.5),
                    service=ServiceConfig(control_socket=str(tmp_path / "c.sock")))

    async def main():
        server = HttpServer(FakeDaemon(), config)
        await server.start()
        host, port = server.bound[-1].removeprefix("tcp://").rsplit(":", 1)
        try:
            async def closed_after(send: list[bytes]) -> tuple[float, bytes]:
                r, w = await asyncio.open_connection(host, int(port))
                t0 = time.monotonic()
                answer = asyncio.create_task(r.read(65536))  # a response, or EOF
                with contextlib.suppress(ConnectionError):
                    for piece in send:
                        if answer.done():
                            break
                        w.write(piece)
                        await w.drain()
                        await asyncio.sleep(0.2)
                try:
                    got = await asyncio.wait_for(answer, 5)
                except ConnectionError:
                    got = b""
                took = time.monotonic() - t0
                w.close()
                with contextlib.suppress(ConnectionError):
                    await w.wait_closed()
                return took, got

            idle = closed_after([])
            head = closed_after([b"POST /v1/tts HTTP/1.1\r\n"] + [b"X-a: b\r\n"] * 20)
            body = closed_after([b"POST /v1/tts HTTP/1.1\r\nHost: x\r\nContent-Type: "
                                 b"application/json\r\nContent-Length: 100\r\n\r\n{"]
                                + [b" "] * 20)
            async with ClientSession() as http:
                async with http.get(f"http://{host}:{port}/healthz") as r:
                    prompt = r.status
            return await asyncio.gather(idle, head, body), prompt
        finally:
            await server.stop()

    (idle, head, body), prompt = asyncio.run(main())
    assert prompt == 200
    assert idle[0] < 2.0 and idle[1] == b""
    assert head[0] < 2.0 and head[1] == b""  # 20 header lines over 4 s: cut off
    assert body[0] < 2.0 and b" 408 " in body[1].split(b"\r\n", 1)[0]


def test_event_subscribers_are_capped_and_their_slots_come_back():
    from cosyvoiced.serve.http.transcribe import MAX_SSE_SUBSCRIBERS

    async def go(http, daemon):
        held = []
        for _ in range(MAX_SSE_SUBSCRIBERS):
            r = await http.get("/v1/events")
            assert r.status == 200
            held.append(r)
        async with http.get("/v1/events") as r:
            assert r.status == 503 and (await r.json())["error"]["code"] == "overloaded"
        async with http.post("/v1/tts", json={"text": "still served"}) as r:
            assert r.status == 200
        for r in held:
            r.close()
        for _ in range(100):  # the server sees the subscribers go
            await asyncio.sleep(0.05)
            async with http.get("/v1/events") as r:
                if r.status == 200:
                    return True
        return False

    assert run(go)



class _GoneWriter:
    """aiohttp's payload writer once the client has closed: headers go, data does not."""

    buffer_size = output_size = 0
    length = None

    async def write_headers(self, *_args, **_kw) -> None:
        pass

    def send_headers(self, *_args, **_kw) -> None:
        pass

    async def write(self, *_args, **_kw) -> None:
        raise ConnectionResetError("Cannot write to closing transport")

    write_eof = write

    async def drain(self) -> None:
        pass

    def enable_chunking(self) -> None:
        pass

    def enable_compression(self, *_args, **_kw) -> None:
        pass


def test_a_tts_client_vanishing_mid_stream_is_logged_as_gone_not_as_a_failure():
    """Found by the soak: the client-gone path re-raised its ConnectionError, which the
    error middleware logged as http_handler_failed (error, with a traceback) and turned
    into a 500 for the dead connection."""
    from aiohttp.test_utils import make_mocked_request
    from structlog.testing import capture_logs

    from cosyvoiced.serve.http.app import json_errors
    from cosyvoiced.serve.http.body import AudioBody
    from cosyvoiced.serve.http.tts import TtsRoutes
    from cosyvoiced.tts.request import SynthesisOptions

    async def main():
        d = FakeDaemon()
        routes = TtsRoutes(d.speech, d.streams, d.metrics)

        async def handler(request):
            return await routes.stream(request, "word " * 50, SynthesisOptions(format="s16le"),
                                       AudioBody("s16le"), kind="tts")

        with capture_logs() as logs:
            resp = await json_errors(make_mocked_request("POST", "/v1/tts",
                                                         writer=_GoneWriter()), handler)
        return resp, logs, len(d.streams)

    resp, logs, open_streams = asyncio.run(main())
    assert [e["event"] for e in logs if e["log_level"] != "debug"] == ["tts_client_gone"]
    assert resp.status != 500 and open_streams == 0
