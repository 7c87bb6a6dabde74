"""Property-based fuzzing of every parser that reads a peer's bytes: only its typed error,
never anything else. Examples are derandomized (the same on every run and in CI)."""

from __future__ import annotations

import asyncio
import json
import struct

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from cosyvoiced.serve.audiosocket.frames import HEADER, FrameError, FrameParser, Kind
from cosyvoiced.serve.errors import ApiError
from cosyvoiced.serve.http.transcribe import decode_upload
from cosyvoiced.serve.wyoming.wire import WyomingProtocolError, read_event

FUZZ = settings(derandomize=True, database=None, deadline=None, max_examples=150,
                suppress_health_check=[HealthCheck.too_slow])


# -- AudioSocket frames ------------------------------------------------------------------

_frame = st.builds(
    lambda kind, payload, lie: HEADER.pack(kind, len(payload) if lie is None else lie) + payload,
    st.sampled_from([int(k) for k in Kind] + [0x00, 0x02, 0x11, 0xFE]),
    st.binary(max_size=64), st.none() | st.integers(0, 0xFFFF))


@FUZZ
@given(st.lists(_frame | st.binary(max_size=40), max_size=12), st.integers(1, 50))
def test_audiosocket_frames_only_frame_errors(parts, chunk):
    parser = FrameParser(max_payload_bytes=64)
    data = b"".join(parts)
    for i in range(0, len(data), chunk):
        try:
            parser.feed(data[i:i + chunk])
        except FrameError:
            assert parser.error is not None  # raised only once an error was set
            return
        assert parser.pending_bytes <= HEADER.size + 64  # bounded by the payload cap


# -- Wyoming events ----------------------------------------------------------------------

_json_value = st.recursive(st.none() | st.booleans() | st.integers() | st.floats() | st.text(),
                           lambda c: st.lists(c, max_size=3)
                           | st.dictionaries(st.text(max_size=8), c, max_size=3), max_leaves=6)
_header = st.fixed_dictionaries(
    {"type": st.text(max_size=12) | _json_value},
    optional={"data": _json_value | st.dictionaries(st.text(max_size=8), _json_value),
              "data_length": st.integers(-5, 3_000_000) | _json_value,
              "payload_length": st.integers(-5, 3_000_000) | _json_value})
_event = st.builds(lambda h, rest: json.dumps(h).encode() + b"\n" + rest, _header,
                   st.binary(max_size=80))
_nested = st.integers(1, 70_000).map(lambda n: b'{"type": "x", "data": ' + b"[" * n + b"\n")


async def _read_all(data: bytes) -> None:
    reader = asyncio.StreamReader(limit=64 * 1024)
    reader.feed_data(data)
    reader.feed_eof()
    for _ in range(50):
        if await read_event(reader) is None:
            return


@FUZZ
@given(st.lists(_event | st.binary(max_size=100), min_size=1, max_size=4))
def test_wyoming_events_only_protocol_errors(parts):
    try:
        asyncio.run(_read_all(b"".join(parts)))
    except WyomingProtocolError:
        pass


def test_wyoming_deeply_nested_header_is_a_protocol_error():
    """Found by the fuzzer: json.loads' RecursionError came through untyped."""
    with pytest.raises(WyomingProtocolError):
        asyncio.run(_read_all(b'{"type": "x", "data": ' + b"[" * 60_000 + b"\n"))


# -- decode_upload -----------------------------------------------------------------------

def _wav(fmt_tag: int, channels: int, rate: int, bits: int, fmt_len: int, riff_size: int | None,
         data_size: int | None, data: bytes, extra: bytes) -> bytes:
    block = max(channels, 0) * bits // 8
    fmt = struct.pack("<HHIIHH", fmt_tag, channels, rate, rate * block, block, bits) + extra
    fmt = fmt[:fmt_len] if fmt_len < len(fmt) else fmt
    chunks = (b"fmt " + struct.pack("<I", len(fmt)) + fmt + b"data"
              + struct.pack("<I", len(data) if data_size is None else data_size) + data)
    size = 4 + len(chunks) if riff_size is None else riff_size
    return b"RIFF" + struct.pack("<I", size) + b"WAVE" + chunks


_wav_bytes = st.builds(
    _wav, st.sampled_from([1, 3, 0xFFFE, 0, 2]), st.integers(0, 3),
    st.sampled_from([8000, 16000, 44100, 0]), st.sampled_from([8, 16, 24, 0]),
    st.integers(0, 40), st.none() | st.integers(0, 2**32 - 1),
    st.none() | st.integers(0, 2**32 - 1), st.binary(max_size=200), st.binary(max_size=26))


@FUZZ
@given(_wav_bytes | st.binary(max_size=300),
       st.sampled_from(["audio/wav", "application/octet-stream", "audio/l16", "text/plain"]),
       st.none() | st.text(max_size=8))
def test_decode_upload_only_api_errors(body, ctype, rate):
    try:
        samples, rate_hz = decode_upload(body, ctype, rate)
    except ApiError as exc:
        assert 400 <= exc.status < 500
        return
    assert samples.dtype.name == "float32" and rate_hz > 0


def test_decode_upload_a_fmt_chunk_running_past_the_end_is_bad_wav():
    """Found by the fuzzer: the wave module raises a bare RuntimeError when a chunk's size
    points past the file's end (was a 500)."""
    body = _wav(1, 1, 8000, 8, 17, None, None, b"\x01", b"\x00")
    with pytest.raises(ApiError) as exc:
        decode_upload(body, "audio/wav", None)
    assert exc.value.code == "bad_wav"


# -- JSON bodies through the real aiohttp app --------------------------------------------

JSON_ROUTES = ["/v1/tts", "/v1/audio/speech", "/v1/calls/c1/say", "/v1/calls/c1/stop",
               "/v1/play", "/v1/play/stop"]
_raw_json = (_json_value.map(lambda v: json.dumps(v).encode())
             | st.integers(1, 100_000).map(lambda n: b"[" * n + b"]" * n)
             | st.integers(1, 100_000).map(lambda n: b'{"text": ' + b"[" * n)
             | st.binary(max_size=200))


@settings(derandomize=True, database=None, deadline=None, max_examples=60,
          suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.tuples(st.sampled_from(JSON_ROUTES), _raw_json), min_size=1, max_size=5))
def test_json_bodies_through_the_app_only_typed_errors(requests):
    from aiohttp import ClientSession
    from aiohttp.test_utils import TestServer

    from cosyvoiced.serve.http.app import make_app
    from tests.fakes.daemon import FakeDaemon

    async def main() -> None:
        daemon = FakeDaemon()
        server = TestServer(make_app(daemon))
        await server.start_server()
        try:
            async with ClientSession(base_url=str(server.make_url(""))) as http:
                for path, body in requests:
                    async with http.post(path, data=body,
                                         headers={"Content-Type": "application/json"}) as r:
                        text = await r.text()
                        assert r.status < 500 or r.status == 503, (path, r.status, text)
                        if r.status >= 400:
                            assert json.loads(text)["error"]["code"], text
            await asyncio.sleep(0.05)
            assert len(daemon.streams) == 0  # nothing left open by a refused request
        finally:
            await server.close()

    asyncio.run(main())


def test_a_deeply_nested_json_body_is_400_not_500():
    """Regression: 256 KiB of "[" made json.loads raise RecursionError: a 500."""
    from aiohttp import ClientSession
    from aiohttp.test_utils import TestServer

    from cosyvoiced.serve.http.app import make_app
    from tests.fakes.daemon import FakeDaemon

    async def main() -> tuple[int, dict]:
        server = TestServer(make_app(FakeDaemon()))
        await server.start_server()
        try:
            async with ClientSession(base_url=str(server.make_url(""))) as http, \
                    http.post("/v1/tts", data=b"[" * 100_000,
                              headers={"Content-Type": "application/json"}) as r:
                return r.status, await r.json()
        finally:
            await server.close()

    status, body = asyncio.run(main())
    assert status == 400 and body["error"]["code"] == "bad_json"
