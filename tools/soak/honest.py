"""The honest load of a soak window: AudioSocket calls with real prompts (a TTS reply into
the call after each utterance: `tools.bench.calls`), HTTP TTS streams and Wyoming
synthesize clients (`tools.loadgen.streams`), and Wyoming transcribe clients (a real
prompt sent at real-time pace, its transcript awaited)."""

from __future__ import annotations

import asyncio
import random
import time
from dataclasses import dataclass, field

import numpy as np
from aiohttp import ClientSession, ClientTimeout

from tools.bench.calls import Daemon, _caller, _controller
from tools.loadgen.stats import Heard
from tools.loadgen.streams import (
    RETRY_S,
    Endpoints,
    Gate,
    HttpTts,
    Reply,
    Stream,
    WyomingTts,
)

REQUEST_DEADLINE_S = 60.0
"""An honest request (a 3-6 s reply, a prompt's transcript) not ended by then is hung:
recorded as failed ("TimeoutError") and the client goes on."""
CLOCK_GAP_S = 0.1
"""A call that received no frame (speech or comfort silence) for this long heard a gap:
the 20 ms clock sends one every 20 ms whatever is being said."""


@dataclass
class CallResult:
    call_id: str
    started_s: float
    ended_s: float
    frames: int
    speech_frames: int
    utterances: int
    replies_asked: int
    hung_up_by_daemon: bool
    gaps_at_s: list[float] = field(default_factory=list)
    """When the peer's clock gaps (no frame for CLOCK_GAP_S) began."""
    refused: bool = False
    """Refused at admission (its call_refused line in the daemon's log)."""

    @property
    def answered(self) -> bool:
        """Served: frames came back and the daemon did not end the call."""
        return self.frames >= 10 and not self.hung_up_by_daemon


@dataclass
class Mix:
    calls: int
    call_s: float
    http_tts: int
    wyoming_tts: int
    wyoming_asr: int


@dataclass
class HonestResult:
    calls: list[CallResult] = field(default_factory=list)
    replies: list[Reply] = field(default_factory=list)
    """HTTP TTS, Wyoming TTS and Wyoming ASR requests."""


class WyomingAsr(Stream):
    """One Wyoming transcription: a real prompt at real-time pace, then its transcript."""

    kind = "wyoming-asr"
    corpus: list[np.ndarray] = []

    async def once(self, t0: float) -> Reply:
        from wyoming.asr import Transcribe, Transcript
        from wyoming.audio import AudioChunk, AudioStart, AudioStop
        from wyoming.client import AsyncTcpClient
        from wyoming.error import Error

        assert self.ends.wyoming is not None
        speech = self.corpus[self.rng.randrange(len(self.corpus))]
        pcm = np.concatenate([speech, np.zeros(6400, dtype=np.int16)]).astype("<i2")
        async with AsyncTcpClient(*self.ends.wyoming) as client:
            await client.write_event(Transcribe().event())
            await client.write_event(AudioStart(rate=8000, width=2, channels=1).event())
            for i in range(0, pcm.shape[0], 800):  # 100 ms chunks at real-time pace
                await client.write_event(AudioChunk(rate=8000, width=2, channels=1,
                                                    audio=pcm[i:i + 800].tobytes()).event())
                await asyncio.sleep(0.1)
            sent_s = time.monotonic()
            await client.write_event(AudioStop().event())
            while True:
                event = await client.read_event()
                now = time.monotonic()
                if event is None:
                    raise ConnectionResetError("server closed the connection before the "
                                               "transcript")
                if Error.is_type(event.type):
                    err = Error.from_event(event)
                    return Reply(self.kind, self.index, t0, now,
                                 refused=err.code in ("overloaded", "draining"),
                                 error=f"{err.code}: {err.text}")
                if Transcript.is_type(event.type):
                    return Reply(self.kind, self.index, t0, now,
                                 Heard(now - sent_s, pcm.shape[0] / 8000, 0.0, 0))


def _with_deadline(kind: type[Stream]) -> type[Stream]:
    """`kind` whose requests give up after REQUEST_DEADLINE_S (`Stream.run` records the
    TimeoutError as a failed request)."""

    class Bounded(kind):  # type: ignore[valid-type,misc]
        async def once(self, t0: float) -> Reply:
            return await asyncio.wait_for(super().once(t0), REQUEST_DEADLINE_S)

    Bounded.__name__ = kind.__name__
    return Bounded


def _call_result(peer: object, log: object) -> CallResult:
    call = peer.call  # type: ignore[attr-defined]
    times = call.audio_times()
    gaps = np.diff(times) if times.size > 1 else np.zeros(0)
    return CallResult(str(call.call_id), call.started_s, time.monotonic(), len(call.received),
                      len(call.speech_frames()), len(log.utterances),  # type: ignore[attr-defined]
                      len(log.replies), call.hangup_at_s is not None,  # type: ignore[attr-defined]
                      [float(times[i]) for i in np.nonzero(gaps > CLOCK_GAP_S)[0]])


async def _call_slot(d: Daemon, corpus: list[np.ndarray], mix: Mix, end_s: float,
                     delay_s: float, logs: dict, rng: random.Random,
                     out: HonestResult) -> None:
    """Calls one after another until the load phase ends, each ~mix.call_s long."""
    await asyncio.sleep(delay_s)
    while (left_s := end_s - time.monotonic()) > 4.0:
        peer, log = await _caller(d, corpus, min(mix.call_s, left_s - 2.5), 0.0, logs, rng)
        out.calls.append(result := _call_result(peer, log))
        if result.hung_up_by_daemon:  # refused (admission) or dropped: not at once again
            await asyncio.sleep(RETRY_S)


async def run_honest(d: Daemon, ends: Endpoints, corpus: list[np.ndarray], mix: Mix,
                     load_s: float, rng: random.Random, out: HonestResult) -> None:
    """The honest clients for `load_s`; returns once each has finished its last request."""
    end_s = time.monotonic() + load_s
    stop = asyncio.Event()
    logs: dict = {}
    WyomingAsr.corpus = corpus
    async with ClientSession(timeout=ClientTimeout(total=None)) as session:
        ctl = asyncio.create_task(_controller(d.http, logs, stop))
        gate = Gate()
        streams: list[Stream] = []
        for kind, n in ((HttpTts, mix.http_tts), (WyomingTts, mix.wyoming_tts),
                        (WyomingAsr, mix.wyoming_asr)):
            streams += [_with_deadline(kind)(len(streams), ends, session, out.replies,
                             random.Random(rng.random())) for _ in range(n)]
        tasks = [asyncio.create_task(s.run(stop, 0.5 * i, gate))
                 for i, s in enumerate(streams)]
        tasks += [asyncio.create_task(_call_slot(d, corpus, mix, end_s, 1.0 * i, logs,
                                                 random.Random(rng.random()), out))
                  for i in range(mix.calls)]
        await asyncio.sleep(max(0.0, end_s - time.monotonic()))
        stop.set()
        await asyncio.gather(*tasks)
        ctl.cancel()
        await asyncio.gather(ctl, return_exceptions=True)
