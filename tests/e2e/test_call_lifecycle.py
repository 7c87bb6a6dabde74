"""AudioSocket calls in the wideband formats (`Dial(AudioSocket/.../c(slin16))`) against
the real daemon, comfort silence, and the call lifecycle a voicebot controller drives:
say ids and their playback events, barge-in, hangup, on SSE and the events WebSocket.

The calls on the default config (no greeting) share one daemon; each test looks at its
own calls' frames and events only."""

from __future__ import annotations

import asyncio
import io
import json
import signal
import time
import wave
from collections.abc import Iterator

import numpy as np
import pytest
from aiohttp import ClientSession, ClientTimeout, WSMsgType

from cosyvoiced.audio.resample import StreamResampler
from cosyvoiced.serve.audiosocket.frames import AUDIO_RATES_HZ, Kind
from cosyvoiced.testing.audiosocket_peer import Peer, inter_frame_gaps_ms
from cosyvoiced.testing.prompts import normalizer, prompts, wer
from tests.e2e.test_calls import (
    GREETING,
    LONG_GREETING,
    _events,
    _onset_s,
    _pcm,
    _ports,
    _until_ended,
)
from tests.fixtures.daemon import DaemonProcess, SharedDaemon, wait_idle

GAP_BOUND_MS = 200.0
"""Largest gap allowed between frames sent to a caller (10 ticks: margin for a loaded
two-core box; a silent gap of that size is what comfort silence exists to prevent)."""


@pytest.fixture(scope="module")
def shared(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SharedDaemon]:
    s = SharedDaemon(tmp_path_factory, "calls")  # no greeting: silent until asked to speak
    yield s
    s.close()


@pytest.fixture
def daemon(shared: SharedDaemon) -> DaemonProcess:
    """The shared daemon, once the calls of the test before have ended."""
    d = shared.get()
    wait_idle(d)
    return d


def _upsample(x: np.ndarray, rate: int) -> np.ndarray:
    """A real 8 kHz prompt at `rate`, as a wideband channel would carry it."""
    rs = StreamResampler(8000, rate)
    return np.concatenate([rs.process(x), rs.flush()])


def _wav(samples: np.ndarray, rate: int) -> bytes:
    buf = io.BytesIO()
    with wave.open(buf, "wb") as w:
        w.setnchannels(1)
        w.setsampwidth(2)
        w.setframerate(rate)
        w.writeframes(samples.astype("<i2").tobytes())
    return buf.getvalue()


def test_slin16_and_slin48_calls_hear_their_greeting_and_are_transcribed(daemon_factory):
    # calls cannot ask for word times: asr.word_timestamps gives them, call-relative
    d = daemon_factory(overrides=(f'audiosocket.greeting="{GREETING}"',
                                  "asr.word_timestamps=true")).start()
    d.wait_ready()
    host, port, http = _ports(d)
    corpus = [p for p in prompts() if 1.5 < p.samples().shape[0] / 8000 < 4.0][:2]

    async def one(kind: int, prompt) -> tuple[Peer, float, float]:
        rate = AUDIO_RATES_HZ[kind]
        peer = Peer(host, port, kind=kind)
        await peer.connect()
        await peer.play(np.zeros(rate * 4, dtype=np.int16))  # the greeting, then silence
        t_prompt = time.monotonic()
        await peer.play(np.concatenate([_pcm(_upsample(prompt.samples(), rate)),
                                        np.zeros(rate * 2, dtype=np.int16)]))
        t_end = time.monotonic()
        await peer.hangup()
        return peer, t_prompt, t_end

    async def main():
        events: list = []
        stop = asyncio.Event()
        watcher = asyncio.create_task(_events(http, events, stop))
        await asyncio.sleep(0.3)
        calls = await asyncio.gather(one(Kind.SLIN16, corpus[0]), one(Kind.SLIN48, corpus[1]))
        await _until_ended(events, [peer for peer, _, _ in calls])  # the last transcripts
        stop.set()
        watcher.cancel()
        greetings = []
        async with ClientSession() as s:
            for (peer, t_prompt, _), kind in zip(calls, (Kind.SLIN16, Kind.SLIN48),
                                                 strict=True):
                rate = AUDIO_RATES_HZ[kind]  # what the caller heard, transcribed at its rate
                heard = np.frombuffer(b"".join(r.pcm for r in peer.call.received
                                               if r.at_s < t_prompt), dtype=np.int16)
                async with s.post(f"{http}/v1/transcribe", data=_wav(heard, rate),
                                  headers={"Content-Type": "audio/wav"}) as r:
                    assert r.status == 200, await r.text()
                    greetings.append((await r.json())["text"])
        return calls, events, greetings

    calls, events, greetings = asyncio.run(main())
    norm = normalizer()
    for (peer, t_prompt, t_end), kind, greeting, prompt in zip(
            calls, (Kind.SLIN16, Kind.SLIN48), greetings, corpus, strict=True):
        rate, call, cid = AUDIO_RATES_HZ[kind], peer.call, str(peer.call.call_id)
        # every frame in the caller's own format: its kind, 20 ms at its rate
        assert call.received and all(r.kind == kind and len(r.pcm) == rate // 50 * 2
                                     for r in call.received), (kind, len(call.received[0].pcm))
        assert "thanks for calling" in norm(greeting), (kind, greeting)
        started = [e for _, e in events if e["type"] == "call_started" and e["stream"] == cid]
        assert [(e["format"], e["rate_hz"]) for e in started] == [(kind.name.lower(), rate)]
        # comfort silence: frames all along, speech first, then silence while it waits
        gaps = inter_frame_gaps_ms(np.array([r.at_s for r in call.received if r.at_s < t_end]))
        assert gaps.max() < GAP_BOUND_MS, (kind, gaps.max())
        first_speech = call.speech_frames()[0].at_s
        tail = [r for r in call.received if first_speech + 2.5 < r.at_s < t_prompt]
        assert tail and all(r.silent for r in tail), kind  # the greeting is ~1.5 s long
        said = [e for _, e in events if e["type"] == "transcript" and e["stream"] == cid]
        heard = " ".join(e["text"] for e in said)
        words = [w for e in said for w in e["words"]]
        starts = [w["start"] for w in words]
        assert words and starts == sorted(starts), said
        # the prompt began 4 s into the call's audio: the first word there, in call time
        assert abs(starts[0] - (4.0 + _onset_s(prompt.samples()))) < 0.2, (kind, words)
        score = wer([prompt.text], [heard])
        print(f"{kind.name}: greeting heard as {greeting!r}; prompt {prompt.text!r} -> "
              f"{heard!r} (WER {score:.0f}%), largest gap {gaps.max():.1f} ms")
        assert score <= 40.0, (prompt.text, heard)
    d.signal(signal.SIGTERM)
    assert d.wait(60) == 0


def test_comfort_frames_flow_every_20ms_and_speech_replaces_them(daemon):
    d = daemon
    host, port, http = _ports(d)

    async def main():
        peer = Peer(host, port)
        await peer.connect()
        player = asyncio.create_task(peer.play(np.zeros(8000 * 6, dtype=np.int16)))
        await asyncio.sleep(2.0)
        t_say = time.monotonic()
        async with ClientSession() as s, s.post(
                f"{http}/v1/calls/{peer.call.call_id}/say", json={"text": GREETING}) as r:
            assert r.status == 202, await r.text()
        await player
        t_end = time.monotonic()
        done = await asyncio.to_thread(d.ctl, "calls", "hangup", str(peer.call.call_id))
        assert done.returncode == 0 and '"hangup_requested"' in done.stdout, done
        assert await peer.wait_closed(5)
        await peer.close()
        return peer.call, t_say, t_end

    call, t_say, t_end = asyncio.run(main())
    assert call.hangup_at_s is not None  # `cosyvoicectl calls hangup` ended it
    before = [r for r in call.received if r.at_s < t_say]
    assert len(before) >= 0.8 * 2.0 / 0.02 and all(r.silent for r in before)  # ~100 frames
    during = call.speech_frames()
    assert len(during) * 0.02 > 0.8, len(during)  # the reply replaced the silence
    gaps = inter_frame_gaps_ms(np.array([r.at_s for r in call.received if r.at_s < t_end]))
    span_s = t_end - call.received[0].at_s
    print(f"{len(call.received)} frames ({len(call.received) - len(during)} silent) over "
          f"{span_s:.2f} s; largest gap {gaps.max():.1f} ms")
    assert gaps.max() < GAP_BOUND_MS
    assert len(call.received) >= 0.9 * span_s / 0.02  # no tick left out


def test_say_barge_in_and_hangup_events_on_sse_and_websocket(daemon):
    secret = "The account number is four four two seven."
    d = daemon
    host, port, http = _ports(d)
    prompt = next(p for p in prompts() if 1.5 < p.samples().shape[0] / 8000 < 4.0)
    speech = _pcm(prompt.samples())
    onset = _onset_s(prompt.samples())

    async def main():
        sse: list = []
        stop = asyncio.Event()
        watcher = asyncio.create_task(_events(http, sse, stop))
        async with ClientSession(timeout=ClientTimeout(total=60)) as s:
            ws = await s.ws_connect(f"{http}/v1/calls/events")
            assert (await ws.receive_json())["type"] == "ready"
            await asyncio.sleep(0.3)
            peer = Peer(host, port)
            await peer.connect()
            cid = str(peer.call.call_id)
            player = asyncio.create_task(peer.play(np.zeros(8000 * 30, dtype=np.int16)))
            await asyncio.sleep(0.5)
            async with s.post(f"{http}/v1/calls/{cid}/say", json={"text": secret}) as r:
                assert r.status == 202
                first = (await r.json())["id"]
            t0 = time.monotonic()
            while not any(e.get("say_id") == first and e["type"] == "playback_done"
                          for _, e in sse):
                assert time.monotonic() - t0 < 20, sse
                await asyncio.sleep(0.1)
            async with s.post(f"{http}/v1/calls/{cid}/say",
                              json={"text": LONG_GREETING}) as r:
                second = (await r.json())["id"]
            await asyncio.sleep(2.0)  # well into the long reply: the caller talks over it
            player.cancel()
            await peer.play(np.concatenate([speech, np.zeros(8000, dtype=np.int16)]))
            async with s.post(f"{http}/v1/calls/{cid}/hangup") as r:
                assert r.status == 200
                assert (await r.json())["reason"] == "hangup_requested"
            assert await peer.wait_closed(5)
            ws_events = []
            while not ws_events or ws_events[-1]["type"] != "call_ended":
                msg = await asyncio.wait_for(ws.receive(), 10)
                assert msg.type == WSMsgType.TEXT, msg
                ev = json.loads(msg.data)
                if ev.get("stream") == cid:
                    ws_events.append(ev)
            await ws.close()
        await _until_ended(sse, [peer])
        stop.set()
        watcher.cancel()
        await peer.close()
        return cid, first, second, [e for _, e in sse if e.get("stream") == cid], ws_events

    cid, first, second, sse, ws_events = asyncio.run(main())
    lifecycle = ("call_started", "playback_started", "playback_done", "barge_in", "call_ended")
    for events in (sse, ws_events):
        seq = [(e["type"], e.get("say_id"), e.get("reason")) for e in events
               if e["type"] in lifecycle]
        assert seq == [("call_started", None, None),
                       ("playback_started", first, None), ("playback_done", first, "done"),
                       ("playback_started", second, None), ("barge_in", second, None),
                       ("playback_done", second, "barge_in"),
                       ("call_ended", None, "hangup_requested")], seq
    barge = next(e for e in sse if e["type"] == "barge_in")
    print(f"barge_in at {barge['start_ms']} ms into the call (caller onset ~{onset:.2f} s "
          f"into the prompt)")
    assert any(e["type"] == "transcript" for e in sse)  # the caller was heard
    # neither what was said to the caller nor what the caller said is logged above debug
    private = ["account number", *(e["text"].strip().lower() for e in sse
                                   if e["type"] == "transcript" and len(e["text"]) > 8)]
    for ev in d.log_events():
        if ev.get("level", "info") != "debug":
            line = json.dumps(ev).lower()
            assert not [p for p in private if p in line], ev


def test_mulaw_bytes_sent_as_slin_are_noise_to_the_listener(daemon):
    """What `Dial(AudioSocket/...)` without `c(slin)` does to a μ-law call: Asterisk sends
    the μ-law bytes under kind 0x10. Beside a correct slin call, the same prompt sent
    that way is not understood (docs/http-api.md, "Audio formats")."""
    from cosyvoiced.audio.codec import mulaw_encode
    from cosyvoiced.serve.audiosocket.frames import Audio

    d = daemon
    host, port, http = _ports(d)
    prompt = next(p for p in prompts() if 2.0 < p.samples().shape[0] / 8000 < 4.0)
    pcm = np.concatenate([_pcm(prompt.samples()), np.zeros(8000 * 2, dtype=np.int16)])

    async def slin() -> Peer:
        peer = Peer(host, port)
        await peer.connect()
        await peer.play(pcm)
        await peer.hangup()
        return peer

    async def mulaw() -> Peer:
        peer = Peer(host, port)
        await peer.connect()
        codes = mulaw_encode(pcm).tobytes()
        t0 = time.monotonic()
        for i, at in enumerate(range(0, len(codes) - 159, 160)):  # 160 bytes per 20 ms
            await peer.send_raw(Audio(codes[at:at + 160]).encode())
            await asyncio.sleep(max(0.0, t0 + (i + 1) * 0.02 - time.monotonic()))
        await peer.hangup()
        return peer

    async def main():
        events: list = []
        stop = asyncio.Event()
        watcher = asyncio.create_task(_events(http, events, stop))
        await asyncio.sleep(0.3)
        peers = await asyncio.gather(slin(), mulaw())
        await _until_ended(events, list(peers))  # the last transcripts
        stop.set()
        watcher.cancel()
        return peers, events

    (right, wrong), events = asyncio.run(main())

    def heard(peer: Peer) -> str:
        return " ".join(e["text"] for _, e in events if e["type"] == "transcript"
                        and e["stream"] == str(peer.call.call_id))

    good, bad = wer([prompt.text], [heard(right)]), wer([prompt.text], [heard(wrong)])
    print(f"{prompt.text!r}: as slin {heard(right)!r} (WER {good:.0f}%), "
          f"as μ-law bytes {heard(wrong)!r} (WER {bad:.0f}%)")
    assert good <= 40.0 and bad >= 75.0
