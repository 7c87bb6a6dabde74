"""The load ramp's streams: each one a client that talks to a server without pause.

Kinds (mixable by ratio with `--mix`):

* `tts`: cosyvoiced's streaming `POST /v1/tts` (raw s16le); audio is timed as it arrives.
* `piper`: Piper's own HTTP server, `POST /synthesize`; it answers with a whole WAV
  after synthesizing everything, so its first audio is the first byte of the body.
* `wyoming`: Wyoming `synthesize` over TCP (cosyvoiced or wyoming-piper); audio-chunk
  events are timed as they arrive.
* `call`: an AudioSocket call (cosyvoiced.testing.audiosocket_peer) that plays a real Asterisk
  prompt at real-time pace, then silence; after each utterance a controller following
  `/v1/events` asks the daemon to reply into the call (`/v1/calls/{id}/say`), as an IVR
  would. Measured: reply first audio (say -> first reply frame), the time from the end
  of the caller's prompt to its `transcript` event, and the daemon's underrun counter.

A TTS stream asks for a reply, waits until its listener has heard all of it (the
listener model in `tools.loadgen.stats`), then asks for the next: N streams are N listeners
that are always either waiting or hearing speech.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import random
import struct
import time
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from aiohttp import ClientError, ClientSession

from tools.loadgen.stats import Heard, listen

REPLIES = (
    "Thank you for calling. Your order shipped this morning and should arrive on Thursday.",
    "I can help with that. Your current balance is forty two dollars and ten cents.",
    "Please hold for a moment while I transfer you to the billing department.",
    "Your appointment is confirmed for Monday at three in the afternoon. Is there anything "
    "else?",
    "I am sorry, I did not catch that. Could you say your account number again, please?",
)
"""What the streams ask each server to say: IVR-style replies of 3 to 6 s."""
CALL_REPLY = "I can help with that. One moment while I look it up."
SCRIPT_PROMPTS = (
    "Thank you for calling Northwind. This call may be recorded for quality purposes.",
    "Please hold for a moment while I look up your account.",
    "For billing, press one. For technical support, press two.",
    "Is there anything else I can help you with today?",
    "Your request has been received and a confirmation is on its way.",
)
"""A call-center script's fixed prompts: said to every caller, word for word."""
SCRIPT_VALUES = (
    "Your balance is {a} dollars and {b} cents.",
    "Order number {n} ships on {day}.",
    "Your appointment is on {day} at {h} o'clock.",
)
"""The per-caller sentences that follow one: a value each caller hears differently."""
DAYS = ("Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday", "Sunday")


def script_text(rng: random.Random) -> str:
    """One reply of the call-center script mix: a fixed prompt, then a per-caller value."""
    value = SCRIPT_VALUES[rng.randrange(len(SCRIPT_VALUES))].format(
        a=rng.randrange(1, 1000), b=rng.randrange(100), n=rng.randrange(10000, 100000),
        day=DAYS[rng.randrange(7)], h=rng.randrange(1, 13))
    return f"{SCRIPT_PROMPTS[rng.randrange(len(SCRIPT_PROMPTS))]} {value}"
RETRY_S = 1.0
"""A refused or failed stream waits this long before asking again."""
RESUME_SPREAD_S = 1.0
"""Streams let go after a pause restart spread over this long, not all at once."""
CALL_JITTER_S = 0.06
"""A call's listener (Asterisk) starts playing this long after the first frame."""


@dataclass
class Reply:
    kind: str
    stream: int
    started_s: float
    finished_s: float
    heard: Heard | None = None
    """None: refused or failed."""
    refused: bool = False
    error: str = ""
    transcript_s: list[float] = field(default_factory=list)
    """Calls: end of the caller's prompt to its transcript event (a record of its own,
    with heard None, made when the transcript arrives)."""


@dataclass
class Endpoints:
    """Where a server under test answers (None: that kind is not served)."""

    http: str | None = None
    """cosyvoiced's HTTP API base URL."""
    piper_http: str | None = None
    wyoming: tuple[str, int] | None = None
    audiosocket: tuple[str, int] | None = None


class Gate:
    """Pauses a ramp's streams while another server has its turn: no new request while
    closed, and `drain()` returns once the requests in flight are answered."""

    def __init__(self) -> None:
        self.opened = asyncio.Event()
        self.opened.set()
        self.inflight = 0
        self._idle = asyncio.Event()
        self._idle.set()

    async def enter(self) -> None:
        while not self.opened.is_set():  # paused: on resume, restart spread over 1 s
            await self.opened.wait()
            await asyncio.sleep(random.uniform(0.0, RESUME_SPREAD_S))
        self.inflight += 1
        self._idle.clear()

    def leave(self) -> None:
        self.inflight -= 1
        if self.inflight == 0:
            self._idle.set()

    async def drain(self) -> None:
        self.opened.clear()
        await self._idle.wait()

    def resume(self) -> None:
        self.opened.set()


class Stream:
    """One client; subclasses implement `once()` (one request, timed)."""

    kind = ""
    script = False
    """Set once before a ramp: replies from the call-center script mix (`script_text`)
    instead of the IVR replies."""

    def __init__(self, index: int, ends: Endpoints, session: ClientSession,
                 out: list[Reply], rng: random.Random) -> None:
        self.index = index
        self.ends = ends
        self.session = session
        self.out = out
        self.rng = rng

    async def run(self, stop: asyncio.Event, delay_s: float, gate: Gate) -> None:
        await asyncio.sleep(delay_s)
        while not stop.is_set():
            await gate.enter()
            if stop.is_set():  # let go at the end of the ramp: no new request
                gate.leave()
                return
            t0 = time.monotonic()
            try:
                reply = await self.once(t0)
            except (ClientError, OSError, asyncio.IncompleteReadError, ValueError) as exc:
                reply = Reply(self.kind, self.index, t0, time.monotonic(),
                              error=f"{type(exc).__name__}: {exc}")
            finally:
                gate.leave()
            self.out.append(reply)
            if reply.heard is None:
                wait_s = RETRY_S
            else:  # until the listener has heard it all
                h = reply.heard
                wait_s = t0 + h.ttfa_s + h.stall_s + h.audio_s - time.monotonic()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), max(0.0, wait_s))

    async def once(self, t0: float) -> Reply:
        raise NotImplementedError

    def text(self) -> str:
        if Stream.script:
            return script_text(self.rng)
        return REPLIES[self.rng.randrange(len(REPLIES))]


class HttpTts(Stream):
    kind = "tts"

    async def once(self, t0: float) -> Reply:
        assert self.ends.http is not None
        arrivals: list[tuple[float, float]] = []
        async with self.session.post(f"{self.ends.http}/v1/tts",
                                     json={"text": self.text(), "format": "s16le"}) as r:
            if r.status == 503:
                body = await r.text()
                return Reply(self.kind, self.index, t0, time.monotonic(), refused=True,
                             error=f"refused: {body[:300]}")
            if r.status != 200:
                body = await r.text()
                return Reply(self.kind, self.index, t0, time.monotonic(),
                             error=f"{r.status} {body[:200]}")
            rate = r.headers.get("X-Sample-Rate", "")
            if not rate.isdigit():
                raise ValueError("no X-Sample-Rate header on the audio response")
            bytes_per_s = 2 * int(rate)
            async for data in r.content.iter_any():
                arrivals.append((time.monotonic(), len(data) / bytes_per_s))
        return Reply(self.kind, self.index, t0, time.monotonic(), listen(t0, arrivals))


class PiperHttp(Stream):
    kind = "piper"

    async def once(self, t0: float) -> Reply:
        assert self.ends.piper_http is not None
        arrivals: list[tuple[float, int]] = []
        head = b""
        async with self.session.post(f"{self.ends.piper_http}/synthesize",
                                     json={"text": self.text()}) as r:
            if r.status != 200:
                body = await r.text()
                return Reply(self.kind, self.index, t0, time.monotonic(),
                             error=f"{r.status} {body[:200]}")
            async for data in r.content.iter_any():
                if len(head) < 44:
                    head += data[:44 - len(head)]
                arrivals.append((time.monotonic(), len(data)))
        rate_hz, bits = _wav_format(head)
        bytes_per_s = rate_hz * bits // 8
        audio = [(t, n / bytes_per_s) for t, n in arrivals]
        audio[0] = (audio[0][0], max(0.0, (arrivals[0][1] - 44) / bytes_per_s))
        return Reply(self.kind, self.index, t0, time.monotonic(), listen(t0, audio))


def _wav_format(head: bytes) -> tuple[int, int]:
    """(rate_hz, bits per sample) from a canonical 44-byte RIFF header of mono PCM."""
    if len(head) < 44 or head[:4] != b"RIFF" or head[8:12] != b"WAVE":
        raise ValueError("not a WAV response")
    channels, rate_hz = struct.unpack("<HI", head[22:28])
    bits = struct.unpack("<H", head[34:36])[0]
    return rate_hz, bits * channels


class WyomingTts(Stream):
    kind = "wyoming"

    async def once(self, t0: float) -> Reply:
        from wyoming.audio import AudioChunk, AudioStop
        from wyoming.client import AsyncTcpClient
        from wyoming.error import Error
        from wyoming.tts import Synthesize

        assert self.ends.wyoming is not None
        arrivals: list[tuple[float, float]] = []
        async with AsyncTcpClient(*self.ends.wyoming) as client:
            await client.write_event(Synthesize(text=self.text()).event())
            while True:
                event = await client.read_event()
                now = time.monotonic()
                if event is None:
                    raise ConnectionResetError("server closed the connection mid-reply")
                if Error.is_type(event.type):
                    err = Error.from_event(event)
                    refused = err.code in ("overloaded", "draining")
                    return Reply(self.kind, self.index, t0, now, refused=refused,
                                 error=f"{'refused: ' if refused else ''}{err.code}: "
                                       f"{err.text}")
                if AudioChunk.is_type(event.type):
                    c = AudioChunk.from_event(event)
                    arrivals.append((now, len(c.audio) / (c.rate * c.width * c.channels)))
                elif AudioStop.is_type(event.type):
                    break
        return Reply(self.kind, self.index, t0, time.monotonic(), listen(t0, arrivals))


# --- AudioSocket calls -----------------------------------------------------------------


class CallController:
    """Follows /v1/events: replies into a call after each utterance, notes transcripts."""

    def __init__(self, http: str, session: ClientSession) -> None:
        self.http = http
        self.session = session
        self.calls: dict[str, CallStream] = {}

    async def run(self) -> None:
        async with self.session.get(f"{self.http}/v1/events") as r:
            async for line in r.content:
                if not line.startswith(b"data: "):
                    continue
                ev: dict[str, Any] = json.loads(line[6:])
                call = self.calls.get(ev.get("stream", ""))
                if call is None:
                    continue
                if ev["type"] == "transcript":
                    call.transcribed(time.monotonic())
                elif ev["type"] == "voice_stopped":
                    call.said_s = time.monotonic()
                    text = script_text(call.rng) if Stream.script else CALL_REPLY
                    async with self.session.post(f"{self.http}/v1/calls/{ev['stream']}/say",
                                                 json={"text": text}) as resp:
                        await resp.read()


def reply_frames(received: list[Any], said_s: float) -> list[tuple[float, float]]:
    """(arrival, seconds) of a reply's frames: from its first speech frame after `said_s`
    to its last, the all-zero frames between them included. A zero frame there is a pause
    in the speech (sentence silence at 8 kHz is exact zeros) or the daemon's ring running
    dry, which it counts itself (`cosyvoiced_underruns_total{kind="call"}`): from the wire
    the two look alike, so the listener here judges only when frames arrive."""
    after = [r for r in received if r.at_s > said_s]
    speech = [i for i, r in enumerate(after) if not r.silent]
    if not speech:
        return []
    return [(r.at_s, len(r.pcm) / 16000) for r in after[speech[0]:speech[-1] + 1]]


class CallStream(Stream):
    kind = "call"
    corpus: list[np.ndarray] = []
    """int16 8 kHz prompts; set once before the ramp (`tools.loadgen.ramp`)."""
    controller: CallController | None = None

    def __init__(self, *args: Any, **kw: Any) -> None:
        super().__init__(*args, **kw)
        self.said_s: float | None = None
        self.spoke_end_s: float | None = None

    def transcribed(self, at_s: float) -> None:
        """The transcript of the caller's last prompt arrived: one record for it alone."""
        if self.spoke_end_s is not None:
            self.out.append(Reply(self.kind, self.index, self.spoke_end_s, at_s,
                                  transcript_s=[at_s - self.spoke_end_s]))
            self.spoke_end_s = None

    async def run(self, stop: asyncio.Event, delay_s: float, gate: Gate) -> None:
        """Calls stay connected for the whole ramp (they do not take turns)."""
        from cosyvoiced.testing.audiosocket_peer import Peer

        assert self.ends.audiosocket is not None and self.controller is not None
        await asyncio.sleep(delay_s)
        while not stop.is_set():
            t0 = time.monotonic()
            peer = Peer(*self.ends.audiosocket)
            call_id = str(peer.call.call_id)
            self.controller.calls[call_id] = self
            try:
                await peer.connect()
                await peer.play(np.zeros(1600, dtype=np.int16))
                if peer.closed or peer.call.hangup_at_s is not None:
                    self.out.append(Reply(self.kind, self.index, t0, time.monotonic(),
                                          refused=True))
                    await peer.close()
                    with contextlib.suppress(TimeoutError):
                        await asyncio.wait_for(stop.wait(), RETRY_S)
                    continue
                while not stop.is_set() and not peer.closed:
                    await self._turn(peer, stop)
            except (OSError, asyncio.IncompleteReadError) as exc:
                self.out.append(Reply(self.kind, self.index, t0, time.monotonic(),
                                      error=f"{type(exc).__name__}: {exc}"))
                await asyncio.sleep(RETRY_S)
            finally:
                self.controller.calls.pop(call_id, None)
                await _hang_up(peer)

    async def _turn(self, peer: Any, stop: asyncio.Event) -> None:
        """One exchange: the caller speaks a prompt, then listens to the reply."""
        speech = self.corpus[self.rng.randrange(len(self.corpus))]
        self.said_s = self.spoke_end_s = None
        await peer.play(speech)
        spoke_end_s = self.spoke_end_s = time.monotonic()
        silence = np.zeros(1600, dtype=np.int16)  # 200 ms
        deadline_s = spoke_end_s + 15.0
        last_n = len(peer.call.speech_frames())  # comfort silence is not a reply
        quiet_s = 0.0
        while time.monotonic() < deadline_s and not peer.closed and not stop.is_set():
            await peer.play(silence)
            n = len(peer.call.speech_frames())
            if self.said_s is not None and n > last_n:
                quiet_s = 0.0
            elif self.said_s is not None and n > 0 and n == last_n:
                quiet_s += 0.2
                if quiet_s >= 0.6 and any(r.at_s > self.said_s
                                          for r in peer.call.speech_frames()):
                    break
            last_n = n
        said = self.said_s
        if said is None:
            return  # the daemon heard no end of speech: no reply to time
        frames = reply_frames(peer.call.received, said)
        heard = listen(said, frames, jitter_s=CALL_JITTER_S) if frames else None
        self.out.append(Reply(self.kind, self.index, said, time.monotonic(), heard,
                              error="" if frames else "no reply audio"))


async def _hang_up(peer: Any) -> None:
    """Hang up and close the call's socket, also when the ramp's end cancels the hangup
    while it waits for the daemon to close (the socket would be left open)."""
    try:
        await peer.hangup()
    except OSError:
        pass
    except asyncio.CancelledError:
        await peer.close()
        raise


KINDS: dict[str, type[Stream]] = {"tts": HttpTts, "piper": PiperHttp, "wyoming": WyomingTts,
                                  "call": CallStream}
