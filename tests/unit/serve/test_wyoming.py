"""Wyoming server, driven by the `wyoming` package's own client classes."""

from __future__ import annotations

import asyncio
import contextlib
import json
import re

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from wyoming.asr import Transcribe, Transcript
from wyoming.audio import AudioChunk, AudioStart, AudioStop
from wyoming.client import AsyncTcpClient
from wyoming.error import Error
from wyoming.event import async_read_event, async_write_event
from wyoming.info import Describe, Info
from wyoming.ping import Ping
from wyoming.tts import (
    Synthesize,
    SynthesizeChunk,
    SynthesizeStart,
    SynthesizeStop,
    SynthesizeStopped,
    SynthesizeVoice,
)
from wyoming.vad import VoiceStarted, VoiceStopped

from cosyvoiced.config.listeners import WyomingConfig
from cosyvoiced.config.schema import TtsConfig
from cosyvoiced.serve.streams import Streams
from cosyvoiced.serve.wyoming.server import WyomingServer
from cosyvoiced.serve.wyoming.wire import WyomingProtocolError, parse_header
from tests.fakes.speech import FakeSpeech


async def _server(speech: FakeSpeech | None = None) -> tuple[WyomingServer, int]:
    server = WyomingServer(speech or FakeSpeech(), Streams(100),
                           WyomingConfig(listen="tcp://127.0.0.1:0"))
    await server.start()
    return server, int(server.bound.rsplit(":", 1)[1])


async def _collect(client: AsyncTcpClient, until: str, limit: int = 500) -> list:
    events = []
    for _ in range(limit):
        ev = await asyncio.wait_for(client.read_event(), 10)
        assert ev is not None, f"connection closed; got {[e.type for e in events]}"
        events.append(ev)
        if ev.type == until or ev.type == "error":
            return events
    raise AssertionError("too many events")


def test_describe_lists_voices_and_asr():
    async def main():
        server, port = await _server()
        async with AsyncTcpClient("127.0.0.1", port) as client:
            await client.write_event(Describe().event())
            info = Info.from_event((await _collect(client, "info"))[-1])
        await server.stop()
        assert info.tts[0].voices[0].name == "en_US-joe-medium"
        assert info.tts[0].supports_synthesize_streaming
        assert info.asr[0].models[0].name == "whisper-tiny.en"
    asyncio.run(main())


def test_synthesize_plain_and_streaming():
    async def main():
        speech = FakeSpeech()
        server, port = await _server(speech)
        async with AsyncTcpClient("127.0.0.1", port) as client:
            await client.write_event(Synthesize(text="one two three").event())
            events = await _collect(client, "audio-stop")
            types = [e.type for e in events]
            assert types[0] == "audio-start" and types[-1] == "audio-stop"
            assert set(types[1:-1]) == {"audio-chunk"}
            start = AudioStart.from_event(events[0])
            assert (start.rate, start.width, start.channels) == (22050, 2, 1)
            assert sum(len(AudioChunk.from_event(e).audio) for e in events[1:-1]) == 3 * 4410

            voice = SynthesizeVoice(name="en_US-joe-medium")
            await client.write_event(SynthesizeStart(voice=voice).event())
            for part in ["Hello the", "re. How are", " you? Fine"]:
                await client.write_event(SynthesizeChunk(text=part).event())
            # the compatibility `synthesize` a streaming client also sends is ignored
            await client.write_event(Synthesize(text="Hello there. How are you? Fine").event())
            await client.write_event(SynthesizeStop().event())
            events = await _collect(client, "synthesize-stopped")
            assert events[-1].type == SynthesizeStopped().event().type
            assert sum(e.type == "audio-stop" for e in events) == 3
        await server.stop()
        texts = [t for t, _ in speech.requests]
        assert texts == ["one two three", "Hello there.", "How are you?", "Fine"]
    asyncio.run(main())


def test_transcribe_round_trip_with_vad_events():
    async def main():
        speech = FakeSpeech()
        server, port = await _server(speech)
        audio = np.zeros(16000, dtype=np.int16)
        audio[4000:8000] = 10000  # 0.25 s of "speech"
        async with AsyncTcpClient("127.0.0.1", port) as client:
            await client.write_event(Transcribe(language="en").event())
            await client.write_event(AudioStart(rate=16000, width=2, channels=1).event())
            for i in range(0, 16000, 1600):
                await client.write_event(AudioChunk(rate=16000, width=2, channels=1,
                                                    audio=audio[i:i + 1600].tobytes()).event())
            await client.write_event(AudioStop().event())
            events = await _collect(client, "transcript")
        await server.stop()
        types = [e.type for e in events]
        assert types == ["voice-started", "voice-stopped", "transcript"]
        assert VoiceStarted.from_event(events[0]).timestamp == 250
        assert VoiceStopped.from_event(events[1]).timestamp == 500
        assert Transcript.from_event(events[2]).text == "4000 samples"
    asyncio.run(main())


def test_errors_are_typed_and_keep_the_connection():
    async def main():
        server, port = await _server(FakeSpeech())
        async with AsyncTcpClient("127.0.0.1", port) as client:
            await client.write_event(Synthesize(text="   ").event())
            err = Error.from_event((await _collect(client, "error"))[-1])
            assert err.code == "empty_text"
            await client.write_event(Synthesize(text="hi",
                                                voice=SynthesizeVoice(name="nope")).event())
            err = Error.from_event((await _collect(client, "error"))[-1])
            assert err.code == "unknown_voice" and "en_US-joe-medium" in err.text
            await client.write_event(AudioStart(rate=16000, width=4, channels=1).event())
            assert Error.from_event((await _collect(client, "error"))[-1]).code \
                == "bad_audio_format"
            await client.write_event(SynthesizeChunk(text="x").event())
            assert Error.from_event((await _collect(client, "error"))[-1]).code == "no_stream"
            # still served
            await client.write_event(Synthesize(text="ok").event())
            assert (await _collect(client, "audio-stop"))[-1].type == "audio-stop"
        await server.stop()
    asyncio.run(main())


def test_overloaded_is_an_error_event():
    async def main():
        server, port = await _server(FakeSpeech(capacity=0))
        async with AsyncTcpClient("127.0.0.1", port) as client:
            await client.write_event(Synthesize(text="hello").event())
            assert Error.from_event((await _collect(client, "error"))[-1]).code == "overloaded"
        await server.stop()
    asyncio.run(main())


def test_garbage_ends_only_that_connection_and_clients_run_in_parallel():
    async def main():
        server, port = await _server(FakeSpeech())
        good = AsyncTcpClient("127.0.0.1", port)
        await good.connect()
        r, w = await asyncio.open_connection("127.0.0.1", port)
        w.write(b'{"type": "synthesize", "data": {"text": "x"}, "payload_length": 99999999}\n')
        await w.drain()
        line = await asyncio.wait_for(r.readline(), 10)
        assert json.loads(line)["type"] == "error"
        rest = await asyncio.wait_for(r.read(), 10)  # read() ends only when the server hangs up
        assert b"too_large" in rest
        w.close()
        await good.write_event(Synthesize(text="still here").event())
        assert (await _collect(good, "audio-stop"))[-1].type == "audio-stop"
        await good.disconnect()
        await server.stop()
    asyncio.run(main())


@pytest.mark.parametrize("line,code", [
    (b"not json\n", "bad_json"),
    (b"[1, 2]\n", "bad_header"),
    (b'{"data": {}}\n', "bad_header"),
    (b'{"type": "x", "data": 5}\n', "bad_header"),
    (b'{"type": "x", "payload_length": -1}\n', "bad_header"),
    (b'{"type": "x", "data_length": true}\n', "bad_header"),
    (b'{"type": "x", "payload_length": 999999999}\n', "too_large"),
])
def test_header_problems(line, code):
    with pytest.raises(WyomingProtocolError) as info:
        parse_header(line)
    assert info.value.code == code


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.binary(max_size=300))
def test_fuzz_garbage_never_kills_the_server(blob):
    async def main():
        server, port = await _server(FakeSpeech())
        r, w = await asyncio.open_connection("127.0.0.1", port)
        w.write(blob)
        w.write_eof()
        await asyncio.wait_for(r.read(), 10)  # the server answers and closes, never hangs
        w.close()
        async with AsyncTcpClient("127.0.0.1", port) as client:
            await client.write_event(Describe().event())
            assert (await _collect(client, "info"))[-1].type == "info"
        await server.stop()
    asyncio.run(main())


def test_streamed_text_over_max_chars_is_a_typed_error_for_that_stream_only():
    # regression: synthesize-chunk text piled up without a cap until synthesize-stop
    async def main():
        speech = FakeSpeech()
        server, port = await _server(speech)
        async with AsyncTcpClient("127.0.0.1", port) as client, \
                AsyncTcpClient("127.0.0.1", port) as other:
            await client.write_event(SynthesizeStart().event())
            chunk = "word " * 10  # no sentence end: nothing can be spoken yet
            for _ in range(TtsConfig().max_chars // len(chunk) + 20):
                await client.write_event(SynthesizeChunk(text=chunk).event())
            await client.write_event(Ping().event())  # the error comes before the pong
            events = [await asyncio.wait_for(client.read_event(), 10) for _ in range(2)]
            assert [e.type for e in events] == ["error", "pong"]
            err = Error.from_event(events[0])
            assert err.code == "text_too_long" and str(TtsConfig().max_chars) in err.text
            await client.write_event(SynthesizeChunk(text="ignored. ").event())
            await client.write_event(SynthesizeStop().event())
            assert [e.type for e in await _collect(client, "synthesize-stopped")] == [
                "synthesize-stopped"]
            assert speech.requests == []
            await other.write_event(Synthesize(text="unaffected").event())
            assert (await _collect(other, "audio-stop"))[-1].type == "audio-stop"
            await client.write_event(Synthesize(text="still served").event())
            assert (await _collect(client, "audio-stop"))[-1].type == "audio-stop"
        await server.stop()
    asyncio.run(main())


class _CountingPattern:
    """A sentence-end pattern that counts the characters each scan looks at."""

    def __init__(self, pattern: re.Pattern[str]) -> None:
        self.pattern = pattern
        self.scanned = 0

    def _count(self, name: str):
        def scan(text: str, *args, **kwargs):
            self.scanned += len(text)
            return getattr(self.pattern, name)(text, *args, **kwargs)
        return scan

    def __getattr__(self, name: str):
        return self._count(name)


def test_streamed_text_is_scanned_once(monkeypatch):
    # regression: every chunk re-joined and re-split all the text since the last sentence
    # end: O(n^2) on the event loop
    from cosyvoiced.serve.wyoming import text as wyoming_text

    counting = _CountingPattern(wyoming_text._SENTENCE_END)
    monkeypatch.setattr(wyoming_text, "_SENTENCE_END", counting)

    async def main():
        speech = FakeSpeech()
        server, port = await _server(speech)
        parts = ["ab "] * 1500 + ["end.", " Next one", " too!", " tail"]
        async with AsyncTcpClient("127.0.0.1", port) as client:
            await client.write_event(SynthesizeStart().event())
            for part in parts:
                await client.write_event(SynthesizeChunk(text=part).event())
            await client.write_event(SynthesizeStop().event())
            await _collect(client, "synthesize-stopped", limit=5000)
        await server.stop()
        total = sum(map(len, parts))
        assert counting.scanned <= total + 2 * len(parts), (counting.scanned, total)
        texts = [t for t, _ in speech.requests]
        assert texts == [("ab " * 1500) + "end.", "Next one too!", "tail"]
    asyncio.run(main())


async def _server_with(config: WyomingConfig,
                       speech: FakeSpeech | None = None) -> tuple[WyomingServer, int]:
    server = WyomingServer(speech or FakeSpeech(), Streams(100), config)
    await server.start()
    return server, int(server.bound.rsplit(":", 1)[1])


def test_server_side_defaults_for_what_wyoming_cannot_send():
    async def main():
        speech = FakeSpeech()
        config = WyomingConfig(listen="tcp://127.0.0.1:0", voice="en_US-joe-medium",
                               speaker="3", speed=2.0)
        server, port = await _server_with(config, speech)
        async with AsyncTcpClient("127.0.0.1", port) as client:
            await client.write_event(Synthesize(text="no voice named").event())
            await _collect(client, "audio-stop")
            voice = SynthesizeVoice(name="en_US-joe-medium", speaker="b")
            await client.write_event(Synthesize(text="named", voice=voice).event())
            await _collect(client, "audio-stop")
            await client.write_event(Synthesize(text="only a voice",
                                                voice=SynthesizeVoice(name="en_US-joe-medium")).event())
            await _collect(client, "audio-stop")
        await server.stop()
        (_, default), (_, named), (_, only_voice) = speech.requests
        assert (default.voice, default.speaker, default.length_scale) == (
            "en_US-joe-medium", 3, 0.5)
        assert (named.voice, named.speaker, named.length_scale) == ("en_US-joe-medium", "b", 0.5)
        assert (only_voice.voice, only_voice.speaker) == ("en_US-joe-medium", None)  # not the default's
    asyncio.run(main())


def test_default_speed_leaves_the_voices_own_length_scale():
    async def main():
        speech = FakeSpeech()
        server, port = await _server(speech)
        async with AsyncTcpClient("127.0.0.1", port) as client:
            await client.write_event(Synthesize(text="plain").event())
            await _collect(client, "audio-stop")
        await server.stop()
        assert speech.requests[0][1].length_scale is None
        assert speech.requests[0][1].voice is None
    asyncio.run(main())


def test_info_carries_versions_and_streaming_support():
    from cosyvoiced import __version__

    async def main():
        server, port = await _server()
        async with AsyncTcpClient("127.0.0.1", port) as client:
            await client.write_event(Describe().event())
            info = Info.from_event((await _collect(client, "info"))[-1])
        await server.stop()
        assert info.tts[0].version == __version__ and info.asr[0].version == __version__
        assert info.tts[0].supports_synthesize_streaming is True
    asyncio.run(main())


@pytest.mark.parametrize("trickle", [False, True])
def test_a_silent_or_trickling_client_is_closed_after_the_idle_timeout(trickle):
    async def main():
        config = WyomingConfig(listen="tcp://127.0.0.1:0", idle_timeout_s=1.0)
        server, port = await _server_with(config)
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        t0 = asyncio.get_running_loop().time()
        if trickle:  # one byte of a header every 0.2 s: never a whole event
            async def drip():
                for ch in b'{"type": "describe", "data": {}}':
                    writer.write(bytes([ch]))
                    await writer.drain()
                    await asyncio.sleep(0.2)
            dripping = asyncio.create_task(drip())
        try:
            event = await asyncio.wait_for(async_read_event(reader), 10)
            assert event is not None and Error.from_event(event).code == "idle_timeout"
            try:  # closed: an end of stream, or a reset where the drip's bytes were unread
                assert await asyncio.wait_for(reader.read(), 10) == b""
            except ConnectionResetError:
                pass
            took = asyncio.get_running_loop().time() - t0
            assert 0.9 <= took < 5, took
        finally:
            if trickle:
                dripping.cancel()
                with contextlib.suppress(asyncio.CancelledError, ConnectionError):
                    await dripping
            writer.close()
            with contextlib.suppress(ConnectionError):
                await writer.wait_closed()
        # a client that keeps sending whole events is not idle
        async with AsyncTcpClient("127.0.0.1", port) as client:
            for _ in range(4):
                await asyncio.sleep(0.4)
                await client.write_event(Ping().event())
                assert (await _collect(client, "pong"))[-1].type == "pong"
        assert len(server._clients) <= 1
        await server.stop()
    asyncio.run(main())


def test_connections_over_the_cap_are_refused_with_a_typed_error():
    async def main():
        config = WyomingConfig(listen="tcp://127.0.0.1:0", max_connections=2)
        server, port = await _server_with(config)
        held = [await asyncio.open_connection("127.0.0.1", port) for _ in range(2)]
        await asyncio.sleep(0.1)
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        event = await asyncio.wait_for(async_read_event(reader), 5)
        assert event is not None and Error.from_event(event).code == "overloaded"
        assert await asyncio.wait_for(reader.read(), 5) == b""
        writer.close()
        await writer.wait_closed()
        for _, w in held:  # a slot freed is taken again
            w.close()
            await w.wait_closed()
        await asyncio.sleep(0.2)
        async with AsyncTcpClient("127.0.0.1", port) as client:
            await client.write_event(Ping().event())
            assert (await _collect(client, "pong"))[-1].type == "pong"
        await server.stop()
    asyncio.run(main())


def test_no_zeroconf_on_loopback():
    async def main():
        server, _ = await _server_with(WyomingConfig(listen="tcp://127.0.0.1:0",
                                                     zeroconf=True))
        assert server.advertisement is None
        await server.stop()
    asyncio.run(main())


def test_a_client_that_stops_reading_is_dropped_and_frees_its_stream():
    async def main():
        config = WyomingConfig(listen="tcp://127.0.0.1:0", idle_timeout_s=1.0)
        streams = Streams(100)
        server = WyomingServer(FakeSpeech(), streams, config)
        await server.start()
        port = int(server.bound.rsplit(":", 1)[1])
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        # ~11 MB of audio, far more than the socket buffers hold: never read
        await async_write_event(Synthesize(text="a " * 2500).event(), writer)
        deadline = asyncio.get_running_loop().time() + 20
        while server._clients and asyncio.get_running_loop().time() < deadline:
            await asyncio.sleep(0.1)
        assert not server._clients and len(streams) == 0
        writer.close()
        with contextlib.suppress(ConnectionError):
            await writer.wait_closed()
        await server.stop()
    asyncio.run(main())


def test_transcribe_language_is_checked_and_reaches_the_stream():
    from tests.unit.serve.test_http_openai import MultilingualSpeech

    async def main():
        audio = np.zeros(8000, dtype=np.int16)
        audio[2000:4000] = 10000
        results = {}
        for speech in (FakeSpeech(), MultilingualSpeech()):
            server, port = await _server(speech)
            async with AsyncTcpClient("127.0.0.1", port) as client:
                await client.write_event(Describe().event())
                info = Info.from_event((await _collect(client, "info"))[-1])
                await client.write_event(Transcribe(language="de-DE").event())
                got = []
                if speech.asr_languages() == ("en",):  # English-only: an error, still served
                    err = Error.from_event((await _collect(client, "error"))[-1])
                    got.append((err.code, err.text))
                await client.write_event(AudioStart(rate=16000, width=2, channels=1).event())
                await client.write_event(AudioChunk(rate=16000, width=2, channels=1,
                                                    audio=audio.tobytes()).event())
                await client.write_event(AudioStop().event())
                transcript = Transcript.from_event((await _collect(client, "transcript"))[-1])
                got.append((speech.listens[-1].language, transcript.language))
            await server.stop()
            results[speech.asr_model()] = (info.asr[0].models[0].languages, got)
        assert results["whisper-tiny.en"] == (["en"], [
            ("unsupported_language", "the ASR model does not transcribe 'de-DE'; it "
             "transcribes en"), ("", "en")])
        assert results["whisper-base"] == (["en", "de", "es"], [("de", "de")])
    asyncio.run(main())


def test_transcript_is_not_held_back_when_audio_stop_comes_with_the_voice_events():
    """One chunk holding a whole utterance, then audio-stop: the voice events are being
    written while the forwarder is cancelled. A swallowed cancel (Python 3.11's wait_for)
    kept the transcript until the client went away."""
    async def main():
        server, port = await _server(FakeSpeech())
        audio = np.zeros(8000, dtype=np.int16)
        audio[2000:4000] = 10000
        async with AsyncTcpClient("127.0.0.1", port) as client:
            for _ in range(3):
                await client.write_event(AudioStart(rate=16000, width=2, channels=1).event())
                await client.write_event(AudioChunk(rate=16000, width=2, channels=1,
                                                    audio=audio.tobytes()).event())
                await client.write_event(AudioStop().event())
                events = await _collect(client, "transcript")
                assert Transcript.from_event(events[-1]).text == "2000 samples"
        await server.stop()
    asyncio.run(main())
