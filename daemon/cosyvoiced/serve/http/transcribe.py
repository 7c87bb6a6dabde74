"""Listening routes: `/v1/transcribe` (upload), `/v1/events` (server-sent events) and
`/v1/stream` (WebSocket: PCM in, events out; text in, speech out on the same socket).

Both that transcribe take `?language=` (a code, tag or name of the ASR model's languages;
another is 400 `unsupported_language` before anything is admitted): without one a
multilingual model detects each utterance's language, an English-only one hears English.
Both take `?words=true` too: each transcript then carries its words' times (seconds from
the stream's start), which costs an alignment pass per utterance.
"""

from __future__ import annotations

import asyncio
import contextlib
import io
import json
import time
import wave
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import structlog
from aiohttp import WSMsgType, web

from cosyvoiced.audio.codec import s16_to_f32
from cosyvoiced.audio.resample import SUPPORTED_RATES_HZ, StreamResampler
from cosyvoiced.listen.events import EventBus, Transcript, VoiceStarted, VoiceStopped
from cosyvoiced.listen.languages import LanguageError, resolve_language, spoken_language
from cosyvoiced.serve.errors import api_error, as_api_error, status_of
from cosyvoiced.serve.http.errors import read_body
from cosyvoiced.serve.speech import BACKLOG_S, Listening, Speech, Synthesis, Unavailable
from cosyvoiced.serve.streams import Refused, Streams
from cosyvoiced.tts.errors import TtsError
from cosyvoiced.tts.request import SynthesisOptions

log = structlog.get_logger(__name__)

LISTEN_RATES_HZ = (8000, 16000)
MAX_UPLOAD_BYTES = 64 * 1024 * 1024


def pcm16_to_f32(data: bytes) -> np.ndarray:
    pcm = np.frombuffer(data, dtype="<i2").astype(np.int16, copy=False)
    return s16_to_f32(pcm, np.empty(pcm.shape, dtype=np.float32))


def decode_upload(body: bytes, content_type: str, rate_param: str | None) -> tuple[np.ndarray,
                                                                                   int]:
    """A WAV file (16-bit mono) or raw s16le PCM (rate from `?rate_hz=`) -> samples, rate."""
    if not body:
        raise api_error("empty_audio", "the upload is empty")
    if content_type in ("audio/wav", "audio/x-wav", "audio/wave") or body[:4] == b"RIFF":
        try:
            with wave.open(io.BytesIO(body)) as w:
                if w.getsampwidth() != 2 or w.getnchannels() != 1:
                    raise api_error("unsupported_audio",
                                    f"need 16-bit mono WAV, got {8 * w.getsampwidth()}-bit "
                                    f"{w.getnchannels()}-channel")
                rate = w.getframerate()
                data = w.readframes(w.getnframes())
        except (wave.Error, EOFError, RuntimeError) as exc:  # RuntimeError: a chunk past the end
            raise api_error("bad_wav", f"not a readable WAV file: {exc}") from None
    elif content_type in ("application/octet-stream", "audio/l16", "audio/pcm"):
        try:
            rate = int(rate_param or "16000")
        except ValueError:
            raise api_error("bad_parameter", "rate_hz must be an integer") from None
        data = body
    else:
        raise api_error("unsupported_media_type",
                        "send audio/wav, or raw s16le PCM as application/octet-stream "
                        "with ?rate_hz=")
    if rate not in SUPPORTED_RATES_HZ:
        raise api_error("unsupported_rate", f"rate {rate} Hz; supported: "
                        f"{', '.join(map(str, SUPPORTED_RATES_HZ))}")
    if len(data) % 2:
        raise api_error("bad_audio", "PCM byte count must be even (16-bit samples)")
    return pcm16_to_f32(data), rate


def upload_rate(body: bytes, content_type: str, rate_param: str | None) -> int:
    """The sample rate an upload declares (its WAV header, or `?rate_hz=` for raw PCM),
    checked as `decode_upload` checks it, without converting the audio."""
    if not body:
        raise api_error("empty_audio", "the upload is empty")
    if content_type in ("audio/wav", "audio/x-wav", "audio/wave") or body[:4] == b"RIFF":
        try:
            with wave.open(io.BytesIO(body)) as w:  # reads the header, not the frames
                rate = w.getframerate()
        except (wave.Error, EOFError, RuntimeError) as exc:  # RuntimeError: a chunk past the end
            raise api_error("bad_wav", f"not a readable WAV file: {exc}") from None
        if rate not in SUPPORTED_RATES_HZ:
            raise api_error("unsupported_rate", f"rate {rate} Hz; supported: "
                            f"{', '.join(map(str, SUPPORTED_RATES_HZ))}")
        return rate
    return decode_upload(body[:2], content_type, rate_param)[1]


def decode_at(body: bytes, content_type: str, rate_param: str | None,
              rate_hz: int) -> np.ndarray:
    """The upload's samples at `rate_hz`, decoded and resampled (run off the event loop)."""
    samples, rate = decode_upload(body, content_type, rate_param)
    if rate != rate_hz:
        rs = StreamResampler(rate, rate_hz)
        samples = np.concatenate([rs.process(samples), rs.flush()])
    return samples


def check_language(asked: str, speech: Speech) -> str:
    """The language code a request asks for ("": none), or its typed error: 503
    `asr_disabled` with ASR off, 400 `unsupported_language` naming the model's languages."""
    if speech.asr_model() is None:
        raise api_error("asr_disabled", "speech recognition is off (asr.enabled)")
    try:
        return resolve_language(asked, speech.asr_languages())
    except LanguageError as exc:
        raise api_error(exc.code, str(exc)) from None


def words_flag(request: web.Request) -> bool:
    """`?words=`: true/1 or false/0 (absent: false); anything else is 400."""
    value = request.query.get("words", "false").lower()
    if value not in ("true", "1", "false", "0"):
        raise api_error("bad_parameter", "words must be true or false")
    return value in ("true", "1")


MAX_SSE_SUBSCRIBERS = 64
"""`GET /v1/events` connections at once (each holds a queue of up to 1024 events); more
are 503 `overloaded`."""


@dataclass(frozen=True)
class ListenRoutes:
    speech: Speech
    streams: Streams
    bus: EventBus
    sse: list[int] = field(default_factory=lambda: [0])
    """Open `GET /v1/events` responses (a one-item counter: the routes are frozen)."""

    def add_to(self, app: web.Application) -> None:
        app.router.add_post("/v1/transcribe", self.transcribe)
        app.router.add_get("/v1/events", self.events)
        app.router.add_get("/v1/stream", self.stream)

    async def _listen(self, rate_hz: int, kind: str, backlog_s: float | None = BACKLOG_S,
                      language: str = "", words: bool = False) -> tuple[Listening, str]:
        try:
            info = self.streams.open(kind)
        except Refused as exc:
            raise as_api_error(exc) from None
        try:
            return (await self.speech.listen(rate_hz, info.id, backlog_s, language, words),
                    info.id)
        except Unavailable as exc:
            self.streams.close(info.id)
            raise as_api_error(exc) from None
        except BaseException:
            self.streams.close(info.id)
            raise

    async def transcribe(self, request: web.Request) -> web.Response:
        t0 = time.monotonic()
        body = await read_body(request, MAX_UPLOAD_BYTES, streaming=True)
        ctype = request.content_type
        rate_param = request.query.get("rate_hz")
        rate = upload_rate(body, ctype, rate_param)  # the header only: typed errors now
        asked = request.query.get("language", "")
        language = check_language(asked, self.speech) if asked else ""
        words = words_flag(request)
        listen_rate = rate if rate in LISTEN_RATES_HZ else 16000
        finals, duration_s, stream_id = await self.transcribe_with(
            lambda: decode_at(body, ctype, rate_param, listen_rate), listen_rate, language,
            words)
        segments = [{"text": t.text.strip(), "start_ms": t.start_ms, "end_ms": t.end_ms,
                     "latency_ms": t.latency_ms, "rtf": t.rtf, "language": t.language,
                     **({"words": [w.to_dict() for w in t.words or ()]} if words else {})}
                    for t in finals]
        took_ms = (time.monotonic() - t0) * 1000
        return web.json_response({
            "text": " ".join(s["text"] for s in segments if s["text"]),
            "language": spoken_language(finals, language, self.speech.asr_languages()),
            "segments": segments,
            "duration_s": round(duration_s, 3),
            "processing_ms": round(took_ms, 1),
            "stream_id": stream_id,
        })

    async def transcribe_with(self, decode: Callable[[], np.ndarray], listen_rate: int,
                              language: str = "", words: bool = False
                              ) -> tuple[list[Transcript], float, str]:
        """Admit a listening stream at `listen_rate` in `language` (a code checked by
        `check_language`, or ""), then run `decode` (the upload's samples at that rate)
        off the event loop and transcribe them (with word times when `words`): the
        finals, the audio's duration and the stream's id."""
        # admitted before the work of decoding, which runs off the event loop
        listening, stream_id = await self._listen(listen_rate, "transcribe", backlog_s=None,
                                                  language=language, words=words)
        try:
            try:
                samples = await asyncio.to_thread(decode)
            except BaseException:
                await listening.close()  # an upload that does not decode frees its slot
                raise
            listening.feed(samples)
            finals = await listening.close()
        finally:
            self.streams.close(stream_id)
        return finals, len(samples) / listen_rate, stream_id

    async def events(self, request: web.Request) -> web.StreamResponse:
        want_stream = request.query.get("stream") or request.query.get("call")
        if self.sse[0] >= MAX_SSE_SUBSCRIBERS:
            raise api_error("overloaded", f"{MAX_SSE_SUBSCRIBERS} event subscribers already")
        self.sse[0] += 1
        try:
            return await self._events(request, want_stream)
        finally:
            self.sse[0] -= 1

    async def _events(self, request: web.Request, want_stream: str | None
                      ) -> web.StreamResponse:
        sub = self.bus.subscribe(maxsize=1024)
        response = web.StreamResponse(headers={"Content-Type": "text/event-stream",
                                               "Cache-Control": "no-cache"})
        await response.prepare(request)
        try:
            await response.write(b": connected\n\n")
            while True:
                try:
                    event = await asyncio.wait_for(sub.get(), 15.0)
                except TimeoutError:
                    await response.write(b": keep-alive\n\n")
                    continue
                if notice := sub.dropped_notice():
                    await response.write(f"event: events_dropped\ndata: {json.dumps(notice)}\n\n"
                                         .encode())
                if want_stream and event.stream != want_stream:
                    continue
                data = json.dumps(event.to_dict())
                await response.write(f"event: {event.type}\ndata: {data}\n\n".encode())
        except (ConnectionError, EOFError):
            pass
        finally:
            sub.close()
        return response

    async def stream(self, request: web.Request) -> web.StreamResponse:
        """WebSocket duplex: binary s16le mono in at `?rate_hz=` (8000/16000) -> JSON events
        out; JSON `{"type": "say", "text": ...}` in -> binary s16le audio out at
        `?out_rate_hz=`; `{"type": "stop"}` flushes what is being spoken; `{"type": "end"}`
        transcribes what is still open, sends it, then `{"type": "ended"}` and closes.

        A request that is no WebSocket handshake is answered 426 `websocket_required` with
        nothing opened; once opened, the stream is closed whatever fails after."""
        try:
            rate = int(request.query.get("rate_hz", "16000"))
            out_rate = int(request.query.get("out_rate_hz", "16000"))
        except ValueError:
            raise api_error("bad_parameter", "rate_hz/out_rate_hz must be integers") from None
        if rate not in LISTEN_RATES_HZ or out_rate not in SUPPORTED_RATES_HZ:
            raise api_error("unsupported_rate", f"rate_hz must be one of {LISTEN_RATES_HZ}")
        asked = request.query.get("language", "")
        language = check_language(asked, self.speech) if asked else ""
        words = words_flag(request)
        ws = web.WebSocketResponse(heartbeat=20.0, max_msg_size=1 << 20)
        if not ws.can_prepare(request).ok:
            return websocket_required()
        listening, stream_id = await self._listen(rate, "ws", language=language, words=words)
        session: _WsSession | None = None
        forward: asyncio.Task[None] | None = None
        try:
            await ws.prepare(request)
            session = _WsSession(ws, self.speech, stream_id, out_rate)
            forward = asyncio.create_task(session.forward_events(listening))
            await ws.send_json({"type": "ready", "stream": stream_id, "rate_hz": rate,
                                "out_rate_hz": out_rate})
            async for msg in ws:
                if msg.type == WSMsgType.BINARY:
                    if len(msg.data) % 2:
                        await ws.send_json(_err("bad_audio", "odd byte count"))
                        continue
                    listening.feed(pcm16_to_f32(msg.data))
                elif msg.type == WSMsgType.TEXT:
                    if await session.command(msg.data) == "end":
                        break
        finally:
            try:
                if session is not None:
                    session.stop_speaking()
                try:
                    finals = await listening.close()
                finally:
                    if forward is not None:
                        forward.cancel()
                        with contextlib.suppress(asyncio.CancelledError):
                            await forward
                if session is not None and ws.prepared:
                    with contextlib.suppress(ConnectionError, RuntimeError):
                        for t in finals:  # the open utterance's, unless already sent
                            if t not in session.sent:
                                await ws.send_json(t.to_dict())
                        await ws.send_json({"type": "ended"})
                    await ws.close()
            finally:
                self.streams.close(stream_id)
        return ws


def websocket_required() -> web.Response:
    """426 for a request to a WebSocket route without a (valid) upgrade handshake."""
    code = "websocket_required"
    return web.json_response(
        {"error": {"code": code, "message": "this route is a WebSocket: send a GET with "
                   "Connection: Upgrade, Upgrade: websocket and Sec-WebSocket-Key/-Version"}},
        status=status_of(code), headers={"Upgrade": "websocket"})


def _err(code: str, message: str) -> dict[str, Any]:
    return {"type": "error", "error": {"code": code, "message": message}}


class _WsSession:
    def __init__(self, ws: web.WebSocketResponse, speech: Speech, stream_id: str,
                 out_rate_hz: int) -> None:
        self.ws = ws
        self.speech = speech
        self.stream_id = stream_id
        self.out_rate_hz = out_rate_hz
        self._speaking: tuple[Synthesis, asyncio.Task[None]] | None = None
        self.sent: set[Transcript] = set()
        """Transcripts already sent as events (close must not send them twice)."""

    async def forward_events(self, listening: Listening) -> None:
        async for ev in listening.events():
            if isinstance(ev, VoiceStarted | VoiceStopped | Transcript):
                await self.ws.send_json(ev.to_dict())
                if isinstance(ev, Transcript):
                    self.sent.add(ev)

    async def command(self, raw: str) -> str:
        """Run one text command; returns its type ("" if it was malformed)."""
        try:
            cmd = json.loads(raw)
            kind = cmd["type"]
        except (json.JSONDecodeError, KeyError, TypeError):
            await self.ws.send_json(_err("bad_json",
                                         'expected {"type": "say"|"stop"|"end", ...}'))
            return ""
        if kind == "end":
            return kind
        if kind == "stop":
            self.stop_speaking()
            await self.ws.send_json({"type": "stopped"})
        elif kind == "say":
            self.stop_speaking()
            options = SynthesisOptions(voice=cmd.get("voice"), rate_hz=self.out_rate_hz,
                                       format="s16le")
            try:
                synthesis = await self.speech.synthesize(cmd.get("text", ""), options,
                                                         self.stream_id)
            except (TtsError, Unavailable) as exc:
                await self.ws.send_json(_err(exc.code, str(exc)))
                return kind
            task = asyncio.create_task(self._speak(synthesis))
            self._speaking = (synthesis, task)
        else:
            await self.ws.send_json(_err("unknown_command", f"unknown type {kind!r}"))
        return kind

    async def _speak(self, synthesis: Synthesis) -> None:
        with contextlib.suppress(ConnectionError, RuntimeError):
            async for chunk in synthesis:
                await self.ws.send_bytes(chunk.data)
            await self.ws.send_json({"type": "spoken"})

    def stop_speaking(self) -> None:
        if self._speaking is not None:
            synthesis, task = self._speaking
            synthesis.cancel()
            task.cancel()
            self._speaking = None
