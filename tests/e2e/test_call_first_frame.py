"""A call's format is the kind of its caller's first audio frame, whenever that comes.

For every AudioSocket audio kind (0x10-0x18) with the caller's first frame 0, 300 and
1200 ms after its UUID (Asterisk sends it ~0.3 s after), against one real daemon with
the real voice: the greeting is heard in the caller's format, a reply too, barge-in cuts
a long reply, and no call ends in a protocol error. All 27 calls run at once.
"""

from __future__ import annotations

import asyncio
import io
import time
import wave
from collections.abc import Iterator
from dataclasses import dataclass, field

import numpy as np
import pytest
from aiohttp import ClientError, ClientSession, ClientTimeout

from cosyvoiced.audio.resample import StreamResampler
from cosyvoiced.config.listeners import AudioSocketConfig
from cosyvoiced.serve.audiosocket.frames import AUDIO_RATES_HZ, Kind
from cosyvoiced.testing.audiosocket_peer import Peer, Received
from cosyvoiced.testing.prompts import normalizer, prompt_samples, prompts
from tests.e2e.test_calls import GREETING, LONG_GREETING, _events, _pcm, _ports
from tests.fixtures.daemon import DaemonProcess, ready_daemon

KINDS = sorted(AUDIO_RATES_HZ)
DELAYS_MS = (0, 300, 1200)
REPLY = "Sure."
STAGGER_S = 0.1
"""Calls start this far apart (27 of them over 2.7 s)."""
WAIT_S = 30.0
"""Longest any step of a call may take (a loaded two-core box, 27 calls at once)."""


@dataclass
class Outcome:
    peer: Peer
    first_frame_s: float
    """time.monotonic() when the peer sent its first audio frame."""
    reply_s: float = 0.0
    """When the reply was asked for (the greeting had played out)."""
    long_s: float = 0.0
    long_id: str = ""
    greeting_text: str = ""
    error: str | None = None
    """The step of the call that failed, if one did."""
    events: list[dict] = field(default_factory=list)
    """The call's own events from /v1/events."""


@pytest.fixture(scope="module")
def daemon(tmp_path_factory: pytest.TempPathFactory) -> Iterator[DaemonProcess]:
    # admission is tested elsewhere (out of the way, at its largest limit): here every call
    # must be admitted on a shared box
    yield from ready_daemon(tmp_path_factory, "first-frame",
                            (f'audiosocket.greeting="{GREETING}"',
                             "workers.admit_busy_max=4.0"))


async def _event(events: list, cid: str, kind: str, say_id: str | None = None) -> dict:
    deadline = time.monotonic() + WAIT_S
    while True:
        for _, e in events:
            if (e["type"] == kind and e.get("stream") == cid
                    and (say_id is None or e.get("say_id") == say_id)):
                return e
        assert time.monotonic() < deadline, f"no {kind} ({say_id}) for call {cid}"
        await asyncio.sleep(0.05)


async def _say(http: ClientSession, base: str, cid: str, text: str) -> str:
    async with http.post(f"{base}/v1/calls/{cid}/say", json={"text": text}) as r:
        assert r.status == 202, await r.text()
        return (await r.json())["id"]


def _heard_16k(frames: list[Received]) -> np.ndarray:
    """What the caller heard, as Asterisk plays it (each frame in its own kind's rate),
    at 16 kHz float32."""
    out: list[np.ndarray] = []
    i = 0
    while i < len(frames):
        j = i
        while j < len(frames) and frames[j].kind == frames[i].kind:
            j += 1
        pcm = np.frombuffer(b"".join(f.pcm for f in frames[i:j]), dtype="<i2")
        rs = StreamResampler(AUDIO_RATES_HZ[frames[i].kind], 16000)
        x = pcm.astype(np.float32) / 32768
        out += [rs.process(x), rs.flush()]
        i = j
    return np.concatenate(out) if out else np.zeros(0, dtype=np.float32)


async def _transcribe(http: ClientSession, base: str, samples: np.ndarray) -> str:
    buf = io.BytesIO()
    with wave.open(buf, "wb") as w:
        w.setnchannels(1)
        w.setsampwidth(2)
        w.setframerate(16000)
        w.writeframes(_pcm(samples).tobytes())
    async with http.post(f"{base}/v1/transcribe", data=buf.getvalue(),
                         headers={"Content-Type": "audio/wav"}) as r:
        assert r.status == 200, await r.text()
        return (await r.json())["text"]


async def _line(peer: Peer, then: np.ndarray | None = None) -> None:
    """The caller's side of the line: `then` (if any), then silence, in frames as RTP
    brings them, until cancelled."""
    if then is not None:
        await peer.play(then)
    second = np.zeros(peer.rate_hz, dtype=np.int16)
    while not peer.closed:
        await peer.play(second)


async def _one(host: str, port: int, base: str, kind: int, delay_ms: int, start_s: float,
               events: list, talk: np.ndarray) -> Outcome:
    """One call: greeting, a reply, a long reply the caller talks over, hangup. A step
    that fails is kept in `error` (the call is hung up all the same)."""
    await asyncio.sleep(start_s)
    peer = Peer(host, port, kind=kind)
    await peer.connect()
    cid = str(peer.call.call_id)
    await asyncio.sleep(max(0.0, peer.call.started_s + delay_ms / 1000 - time.monotonic()))
    out = Outcome(peer, time.monotonic())
    line = asyncio.create_task(_line(peer))  # silent, but its frames keep coming
    async with ClientSession(timeout=ClientTimeout(total=WAIT_S)) as http:
        try:
            await _event(events, cid, "playback_done")  # the greeting played out
            out.reply_s = time.monotonic()
            reply = await _say(http, base, cid, REPLY)
            await _event(events, cid, "playback_done", reply)
            out.long_s = time.monotonic()
            out.long_id = await _say(http, base, cid, LONG_GREETING)
            await _event(events, cid, "playback_started", out.long_id)
            await asyncio.sleep(0.5)
            line.cancel()
            line = asyncio.create_task(_line(peer, talk))  # talks over it
            await _event(events, cid, "playback_done", out.long_id)
            await asyncio.sleep(0.5)  # nothing more of the long reply may come
        except (AssertionError, ClientError, OSError) as exc:
            out.error = f"{type(exc).__name__}: {exc}"
        finally:
            line.cancel()
            await peer.hangup()
        if out.error is None:
            greeting = [r for r in peer.call.received if r.at_s < out.reply_s]
            out.greeting_text = await _transcribe(http, base, _heard_16k(greeting))
    return out


@pytest.fixture(scope="module")
def outcomes(daemon: DaemonProcess) -> dict[tuple[int, int], Outcome]:
    host, port, base = _ports(daemon)
    prompt = next(p for p in prompts() if 1.5 < p.samples().shape[0] / 8000 < 3.0)
    talk = {k: _pcm(prompt_samples(prompt.name, AUDIO_RATES_HZ[k])) for k in KINDS}
    cases = [(k, d) for d in DELAYS_MS for k in KINDS]

    async def main() -> list[Outcome]:
        events: list = []
        stop = asyncio.Event()
        watcher = asyncio.create_task(_events(base, events, stop))
        await asyncio.sleep(0.3)
        got = await asyncio.gather(*(_one(host, port, base, k, d, i * STAGGER_S, events,
                                          talk[k]) for i, (k, d) in enumerate(cases)))
        for o in got:  # each call's end is on the bus shortly after its hangup
            await _event(events, str(o.peer.call.call_id), "call_ended")
        stop.set()
        watcher.cancel()
        for o in got:
            o.events = [e for _, e in events if e.get("stream") == str(o.peer.call.call_id)]
        return got

    t0 = time.monotonic()
    got = asyncio.run(main())
    print(f"{len(cases)} calls in {time.monotonic() - t0:.1f} s")
    return dict(zip(cases, got, strict=True))


@pytest.mark.parametrize("delay_ms", DELAYS_MS)
@pytest.mark.parametrize("kind", KINDS, ids=[k.name.lower() for k in KINDS])
def test_the_call_speaks_its_callers_first_frame_format(
        outcomes: dict[tuple[int, int], Outcome], daemon: DaemonProcess, kind: Kind,
        delay_ms: int) -> None:
    o = outcomes[(kind, delay_ms)]
    call, cid, rate = o.peer.call, str(o.peer.call.call_id), AUDIO_RATES_HZ[kind]
    ended = [e for e in o.events if e["type"] == "call_ended"]
    # the caller hung up: the daemon did not end the call (no protocol_error)
    assert [e["reason"] for e in ended] == ["hangup"], ended
    assert o.error is None, o.error
    assert not [e for e in daemon.log_events() if e.get("call_id") == cid
                and e.get("event") == "call_format_changed"]
    # every frame 20 ms of its own kind; once the caller's format is in, only that
    assert all(len(r.pcm) == 2 * (AUDIO_RATES_HZ[r.kind] // 50) for r in call.received)
    kinds = [r.kind for r in call.received]
    assert kind in kinds, kinds[:5]
    assert set(kinds[kinds.index(kind):]) == {kind}, sorted(set(kinds))
    grace_s = AudioSocketConfig().first_frame_wait_ms / 1000
    if delay_ms / 1000 < grace_s / 2:  # well inside the grace: nothing sent before it
        assert set(kinds) == {kind}
        assert call.received[0].at_s >= o.first_frame_s
    else:  # comfort silence, maybe the greeting's start, in slin until then
        assert set(kinds) <= {kind, Kind.SLIN}
    switched = kinds.index(kind)
    # the greeting, heard in the caller's format (what went before it in slin too)
    greeting = [r for r in call.received[switched:] if r.at_s < o.reply_s and not r.silent]
    assert len(greeting) * 0.02 > 0.5, len(greeting)
    level = np.sqrt(np.mean(np.frombuffer(b"".join(r.pcm for r in greeting),
                                          dtype="<i2").astype(np.float64) ** 2))
    assert level > 300, level  # speech, not a whisper of noise
    assert "thanks for calling" in normalizer()(o.greeting_text), o.greeting_text
    # the reply, in the caller's format
    reply = [r for r in call.received if o.reply_s < r.at_s < o.long_s and not r.silent]
    assert reply and all(r.kind == kind and len(r.pcm) == rate // 50 * 2 for r in reply)
    # barge-in: the caller's speech cut the long reply, which then stopped
    cut = [e for e in o.events if e["type"] == "barge_in"]
    assert [e["say_id"] for e in cut] == [o.long_id], cut
    done = [e["reason"] for e in o.events
            if e["type"] == "playback_done" and e["say_id"] == o.long_id]
    assert done == ["barge_in"], done
    spoken = [r for r in call.received if r.at_s > o.long_s and not r.silent]
    assert len(spoken) * 0.02 < 6.0, len(spoken)  # the long reply is ~10 s
    said_in_slin = sum(not r.silent for r in call.received[:switched])
    print(f"{kind.name} first frame at {delay_ms} ms: {switched} slin frames first "
          f"({said_in_slin} of speech), greeting heard as {o.greeting_text!r}, long reply "
          f"cut after {len(spoken) * 0.02:.1f} s")
