"""A call's format is set by its caller's first audio frame, whenever that comes: nothing
is sent before it within `first_frame_wait_ms`; a call that began in slin without one
switches to the first frame's format, its queued speech resampled; only a change after
that first frame is a protocol error. Real TCP, the Speech interface faked."""

from __future__ import annotations

import asyncio
import time

import numpy as np
import pytest

from cosyvoiced.config.listeners import AudioSocketConfig
from cosyvoiced.listen.events import EventBus
from cosyvoiced.runtime.metrics import Metrics
from cosyvoiced.serve.audiosocket.frames import AUDIO_RATES_HZ, Audio, Kind, kind_name
from cosyvoiced.serve.audiosocket.server import AudioSocketServer
from cosyvoiced.serve.streams import Streams
from cosyvoiced.testing.audiosocket_peer import Peer, PeerCall
from tests.fakes.speech import FakeSpeech

WORD_SAMPLES = 2205
"""What the fake says per word (0.1 s at 22050 Hz), taken by a call as samples at the rate
it asked for: 8 kHz for slin."""


async def _server(speech: FakeSpeech, **cfg: object) -> AudioSocketServer:
    config = AudioSocketConfig(enabled=True, listen="127.0.0.1:0", **cfg)  # type: ignore[arg-type]
    server = AudioSocketServer(speech, Streams(100), EventBus(), Metrics(), config)
    await server.start()
    return server


def _port(server: AudioSocketServer) -> int:
    return int(server.bound.rsplit(":", 1)[1])


def _frames_ok(call: PeerCall) -> bool:
    """Every frame is 20 ms of its own kind."""
    return all(len(r.pcm) == 2 * (AUDIO_RATES_HZ[r.kind] // 50) for r in call.received)


@pytest.mark.parametrize("kind", [Kind.SLIN, Kind.SLIN16, Kind.SLIN44])
def test_nothing_is_sent_before_a_first_frame_that_comes_within_the_wait(kind):
    async def main():
        speech = FakeSpeech()
        server = await _server(speech, greeting="one two", first_frame_wait_ms=600)
        started = server.bus.subscribe(types=["call_started"])
        peer = Peer("127.0.0.1", _port(server), kind=kind)
        await peer.connect()
        await asyncio.sleep(0.3)  # as Asterisk does, ~0.3 s after the UUID
        first = time.monotonic()
        await peer.play(np.zeros(AUDIO_RATES_HZ[kind], dtype=np.int16))
        call = server.calls[str(peer.call.call_id)]
        await peer.hangup()
        await server.stop()
        return peer.call, call, first, started.get_nowait()

    pcall, call, first, started = asyncio.run(main())
    assert call.end_reason == "hangup"
    assert (started.format, started.rate_hz) == (kind_name(kind), AUDIO_RATES_HZ[kind])
    assert pcall.received[0].at_s >= first  # nothing before the caller's first frame
    assert {r.kind for r in pcall.received} == {kind} and _frames_ok(pcall)
    assert len(pcall.speech_frames()) > 0  # the greeting


def test_a_silent_caller_hears_slin_comfort_frames_once_the_wait_is_over():
    async def main():
        server = await _server(FakeSpeech(), first_frame_wait_ms=300)
        peer = Peer("127.0.0.1", _port(server))
        await peer.connect()
        await asyncio.sleep(0.8)  # no audio from the caller
        call = server.calls[str(peer.call.call_id)]
        await peer.hangup()
        await server.stop()
        return peer.call, call

    pcall, call = asyncio.run(main())
    assert pcall.received[0].at_s - pcall.started_s >= 0.3
    assert call.format == "slin" and not call.decided
    assert {r.kind for r in pcall.received} == {Kind.SLIN} and len(pcall.received) > 10


@pytest.mark.parametrize("kind", [Kind.SLIN12, Kind.SLIN16, Kind.SLIN44, Kind.SLIN192])
def test_a_first_frame_after_the_wait_switches_the_call_and_its_speech_goes_on(kind):
    rate = AUDIO_RATES_HZ[kind]

    async def main():
        speech = FakeSpeech()
        server = await _server(speech, greeting="a b c d", first_frame_wait_ms=50)
        events = server.bus.subscribe(types=["playback_done", "call_ended"])
        peer = Peer("127.0.0.1", _port(server), kind=kind)
        await peer.connect()
        await asyncio.sleep(0.4)  # comfort frames and the greeting's start, in slin
        switch = time.monotonic()
        call = server.calls[str(peer.call.call_id)]
        assert call.kind == Kind.SLIN and not call.decided
        await peer.play(np.full(rate, 100, dtype=np.int16))  # 1 s, quiet: no barge-in
        after = call.kind, call.decided
        await peer.hangup()
        await server.stop()
        return peer.call, call, speech, switch, after, [events.get_nowait() for _ in range(2)]

    pcall, call, speech, switch, after, (done, ended) = asyncio.run(main())
    assert after == (kind, True) and call.format == kind_name(kind)
    assert (done.type, done.reason) == ("playback_done", "done")  # not cut by the switch
    assert (ended.type, ended.reason) == ("call_ended", "hangup")
    kinds = [r.kind for r in pcall.received]
    n_slin = kinds.index(kind)
    assert 5 < n_slin and set(kinds[:n_slin]) == {Kind.SLIN} and set(kinds[n_slin:]) == {kind}
    assert pcall.received[n_slin].at_s > switch and _frames_ok(pcall)
    # the greeting whole across the switch (4 words at 8 kHz: the slin part as it was,
    # the rest resampled to the caller's rate): none of it lost, none said twice; frames
    # padded at its end, at the switch or at an underrun on a busy box are whole frames
    spoken = pcall.speech_frames()
    assert spoken[0].kind == Kind.SLIN and spoken[-1].kind == kind
    extra_s = len(spoken) * 0.02 - 4 * WORD_SAMPLES / 8000
    assert -0.005 < extra_s <= 0.1, len(spoken)
    level = np.frombuffer(b"".join(r.pcm for r in spoken if r.kind == kind), dtype="<i2")
    assert abs(np.median(np.abs(level[level != 0])) - 0.25 * 32767) < 200  # the fake's level
    # the listener the call began with (8 kHz) hears the caller, resampled from its rate
    lis = speech.listens[0]
    assert lis.rate_hz == 8000 and abs(lis.pos - 8000) <= 160, lis.pos


@pytest.mark.parametrize("wait_ms", [0, 1000])  # the first frame after the wait, or within it
def test_a_change_after_the_adopted_first_frame_is_a_protocol_error(wait_ms):
    async def main():
        server = await _server(FakeSpeech(), first_frame_wait_ms=wait_ms)
        peer = Peer("127.0.0.1", _port(server), kind=Kind.SLIN16)
        await peer.connect()
        await asyncio.sleep(0.1)
        await peer.play(np.zeros(320 * 5, dtype=np.int16))  # adopted: slin16
        call = server.calls[str(peer.call.call_id)]
        await peer.send_raw(Audio(bytes(320), Kind.SLIN).encode())
        assert await peer.wait_closed(5)
        await peer.close()
        await server.stop()
        return call, peer.call

    call, pcall = asyncio.run(main())
    assert call.kind == Kind.SLIN16
    assert call.end_reason == "protocol_error:audio_kind_changed"
    assert pcall.hangup_at_s is not None
