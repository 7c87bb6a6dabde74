"""One AudioSocket call: caller audio to the listener, our speech out on the 20 ms clock.

A call speaks in the format of the caller's first audio frame (slin at 8 kHz up to
slin192; `frames.py`). One that came within `first_frame_wait_ms` sets it before anything
is sent; without one by then the call begins in slin, and its first audio frame, whenever
it comes, switches the call to its format for good (`Speaker.adopt`). Only a change
after that first frame ends the call.

Speech for the caller (`speaker.py`) goes into a small playout ring; the call clock (its
own thread, `clock.py`) takes one 20 ms frame per call per tick and sends it on a
duplicate of the call's socket, so nothing is sent in bursts and nothing is queued at
Asterisk that barge-in could not recall. With nothing to say, the tick sends a
preallocated frame of silence (`comfort_silence`), so RTP keeps flowing. Barge-in cancels
the synthesis and flushes the ring. The event loop writes to the socket only after the
clock has let go of it (the hangup at the end), under the call's send lock.

Caller audio goes to the listener at 8 kHz (slin) or 16 kHz (every other rate, resampled
here with soxr); a call that began in slin keeps its 8 kHz listener after a switch.
`barge_in`, `call_started` and `call_ended` go on the event bus (SSE, WebSocket), with
each say's playback events (`playback_done` with the words the caller heard: `heard.py`).
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
import threading
import time
from typing import Any

import numpy as np
import structlog

from cosyvoiced.audio.codec import s16_to_f32
from cosyvoiced.audio.resample import StreamResampler
from cosyvoiced.config.listeners import AudioSocketConfig
from cosyvoiced.listen.events import (
    BargeIn,
    CallEnded,
    CallStarted,
    DtmfPressed,
    EventBus,
    VoiceStarted,
    VoiceStopped,
)
from cosyvoiced.runtime.metrics import Metrics
from cosyvoiced.serve.audiosocket.clock import clock_socket, set_send_buffer
from cosyvoiced.serve.audiosocket.frames import (
    Audio,
    CallId,
    Dtmf,
    Error,
    Frame,
    FrameParser,
    Hangup,
    Kind,
    kind_name,
)
from cosyvoiced.serve.audiosocket.lead import CallerLead
from cosyvoiced.serve.audiosocket.speaker import Speaker
from cosyvoiced.serve.speech import Listening, Speech

log = structlog.get_logger(__name__)


def listen_rate_for(kind: int) -> int:
    """The listener runs at 8 kHz for slin, 16 kHz (Whisper's rate) for the rest."""
    return 8000 if kind == Kind.SLIN else 16000


class Call:
    def __init__(self, call_id: str, reader: asyncio.StreamReader,
                 writer: asyncio.StreamWriter, parser: FrameParser, speech: Speech,
                 listening: Listening, config: AudioSocketConfig, bus: EventBus,
                 metrics: Metrics, kind: int = Kind.SLIN, decided: bool = True) -> None:
        """`kind`: the format the call begins in; `decided`: it is the kind of the
        caller's first audio frame (False: the default, until that frame comes)."""
        self.id = call_id
        self.decided = decided
        self.reader = reader
        self.writer = writer
        self.parser = parser
        self.listening = listening
        self.config = config
        self.bus = bus
        self.metrics = metrics
        self.started_s = time.monotonic()
        self.end_reason = ""
        self.ended = asyncio.Event()
        self.finished = asyncio.Event()
        """Set once the call is torn down and `call_ended` is published."""
        self.frames_sent = 0
        self.comfort_frames = 0
        """Of `frames_sent`, frames of comfort silence."""
        self.barge_ins = 0
        self._send_lock = threading.Lock()
        self.speaker = Speaker(call_id, kind, speech, config, bus, self._send_lock)
        self._take_format(kind)
        self._tasks: list[asyncio.Task[None]] = []
        self._loop = asyncio.get_running_loop()
        self._sock: socket.socket | None = clock_socket(writer, self._sndbuf_bytes())
        self._broken = False
        """A frame went out in part: nothing more (not even a hangup) can follow it."""

    def _take_format(self, kind: int) -> None:
        """The call's side of its format (the speaker keeps the rest)."""
        self.kind = kind
        self.format = kind_name(kind)
        self.rate_hz = self.speaker.rate_hz
        self.frame_samples = self.speaker.out.frame_samples
        self.lead = CallerLead(self.id, self.rate_hz)
        self._listen_rs = (None if self.listening.rate_hz == self.rate_hz else
                           StreamResampler(self.rate_hz, self.listening.rate_hz))

    def _sndbuf_bytes(self) -> int:
        # the same time's worth for every format: slin192 sends 24x the bytes of slin
        return self.config.max_send_buffer_bytes * max(1, self.rate_hz // 8000)

    def _adopt(self, kind: int) -> None:
        """The caller's first audio frame came after the call began in the default
        format: the call is in the caller's from now on, what is said and queued too."""
        was = self.format
        self.speaker.adopt(kind)
        self._take_format(kind)
        with self._send_lock:
            if self._sock is not None:
                set_send_buffer(self._sock, self._sndbuf_bytes())
        log.info("call_format_adopted", call_id=self.id, format=self.format, was=was,
                 after_ms=int((time.monotonic() - self.started_s) * 1000))

    # --- the send clock (called on the clock thread every 20 ms) ----------------------

    def tick(self) -> None:
        """Send one frame: speech if there is some, else (`comfort_silence`) silence;
        never blocks, never allocates."""
        with self._send_lock:
            sock = self._sock
            if sock is None:
                return
            out = self.speaker.out
            packet: bytes | bytearray | None = out.next_speech()
            if packet is None:
                if not self.config.comfort_silence:
                    return
                packet = out.silence
                self.comfort_frames += 1
            try:
                sent = sock.send(packet)
            except BlockingIOError:
                sent = 0
            except OSError:
                self._stop_sending("peer_gone")
                return
            except Exception:
                log.exception("call_send_failed", call_id=self.id)
                self._stop_sending("internal_error")
                return
            if sent < len(packet):  # the kernel's buffer is full: the peer is not reading
                self._broken = sent > 0
                self._stop_sending("slow_peer")
                return
            self.frames_sent += 1

    def _stop_sending(self, reason: str) -> None:
        """(Clock thread, send lock held.) Let go of the socket and end the call."""
        sock, self._sock = self._sock, None
        if sock is not None:
            sock.close()
        with contextlib.suppress(RuntimeError):  # the loop is already closed: shutting down
            self._loop.call_soon_threadsafe(self.end, reason)

    # --- speaking (`speaker.py`) ---------------------------------------------------

    @property
    def speaking(self) -> bool:
        return self.speaker.speaking

    @property
    def say_id(self) -> str:
        """The id of what is being said now ("" if nothing)."""
        return self.speaker.say_id

    async def say(self, text: str, speed: float | None = None) -> str:
        """Replace whatever is being said with `text` (typed errors raised here) at
        `speed` (None: the voice's own); returns the id its `playback_started` and
        `playback_done` events carry (the latter with what the caller heard of it)."""
        return await self.speaker.say(text, speed)

    def stop_speaking(self, reason: str = "stopped") -> None:
        """Cancel synthesis and drop buffered speech: the next tick sends silence (or
        nothing). What was being said ends with `playback_done` (`reason`)."""
        self.speaker.stop(reason)

    # --- receiving ----------------------------------------------------------------

    async def run(self, early: list[Frame]) -> None:
        """Serve the call until it ends; `early` are frames read along with the UUID."""
        log.info("call_started", call_id=self.id, format=self.format)
        self.bus.publish(CallStarted(self.format, self.rate_hz, stream=self.id))
        for frame in early:
            if not self._handle(frame):
                break
        if self.parser.error is not None:
            self.end(f"protocol_error:{self.parser.error.code}")
        self._tasks = [asyncio.create_task(self._receive()),
                       asyncio.create_task(self._watch_voice())]
        if self.config.greeting:
            try:
                await self.say(self.config.greeting)
            except Exception as exc:
                log.error("greeting_failed", call_id=self.id, error=str(exc))
        await self.ended.wait()
        await self._finish()

    def end(self, reason: str) -> None:
        if not self.ended.is_set():
            self.end_reason = reason
            self.ended.set()

    async def _receive(self) -> None:
        loop = asyncio.get_running_loop()
        last_frame = loop.time()  # a peer trickling bytes but no whole frame is silent too
        try:
            while not self.ended.is_set():
                wait = last_frame + self.config.peer_timeout_s - loop.time()
                if wait <= 0:
                    raise TimeoutError
                data = await asyncio.wait_for(self.reader.read(65536), wait)
                if not data:
                    self.end("peer_closed")
                    return
                for frame in self.parser.feed(data):
                    last_frame = loop.time()
                    if not self._handle(frame):
                        return
                if self.parser.error is not None:
                    self.end(f"protocol_error:{self.parser.error.code}")
                    return
        except TimeoutError:
            self.end("peer_silent")
        except ConnectionError:
            self.end("peer_gone")

    def _handle(self, frame: Any) -> bool:
        if isinstance(frame, Audio):
            if not self.decided:  # the first audio frame sets the format, whenever it comes
                self.decided = True
                if frame.kind != self.kind:
                    self._adopt(frame.kind)
            elif frame.kind != self.kind:  # Asterisk keeps a channel's format for its life
                log.warning("call_format_changed", call_id=self.id, format=self.format,
                            got=kind_name(frame.kind))
                self.end("protocol_error:audio_kind_changed")
                return False
            pcm = np.frombuffer(frame.pcm, dtype=np.int16)
            if not self.lead.take(pcm.shape[0]):
                return True
            samples = s16_to_f32(pcm, np.empty(pcm.shape, dtype=np.float32))
            if self._listen_rs is not None:
                samples = self._listen_rs.process(samples)
            self.listening.feed(samples)
        elif isinstance(frame, Dtmf):
            at_ms = int((time.monotonic() - self.started_s) * 1000)
            self.bus.publish(DtmfPressed(frame.digit, at_ms, stream=self.id))
            log.info("dtmf", call_id=self.id, at_ms=at_ms)  # the digit only at debug (PINs)
            log.debug("dtmf_digit", call_id=self.id, at_ms=at_ms, digit=frame.digit)
        elif isinstance(frame, Hangup):
            self.end("hangup")
            return False
        elif isinstance(frame, Error):
            self.end(f"asterisk_error:{frame.code}")
            return False
        elif isinstance(frame, CallId):
            self.end("protocol_error:second_uuid")
            return False
        return True

    async def _watch_voice(self) -> None:
        pending: asyncio.Task[None] | None = None
        async for ev in self.listening.events():
            if isinstance(ev, VoiceStarted) and self.config.barge_in and self.speaking:
                if self.config.barge_in_min_ms <= 0:
                    self._barge_in(ev)
                else:
                    pending = asyncio.create_task(self._barge_in_later(ev))
            elif isinstance(ev, VoiceStopped) and pending is not None:
                pending.cancel()
                pending = None

    async def _barge_in_later(self, ev: VoiceStarted) -> None:
        await asyncio.sleep(self.config.barge_in_min_ms / 1000)
        if self.speaking:
            self._barge_in(ev)

    def _barge_in(self, ev: VoiceStarted) -> None:
        say_id = self.say_id
        self.bus.publish(BargeIn(say_id, ev.start_ms, stream=self.id))
        self.stop_speaking("barge_in")
        self.barge_ins += 1
        log.info("barge_in", call_id=self.id, say_id=say_id, speech_start_ms=ev.start_ms)

    async def _finish(self) -> None:
        self.stop_speaking("ended")
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        with contextlib.suppress(Exception):
            if self._listen_rs is not None:  # what the resampler's filter still holds
                self.listening.feed(self._listen_rs.flush())
            await self.listening.close()
        with self._send_lock:  # the clock is not mid-frame and will not send again
            sock, self._sock = self._sock, None
        if sock is not None:
            sock.close()
        if self.end_reason not in ("hangup", "peer_closed", "peer_gone") and not self._broken:
            with contextlib.suppress(ConnectionError, RuntimeError):
                self.writer.write(Hangup().encode())
        self.writer.close()
        underruns = self.speaker.underruns()
        self.speaker.close()
        self.metrics.underruns.labels("call").inc(underruns)
        dropped = self.listening.dropped + self.lead.dropped
        self.metrics.dropped_frames.labels("call").inc(dropped)
        duration_s = round(time.monotonic() - self.started_s, 3)
        level = ("info" if self.end_reason in ("hangup", "peer_closed", "hangup_requested")
                 else "warning")
        getattr(log, level)("call_ended", call_id=self.id, reason=self.end_reason,
                            duration_s=duration_s, format=self.format,
                            frames_sent=self.frames_sent, comfort_frames=self.comfort_frames,
                            barge_ins=self.barge_ins, underruns=underruns,
                            dropped_frames=dropped)
        self.bus.publish(CallEnded(self.end_reason, duration_s, stream=self.id))
        self.finished.set()
