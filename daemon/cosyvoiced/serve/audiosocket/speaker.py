"""What a call says: one say at a time, fed into the call's playout as it is synthesized.

Speech is synthesized at the call's rate where the synthesizer offers it (8, 16, 24,
48 kHz), else at 22050 Hz and resampled here. Each say has an id: `playback_started` when
its first audio enters the playout (it goes out on the next 20 ms tick), then exactly one
`playback_done` saying why it ended. When the call adopts its caller's format (`adopt`),
the playout moves to it (`playout.py`), what is being said goes on, resampled as it
comes, and later says are synthesized for the new rate. Each say is synthesized with its
words' times, and its `playback_done` tells what the caller heard of it (`heard.py`).
"""

from __future__ import annotations

import asyncio
import threading
import time
import uuid

import numpy as np
import structlog

from cosyvoiced.audio.resample import SUPPORTED_RATES_HZ, StreamResampler
from cosyvoiced.config.listeners import AudioSocketConfig
from cosyvoiced.listen.events import EventBus, PlaybackDone, PlaybackStarted
from cosyvoiced.serve.audiosocket.clock import TICK_S
from cosyvoiced.serve.audiosocket.heard import SayLedger, heard_words
from cosyvoiced.serve.audiosocket.playout import Playout, resample_once
from cosyvoiced.serve.speech import Speech, Synthesis
from cosyvoiced.tts.request import SynthesisOptions

log = structlog.get_logger(__name__)

FALLBACK_SYNTH_RATE_HZ = 22050
"""Piper voices' own rate: what we synthesize at for a call rate the synthesizer does not
offer (12, 32, 44.1, 96, 192 kHz), resampled here."""


class Speaker:
    def __init__(self, call_id: str, kind: int, speech: Speech, config: AudioSocketConfig,
                 bus: EventBus, send_lock: threading.Lock) -> None:
        """`send_lock`: the call's, held by the clock thread while it reads `out`."""
        self.call_id = call_id
        self.speech = speech
        self.config = config
        self.bus = bus
        self.out = Playout(kind, config.playout_ms)
        """What the clock sends from (replaced, under the send lock, by `adopt`)."""
        self._send_lock = send_lock
        self._underruns = 0
        """Underruns of playouts the call switched away from."""
        self._speaking: tuple[str, Synthesis, asyncio.Task[None], SayLedger] | None = None

    @property
    def rate_hz(self) -> int:
        return self.out.rate_hz

    @property
    def speaking(self) -> bool:
        return self._speaking is not None or self.out.ring.available() > 0

    @property
    def say_id(self) -> str:
        """The id of what is being said now ("" if nothing)."""
        return self._speaking[0] if self._speaking is not None else ""

    def underruns(self) -> int:
        """Ticks that found the playout short while a say was playing, this call."""
        return self._underruns + self.out.ring.stats().underruns

    def adopt(self, kind: int) -> None:
        """Speak in `kind` from now on: what is queued moves to its playout, resampled
        (the clock, kept off by the send lock meanwhile, sends from that one next)."""
        with self._send_lock:
            old = self.out
            ledger = self._speaking[3] if self._speaking is not None else None
            sent_s = ledger.sent_s() if ledger is not None else 0.0
            self.out = old.moved(kind, self.config.playout_ms)
            if ledger is not None:
                ledger.moved(sent_s, self.out.ring, self.out.rate_hz)
        self._underruns += old.ring.stats().underruns
        old.close()

    async def say(self, text: str, speed: float | None = None) -> str:
        """Replace whatever is being said with `text` (typed errors raised here), at
        `speed` (a multiple of the voice's rate; None: its own); returns the id its
        `playback_started` and `playback_done` events carry."""
        rate = self.rate_hz if self.rate_hz in SUPPORTED_RATES_HZ else FALLBACK_SYNTH_RATE_HZ
        options = SynthesisOptions(voice=self.config.voice or None, rate_hz=rate,
                                   format="s16le", words=True,
                                   length_scale=1.0 / speed if speed else None)
        synthesis = await self.speech.synthesize(text, options, self.call_id)
        self.stop("replaced")
        say_id = uuid.uuid4().hex
        ledger = SayLedger(text)
        ledger.begin(self.out.ring, self.rate_hz)
        task = asyncio.create_task(self._feed(say_id, synthesis, rate, ledger))
        self._speaking = (say_id, synthesis, task, ledger)
        return say_id

    async def _write(self, pcm: np.ndarray, rate_hz: int) -> None:
        """Into the playout, `pcm` at `rate_hz`: the call's rate, unless the call switched
        format since it was made (then the rest is resampled here)."""
        done = 0
        while done < pcm.shape[0]:
            if rate_hz != self.rate_hz:
                pcm, done = resample_once(pcm[done:], rate_hz, self.rate_hz), 0
                rate_hz = self.rate_hz
            ring = self.out.ring
            done += ring.write(pcm[done:])
            ring.set_playing(True)
            if done < pcm.shape[0]:
                await asyncio.sleep(TICK_S / 2)

    async def _feed(self, say_id: str, synthesis: Synthesis, synth_rate: int,
                    ledger: SayLedger) -> None:
        """Write speech into the playout ring as it comes (resampled to the call's rate if
        it was synthesized at another), then wait for the ring to drain. The ring counts
        an underrun for each tick it comes up short between the first chunk and the last
        (not while waiting for first audio, not after the end)."""
        rs: StreamResampler | None = None
        started = False
        reason = "done"
        began, chunks, dry = time.monotonic(), 0, self.underruns()
        logged = False
        try:
            async for chunk in synthesis:
                ledger.words.extend(chunk.words)
                pcm, rate = np.frombuffer(chunk.data, dtype=np.int16), synth_rate
                if rs is not None and rs.out_rate_hz != self.rate_hz:  # switched format
                    await self._write(rs.flush(), rs.out_rate_hz)
                    rs = None
                if synth_rate != self.rate_hz:
                    rs = rs or StreamResampler(synth_rate, self.rate_hz, dtype=np.int16)
                    pcm, rate = rs.process(pcm), self.rate_hz
                if not started and pcm.shape[0]:  # goes out on the next tick
                    started = True
                    self.bus.publish(PlaybackStarted(say_id, stream=self.call_id))
                chunks += 1
                if not logged and self.underruns() > dry:
                    logged = True  # once per say: when and before which chunk it ran dry
                    log.info("call_underrun", call_id=self.call_id, say_id=say_id,
                             chunk=chunks, after_s=round(time.monotonic() - began, 3))
                await self._write(pcm, rate)
            if rs is not None:
                await self._write(rs.flush(), rs.out_rate_hz)
            self.out.ring.set_playing(False)
            while self.out.ring.available() > 0:  # the last frames are still to go out
                await asyncio.sleep(TICK_S / 2)
        except Exception as exc:  # a failed synthesis ends the speech, not the call
            reason = "error"
            log.error("call_speech_failed", call_id=self.call_id, error=str(exc),
                      code=getattr(exc, "code", "internal"))
        finally:
            if self._speaking is not None and self._speaking[2] is asyncio.current_task():
                self._speaking = None
                with self._send_lock:
                    heard_s = ledger.sent_s()
                self._done(say_id, reason, ledger, heard_s)

    def stop(self, reason: str = "stopped") -> None:
        """Cancel synthesis and drop buffered speech: the next tick sends silence (or
        nothing). What was being said ends with `playback_done` (`reason`), telling what
        of it went out before the flush."""
        with self._send_lock:  # counted and flushed between two ticks: exactly what went
            speaking, self._speaking = self._speaking, None
            heard_s = speaking[3].sent_s() if speaking is not None else 0.0
            self.out.ring.request_flush()
            self.out.ring.set_playing(False)
        if speaking is not None:
            say_id, synthesis, task, ledger = speaking
            synthesis.cancel()
            task.cancel()
            self._done(say_id, reason, ledger, heard_s)

    def _done(self, say_id: str, reason: str, ledger: SayLedger, heard_s: float) -> None:
        words, unspoken = heard_words(ledger.words, ledger.text, heard_s, reason == "done")
        self.bus.publish(PlaybackDone(say_id, reason, self.call_id, heard_s, words, unspoken))

    def close(self) -> None:
        self.out.close()
