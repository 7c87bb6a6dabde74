"""Speaking routes: native streaming `/v1/tts` and `/v1/voices`; `stream` is shared with
the OpenAI-compatible `/v1/audio/speech` (openai.py).

Requests are checked and admitted before any byte is sent, so every error is a proper
status with a JSON body; after that, audio is streamed as each chunk is synthesized.
The response headers wait for the first chunk, so `X-Time-To-First-Audio-Ms` is real.
"""

from __future__ import annotations

import base64
import time
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import structlog
from aiohttp import web

from cosyvoiced.errors import CosyvoicedError
from cosyvoiced.runtime.metrics import Metrics
from cosyvoiced.serve.errors import api_error, as_api_error, status_for
from cosyvoiced.serve.http.body import COMPRESSED_RATE_HZ, CONTENT_TYPES, AudioBody, rate_ok
from cosyvoiced.serve.http.errors import ApiError, read_json
from cosyvoiced.serve.speech import Speech, Synthesis, Unavailable
from cosyvoiced.serve.streams import Refused, Streams
from cosyvoiced.tts.errors import TtsError
from cosyvoiced.tts.request import SynthesisOptions

log = structlog.get_logger(__name__)

@dataclass(frozen=True)
class TtsRoutes:
    speech: Speech
    streams: Streams
    metrics: Metrics

    def add_to(self, app: web.Application) -> None:
        app.router.add_post("/v1/tts", self.tts)
        app.router.add_get("/v1/voices", self.voices)

    async def voices(self, _request: web.Request) -> web.Response:
        return web.json_response({"voices": [
            {"name": v.name, "language": v.language, "sample_rate_hz": v.sample_rate_hz,
             "speakers": list(v.speakers), "quality": v.quality}
            for v in self.speech.voices()]})

    async def tts(self, request: web.Request) -> web.StreamResponse:
        body = await read_json(request)
        text = json_field(body, "text", str, required=True)
        container = json_choice(body, "format", CONTENT_TYPES, "wav", code="unsupported_format")
        rate_hz = json_field(body, "rate_hz", int)
        if container not in ("wav", "s16le", "float32", "mulaw"):  # compressed
            rate_hz = rate_hz or COMPRESSED_RATE_HZ
            if not rate_ok(container, rate_hz):
                raise api_error("unsupported_rate", f"{container} cannot carry {rate_hz} Hz")
        speed = json_field(body, "speed", float)
        length_scale = json_field(body, "length_scale", float)
        if speed is not None:
            if not 0.25 <= speed <= 4.0:
                raise api_error("bad_parameter", "speed must be within [0.25, 4.0]")
            length_scale = 1.0 / speed
        options = SynthesisOptions(
            voice=json_field(body, "voice", str), speaker=json_field(body, "speaker", (int, str)),
            length_scale=length_scale, noise_scale=json_field(body, "noise_scale", float),
            noise_w_scale=json_field(body, "noise_w_scale", float),
            volume=json_field(body, "volume", float) or 1.0, rate_hz=rate_hz,
            format=container if container in ("float32", "mulaw") else "s16le",
            ssml=bool(json_field(body, "ssml", bool)), words=bool(json_field(body, "words", bool)))
        if options.words:
            return await self.with_words(request, text, options, AudioBody(container))
        return await self.stream(request, text, options, AudioBody(container), kind="tts")

    async def with_words(self, request: web.Request, text: str, options: SynthesisOptions,
                         body: AudioBody) -> web.Response:
        """The whole audio and its words as one JSON object (`"words": true`)."""
        try:
            info = self.streams.open("tts")
        except Refused as exc:
            self.metrics.refused.labels(exc.code).inc()
            raise as_api_error(exc) from None
        data, words, audio_s, rate_hz = bytearray(), [], 0.0, 0
        try:
            try:
                synthesis = await self.speech.synthesize(text, options, info.id)
            except (TtsError, Unavailable) as exc:
                raise as_api_error(exc) from None
            async for chunk in _guard(synthesis, info.id):
                if not rate_hz:
                    rate_hz = chunk.rate_hz
                    data += body.start(chunk)
                data += await body.chunk(chunk)
                words.extend(w.to_json() for w in chunk.words)
                audio_s += chunk.duration_s
            data += await body.end()
        except MidStreamError as exc:
            raise ApiError(exc.status, exc.code, str(exc)) from None
        finally:
            body.close()
            self.streams.close(info.id)
        if not rate_hz:
            raise api_error("empty_text", "nothing to speak after normalization")
        return web.json_response({
            "audio": base64.b64encode(bytes(data)).decode("ascii"), "format": body.container,
            "sample_rate_hz": rate_hz, "duration_s": round(audio_s, 3), "words": words})

    async def stream(self, request: web.Request, text: str, options: SynthesisOptions,
                     body: AudioBody, kind: str) -> web.StreamResponse:
        """Admit, synthesize and send `text` as `body` makes it, chunk by chunk."""
        try:
            return await self._stream(request, text, options, body, kind)
        finally:
            body.close()

    async def _stream(self, request: web.Request, text: str, options: SynthesisOptions,
                      body: AudioBody, kind: str) -> web.StreamResponse:
        t0 = time.monotonic()
        try:
            info = self.streams.open("tts")
        except Refused as exc:
            self.metrics.refused.labels(exc.code).inc()
            raise as_api_error(exc) from None
        response: web.StreamResponse | None = None
        synthesis: Synthesis | None = None
        audio_s = 0.0
        try:
            try:
                synthesis = await self.speech.synthesize(text, options, info.id)
            except TtsError as exc:
                raise as_api_error(exc) from None
            except Unavailable as exc:
                self.metrics.refused.labels(exc.code).inc()
                raise as_api_error(exc) from None
            async for chunk in _guard(synthesis, info.id):
                if response is None:
                    ttfa_s = time.monotonic() - t0
                    self.metrics.tts_first_audio.observe(ttfa_s)
                    headers = {
                        "Content-Type": body.content_type,
                        "X-Sample-Rate": str(chunk.rate_hz),
                        "X-Sample-Format": body.sample_format(chunk),
                        "X-Stream-Id": info.id,
                        "X-Time-To-First-Audio-Ms": f"{ttfa_s * 1000:.1f}",
                    }
                    if not body.sse:
                        headers["Trailer"] = ", ".join(TRAILERS)
                    response = web.StreamResponse(headers=headers)
                    response.enable_chunked_encoding()
                    await response.prepare(request)
                    if head := body.start(chunk):
                        await response.write(head)
                if words := body.words(chunk):
                    await response.write(words)
                if data := await body.chunk(chunk):
                    await response.write(data)
                audio_s += chunk.duration_s
            if response is not None and (tail := await body.end()):
                await response.write(tail)
        except ConnectionError:
            log.info("tts_client_gone", stream_id=info.id, kind=kind)
            if synthesis is not None:
                synthesis.cancel()
            raise
        except MidStreamError as exc:
            if response is None:
                raise ApiError(exc.status, exc.code, str(exc)) from None
            if body.sse:  # an event stream ends with an error event, then cleanly
                await response.write(body.error(exc.code, str(exc)))
                await response.write_eof()
                return response
            response.force_close()  # no final chunk: the client sees a truncated body
            return response
        finally:
            self.streams.close(info.id)
        took_s = time.monotonic() - t0
        log.info("tts_done", stream_id=info.id, kind=kind, audio_s=round(audio_s, 3),
                 rtf=round(took_s / audio_s, 4) if audio_s else None)
        if response is None:  # text that normalized to nothing speakable
            raise api_error("empty_text", "nothing to speak after normalization")
        if body.sse:
            await response.write_eof()
            return response
        await _end_with_trailers(response, {
            "X-Audio-Seconds": f"{audio_s:.3f}",
            "X-Real-Time-Factor": f"{took_s / audio_s:.4f}" if audio_s else "0"})
        return response


async def _guard(synthesis: Synthesis, stream_id: str) -> Any:
    """The synthesis' chunks; a failure mid-stream is logged and becomes MidStreamError."""
    try:
        async for chunk in synthesis:
            yield chunk
    except (TtsError, Unavailable) as exc:
        log.error("tts_failed", stream_id=stream_id, code=exc.code, error=str(exc))
        raise MidStreamError(status_for(exc), exc.code, str(exc)) from exc


class MidStreamError(CosyvoicedError):
    """Synthesis failed: before any audio it is still an error response; after, the
    response is cut short (no final chunk), never completed as if all was well."""

    def __init__(self, status: int, code: str, message: str) -> None:
        self.status = status
        self.code = code
        super().__init__(message)


def json_field(body: dict[str, Any], name: str, kind: type | tuple[type, ...], *,
           required: bool = False) -> Any:
    value = body.get(name)
    if value is None:
        if required:
            raise api_error("missing_field", f"{name!r} is required")
        return None
    if kind is float and isinstance(value, int) and not isinstance(value, bool):
        value = float(value)
    if not isinstance(value, kind) or (isinstance(value, bool) and kind is not bool):
        names = kind.__name__ if isinstance(kind, type) else "/".join(k.__name__ for k in kind)
        raise api_error("bad_field", f"{name!r} must be {names}, got {type(value).__name__}")
    return value


def json_choice(body: dict[str, Any], name: str, choices: Iterable[str], default: str, *,
                code: str = "bad_parameter") -> str:
    """The string field `name` (`default` when absent), one of `choices` or a typed 400."""
    value = json_field(body, name, str) or default
    if value not in choices:
        raise api_error(code, f"{name} must be one of {', '.join(choices)}")
    return value


TRAILERS = ("X-Audio-Seconds", "X-Real-Time-Factor")
"""Known only once the audio is out: sent as HTTP/1.1 chunked trailers."""


async def _end_with_trailers(response: web.StreamResponse, trailers: dict[str, str]) -> None:
    """The last chunk plus trailer fields. aiohttp has no trailer API (its writer ends a
    chunked body with a bare "0\r\n\r\n"), so the terminator is written here and the
    writer, told the body is no longer chunked, adds nothing after it."""
    writer = response._payload_writer  # noqa: SLF001 - no public way to send trailers
    if writer is None or not writer.chunked:
        await response.write_eof()
        return
    fields = "".join(f"{k}: {v}\r\n" for k, v in trailers.items())
    writer.chunked = False
    await writer.write(f"0\r\n{fields}\r\n".encode("ascii"))
    await response.write_eof()
