"""The official `openai` client against the real daemon: speech in every format it asks
for (decoded and heard by Whisper), speech as server-sent events, transcription of real
telephone prompts uploaded as mp3, webm and m4a, and the listings clients probe."""

from __future__ import annotations

import base64
import io
import json
import urllib.request
from collections.abc import Iterator

import av
import numpy as np
import pytest
from jiwer import wer as word_error_rate
from whisper_normalizer.english import EnglishTextNormalizer

from cosyvoiced.audio.container import decode
from cosyvoiced.listen.asr import WhisperAsr
from cosyvoiced.testing.prompts import Prompt, prompts, wer
from tests.e2e.test_listen import WER_MAX
from tests.fixtures.daemon import DaemonProcess, ready_daemon

TEXT = "Thank you for calling. Your order will arrive on Tuesday afternoon."
_norm = EnglishTextNormalizer()


@pytest.fixture(scope="module")
def daemon(tmp_path_factory: pytest.TempPathFactory) -> Iterator[DaemonProcess]:
    yield from ready_daemon(tmp_path_factory, "openai-daemon",
                            ('openai.voices={nova = "en_US-joe-medium"}',))


@pytest.fixture(scope="module")
def base(daemon: DaemonProcess) -> str:
    for x in json.loads(daemon.ctl("--json", "status").stdout)["listeners"]:
        if x.startswith("tcp://"):
            return x.replace("tcp://", "http://")
    raise AssertionError("no tcp listener")


@pytest.fixture(scope="module")
def client(base: str):
    from openai import OpenAI

    with OpenAI(base_url=f"{base}/v1", api_key="not-needed", max_retries=0,
                timeout=120) as c:
        yield c


@pytest.fixture(scope="module")
def judge() -> WhisperAsr:
    return WhisperAsr()


def heard(judge: WhisperAsr, audio_16k: np.ndarray) -> float:
    text = judge.transcribe_audio(audio_16k).text
    return word_error_rate(_norm(TEXT), _norm(text))


@pytest.mark.parametrize("fmt,ctype", [("mp3", "audio/mpeg"), ("opus", "audio/ogg"),
                                       ("aac", "audio/aac"), ("flac", "audio/flac"),
                                       ("wav", "audio/wav"), ("pcm", "audio/L16")])
def test_speech_in_every_format_is_heard(client, judge, tmp_path, fmt, ctype):
    path = tmp_path / f"speech.{fmt}"
    with client.audio.speech.with_streaming_response.create(
            model="tts-1", voice="nova", input=TEXT, response_format=fmt) as resp:
        assert resp.headers["content-type"] == ctype
        resp.stream_to_file(path)
    data = path.read_bytes()
    if fmt == "pcm":
        pcm = np.frombuffer(data, "<i2").astype(np.float32) / 32768
        import soxr

        audio_16k = soxr.resample(pcm, 24000, 16000).astype(np.float32)
    else:
        audio_16k = decode(data, 600.0, 16000)
    assert 2.0 < audio_16k.size / 16000 < 10.0
    assert heard(judge, audio_16k) <= 0.15


def test_speech_defaults_to_mp3_and_streams_as_it_is_synthesized(client):
    with client.audio.speech.with_streaming_response.create(
            model="tts-1", voice="alloy", input=TEXT + " " + TEXT) as resp:
        assert resp.headers["content-type"] == "audio/mpeg"
        pieces = [len(b) for b in resp.iter_bytes()]
    assert len(pieces) >= 3 and sum(pieces) > 10_000  # many chunks, not one body at the end


def test_speech_as_server_sent_events(client, judge):
    with client.audio.speech.with_streaming_response.create(
            model="gpt-4o-mini-tts", voice="alloy", input=TEXT, response_format="pcm",
            stream_format="sse") as resp:
        assert resp.headers["content-type"].startswith("text/event-stream")
        events = [json.loads(line[len("data: "):]) for line in resp.iter_lines()
                  if line.startswith("data: ")]
    assert {e["type"] for e in events[:-1]} == {"speech.audio.delta", "speech.word"}
    assert events[-1]["type"] == "speech.audio.done" and "total_tokens" in events[-1]["usage"]
    deltas = [e for e in events if e["type"] == "speech.audio.delta"]
    pcm = np.frombuffer(b"".join(base64.b64decode(e["audio"]) for e in deltas), "<i2")
    # each word told before the delta holding its start, in order, inside the audio
    sent_s, words = 0.0, []
    for e in events:
        if e["type"] == "speech.audio.delta":
            sent_s += len(base64.b64decode(e["audio"])) / 2 / 24000
        elif e["type"] == "speech.word":
            assert e["start"] >= sent_s - 0.001, (e, sent_s)
            words.append(e)
    assert [w["text"] for w in words] == TEXT.split()
    assert [TEXT[w["char_start"]:w["char_end"]] for w in words] == TEXT.split()
    starts = [w["start"] for w in words]
    assert starts == sorted(starts) and all(w["start"] <= w["end"] for w in words)
    assert 0 <= starts[0] and words[-1]["end"] <= pcm.size / 24000
    import soxr

    assert heard(judge, soxr.resample(pcm.astype(np.float32) / 32768, 24000, 16000)) <= 0.15


def _convert(p: Prompt, fmt: str, codec: str, rate: int) -> bytes:
    """The prompt as a browser (webm/Opus) or phone (m4a/AAC, mp3) would upload it."""
    buf = io.BytesIO()
    with av.open(buf, "w", format=fmt) as out:
        stream = out.add_stream(codec, rate=rate, layout="mono")
        frame = av.AudioFrame.from_ndarray(p.samples().reshape(1, -1), format="flt",
                                           layout="mono")
        frame.sample_rate = 8000
        for f in (frame, None):
            for packet in stream.encode(f):
                out.mux(packet)
    return buf.getvalue()


UPLOADS = [("mp3", "mp3", "libmp3lame", 22050), ("webm", "webm", "libopus", 48000),
           ("m4a", "ipod", "aac", 44100)]


def test_transcriptions_of_prompts_uploaded_as_mp3_webm_and_m4a(client):
    every = [p for p in prompts() if len(p.text.split()) >= 3]
    chosen = every[::len(every) // 4][:4]
    refs, hyps = [], []
    for ext, fmt, codec, rate in UPLOADS:
        for p in chosen:
            upload = (f"{p.name}.{ext}", _convert(p, fmt, codec, rate))
            out = client.audio.transcriptions.create(model="whisper-1", file=upload)
            refs.append(p.text)
            hyps.append(out.text)
    score = wer(refs, hyps)
    print(f"\nWER {score:.2f}% over {len(hyps)} uploads (mp3, webm, m4a)")
    assert score <= WER_MAX, list(zip(refs, hyps, strict=True))
    verbose = client.audio.transcriptions.create(
        model="whisper-1", file=(f"{chosen[0].name}.webm", _convert(chosen[0], *UPLOADS[1][1:])),
        response_format="verbose_json", timestamp_granularities=["segment"], language="en")
    assert verbose.language == "english" and verbose.segments
    assert 0 <= verbose.segments[0].start < verbose.segments[-1].end <= verbose.duration + 0.1
    srt = client.audio.transcriptions.create(
        model="whisper-1", file=(f"{chosen[0].name}.mp3", _convert(chosen[0], *UPLOADS[0][1:])),
        response_format="srt")
    assert srt.startswith("1\n00:00:")


def test_word_timestamps_line_up_with_the_upload(client, judge):
    """Two prompts 1.5 s apart in one upload: OpenAI's `words`, in order, inside the clip,
    the second prompt's words after the gap, each start within 0.1 s of where Whisper
    aligns the prompt heard alone."""
    import soxr

    first, second = (next(p for p in prompts() if p.name == n)
                     for n in ("agent-pass", "agent-newlocation"))
    gap = np.zeros(12000, dtype=np.float32)
    a, b = first.samples(), second.samples()
    clip = np.concatenate([gap[:4000], a, gap, b, gap[:4000]])
    wav = io.BytesIO()
    with av.open(wav, "w", format="wav") as out:
        stream = out.add_stream("pcm_s16le", rate=8000, layout="mono")
        frame = av.AudioFrame.from_ndarray(clip.reshape(1, -1), format="flt", layout="mono")
        frame.sample_rate = 8000
        for f in (frame, None):
            for packet in stream.encode(f):
                out.mux(packet)
    got = client.audio.transcriptions.create(
        model="whisper-1", file=("two.wav", wav.getvalue()), response_format="verbose_json",
        timestamp_granularities=["word"])
    words = got.words or []
    starts = [w.start for w in words]
    assert len(words) >= 12 and starts == sorted(starts), words
    assert all(0 <= w.start <= w.end <= got.duration for w in words)
    assert _norm(" ".join(w.word for w in words)) == _norm(got.text)
    second_at = (4000 + a.size + gap.size) / 8000
    alone = judge.transcribe_audio(soxr.resample(b, 8000, 16000).astype(np.float32),
                                   words=True).words
    ours = words[-len(alone):]
    assert [_norm(w.word) for w in ours] == [_norm(w.word) for w in alone], (ours, alone)
    delta = [abs(w.start - (second_at + x.start_s)) for w, x in zip(ours, alone, strict=True)]
    assert np.median(delta) <= 0.1, delta
    assert words[-len(alone) - 1].end <= second_at + alone[0].start_s


def test_what_cannot_be_honoured_is_a_typed_400(client):
    import openai

    upload = ("x.webm", _convert(prompts()[0], *UPLOADS[1][1:]))
    with pytest.raises(openai.BadRequestError) as err:
        client.audio.transcriptions.create(model="whisper-1", file=upload, language="de")
    assert err.value.body["code"] == "unsupported_language"
    assert err.value.body["message"].endswith("it transcribes en")
    with pytest.raises(openai.BadRequestError) as err:
        client.audio.transcriptions.create(model="whisper-1", file=upload,
                                           response_format="verbose_json",
                                           timestamp_granularities=["sentence"])  # type: ignore[list-item]
    assert err.value.body["code"] == "unsupported_granularity"
    assert "word, segment" in err.value.body["message"]
    with pytest.raises(openai.BadRequestError) as err:
        client.audio.speech.create(model="tts-1", voice="nobody", input="hi")
    assert err.value.body["code"] == "unknown_voice"


def test_models_and_voices_as_clients_probe_them(client, base):
    models = {m.id: m for m in client.models.list()}
    assert {"en_US-joe-medium", "whisper-tiny.en"} <= set(models)
    assert models["whisper-tiny.en"].model_extra["languages"] == ["en"]
    with urllib.request.urlopen(f"{base}/v1/audio/voices", timeout=30) as r:
        voices = {v["id"]: v["name"] for v in json.loads(r.read())["voices"]}
    assert voices["nova"] == "nova (en_US-joe-medium)"
    assert {"alloy", "ash", "ballad", "coral", "echo", "fable", "nova", "onyx", "sage",
            "shimmer", "verse", "marin", "cedar", "en_US-joe-medium"} <= set(voices)
