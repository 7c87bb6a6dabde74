"""One AudioSocket call: caller audio to the listener, our speech out on the 20 ms clock.

Speech for the caller is synthesized at 8 kHz into a small playout ring; the call clock
(its own thread, `clock.py`) takes one 320-byte frame per call per tick and sends it on a
duplicate of the call's socket, so nothing is sent in bursts and nothing is queued at
Asterisk that barge-in could not recall. Barge-in cancels the synthesis and flushes the
ring: the next tick sends nothing. The event loop writes to the socket only after the
clock has let go of it (the hangup at the end), under the call's send lock.
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
from cosyvoiced.audio.ring import Ring
from cosyvoiced.config.schema import AudioSocketConfig
from cosyvoiced.listen.events import DtmfPressed, EventBus, VoiceStarted, VoiceStopped
from cosyvoiced.runtime.metrics import Metrics
from cosyvoiced.serve.audiosocket.frames import (
    HEADER,
    Audio,
    CallId,
    Dtmf,
    Error,
    Frame,
    FrameParser,
    Hangup,
    Kind,
)
from cosyvoiced.serve.speech import Listening, Speech, Synthesis
from cosyvoiced.tts.request import SynthesisOptions

log = structlog.get_logger(__name__)

RATE_HZ = 8000
FRAME_SAMPLES = 160
"""20 ms at 8 kHz."""
_AUDIO_HEADER = HEADER.pack(Kind.SLIN, 2 * FRAME_SAMPLES)


class Call:
    def __init__(self, call_id: str, reader: asyncio.StreamReader,
                 writer: asyncio.StreamWriter, parser: FrameParser, speech: Speech,
                 listening: Listening, config: AudioSocketConfig, bus: EventBus,
                 metrics: Metrics) -> None:
        self.id = call_id
        self.reader = reader
        self.writer = writer
        self.parser = parser
        self.speech = speech
        self.listening = listening
        self.config = config
        self.bus = bus
        self.metrics = metrics
        self.started_s = time.monotonic()
        self.end_reason = ""
        self.ended = asyncio.Event()
        self.frames_sent = 0
        self.barge_ins = 0
        capacity = max(2 * FRAME_SAMPLES, config.playout_ms * RATE_HZ // 1000)
        self._playout = Ring.create(capacity, dtype=np.int16, policy="refuse")
        self._packet = bytearray(_AUDIO_HEADER + bytes(2 * FRAME_SAMPLES))
        self._frame = np.frombuffer(self._packet, dtype="<i2", offset=len(_AUDIO_HEADER))
        """The packet's payload: the ring copies speech straight into it."""
        self._speaking: tuple[Synthesis, asyncio.Task[None]] | None = None
        self._tasks: list[asyncio.Task[None]] = []
        self._loop = asyncio.get_running_loop()
        self._send_lock = threading.Lock()
        self._sock: socket.socket | None = self._dup_socket(writer, config.max_send_buffer_bytes)
        self._broken = False
        """A frame went out in part: nothing more (not even a hangup) can follow it."""

    @staticmethod
    def _dup_socket(writer: asyncio.StreamWriter, sndbuf_bytes: int) -> socket.socket | None:
        """The clock's own handle on the call's socket: a dup, so the event loop closing
        its end never leaves the clock writing to a reused descriptor. The kernel's send
        buffer is the slow-peer limit (Linux doubles the value asked for). None: the
        connection is already gone (the reader sees that and ends the call)."""
        transport_sock = writer.get_extra_info("socket")
        if transport_sock is None or transport_sock.fileno() < 0:
            return None
        try:
            sock = socket.socket(fileno=socket.dup(transport_sock.fileno()))
        except OSError:
            return None
        sock.setblocking(False)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, max(1, sndbuf_bytes // 2))
        return sock

    @property
    def speaking(self) -> bool:
        return self._speaking is not None or self._playout.available() > 0

    # --- the send clock (called on the clock thread every 20 ms) ----------------------

    def tick(self) -> None:
        """Send one frame if there is speech to send; never blocks, never allocates."""
        with self._send_lock:
            sock = self._sock
            if sock is None:
                return
            n = self._playout.read_into(self._frame)
            if n == 0:
                return
            if n < FRAME_SAMPLES:
                self._frame[n:] = 0
            try:
                sent = sock.send(self._packet)
            except BlockingIOError:
                sent = 0
            except OSError:
                self._stop_sending("peer_gone")
                return
            except Exception:
                log.exception("call_send_failed", call_id=self.id)
                self._stop_sending("internal_error")
                return
            if sent < len(self._packet):  # the kernel's buffer is full: the peer is not reading
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

    # --- speaking -----------------------------------------------------------------

    async def say(self, text: str) -> None:
        """Replace whatever is being said with `text` (typed errors raised here)."""
        options = SynthesisOptions(voice=self.config.voice or None, rate_hz=RATE_HZ,
                                   format="s16le")
        synthesis = await self.speech.synthesize(text, options, self.id)
        self.stop_speaking()
        task = asyncio.create_task(self._feed(synthesis))
        self._speaking = (synthesis, task)

    async def _feed(self, synthesis: Synthesis) -> None:
        """Write speech into the playout ring as it comes. The ring counts an underrun for
        each tick it comes up short between the first chunk and the last (not while
        waiting for first audio, not after the end)."""
        try:
            async for chunk in synthesis:
                pcm = np.frombuffer(chunk.data, dtype=np.int16)
                done = 0
                while done < pcm.shape[0]:
                    done += self._playout.write(pcm[done:])
                    self._playout.set_playing(True)
                    if done < pcm.shape[0]:
                        await asyncio.sleep(FRAME_SAMPLES / RATE_HZ / 2)
            self._playout.set_playing(False)
        except Exception as exc:  # a failed synthesis ends the speech, not the call
            log.error("call_speech_failed", call_id=self.id, error=str(exc),
                      code=getattr(exc, "code", "internal"))
        finally:
            if self._speaking is not None and self._speaking[1] is asyncio.current_task():
                self._speaking = None

    def stop_speaking(self) -> None:
        """Cancel synthesis and drop buffered speech: the next tick sends nothing."""
        if self._speaking is not None:
            synthesis, task = self._speaking
            self._speaking = None
            synthesis.cancel()
            task.cancel()
        self._playout.request_flush()
        self._playout.set_playing(False)

    # --- receiving ----------------------------------------------------------------

    async def run(self, early: list[Frame]) -> None:
        """Serve the call until it ends; `early` are frames read along with the UUID."""
        log.info("call_started", call_id=self.id)
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
            pcm = np.frombuffer(frame.pcm, dtype=np.int16)
            self.listening.feed(s16_to_f32(pcm, np.empty(pcm.shape, dtype=np.float32)))
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
        self.stop_speaking()
        self.barge_ins += 1
        log.info("barge_in", call_id=self.id, speech_start_ms=ev.start_ms)

    async def _finish(self) -> None:
        self.stop_speaking()
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        with contextlib.suppress(Exception):
            await self.listening.close()
        with self._send_lock:  # the clock is not mid-frame and will not send again
            sock, self._sock = self._sock, None
        if sock is not None:
            sock.close()
        if self.end_reason not in ("hangup", "peer_closed", "peer_gone") and not self._broken:
            with contextlib.suppress(ConnectionError, RuntimeError):
                self.writer.write(Hangup().encode())
        self.writer.close()
        underruns = self._playout.stats().underruns
        self._playout.close()
        self._playout.unlink()
        self.metrics.underruns.labels("call").inc(underruns)
        self.metrics.dropped_frames.labels("call").inc(self.listening.dropped)
        level = "info" if self.end_reason in ("hangup", "peer_closed") else "warning"
        getattr(log, level)("call_ended", call_id=self.id, reason=self.end_reason,
                            duration_s=round(time.monotonic() - self.started_s, 3),
                            frames_sent=self.frames_sent, barge_ins=self.barge_ins,
                            underruns=underruns, dropped_frames=self.listening.dropped)
