"""What a caller heard of a say: words against the audio sent (`heard.py`), and the
`playback_done` a call publishes, over real TCP with the Speech interface faked."""

from __future__ import annotations

import asyncio

import numpy as np
import pytest

from cosyvoiced.audio.ring import Ring
from cosyvoiced.config.listeners import AudioSocketConfig
from cosyvoiced.listen.events import EventBus, PlaybackDone
from cosyvoiced.runtime.metrics import Metrics
from cosyvoiced.serve.audiosocket.heard import SayLedger, heard_words
from cosyvoiced.serve.audiosocket.server import AudioSocketServer
from cosyvoiced.serve.streams import Streams
from cosyvoiced.testing.audiosocket_peer import Peer
from cosyvoiced.tts.request import WordTime
from tests.fakes.speech import FakeSpeech

TEXT = "Your order, number 42, ships today."


def _words(speed: float = 1.0) -> list[WordTime]:
    """TEXT's words as synthesis times them: 0.3 s each with 0.05 s between, at `speed`."""
    out = []
    for n, (a, b) in enumerate([(0, 4), (5, 11), (12, 18), (19, 22), (23, 28), (29, 35)]):
        t0 = (0.1 + 0.35 * n) / speed
        out.append(WordTime(TEXT[a:b], a, b, t0, t0 + 0.3 / speed))
    return out


def test_words_that_started_before_the_end_of_the_sent_audio_were_heard():
    heard, unspoken = heard_words(_words(), TEXT, 0.78, whole=False)  # word 2 ends at 0.75
    assert [w.text for w in heard] == ["Your", "order,"]
    assert not any(w.partial for w in heard)
    assert unspoken == "number 42, ships today."  # from the first word not heard


def test_the_cut_word_is_partial_and_the_unspoken_text_follows_it():
    heard, unspoken = heard_words(_words(), TEXT, 0.9, whole=False)  # "number" 0.8..1.1
    assert [(w.text, w.partial) for w in heard] == [("Your", False), ("order,", False),
                                                    ("number", True)]
    assert (heard[-1].char_start, heard[-1].char_end) == (12, 18)
    assert unspoken == " 42, ships today."  # from the cut word's char_end


def test_nothing_sent_nothing_heard_and_all_of_it_unspoken():
    heard, unspoken = heard_words(_words(), TEXT, 0.0, whole=False)
    assert heard == () and unspoken == TEXT
    heard, unspoken = heard_words(_words(), TEXT, 0.05, whole=False)  # leading silence
    assert heard == () and unspoken == TEXT


def test_a_say_played_to_its_end_was_heard_whole():
    heard, unspoken = heard_words(_words(), TEXT, 2.2, whole=True)
    assert [w.text for w in heard] == TEXT.split()
    assert not any(w.partial for w in heard) and unspoken == ""
    # cut in the pause after its last word: all heard, only punctuation left
    heard, unspoken = heard_words(_words(), TEXT, 2.2, whole=False)
    assert len(heard) == 6 and not heard[-1].partial and unspoken == ""


def test_text_whose_words_were_not_synthesized_yet_is_unspoken():
    told = _words()[:3]  # the rest of the say not synthesized when the caller cut in
    heard, unspoken = heard_words(told, TEXT, 1.2, whole=False)
    assert [w.text for w in heard] == ["Your", "order,", "number"]
    assert unspoken == " 42, ships today."


def test_at_twice_the_speed_the_same_audio_carries_twice_the_words():
    slow, _ = heard_words(_words(), TEXT, 0.78, whole=False)
    fast, unspoken = heard_words(_words(2.0), TEXT, 0.78, whole=False)
    assert len(slow) == 2
    assert [(w.text, w.partial) for w in fast] == [("Your", False), ("order,", False),
                                                   ("number", False), ("42,", False),
                                                   ("ships", True)]
    assert fast[-1].start_s == pytest.approx((0.1 + 0.35 * 4) / 2)
    assert unspoken == " today."


def test_the_ledger_counts_only_samples_read_out_of_the_ring():
    ring = Ring.create(8000, dtype=np.int16, policy="refuse")
    try:
        ring.write(np.ones(1000, dtype=np.int16))  # an earlier say, flushed unread
        ring.request_flush()
        ledger = SayLedger(TEXT)
        ledger.begin(ring, 8000)
        assert ledger.sent_s() == 0.0
        ring.write(np.ones(4000, dtype=np.int16))
        out = np.empty(160, dtype=np.int16)
        for _ in range(10):  # ten 20 ms ticks
            ring.read_into(out)
        assert ledger.sent_s() == pytest.approx(0.2)
        other = Ring.create(16000, dtype=np.int16, policy="refuse")  # the call switched
        try:
            ledger.moved(ledger.sent_s(), other, 16000)
            other.write(np.ones(5600, dtype=np.int16))
            for _ in range(5):
                other.read_into(np.empty(320, dtype=np.int16))
            assert ledger.sent_s() == pytest.approx(0.3)
        finally:
            other.close()
            other.unlink()
    finally:
        ring.close()
        ring.unlink()


async def _call(greeting: str, stop_after_frames: int | None
                ) -> tuple[PlaybackDone, Peer, FakeSpeech]:
    config = AudioSocketConfig(enabled=True, listen="127.0.0.1:0", greeting=greeting,
                               first_frame_wait_ms=0, barge_in=False)
    speech = FakeSpeech(at_rate_asked=True)  # audio as long as its words' times say
    server = AudioSocketServer(speech, Streams(100), EventBus(), Metrics(), config)
    await server.start()
    sub = server.bus.subscribe(types=["playback_done"])
    peer = Peer("127.0.0.1", int(server.bound.rsplit(":", 1)[1]))
    await peer.connect()
    try:
        if stop_after_frames is not None:
            while len(peer.call.speech_frames()) < stop_after_frames:
                await asyncio.sleep(0.005)
            server.calls[str(peer.call.call_id)].stop_speaking()
        done = await asyncio.wait_for(sub.get(), 10)
        await asyncio.sleep(0.2)  # anything still sent would arrive by now
    finally:
        await peer.hangup()
        await server.stop()
    return done, peer, speech


def test_a_stopped_say_reports_the_words_in_the_frames_the_caller_got():
    greeting = " ".join(f"w{i}" for i in range(40))  # 4 s: one word per 0.1 s

    done, peer, speech = asyncio.run(_call(greeting, stop_after_frames=23))
    assert speech.requests[0][1].words  # the say asked synthesis for its words
    got_s = peer.call.speech_samples() / 8000
    assert done.reason == "stopped"
    assert done.heard_s == pytest.approx(got_s, abs=0.021)  # a short last frame is padded
    expect = [f"w{i}" for i in range(40) if i / 10 < done.heard_s]
    assert [w.text for w in done.words] == expect
    assert 4 <= len(expect) <= 8
    cut = done.words[-1]
    assert cut.partial == (cut.end_s > done.heard_s)
    rest = greeting[cut.char_end:] if cut.partial else greeting[greeting.index(
        f"w{len(expect)}"):]
    assert done.unspoken == rest
    wire = done.to_dict()
    assert wire["words"][0] == {"text": "w0", "char_start": 0, "char_end": 2, "start": 0.0,
                                "end": 0.08, "partial": False}
    assert wire["unspoken"] == done.unspoken


def test_a_say_played_to_its_end_reports_every_word():
    done, peer, _ = asyncio.run(_call("one two three four", stop_after_frames=None))
    assert done.reason == "done"
    assert [w.text for w in done.words] == ["one", "two", "three", "four"]
    assert done.unspoken == "" and not any(w.partial for w in done.words)
    assert done.heard_s == pytest.approx(peer.call.speech_samples() / 8000, abs=0.021)


def test_the_say_route_takes_a_speed_and_refuses_one_out_of_range():
    from aiohttp import ClientSession
    from aiohttp.test_utils import TestServer

    from cosyvoiced.serve.http.app import make_app
    from tests.fakes.daemon import FakeDaemon

    async def main():
        config = AudioSocketConfig(enabled=True, listen="127.0.0.1:0", first_frame_wait_ms=0)
        speech = FakeSpeech()
        server = AudioSocketServer(speech, Streams(100), EventBus(), Metrics(), config)
        await server.start()
        http_server = TestServer(make_app(FakeDaemon(audiosocket=server)))
        await http_server.start_server()
        peer = Peer("127.0.0.1", int(server.bound.rsplit(":", 1)[1]))
        await peer.connect()
        await asyncio.sleep(0.1)
        statuses = []
        async with ClientSession(base_url=str(http_server.make_url(""))) as http:
            cid = str(peer.call.call_id)
            for speed in (2.0, 5, "fast", True, None):
                body = {"text": "a b"} if speed is None else {"text": "a b", "speed": speed}
                async with http.post(f"/v1/calls/{cid}/say", json=body) as r:
                    statuses.append((r.status, (await r.json()).get("error", {})
                                     .get("code") if r.status != 202 else None))
        await peer.hangup()
        await http_server.close()
        await server.stop()
        return statuses, speech.requests

    statuses, requests = asyncio.run(main())
    assert statuses == [(202, None), (400, "bad_parameter"), (400, "bad_parameter"),
                        (400, "bad_parameter"), (202, None)]
    assert [o.length_scale for _, o in requests] == [0.5, None]
    assert all(o.words for _, o in requests)


def test_a_say_cut_after_the_call_switched_format_counts_the_audio_of_both():
    """The call begins in slin; the caller's first frame (slin16) moves what is queued to a
    16 kHz playout; what the caller heard is the slin part plus the slin16 part."""
    from cosyvoiced.serve.audiosocket.frames import AUDIO_RATES_HZ, Kind

    async def main():
        config = AudioSocketConfig(enabled=True, listen="127.0.0.1:0", first_frame_wait_ms=0,
                                   barge_in=False,
                                   greeting=" ".join(f"w{i}" for i in range(40)))
        server = AudioSocketServer(FakeSpeech(at_rate_asked=True), Streams(100), EventBus(),
                                   Metrics(), config)
        await server.start()
        sub = server.bus.subscribe(types=["playback_done"])
        peer = Peer("127.0.0.1", int(server.bound.rsplit(":", 1)[1]), kind=Kind.SLIN16)
        await peer.connect()
        while len(peer.call.speech_frames()) < 15:  # 0.3 s of the greeting in slin
            await asyncio.sleep(0.005)
        await peer.play(np.full(320 * 10, 100, dtype=np.int16))  # 0.2 s, quiet
        while len([r for r in peer.call.speech_frames() if r.kind == Kind.SLIN16]) < 10:
            await asyncio.sleep(0.005)
        server.calls[str(peer.call.call_id)].stop_speaking()
        done = await asyncio.wait_for(sub.get(), 10)
        await asyncio.sleep(0.2)
        await peer.hangup()
        await server.stop()
        return done, peer

    done, peer = asyncio.run(main())
    frames = peer.call.speech_frames()
    got_s = sum(len(r.pcm) / 2 / AUDIO_RATES_HZ[r.kind] for r in frames)
    assert {r.kind for r in frames} == {Kind.SLIN, Kind.SLIN16}
    assert done.reason == "stopped"
    assert done.heard_s == pytest.approx(got_s, abs=0.041)  # a padded frame at each end
    assert [w.text for w in done.words] == [f"w{i}" for i in range(40) if i / 10 < done.heard_s]
