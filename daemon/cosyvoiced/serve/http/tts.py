"""Speaking routes: native streaming `/v1/tts`, OpenAI-compatible `/v1/audio/speech`,
and `/v1/voices`.

Requests are checked and admitted before any byte is sent, so every error is a proper
status with a JSON body; after that, audio is streamed as each chunk is synthesized.
The response headers wait for the first chunk, so `X-Time-To-First-Audio-Ms` is real.
"""

from __future__ import annotations

import struct
import time
from dataclasses import dataclass
from typing import Any

import structlog
from aiohttp import web

from cosyvoiced.errors import CosyvoicedError
from cosyvoiced.runtime.metrics import Metrics
from cosyvoiced.serve.errors import api_error, as_api_error, status_for
from cosyvoiced.serve.http.errors import ApiError, read_json
from cosyvoiced.serve.speech import Speech, Synthesis, Unavailable
from cosyvoiced.serve.streams import Refused, Streams
from cosyvoiced.tts.errors import TtsError
from cosyvoiced.tts.request import SynthesisOptions

log = structlog.get_logger(__name__)

OPENAI_VOICES = frozenset({"alloy", "ash", "ballad", "coral", "echo", "fable", "nova", "onyx",
                           "sage", "shimmer", "verse"})
"""OpenAI's built-in voice names: mapped to the default voice for drop-in clients."""
OPENAI_RATE_HZ = 24000
"""OpenAI's `pcm` is 24 kHz s16le mono; its `wav` is the same in a RIFF header."""
CONTENT_TYPES = {"wav": "audio/wav", "s16le": "audio/L16", "float32": "audio/x-float32",
                 "mulaw": "audio/basic"}


def wav_header(rate_hz: int, fmt: str) -> bytes:
    """A RIFF header for a stream of unknown length (sizes 0xFFFFFFFF, as streamers do)."""
    code, bits = {"s16le": (1, 16), "float32": (3, 32), "mulaw": (7, 8)}[fmt]
    block = bits // 8
    return (b"RIFF" + struct.pack("<I", 0xFFFFFFFF) + b"WAVE"
            + b"fmt " + struct.pack("<IHHIIHH", 16, code, 1, rate_hz, rate_hz * block, block, bits)
            + b"data" + struct.pack("<I", 0xFFFFFFFF))


@dataclass(frozen=True)
class TtsRoutes:
    speech: Speech
    streams: Streams
    metrics: Metrics

    def add_to(self, app: web.Application) -> None:
        app.router.add_post("/v1/tts", self.tts)
        app.router.add_post("/v1/audio/speech", self.openai_speech)
        app.router.add_get("/v1/voices", self.voices)

    async def voices(self, _request: web.Request) -> web.Response:
        return web.json_response({"voices": [
            {"name": v.name, "language": v.language, "sample_rate_hz": v.sample_rate_hz,
             "speakers": list(v.speakers), "quality": v.quality}
            for v in self.speech.voices()]})

    async def tts(self, request: web.Request) -> web.StreamResponse:
        body = await read_json(request)
        text = _field(body, "text", str, required=True)
        container = _field(body, "format", str) or "wav"
        if container not in CONTENT_TYPES:
            raise api_error("unsupported_format",
                            f"format must be one of {', '.join(CONTENT_TYPES)}")
        speed = _field(body, "speed", float)
        length_scale = _field(body, "length_scale", float)
        if speed is not None:
            if not 0.25 <= speed <= 4.0:
                raise api_error("bad_parameter", "speed must be within [0.25, 4.0]")
            length_scale = 1.0 / speed
        options = SynthesisOptions(
            voice=_field(body, "voice", str), speaker=_field(body, "speaker", (int, str)),
            length_scale=length_scale, noise_scale=_field(body, "noise_scale", float),
            noise_w_scale=_field(body, "noise_w_scale", float),
            volume=_field(body, "volume", float) or 1.0, rate_hz=_field(body, "rate_hz", int),
            format="s16le" if container == "wav" else container,
            ssml=bool(_field(body, "ssml", bool)))
        return await self._stream(request, text, options, container, kind="tts")

    async def openai_speech(self, request: web.Request) -> web.StreamResponse:
        body = await read_json(request)
        text = _field(body, "input", str, required=True)
        fmt = _field(body, "response_format", str) or "wav"
        if fmt not in ("wav", "pcm"):
            raise api_error("unsupported_format",
                            f"response_format {fmt!r} is not supported; use wav or pcm")
        voice = _field(body, "voice", str)
        if voice in OPENAI_VOICES:
            voice = None
        speed = _field(body, "speed", float)
        if speed is not None and not 0.25 <= speed <= 4.0:
            raise api_error("bad_parameter", "speed must be within [0.25, 4.0]")
        options = SynthesisOptions(voice=voice, rate_hz=OPENAI_RATE_HZ, format="s16le",
                                   length_scale=1.0 / speed if speed else None)
        return await self._stream(request, text, options, "wav" if fmt == "wav" else "s16le",
                                  kind="openai")

    async def _stream(self, request: web.Request, text: str, options: SynthesisOptions,
                      container: str, kind: str) -> web.StreamResponse:
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
                    response = web.StreamResponse(headers={
                        "Content-Type": CONTENT_TYPES[container],
                        "X-Sample-Rate": str(chunk.rate_hz),
                        "X-Sample-Format": chunk.format,
                        "X-Stream-Id": info.id,
                        "X-Time-To-First-Audio-Ms": f"{ttfa_s * 1000:.1f}",
                        "Trailer": ", ".join(TRAILERS),
                    })
                    response.enable_chunked_encoding()
                    await response.prepare(request)
                    if container == "wav":
                        await response.write(wav_header(chunk.rate_hz, chunk.format))
                await response.write(chunk.data)
                audio_s += chunk.duration_s
        except ConnectionError:
            log.info("tts_client_gone", stream_id=info.id, kind=kind)
            if synthesis is not None:
                synthesis.cancel()
            raise
        except MidStreamError as exc:
            if response is None:
                raise ApiError(exc.status, exc.code, str(exc)) from None
            response.force_close()  # no final chunk: the client sees a truncated body
            return response
        finally:
            self.streams.close(info.id)
        took_s = time.monotonic() - t0
        log.info("tts_done", stream_id=info.id, kind=kind, audio_s=round(audio_s, 3),
                 rtf=round(took_s / audio_s, 4) if audio_s else None)
        if response is None:  # text that normalized to nothing speakable
            raise api_error("empty_text", "nothing to speak after normalization")
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


def _field(body: dict[str, Any], name: str, kind: type | tuple[type, ...], *,
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
