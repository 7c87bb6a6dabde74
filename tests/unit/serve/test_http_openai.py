"""OpenAI-compatible routes over a real aiohttp server, with the Speech interface faked
and real encoders (PyAV)."""

from __future__ import annotations

import base64
import dataclasses
import io
import json

import av
import numpy as np
import pytest
from aiohttp import FormData

from cosyvoiced.audio.container import decode
from cosyvoiced.config.listeners import OpenAIConfig, OpenAIVoices
from cosyvoiced.config.schema import Config
from cosyvoiced.listen.events import Transcript, Word
from cosyvoiced.serve.http.openai import segment, subtitles
from tests.fakes.daemon import FakeDaemon, wav_bytes
from tests.fakes.speech import FakeSpeech
from tests.unit.serve.test_http_api import run as run_any

WORDS = "one two three four five"
"""The fake speaks 0.1 s per word: 0.5 s."""
TYPES = {"mp3": "audio/mpeg", "opus": "audio/ogg", "aac": "audio/aac", "flac": "audio/flac",
         "wav": "audio/wav", "pcm": "audio/L16"}


def run(go, daemon: FakeDaemon | None = None):
    return run_any(go, daemon or FakeDaemon(speech=FakeSpeech(at_rate_asked=True)))


def speech_body(**kw) -> dict:
    return {"model": "tts-1", "input": WORDS, "voice": "alloy", **kw}


@pytest.mark.parametrize("fmt", sorted(TYPES))
def test_speech_in_every_format_decodes_to_what_was_synthesized(fmt):
    async def go(http, daemon):
        async with http.post("/v1/audio/speech", json=speech_body(response_format=fmt)) as r:
            assert r.status == 200, await r.text()
            assert r.headers["Content-Type"] == TYPES[fmt]
            data = await r.read()
        if fmt == "pcm":
            audio = np.frombuffer(data, "<i2").astype(np.float32) / 32768
            assert audio.size == 5 * 2400
        else:
            audio = decode(data, 60.0, 24000)
        assert abs(audio.size / 24000 - 0.5) < 0.1
        if fmt != "opus":  # the fake's constant level: Opus codes no DC (e2e hears speech)
            assert np.median(audio[2400:-2400]) == pytest.approx(0.25, abs=0.03)
        assert len(daemon.streams) == 0
    run(go)


def test_speech_defaults_to_mp3_and_tts_keeps_wav():
    async def go(http, daemon):
        async with http.post("/v1/audio/speech", json=speech_body()) as r:
            assert r.status == 200 and r.headers["Content-Type"] == "audio/mpeg"
            assert decode(await r.read(), 60.0, 24000).size > 0
        async with http.post("/v1/tts", json={"text": WORDS}) as r:
            assert r.headers["Content-Type"] == "audio/wav"
        async with http.post("/v1/tts", json={"text": WORDS, "format": "flac"}) as r:
            assert r.status == 200 and r.headers["Content-Type"] == "audio/flac"
            assert r.headers["X-Sample-Rate"] == "24000" and r.headers["X-Sample-Format"] == "flac"
            assert abs(decode(await r.read(), 60.0, 24000).size / 24000 - 0.5) < 0.1
    run(go)


@pytest.mark.parametrize("fmt", ["mp3", "pcm"])
def test_speech_as_server_sent_events(fmt):
    async def go(http, daemon):
        body = speech_body(response_format=fmt, stream_format="sse")
        async with http.post("/v1/audio/speech", json=body) as r:
            assert r.status == 200 and r.headers["Content-Type"] == "text/event-stream"
            text = (await r.read()).decode()
        events = [json.loads(block.removeprefix("data: "))
                  for block in text.split("\n\n") if block]
        assert {e["type"] for e in events[:-1]} == {"speech.audio.delta", "speech.word"}
        assert events[-1] == {"type": "speech.audio.done", "usage": {
            "input_tokens": 0, "output_tokens": 0, "total_tokens": 0}}
        words = [e for e in events if e["type"] == "speech.word"]
        assert [(w["text"], w["char_start"], w["char_end"]) for w in words] == [
            (w, WORDS.index(w), WORDS.index(w) + len(w)) for w in WORDS.split()]
        assert words[1] == {"type": "speech.word", "text": "two", "start": 0.1, "end": 0.18,
                            "char_start": 4, "char_end": 7}
        if fmt == "pcm":  # each word before the delta holding its start
            kinds = [e["type"] for e in events[:-1]]
            assert kinds == ["speech.word", "speech.audio.delta"] * len(words)
        audio = b"".join(base64.b64decode(e["audio"]) for e in events
                         if e["type"] == "speech.audio.delta")
        n = len(audio) // 2 if fmt == "pcm" else decode(audio, 60.0, 24000).size
        assert abs(n / 24000 - 0.5) < 0.1
    run(go)


def test_a_failure_mid_way_ends_the_event_stream_with_an_error_event():
    async def go(http, daemon):
        body = speech_body(input="one two FAIL four", response_format="pcm",
                           stream_format="sse")
        async with http.post("/v1/audio/speech", json=body) as r:
            assert r.status == 200
            text = (await r.read()).decode()
        events = [json.loads(block.removeprefix("data: "))
                  for block in text.split("\n\n") if block]
        assert [e["type"] for e in events].count("speech.audio.delta") == 2
        assert events[-1]["type"] == "error"
        assert events[-1]["error"]["code"] == "audio_too_long"
        assert "speech.audio.done" not in [e["type"] for e in events]
        async with http.post("/v1/audio/speech", json=speech_body()) as r:  # undisturbed
            assert r.status == 200 and len(await r.read()) > 1000
    run(go)


def test_plain_speech_asks_for_no_word_times():
    async def go(http, daemon):
        async with http.post("/v1/audio/speech", json=speech_body()) as r:
            await r.read()
        assert daemon.speech.requests[-1][1].words is False
    run(go)


def test_native_tts_with_words_answers_json():
    async def go(http, daemon):
        async with http.post("/v1/tts", json={"text": WORDS, "words": True}) as r:
            assert r.status == 200
            got = await r.json()
        assert got["format"] == "wav" and got["duration_s"] == 0.5
        assert base64.b64decode(got["audio"])[:4] == b"RIFF"
        assert [w["text"] for w in got["words"]] == WORDS.split()
    run(go)


def test_openai_voice_names_map_through_config():
    voices = dataclasses.replace(OpenAIVoices(), nova="en_US-joe-medium", cedar="nope")
    daemon = FakeDaemon(speech=FakeSpeech(at_rate_asked=True),
                        config=Config(openai=OpenAIConfig(voices=voices)))

    async def go(http, daemon):
        for name, want in [("nova", "en_US-joe-medium"), ("alloy", None), ("marin", None),
                           ("en_US-joe-medium", "en_US-joe-medium")]:
            async with http.post("/v1/audio/speech", json=speech_body(voice=name)) as r:
                assert r.status == 200
            assert daemon.speech.requests[-1][1].voice == want
        for name in ("cedar", "bob"):  # mapped to a voice that is not there; no such name
            async with http.post("/v1/audio/speech", json=speech_body(voice=name)) as r:
                assert r.status == 400 and (await r.json())["error"]["code"] == "unknown_voice"
        async with http.get("/v1/audio/voices") as r:
            listed = {v["id"]: v["name"] for v in (await r.json())["voices"]}
        assert listed["en_US-joe-medium"] == "en_US-joe-medium"
        assert listed["nova"] == "nova (en_US-joe-medium)" and listed["ash"] == "ash (tts.voice)"
        assert {"alloy", "ash", "ballad", "coral", "echo", "fable", "nova", "onyx", "sage",
                "shimmer", "verse", "marin", "cedar"} <= set(listed)
    run(go, daemon)


@pytest.mark.parametrize("body,code", [
    (speech_body(response_format="ogg"), "unsupported_format"),
    (speech_body(stream_format="ws"), "bad_parameter"),
    (speech_body(speed=5.0), "bad_parameter"),
    ({"voice": "alloy"}, "missing_field"),
])
def test_speech_errors_are_typed(body, code):
    async def go(http, daemon):
        async with http.post("/v1/audio/speech", json=body) as r:
            assert r.status == 400 and (await r.json())["error"]["code"] == code
    run(go)


def test_models_list_the_voices_and_the_asr_model():
    async def go(http, daemon):
        async with http.get("/v1/models") as r:
            out = await r.json()
        assert out["object"] == "list"
        by_id = {m["id"]: m for m in out["data"]}
        assert by_id["en_US-joe-medium"]["kind"] == "tts"
        assert by_id["whisper-tiny.en"] == {"id": "whisper-tiny.en", "object": "model",
                                            "created": 0, "owned_by": "cosyvoiced",
                                            "kind": "asr", "languages": ["en"]}
    run(go)


def webm(samples: np.ndarray, rate: int) -> bytes:
    return upload(samples, rate, "webm", "libopus", 48000)


def flac(samples: np.ndarray, rate: int) -> bytes:
    return upload(samples, rate, "flac", "flac", rate)


def upload(samples: np.ndarray, rate: int, fmt: str, codec: str, codec_rate: int) -> bytes:
    buf = io.BytesIO()
    with av.open(buf, "w", format=fmt) as c:
        s = c.add_stream(codec, rate=codec_rate, layout="mono")
        frame = av.AudioFrame.from_ndarray(samples.reshape(1, -1).astype(np.float32),
                                           format="flt", layout="mono")
        frame.sample_rate = rate
        for f in [frame, None]:
            for p in s.encode(f):
                c.mux(p)
    return buf.getvalue()


SPEECH = np.concatenate([np.zeros(8000), np.full(8000, 0.5), np.zeros(8000),
                         np.full(4000, 0.5), np.zeros(4000)]).astype(np.float32)
"""At 16 kHz: two 'utterances' for the fake listener, 0.5-1.0 s and 1.5-1.75 s."""


def form(data: bytes, **fields) -> FormData:
    f = FormData()
    f.add_field("file", io.BytesIO(data), filename="speech.webm", content_type="audio/webm")
    f.add_field("model", "whisper-1")
    for name, value in fields.items():
        for v in value if isinstance(value, list) else [value]:
            f.add_field(name, v)
    return f


def test_transcriptions_of_a_webm_upload():
    async def go(http, daemon):
        async with http.post("/v1/audio/transcriptions", data=form(webm(SPEECH, 16000))) as r:
            assert r.status == 200
            assert (await r.json())["text"]  # Opus codes no DC: the fake hears something
        assert daemon.speech.listens[-1].rate_hz == 16000
        assert len(daemon.streams) == 0
    run(go)


def test_transcriptions_in_every_response_format():
    async def go(http, daemon):
        upload = flac(SPEECH, 16000)
        got = {}
        for fmt in ("json", "text", "srt", "vtt", "verbose_json"):
            async with http.post("/v1/audio/transcriptions",
                                 data=form(upload, response_format=fmt,
                                           **{"timestamp_granularities[]": "segment"})) as r:
                assert r.status == 200, await r.text()
                got[fmt] = (r.headers["Content-Type"], await r.text())
        assert daemon.speech.listens[-1].rate_hz == 16000
        assert len(daemon.streams) == 0
        assert json.loads(got["json"][1])["text"].count("samples") == 2
        assert got["text"][0].startswith("text/plain") and got["text"][1].count("samples") == 2
        srt = got["srt"][1].splitlines()
        assert srt[0] == "1" and srt[1].startswith("00:00:00,5") and " --> 00:00:01," in srt[1]
        assert got["vtt"][1].startswith("WEBVTT\n\n00:00:00.5")
        verbose = json.loads(got["verbose_json"][1])
        assert verbose["language"] == "english" and abs(verbose["duration"] - 2.0) < 0.1
        assert [round(s["start"], 1) for s in verbose["segments"]] == [0.5, 1.5]
    run(go)


def test_verbose_json_with_word_and_segment_times():
    async def go(http, daemon):
        got = {}
        for asked in (["word"], ["word", "segment"], ["segment"], []):
            fields = {"timestamp_granularities[]": asked} if asked else {}
            async with http.post("/v1/audio/transcriptions",
                                 data=form(flac(SPEECH, 16000), response_format="verbose_json",
                                           **fields)) as r:
                assert r.status == 200, await r.text()
                got[tuple(asked)] = await r.json()
            assert daemon.speech.listens[-1].words == ("word" in asked)  # cost only if asked
        words = got[("word",)]["words"]
        assert "segments" not in got[("word",)]  # OpenAI's shape for words alone
        assert all(set(w) == {"word", "start", "end"} for w in words)
        starts = [w["start"] for w in words]
        assert starts == sorted(starts) and len(words) == 5 + 2  # 0.5 s and 0.25 s of speech
        assert all(0 <= w["start"] <= w["end"] <= got[("word",)]["duration"] for w in words)
        both = got[("word", "segment")]
        assert both["words"] == words
        assert [(s["start"], s["end"]) for s in both["segments"]] == [(0.5, 1.0), (1.5, 1.75)]
        assert "words" not in got[("segment",)] and "words" not in got[()]
        assert got[("segment",)]["segments"] == got[()]["segments"]
    run(go)


def test_subtitles_are_timed_from_the_words():
    async def go(http, daemon):
        for fmt in ("srt", "vtt", "json"):
            async with http.post("/v1/audio/transcriptions",
                                 data=form(flac(SPEECH, 16000), response_format=fmt)) as r:
                assert r.status == 200
            assert daemon.speech.listens[-1].words == (fmt != "json")
    run(go)
    # the VAD's bounds pad the speech; the cues run from the first word to the last
    timed = Transcript("Please hold.", 1000, 4000, 1.0, 0.1,
                       words=(Word("Please", 1.24, 1.6, 0.9), Word("hold.", 1.6, 2.35, 0.9)))
    untimed = Transcript("Bye.", 5000, 6020, 1.0, 0.1)
    assert subtitles([timed, untimed], vtt=True) == (
        "WEBVTT\n\n00:00:01.240 --> 00:00:02.350\nPlease hold.\n\n"
        "00:00:05.000 --> 00:00:06.020\nBye.\n")
    assert subtitles([timed], vtt=False) == "1\n00:00:01,240 --> 00:00:02,350\nPlease hold.\n"
    assert segment(0, timed)["start"] == 1.24 and segment(0, timed)["end"] == 2.35


def test_an_unknown_granularity_names_the_accepted_ones():
    async def go(http, daemon):
        async with http.post("/v1/audio/transcriptions",
                             data=form(webm(SPEECH, 16000), response_format="verbose_json",
                                       **{"timestamp_granularities[]": ["word", "phoneme"]})
                             ) as r:
            assert r.status == 400
            error = (await r.json())["error"]
        assert error["code"] == "unsupported_granularity"
        assert "'phoneme'" in error["message"] and "word, segment" in error["message"]
        assert not daemon.speech.listens
    run(go)


@pytest.mark.parametrize("fields,status,code", [
    ({"timestamp_granularities[]": ["segment", "sentence"]}, 400, "unsupported_granularity"),
    ({"language": "de"}, 400, "unsupported_language"),
    ({"response_format": "xml"}, 400, "unsupported_format"),
])
def test_transcription_requests_we_cannot_honour_are_typed_errors(fields, status, code):
    async def go(http, daemon):
        async with http.post("/v1/audio/transcriptions",
                             data=form(webm(SPEECH, 16000), **fields)) as r:
            assert r.status == status and (await r.json())["error"]["code"] == code
        assert not daemon.speech.listens  # refused before admission
    run(go)


def test_transcription_of_what_is_no_audio_frees_its_stream():
    async def go(http, daemon):
        async with http.post("/v1/audio/transcriptions", data=form(b"not audio at all")) as r:
            assert r.status == 415 and (await r.json())["error"]["code"] == "unsupported_audio"
        assert len(daemon.streams) == 0
        f = FormData(default_to_multipart=True)
        f.add_field("model", "whisper-1")
        async with http.post("/v1/audio/transcriptions", data=f) as r:
            assert r.status == 400 and (await r.json())["error"]["code"] == "empty_audio"
        async with http.post("/v1/audio/transcriptions", json={"file": "x"}) as r:
            assert r.status == 415
        # a WAV still goes through the same decoder
        wav = wav_bytes((SPEECH * 32767).astype(np.int16), 16000)
        async with http.post("/v1/audio/transcriptions", data=form(wav)) as r:
            assert (await r.json())["text"].count("samples") == 2
    run(go)


def test_an_oversized_form_is_413():
    from cosyvoiced.serve.http.transcribe import MAX_UPLOAD_BYTES

    async def go(http, daemon):
        async with http.post("/v1/audio/transcriptions",
                             data=form(b"\0" * (MAX_UPLOAD_BYTES + 1))) as r:
            assert r.status == 413
        big = FormData()
        big.add_field("prompt", "x" * 100_000)
        big.add_field("file", io.BytesIO(b"x"), filename="a.mp3")
        async with http.post("/v1/audio/transcriptions", data=big) as r:
            assert r.status == 413
        many = FormData(default_to_multipart=True)
        for _ in range(100):
            many.add_field("language", "en")
        async with http.post("/v1/audio/transcriptions", data=many) as r:
            assert r.status == 413
        assert not daemon.speech.listens
    run(go)


def test_transcription_with_asr_off_is_503_and_models_leave_it_out():
    daemon = FakeDaemon(speech=FakeSpeech(at_rate_asked=True))
    daemon.speech.asr_model = lambda: None

    async def go(http, daemon):
        async with http.post("/v1/audio/transcriptions", data=form(flac(SPEECH, 16000))) as r:
            assert r.status == 503 and (await r.json())["error"]["code"] == "asr_disabled"
        async with http.get("/v1/models") as r:
            assert [m["kind"] for m in (await r.json())["data"]] == ["tts"]
        assert not daemon.speech.listens
    run(go, daemon)


def test_subtitle_stamps_and_numbering():
    from cosyvoiced.listen.events import Transcript
    from cosyvoiced.serve.http.openai import subtitles

    finals = [Transcript(" hello ", 3_723_004, 3_725_010, 1.0, 0.1),
              Transcript("bye", 3_726_000, 3_727_999, 1.0, 0.1)]
    assert subtitles(finals, vtt=False) == ("1\n01:02:03,004 --> 01:02:05,010\nhello\n\n"
                                            "2\n01:02:06,000 --> 01:02:07,999\nbye\n")
    assert subtitles(finals[1:], vtt=True) == "WEBVTT\n\n01:02:06.000 --> 01:02:07.999\nbye\n"
    assert subtitles([], vtt=True) == "WEBVTT\n\n"


class MultilingualSpeech(FakeSpeech):
    """The fake with a multilingual model's languages."""

    def asr_model(self) -> str | None:
        return "whisper-base"

    def asr_languages(self) -> tuple[str, ...]:
        return ("en", "de", "es")


def test_the_language_asked_reaches_the_stream_and_names_the_transcription():
    daemon = FakeDaemon(speech=MultilingualSpeech(at_rate_asked=True))

    async def go(http, daemon):
        async with http.get("/v1/models") as r:
            asr = [m for m in (await r.json())["data"] if m["kind"] == "asr"]
        assert asr == [{"id": "whisper-base", "object": "model", "created": 0,
                        "owned_by": "cosyvoiced", "kind": "asr",
                        "languages": ["en", "de", "es"]}]
        for asked, code in [("de-DE", "de"), ("spanish", "es"), ("", "")]:
            fields = {"response_format": "verbose_json", **({"language": asked} if asked else {})}
            async with http.post("/v1/audio/transcriptions",
                                 data=form(flac(SPEECH, 16000), **fields)) as r:
                assert r.status == 200, await r.text()
                verbose = await r.json()
            assert daemon.speech.listens[-1].language == code
            # none asked: the fake's transcripts name no language, nor does the answer
            assert verbose["language"] == {"de": "german", "es": "spanish", "": ""}[code]
        async with http.post("/v1/audio/transcriptions",
                             data=form(flac(SPEECH, 16000), language="fr")) as r:
            err = (await r.json())["error"]
        assert r.status == 400 and err["code"] == "unsupported_language"
        assert err["message"].endswith("transcribes en, de, es")
        wav = wav_bytes((SPEECH * 32767).astype(np.int16), 16000)
        async with http.post("/v1/transcribe?language=de", data=wav,
                             headers={"Content-Type": "audio/wav"}) as r:
            assert r.status == 200 and (await r.json())["language"] == "de"
        assert daemon.speech.listens[-1].language == "de"
        async with http.post("/v1/transcribe?language=fr", data=wav,
                             headers={"Content-Type": "audio/wav"}) as r:
            assert r.status == 400 and (await r.json())["error"]["code"] == "unsupported_language"
        async with http.get("/v1/stream?language=fr") as r:
            assert r.status == 400  # checked before the WebSocket is opened
        assert len(daemon.speech.listens) == 4 and len(daemon.streams) == 0
    run(go, daemon)
