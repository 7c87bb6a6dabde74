"""AudioSocket calls over real TCP with the Speech interface faked (the real models run
in the end-to-end suite)."""

from __future__ import annotations

import asyncio
import contextlib
import time
import uuid

import numpy as np
import pytest
import structlog
import structlog.testing

from cosyvoiced.config.addr import parse_allow_from, peer_allowed
from cosyvoiced.config.listeners import AudioSocketConfig
from cosyvoiced.listen.events import EventBus
from cosyvoiced.runtime.metrics import Metrics
from cosyvoiced.serve.audiosocket.frames import Audio, CallId, Hangup, Kind
from cosyvoiced.serve.audiosocket.server import AudioSocketServer
from cosyvoiced.serve.streams import Streams
from cosyvoiced.testing.audiosocket_peer import Peer, PeerCall, inter_frame_gaps_ms
from tests.fakes.speech import FakeSpeech


async def _server(speech=None, **cfg) -> AudioSocketServer:
    cfg.setdefault("first_frame_wait_ms", 0)  # begins at once, in slin until a first frame
    config = AudioSocketConfig(enabled=True, listen="127.0.0.1:0", **cfg)
    server = AudioSocketServer(speech or FakeSpeech(), Streams(100), EventBus(), Metrics(),
                               config)
    await server.start()
    return server


def _port(server: AudioSocketServer) -> int:
    return int(server.bound.rsplit(":", 1)[1])


def test_greeting_is_paced_in_20ms_frames_and_hangup_ends_call():
    async def main():
        server = await _server(greeting="one two three four five")
        peer = Peer("127.0.0.1", _port(server))
        await peer.connect()
        await peer.play(np.zeros(8000 * 2, dtype=np.int16))  # 2 s of silence from the caller
        await peer.hangup()
        await asyncio.sleep(0.1)
        await server.stop()
        return peer.call

    call = asyncio.run(main())
    samples = call.received_samples()
    # the fake's 5 x 2205 samples, whole, in 320-byte frames (the last one zero-padded),
    # and comfort silence around them: a frame every 20 ms for the whole 2 s call
    assert all(len(r.pcm) == 320 and r.kind == Kind.SLIN for r in call.received)
    assert len(call.speech_frames()) == 69 and np.count_nonzero(samples) == 5 * 2205
    assert len(call.received) >= 90, len(call.received)
    gaps = inter_frame_gaps_ms(call.audio_times())
    assert np.percentile(np.abs(gaps - 20.0), 90) < 5, gaps


def test_caller_audio_reaches_the_listener_and_barge_in_flushes():
    async def main():
        speech = FakeSpeech()
        server = await _server(speech, greeting=" ".join(["word"] * 60))  # 6 s of speech
        peer = Peer("127.0.0.1", _port(server))
        await peer.connect()
        await asyncio.sleep(0.5)
        caller = np.zeros(8000, dtype=np.int16)
        caller[1600:] = 12000  # the caller starts talking 0.2 s in
        t_play = asyncio.get_running_loop().time()
        await peer.play(caller)
        await asyncio.sleep(0.3)
        await peer.hangup()
        await server.stop()
        return peer.call, speech, t_play

    call, speech, t_play = asyncio.run(main())
    lis = speech.listens[0]
    assert lis.rate_hz == 8000 and lis.pos == 8000
    # speech stopped: far fewer than 6 s of frames arrived, and none long after the onset
    onset = t_play + 0.2
    late = [r.at_s for r in call.speech_frames() if r.at_s > onset + 0.1]
    assert late == [], f"{len(late)} frames after barge-in"
    assert 0.3 < len(call.speech_frames()) * 0.02 < 2.0


def test_audio_far_ahead_of_real_time_is_dropped_as_it_is_read():
    """A peer sending 6 s of audio at once: what runs more than LEAD_S ahead of the call's
    clock is dropped (counted, logged once), its hangup is read at once, and audio sent
    at real-time pace after the burst is taken again."""
    from cosyvoiced.serve.audiosocket.lead import LEAD_S

    async def main():
        speech = FakeSpeech()
        server = await _server(speech)
        peer = Peer("127.0.0.1", _port(server))
        await peer.connect()
        t0 = time.monotonic()
        await peer.send_raw(b"".join(Audio(bytes(320)).encode() for _ in range(300)))
        await asyncio.sleep(LEAD_S + 1.0)  # the clock passes what was taken of the burst
        await peer.play(np.zeros(1600, dtype=np.int16))  # 0.2 s at real-time pace
        await peer.hangup()
        elapsed = time.monotonic() - t0
        await server.stop()
        return speech, elapsed

    with structlog.testing.capture_logs() as logs:
        speech, elapsed = asyncio.run(main())
    taken = speech.listens[0].pos / 8000
    assert LEAD_S <= taken <= elapsed + LEAD_S + 0.1, (taken, elapsed)
    assert taken > LEAD_S + 0.15  # the paced audio after the burst went in
    assert elapsed < 5.0  # the hangup was not held behind 6 s of audio
    assert [e["event"] for e in logs].count("call_audio_ahead") == 1


def test_dtmf_becomes_an_event():
    async def main():
        server = await _server()
        sub = server.bus.subscribe(types=["dtmf"])
        peer = Peer("127.0.0.1", _port(server))
        await peer.connect()
        await peer.dtmf("7")
        ev = await asyncio.wait_for(sub.get(), 5)
        await peer.hangup()
        await server.stop()
        return ev, str(peer.call.call_id)

    ev, call_id = asyncio.run(main())
    assert (ev.type, ev.digit, ev.stream) == ("dtmf", "7", call_id)


@pytest.mark.parametrize("garbage,reason", [
    (b"\x42\x00\x00", "protocol_error:unknown_kind"),
    (b"\x10\x00\x00", "protocol_error:bad_audio"),
    (b"\x10\xff\xff", "protocol_error:oversize_frame"),
    (CallId(uuid.UUID(int=0x5EC0)).encode(), "protocol_error:second_uuid"),
])
def test_garbage_ends_only_that_call(garbage, reason, caplog):
    async def main():
        server = await _server()
        good = Peer("127.0.0.1", _port(server))
        bad = Peer("127.0.0.1", _port(server))
        await good.connect()
        await bad.connect()
        await asyncio.sleep(0.1)
        bad_call = server.calls[str(bad.call.call_id)]
        await bad.send_raw(garbage)
        assert await bad.wait_closed(5)
        assert bad.call.hangup_at_s is not None  # we said goodbye properly
        assert bad_call.end_reason == reason
        await bad.close()
        assert str(good.call.call_id) in server.calls  # the other call goes on
        await server.calls[str(good.call.call_id)].say("still talking")
        await asyncio.sleep(0.3)
        assert good.call.received
        await good.hangup()
        await server.stop()
    asyncio.run(main())


def test_no_uuid_first_is_refused():
    async def main():
        server = await _server(first_frame_timeout_s=0.3)
        r, w = await asyncio.open_connection("127.0.0.1", _port(server))
        w.write(Audio(b"\x00\x00" * 160).encode())
        await w.drain()
        data = await asyncio.wait_for(r.read(), 5)
        r2, w2 = await asyncio.open_connection("127.0.0.1", _port(server))
        data2 = await asyncio.wait_for(r2.read(), 5)  # silent peer: timed out
        w.close()
        w2.close()
        assert not server.calls
        await server.stop()
        return data, data2

    data, data2 = asyncio.run(main())
    assert data == Hangup().encode() and data2 == Hangup().encode()


def test_silent_peer_is_ended():
    async def main():
        server = await _server(peer_timeout_s=0.5)
        peer = Peer("127.0.0.1", _port(server), PeerCall())
        await peer.connect()
        assert await peer.wait_closed(5)
        await server.stop()
        await peer.close()
    asyncio.run(main())


def test_a_peer_trickling_bytes_but_no_whole_frame_is_ended_as_silent():
    async def main():
        server = await _server(peer_timeout_s=0.5)
        peer = Peer("127.0.0.1", _port(server), PeerCall())
        await peer.connect()
        frame = Audio(b"\x00\x00" * 160).encode()
        t0 = time.monotonic()
        for byte in frame:  # one byte every 0.1 s: each read well within the timeout
            if peer.closed:
                break
            with contextlib.suppress(ConnectionError):
                await peer.send_raw(bytes([byte]))
            await asyncio.sleep(0.1)
        closed_after = time.monotonic() - t0
        assert await peer.wait_closed(5)
        await server.stop()
        await peer.close()
        return closed_after

    closed_after = asyncio.run(main())
    assert closed_after < 2.0  # the frame would have taken 32 s to arrive


def test_connections_without_a_call_id_are_bounded():
    from cosyvoiced.serve.audiosocket.server import MAX_PENDING

    async def main():
        server = await _server(first_frame_timeout_s=5.0)
        idle = [await asyncio.open_connection("127.0.0.1", _port(server))
                for _ in range(MAX_PENDING)]
        await asyncio.sleep(0.2)
        r, w = await asyncio.open_connection("127.0.0.1", _port(server))
        over = await asyncio.wait_for(r.read(), 2)  # closed at once, no UUID wait
        for _, wi in idle:
            wi.close()
        w.close()
        await asyncio.sleep(0.2)
        peer = Peer("127.0.0.1", _port(server), PeerCall())  # a real call is served again
        await peer.connect()
        await asyncio.sleep(0.3)
        served = len(server.calls)
        await peer.hangup()
        await peer.close()
        await server.stop()
        return over, served

    over, served = asyncio.run(main())
    assert over == b"" and served == 1


def test_overloaded_call_is_hung_up():
    async def main():
        server = await _server(FakeSpeech(capacity=0))
        peer = Peer("127.0.0.1", _port(server))
        await peer.connect()
        assert await peer.wait_closed(5)
        assert peer.call.hangup_at_s is not None
        await server.stop()
        await peer.close()
    asyncio.run(main())


def test_calls_api_say_and_stop():
    from aiohttp import ClientSession
    from aiohttp.test_utils import TestServer

    from cosyvoiced.serve.http.app import make_app
    from tests.fakes.daemon import FakeDaemon

    async def main():
        server = await _server()
        daemon = FakeDaemon(audiosocket=server)
        http_server = TestServer(make_app(daemon))
        await http_server.start_server()
        peer = Peer("127.0.0.1", _port(server))
        await peer.connect()
        await asyncio.sleep(0.1)
        cid = str(peer.call.call_id)
        async with ClientSession(base_url=str(http_server.make_url(""))) as http:
            async with http.get("/v1/calls") as r:
                assert [c["id"] for c in (await r.json())["calls"]] == [cid]
            async with http.post(f"/v1/calls/{cid}/say",
                                 json={"text": " ".join(["w"] * 50)}) as r:
                assert r.status == 202, await r.text()
            await asyncio.sleep(0.3)
            async with http.post(f"/v1/calls/{cid}/stop") as r:
                assert (await r.json())["was_speaking"] is True
            got = len(peer.call.speech_frames())
            await asyncio.sleep(0.2)
            assert len(peer.call.speech_frames()) <= got + 1  # at most the frame in flight
            async with http.post("/v1/calls/nope/say", json={"text": "x"}) as r:
                assert r.status == 404 and (await r.json())["error"]["code"] == "unknown_call"
            async with http.post(f"/v1/calls/{cid}/say", json={"text": ""}) as r:
                assert r.status == 400 and (await r.json())["error"]["code"] == "empty_text"
        await peer.hangup()
        await http_server.close()
        await server.stop()
        return got

    assert asyncio.run(main()) >= 5


def test_peer_that_does_not_read_is_ended_as_slow_peer():
    """A caller whose socket is never read: once the kernel's send buffer for the call is
    full the clock lets go of it and the call ends "slow_peer"; another call is untouched."""
    import socket

    async def main():
        server = await _server(greeting=" ".join(["word"] * 600), max_send_buffer_bytes=4096)
        stuck = socket.socket()
        stuck.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 1024)  # before connect
        stuck.connect(("127.0.0.1", _port(server)))
        stuck.sendall(CallId(uuid.uuid4()).encode())
        good = Peer("127.0.0.1", _port(server))
        await good.connect()
        await asyncio.sleep(0.2)
        assert len(server.calls) == 2
        stuck_call = next(c for c in server.calls.values() if c.id != str(good.call.call_id))
        t0 = time.monotonic()
        while stuck_call.id in server.calls:
            assert time.monotonic() - t0 < 20, "the stuck call was never ended"
            await asyncio.sleep(0.05)
        ended_after_s = time.monotonic() - t0
        frames = len(good.call.received)
        await good.play(np.zeros(8000, dtype=np.int16))
        assert len(good.call.received) >= frames + 40  # still paced at 20 ms
        await good.hangup()
        await server.stop()
        stuck.close()
        return stuck_call, ended_after_s, good.call

    stuck_call, ended_after_s, good = asyncio.run(main())
    assert stuck_call.end_reason == "slow_peer"
    assert stuck_call.frames_sent < 500 and ended_after_s < 10  # a few KB, not 60 s of speech
    assert good.hangup_at_s is None and good.received


def test_call_clock_keeps_pace_while_the_event_loop_is_blocked():
    """The clock is its own thread: a stalled event loop does not stall the frames."""

    async def main():
        server = await _server(greeting=" ".join(["word"] * 60))  # 6 s of speech
        peer = Peer("127.0.0.1", _port(server))
        await peer.connect()
        await asyncio.sleep(1.0)  # speech is flowing and the playout ring is full
        ticks = server.clock.ticks
        time.sleep(0.2)  # block the loop: the rings keep 60 ms, the clock keeps ticking
        assert server.clock.ticks - ticks >= 8
        await peer.hangup()
        await server.stop()
    asyncio.run(main())


class _ClosingSpeech(FakeSpeech):
    """FakeSpeech whose listen streams record that they were closed."""

    def __init__(self) -> None:
        super().__init__()
        self.closed: list[object] = []

    async def listen(self, rate_hz: int, stream_id: str, backlog_s: float | None = 30.0,
                     language: str = "", words: bool = False):
        lis = await super().listen(rate_hz, stream_id, backlog_s, language, words)
        close = lis.close

        async def closing():
            self.closed.append(lis)
            return await close()
        lis.close = closing
        return lis


def test_call_that_cannot_be_built_releases_its_listen_stream(monkeypatch):
    # e.g. EMFILE creating the call's playout ring: the listen stream (a worker slot and
    # its ring) and the registry entry must not leak, and the next call is served.
    from cosyvoiced.serve.audiosocket import server as server_module

    real_call = server_module.Call
    failures = [OSError(24, "Too many open files")]

    def flaky_call(*args, **kwargs):
        if failures:
            raise failures.pop()
        return real_call(*args, **kwargs)

    monkeypatch.setattr(server_module, "Call", flaky_call)

    async def main():
        speech = _ClosingSpeech()
        server = await _server(speech)
        first = Peer("127.0.0.1", _port(server))
        await first.connect()
        assert await first.wait_closed(5)
        assert first.call.hangup_at_s is not None  # hung up properly, not just dropped
        assert speech.closed == speech.listens == speech.listens[:1]
        assert len(server.streams) == 0 and not server.calls
        await first.close()
        second = Peer("127.0.0.1", _port(server))
        await second.connect()
        await asyncio.sleep(0.1)
        assert str(second.call.call_id) in server.calls
        await second.hangup()
        await asyncio.sleep(0.1)
        await server.stop()
        assert len(speech.listens) == 2 and speech.closed == speech.listens
    asyncio.run(main())


def test_a_peer_not_in_allow_from_is_closed_before_anything_is_read():
    async def main():
        server = await _server(allow_from=("192.0.2.0/24",))  # not this loopback peer
        r, w = await asyncio.open_connection("127.0.0.1", _port(server))
        w.write(CallId(uuid.uuid4()).encode())
        try:
            await w.drain()
            data = await asyncio.wait_for(r.read(), 5)
        except ConnectionResetError:  # closed with our frame unread: a reset, as refused
            data = b""
        w.close()
        with contextlib.suppress(ConnectionError):
            await w.wait_closed()
        calls = len(server.calls), len(server.streams)
        await server.stop()
        return data, calls

    data, calls = asyncio.run(main())
    assert data == b"" and calls == (0, 0)  # closed: no call, no stream slot
    # the same peer is served once it is listed (loopback is allowed by default too)
    assert peer_allowed(("127.0.0.1", 1), parse_allow_from(("127.0.0.0/8",)))
