"""OpenAI-compatible routes, as OpenAI's clients and the apps built on them call them:
`POST /v1/audio/speech`, `POST /v1/audio/transcriptions`, `GET /v1/models` and
`GET /v1/audio/voices`.

Speech streams through the native route's path (tts.py: admission before any byte, then
one encoded piece per synthesized chunk); transcription through `/v1/transcribe`'s
(transcribe.py: admission first, decoding off the event loop). OpenAI's voice names
speak with the voices `[openai] voices` maps them to.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from dataclasses import dataclass, fields
from typing import Any

import numpy as np
from aiohttp import BodyPartReader, web

from cosyvoiced.audio.container import DecodeError, decode
from cosyvoiced.config.listeners import OpenAIConfig
from cosyvoiced.listen.events import Transcript
from cosyvoiced.listen.languages import language_name, spoken_language
from cosyvoiced.serve.errors import api_error
from cosyvoiced.serve.http.body import AudioBody
from cosyvoiced.serve.http.errors import REQUEST_TIMEOUT, read_json
from cosyvoiced.serve.http.transcribe import MAX_UPLOAD_BYTES, ListenRoutes, check_language
from cosyvoiced.serve.http.tts import TtsRoutes, json_choice, json_field
from cosyvoiced.tts.request import SynthesisOptions

OPENAI_VOICES = tuple(f.name for f in fields(OpenAIConfig().voices))
"""OpenAI's built-in voice names (`[openai] voices` maps each to a voice here)."""
SPEECH_FORMATS = ("mp3", "opus", "aac", "flac", "wav", "pcm")
OPENAI_RATE_HZ = 24000
"""OpenAI's `pcm` is 24 kHz s16le mono; every other format is made at that rate too."""
TRANSCRIPTION_FORMATS = ("json", "text", "srt", "vtt", "verbose_json")
GRANULARITIES = ("word", "segment")
"""`timestamp_granularities[]` values (OpenAI's); honoured with `verbose_json`."""
ASR_RATE_HZ = 16000
MAX_AUDIO_S = MAX_UPLOAD_BYTES / 2 / ASR_RATE_HZ
"""Longest upload `/v1/audio/transcriptions` decodes: what the largest WAV upload to
`/v1/transcribe` holds at 16 kHz (~35 min, 134 MB of float32), whatever the container's
compression."""
MAX_FIELD_BYTES = 64 * 1024
"""Largest form field other than `file` (a prompt, a language code)."""
MAX_FIELDS = 64
"""Most parts a form may have (OpenAI's clients send under ten)."""


@dataclass(frozen=True)
class OpenAIRoutes:
    tts: TtsRoutes
    listen: ListenRoutes
    config: Callable[[], OpenAIConfig]
    """The `[openai]` section as it is now (it changes on reload)."""

    def add_to(self, app: web.Application) -> None:
        app.router.add_post("/v1/audio/speech", self.speech)
        app.router.add_post("/v1/audio/transcriptions", self.transcriptions)
        app.router.add_get("/v1/models", self.models)
        app.router.add_get("/v1/audio/voices", self.voices)

    def voice_for(self, name: str | None) -> str | None:
        """The voice a request's `voice` speaks with (None: tts.voice)."""
        if name in OPENAI_VOICES:
            return getattr(self.config().voices, name) or None
        return name

    async def speech(self, request: web.Request) -> web.StreamResponse:
        body = await read_json(request)
        text = json_field(body, "input", str, required=True)
        fmt = json_choice(body, "response_format", SPEECH_FORMATS, "mp3",
                          code="unsupported_format")
        stream_format = json_choice(body, "stream_format", ("audio", "sse"), "audio")
        speed = json_field(body, "speed", float)
        if speed is not None and not 0.25 <= speed <= 4.0:
            raise api_error("bad_parameter", "speed must be within [0.25, 4.0]")
        options = SynthesisOptions(voice=self.voice_for(json_field(body, "voice", str)),
                                   rate_hz=OPENAI_RATE_HZ, format="s16le",
                                   length_scale=1.0 / speed if speed else None,
                                   words=stream_format == "sse")
        out = AudioBody("s16le" if fmt == "pcm" else fmt, sse=stream_format == "sse")
        return await self.tts.stream(request, text, options, out, kind="openai")

    async def transcriptions(self, request: web.Request) -> web.Response:
        t0 = time.monotonic()
        form, data = await read_form(request)
        if not data:
            raise api_error("empty_audio", "the form's `file` is missing or empty")
        fmt = form.get("response_format", ["json"])[-1]
        if fmt not in TRANSCRIPTION_FORMATS:
            raise api_error("unsupported_format", f"response_format must be one of "
                            f"{', '.join(TRANSCRIPTION_FORMATS)}")
        granularities = granularities_of(form)
        # word times for words, and for subtitles: cues from the first word's start to the
        # last one's end, not the VAD's padded bounds
        words = fmt in ("srt", "vtt") or (fmt == "verbose_json" and "word" in granularities)
        speech = self.listen.speech
        language = check_language(form.get("language", [""])[-1], speech)
        finals, duration_s, _ = await self.listen.transcribe_with(
            lambda: decode_upload(data, ASR_RATE_HZ), ASR_RATE_HZ, language, words)
        finals = [t for t in finals if t.text.strip()]  # an utterance Whisper heard nothing in
        text = " ".join(t.text.strip() for t in finals)
        took_s = time.monotonic() - t0
        if fmt == "text":
            return web.Response(text=text + "\n", content_type="text/plain")
        if fmt in ("srt", "vtt"):
            return web.Response(text=subtitles(finals, vtt=fmt == "vtt"),
                                content_type="text/vtt" if fmt == "vtt" else "application/x-subrip")
        if fmt == "json":
            return web.json_response({"text": text, "usage": usage(duration_s)})
        spoken = language_name(spoken_language(finals, language, speech.asr_languages()))
        out: dict[str, Any] = {"task": "transcribe", "language": spoken,
                               "duration": round(duration_s, 3), "text": text}
        if "segment" in granularities or not granularities:  # OpenAI's default: segments
            out["segments"] = [segment(i, t) for i, t in enumerate(finals)]
        if "word" in granularities:
            out["words"] = [{"word": w.word, "start": w.start_s, "end": w.end_s}
                            for t in finals for w in t.words or ()]
        return web.json_response({**out, "usage": usage(duration_s),
                                  "processing_s": round(took_s, 3)})

    async def models(self, _request: web.Request) -> web.Response:
        speech = self.tts.speech
        data = [{"id": v.name, "object": "model", "created": 0, "owned_by": "cosyvoiced",
                 "kind": "tts", "languages": [v.language]} for v in speech.voices()]
        asr = speech.asr_model()
        if asr is not None:
            data.append({"id": asr, "object": "model", "created": 0, "owned_by": "cosyvoiced",
                         "kind": "asr", "languages": list(speech.asr_languages())})
        return web.json_response({"object": "list", "data": data})

    async def voices(self, _request: web.Request) -> web.Response:
        out = [{"id": v.name, "name": v.name} for v in self.tts.speech.voices()]
        default = "tts.voice"
        for name in OPENAI_VOICES:
            out.append({"id": name, "name": f"{name} ({self.voice_for(name) or default})"})
        return web.json_response({"voices": out})


def decode_upload(data: bytes, rate_hz: int) -> np.ndarray:
    """An uploaded audio file of any container we read, as float32 mono at `rate_hz`."""
    try:
        return decode(data, MAX_AUDIO_S, rate_hz)
    except DecodeError as exc:
        raise api_error(exc.code, str(exc)) from None


async def read_form(request: web.Request) -> tuple[dict[str, list[str]], bytes]:
    """A multipart form: its text fields (each name's values in order) and the bytes of
    its `file` part, under the upload cap and the read deadline (reset while data keeps
    coming), as `/v1/transcribe` reads a body."""
    if request.content_type != "multipart/form-data":
        raise api_error("unsupported_media_type", "send multipart/form-data with a `file`")
    if request.content_length is not None and request.content_length > MAX_UPLOAD_BYTES:
        raise api_error("request_entity_too_large", f"body over {MAX_UPLOAD_BYTES} bytes")
    timeout_s = request.app.get(REQUEST_TIMEOUT, 15.0)
    form: dict[str, list[str]] = {}
    data = bytearray()
    total, parts = 0, 0
    try:
        async with asyncio.timeout(timeout_s) as deadline:
            reader = await request.multipart()
            while (part := await reader.next()) is not None:
                parts += 1
                if parts > MAX_FIELDS:
                    raise api_error("request_entity_too_large", f"over {MAX_FIELDS} form fields")
                if not isinstance(part, BodyPartReader) or part.name is None:
                    continue
                is_file = part.name == "file"
                buf = data if is_file else bytearray()
                cap = MAX_UPLOAD_BYTES if is_file else MAX_FIELD_BYTES
                while chunk := await part.read_chunk(1 << 16):
                    buf += chunk
                    total += len(chunk)
                    if len(buf) > cap or total > MAX_UPLOAD_BYTES:
                        raise api_error("request_entity_too_large",
                                        f"form field {part.name!r} over {cap} bytes, or the "
                                        f"form over {MAX_UPLOAD_BYTES}")
                    deadline.reschedule(asyncio.get_running_loop().time() + timeout_s)
                if not is_file:
                    form.setdefault(part.name, []).append(buf.decode("utf-8", "replace"))
    except TimeoutError:
        raise api_error("request_timeout",
                        f"the form did not arrive within {timeout_s} s") from None
    except (ValueError, AssertionError) as exc:  # aiohttp's malformed-multipart errors
        raise api_error("bad_form", f"not a readable multipart form: {exc}") from None
    return form, bytes(data)


def granularities_of(form: dict[str, list[str]]) -> tuple[str, ...]:
    """The form's `timestamp_granularities[]` (OpenAI's clients send the brackets), each
    one of `GRANULARITIES`, else 400 `unsupported_granularity` naming them."""
    asked = tuple(form.get("timestamp_granularities[]", [])
                  + form.get("timestamp_granularities", []))
    for granularity in asked:
        if granularity not in GRANULARITIES:
            raise api_error("unsupported_granularity",
                            f"timestamp granularity {granularity!r} is not supported: "
                            f"accepted values are {', '.join(GRANULARITIES)}")
    return asked


def span_ms(t: Transcript) -> tuple[int, int]:
    """Where an utterance's speech is: its first word's start to its last word's end
    when its words were timed, else the VAD's bounds."""
    if t.words:
        return round(t.words[0].start_s * 1000), round(t.words[-1].end_s * 1000)
    return t.start_ms, t.end_ms


def usage(duration_s: float) -> dict[str, Any]:
    return {"type": "duration", "seconds": round(duration_s, 3)}


def segment(i: int, t: Transcript) -> dict[str, Any]:
    """One verbose_json segment (its words' span when they were timed). Whisper's
    decoding here reports no token ids, log probabilities or compression ratio: those
    fields are empty or 0."""
    start_ms, end_ms = span_ms(t)
    return {"id": i, "seek": 0, "start": start_ms / 1000, "end": end_ms / 1000,
            "text": t.text.strip(), "tokens": [], "temperature": 0.0, "avg_logprob": 0.0,
            "compression_ratio": 0.0, "no_speech_prob": 0.0}


def subtitles(finals: list[Transcript], *, vtt: bool) -> str:
    """SRT or WebVTT cues, one per transcribed utterance, timed as `span_ms` says."""
    sep = "." if vtt else ","

    def stamp(ms: int) -> str:
        h, rest = divmod(ms, 3_600_000)
        m, rest = divmod(rest, 60_000)
        s, ms = divmod(rest, 1000)
        return f"{h:02d}:{m:02d}:{s:02d}{sep}{ms:03d}"

    cues = [f"{stamp(a)} --> {stamp(b)}\n{t.text.strip()}\n"
            for t in finals for a, b in [span_ms(t)]]
    if vtt:
        return "WEBVTT\n\n" + "\n".join(cues)
    return "\n".join(f"{n}\n{cue}" for n, cue in enumerate(cues, 1))
