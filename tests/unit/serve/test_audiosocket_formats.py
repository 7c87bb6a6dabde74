"""AudioSocket calls in every slin format, comfort silence and the call lifecycle events,
over real TCP with the Speech interface faked (the real models run end to end)."""

from __future__ import annotations

import asyncio
import json

import numpy as np
import pytest
from aiohttp import ClientSession, WSMsgType
from aiohttp.test_utils import TestServer

from cosyvoiced.config.listeners import AudioSocketConfig
from cosyvoiced.listen.events import EventBus
from cosyvoiced.runtime.metrics import Metrics
from cosyvoiced.serve.audiosocket.frames import AUDIO_RATES_HZ, Kind, kind_name
from cosyvoiced.serve.audiosocket.server import AudioSocketServer
from cosyvoiced.serve.http.app import make_app
from cosyvoiced.serve.streams import Streams
from cosyvoiced.testing.audiosocket_peer import Peer, inter_frame_gaps_ms
from tests.fakes.daemon import FakeDaemon
from tests.fakes.speech import FakeSpeech

CALL_EVENTS = ("call_started", "call_ended", "playback_started", "playback_done", "barge_in")


async def _server(speech=None, **cfg) -> AudioSocketServer:
    config = AudioSocketConfig(enabled=True, listen="127.0.0.1:0", **cfg)
    server = AudioSocketServer(speech or FakeSpeech(), Streams(100), EventBus(), Metrics(),
                               config)
    await server.start()
    return server


def _port(server: AudioSocketServer) -> int:
    return int(server.bound.rsplit(":", 1)[1])


@pytest.mark.parametrize("kind", sorted(AUDIO_RATES_HZ))
def test_a_call_is_answered_in_its_own_format(kind):
    rate = AUDIO_RATES_HZ[kind]

    async def main():
        speech = FakeSpeech()
        server = await _server(speech, greeting="one two")
        sub = server.bus.subscribe(types=["call_started"])
        peer = Peer("127.0.0.1", _port(server), kind=kind)
        await peer.connect()
        tone = (2000 * np.sin(  # below the fake's speech level: no barge-in
            2 * np.pi * 300 * np.arange(rate * 7 // 10) / rate)).astype(np.int16)
        await peer.play(tone)  # 0.7 s of caller audio at the call's rate (the greeting,
        # 0.55 s at 8 kHz, is out by then)
        started = await asyncio.wait_for(sub.get(), 5)
        await peer.hangup()
        await server.stop()
        return peer.call, speech, started

    call, speech, started = asyncio.run(main())
    assert (started.format, started.rate_hz) == (kind_name(kind), rate)
    frame_bytes = int(rate * 0.02) * 2
    assert call.received and all(r.kind == kind and len(r.pcm) == frame_bytes
                                 for r in call.received)
    listen_rate = 8000 if kind == Kind.SLIN else 16000
    lis = speech.listens[0]
    assert lis.rate_hz == listen_rate
    assert abs(lis.pos - listen_rate * 7 // 10) <= listen_rate // 50, lis.pos  # 0.7 s, resampled
    # the fake speaks 2 x 2205 samples; asked at the call's rate, or at 22050 Hz and
    # resampled here for rates the synthesizer does not offer
    speech_samples = sum(len(r.pcm) for r in call.speech_frames()) // 2
    want = 2 * 2205 if rate in (8000, 16000, 24000, 48000) else 2 * 2205 * rate / 22050
    assert abs(speech_samples - want) <= int(rate * 0.02) + rate // 100, speech_samples
    # one frame per 20 ms tick and no hole (comfort silence between the replies); how
    # late a frame may come on a loaded box is the io bench's figure, not this test's
    gaps = inter_frame_gaps_ms(call.audio_times())
    assert abs(np.median(gaps) - 20.0) < 2 and gaps.max() < 1000, gaps


def test_a_caller_silent_past_the_first_frame_wait_begins_in_slin():
    async def main():
        server = await _server(greeting="hello there", first_frame_wait_ms=100)
        peer = Peer("127.0.0.1", _port(server))
        await peer.connect()
        await asyncio.sleep(0.6)  # no audio from the caller
        call = server.calls[str(peer.call.call_id)]
        await peer.hangup()
        await server.stop()
        return call, peer.call

    call, pcall = asyncio.run(main())
    assert call.format == "slin" and pcall.speech_frames()
    assert all(r.kind == Kind.SLIN for r in pcall.received)


def test_comfort_silence_fills_the_gaps_and_can_be_turned_off():
    async def run(comfort: bool):
        server = await _server(comfort_silence=comfort, first_frame_wait_ms=0)
        peer = Peer("127.0.0.1", _port(server))
        await peer.connect()
        await asyncio.sleep(0.05)
        await server.calls[str(peer.call.call_id)].say("a b")
        await asyncio.sleep(1.0)
        await peer.hangup()
        await server.stop()
        return peer.call

    on = asyncio.run(run(True))
    off = asyncio.run(run(False))
    assert len(on.speech_frames()) == len(off.speech_frames()) > 0
    assert len(off.received) == len(off.speech_frames())  # only speech, no silence
    assert len(on.received) >= 40 and len(on.received) > len(on.speech_frames()) + 10
    assert inter_frame_gaps_ms(on.audio_times()).max() < 100


def test_lifecycle_events_over_the_http_api_and_the_events_websocket():
    async def main():
        server = await _server(first_frame_wait_ms=0)
        http_server = TestServer(make_app(FakeDaemon(audiosocket=server)))
        await http_server.start_server()
        got: list[dict] = []
        async with ClientSession(base_url=str(http_server.make_url(""))) as http:
            ws = await http.ws_connect("/v1/calls/events")
            assert (await ws.receive_json())["type"] == "ready"
            peer = Peer("127.0.0.1", _port(server))
            await peer.connect()
            await asyncio.sleep(0.1)
            cid = str(peer.call.call_id)
            async with http.post(f"/v1/calls/{cid}/say", json={"text": "a b"}) as r:
                first = (await r.json())["id"]
            await asyncio.sleep(0.6)  # 0.2 s of speech: played out
            async with http.post(f"/v1/calls/{cid}/say", json={"text": "a " * 50}) as r:
                second = (await r.json())["id"]
            await asyncio.sleep(0.2)
            async with http.post(f"/v1/calls/{cid}/say", json={"text": "a b"}) as r:
                third = (await r.json())["id"]  # replaces the second
            await asyncio.sleep(0.1)
            async with http.post(f"/v1/calls/{cid}/hangup") as r:
                body = await r.json()
            assert body == {"call": cid, "ended": True, "reason": "hangup_requested"}
            assert await peer.wait_closed(5) and peer.call.hangup_at_s is not None
            async with http.post(f"/v1/calls/{cid}/hangup") as r:
                assert r.status == 404
            while True:
                msg = await asyncio.wait_for(ws.receive(), 5)
                assert msg.type == WSMsgType.TEXT
                got.append(json.loads(msg.data))
                if got[-1]["type"] == "call_ended":
                    break
            await ws.close()
        await peer.close()
        await http_server.close()
        await server.stop()
        return cid, first, second, third, got

    cid, first, second, third, got = asyncio.run(main())
    seq = [(e["type"], e.get("say_id"), e.get("reason")) for e in got
           if e["type"] in CALL_EVENTS]
    assert all(e["stream"] == cid for e in got)
    assert seq == [
        ("call_started", None, None),
        ("playback_started", first, None), ("playback_done", first, "done"),
        ("playback_started", second, None), ("playback_done", second, "replaced"),
        ("playback_started", third, None), ("playback_done", third, "ended"),
        ("call_ended", None, "hangup_requested"),
    ], seq
    assert len({first, second, third}) == 3


def test_barge_in_is_an_event_naming_the_say_it_cut():
    async def main():
        server = await _server(greeting=" ".join(["word"] * 60), first_frame_wait_ms=0)
        sub = server.bus.subscribe(types=["barge_in", "playback_done"])
        peer = Peer("127.0.0.1", _port(server))
        await peer.connect()
        await asyncio.sleep(0.3)
        greeting = server.calls[str(peer.call.call_id)].say_id
        caller = np.zeros(4000, dtype=np.int16)
        caller[800:] = 12000
        await peer.play(caller)
        events = [await asyncio.wait_for(sub.get(), 5) for _ in range(2)]
        await peer.hangup()
        await server.stop()
        return greeting, events

    greeting, (barge, done) = asyncio.run(main())
    assert greeting
    assert (barge.type, barge.say_id) == ("barge_in", greeting)
    assert (done.type, done.say_id, done.reason) == ("playback_done", greeting, "barge_in")


@pytest.mark.parametrize("kind", [Kind.SLIN, Kind.SLIN44, Kind.SLIN192])
def test_a_tick_allocates_no_array_whether_it_sends_speech_or_silence(kind):
    """The clock's work per call per frame: speech copied from the ring into the
    prebuilt packet, or the prebuilt silence frame; no numpy allocation either way."""
    from tools.bench.npalloc import counting

    async def main():
        server = await _server(first_frame_wait_ms=0)
        peer = Peer("127.0.0.1", _port(server), kind=kind)
        await peer.connect()
        await peer.play(np.zeros(AUDIO_RATES_HZ[kind] // 50, dtype=np.int16))
        await asyncio.sleep(0.1)
        call = server.calls[str(peer.call.call_id)]
        server.clock.remove(call)  # ticked here only, on this thread
        silent = speaking = 0
        for _ in range(10):  # in bursts the peer (on this loop) reads between
            with counting() as c:
                for _ in range(5):
                    call.tick()
            silent += c.calls
            await asyncio.sleep(0.02)
        frame = np.full(call.frame_samples, 1000, dtype=np.int16)
        for i in range(20):  # the last one short: padded from preallocated zeros
            short = frame[: -7 if i == 19 else None]
            with counting() as c:
                assert call.speaker.out.ring.write(short) == short.shape[0]
                call.tick()
            speaking += c.calls
            await asyncio.sleep(0.005)
        await asyncio.sleep(0.3)
        await peer.hangup()
        await server.stop()
        return call, silent, speaking, peer.call

    call, silent, speaking, pcall = asyncio.run(main())
    assert silent == 0 and speaking == 0, (silent, speaking)
    assert call.comfort_frames >= 50 and len(pcall.speech_frames()) == 20
