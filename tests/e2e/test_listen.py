"""Listening end to end on the real daemon: real human prompts (Asterisk, 8 kHz) through
the workers' VAD and Whisper, over HTTP, Wyoming and the event stream."""

from __future__ import annotations

import asyncio
import io
import json
import threading
import time
import urllib.request
import wave
from collections.abc import Iterator

import numpy as np
import pytest

from cosyvoiced.testing.prompts import Prompt, prompts, wer
from tests.fixtures.daemon import DaemonProcess, ready_daemon

N_PROMPTS = 12
WER_MAX = 20.0
"""Percent over the dozen prompts (the in-process pipeline measured ~7 % on all 563)."""


@pytest.fixture(scope="module")
def daemon(tmp_path_factory: pytest.TempPathFactory) -> Iterator[DaemonProcess]:
    yield from ready_daemon(tmp_path_factory, "listen-daemon")


@pytest.fixture(scope="module")
def dozen() -> list[Prompt]:
    every = [p for p in prompts() if len(p.text.split()) >= 3]
    step = len(every) // N_PROMPTS
    return every[::step][:N_PROMPTS]


def _listener(d: DaemonProcess, prefix: str) -> str:
    for x in json.loads(d.ctl("--json", "status").stdout)["listeners"]:
        if x.startswith(prefix):
            return x
    raise AssertionError(f"no {prefix} listener")


def _wav(samples: np.ndarray, rate_hz: int) -> bytes:
    buf = io.BytesIO()
    with wave.open(buf, "wb") as w:
        w.setnchannels(1)
        w.setsampwidth(2)
        w.setframerate(rate_hz)
        w.writeframes((np.clip(samples, -1, 1) * 32767).astype("<i2").tobytes())
    return buf.getvalue()


def _post_transcribe(base: str, wav: bytes) -> dict:
    req = urllib.request.Request(f"{base}/v1/transcribe", data=wav,
                                 headers={"Content-Type": "audio/wav"})
    with urllib.request.urlopen(req, timeout=60) as resp:
        return json.loads(resp.read())


class SseReader(threading.Thread):
    """Collects `GET /v1/events` server-sent events."""

    def __init__(self, base: str) -> None:
        super().__init__(daemon=True)
        self.resp = urllib.request.urlopen(f"{base}/v1/events", timeout=120)
        self.events: list[dict] = []
        self.connected = threading.Event()

    def run(self) -> None:
        try:
            for raw in self.resp:
                line = raw.decode().rstrip("\n")
                if line.startswith(": connected"):
                    self.connected.set()
                if line.startswith("data: "):
                    self.events.append(json.loads(line[6:]))
        except (OSError, ValueError):
            pass

    def wait_for(self, pred, timeout_s: float = 30.0) -> dict:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            for e in list(self.events):
                if pred(e):
                    return e
            time.sleep(0.05)
        raise AssertionError(f"no matching event in {self.events[-10:]}")


def test_transcribe_a_dozen_prompts_with_events_on_sse(daemon, dozen):
    base = _listener(daemon, "tcp://").replace("tcp://", "http://")
    sse = SseReader(base)
    sse.start()
    assert sse.connected.wait(10)
    hyps, latencies, ids = [], [], []
    for p in dozen:
        out = _post_transcribe(base, p.path.read_bytes())
        hyps.append(out["text"])
        latencies += [s["latency_ms"] for s in out["segments"]]
        ids.append(out["stream_id"])
        assert out["segments"], (p.name, out)
    score = wer([p.text for p in dozen], hyps)
    lat = np.array(latencies)
    print(f"\nWER {score:.2f}% on {len(dozen)} prompts; latency ms p50 "
          f"{np.percentile(lat, 50):.0f} p95 {np.percentile(lat, 95):.0f}")
    for p, h in zip(dozen, hyps, strict=True):
        print(f"  {p.name}: {p.text!r} -> {h!r}")
    assert score <= WER_MAX, list(zip([p.text for p in dozen], hyps, strict=True))
    assert (lat >= 0).all() and (lat < 10_000).all()
    # Every transcript is on the event bus too, with its latency, tagged with its stream.
    for sid in ids:
        ev = sse.wait_for(lambda e, sid=sid: e["type"] == "transcript" and e["stream"] == sid)
        assert ev["latency_ms"] >= 0 and ev["text"]
        sse.wait_for(lambda e, sid=sid: e["type"] == "voice_stopped" and e["stream"] == sid)


def test_a_stream_that_stops_mid_utterance_still_gets_its_transcript(daemon):
    base = _listener(daemon, "tcp://").replace("tcp://", "http://")
    p = next(p for p in prompts() if p.name == "agent-alreadyon")
    x = p.samples()
    # Cut in the middle of speech: no trailing silence for the endpointer to find.
    cut = x[: int(0.55 * x.shape[0])]
    sse = SseReader(base)
    sse.start()
    assert sse.connected.wait(10)
    out = _post_transcribe(base, _wav(cut, 8000))
    words = out["text"].lower().replace(".", "").replace(",", "").split()
    assert len(words) >= 3, out
    assert set(words[:3]) <= set(p.text.lower().replace(".", "").split()), out
    stop = sse.wait_for(lambda e: e["type"] == "voice_stopped"
                        and e["stream"] == out["stream_id"])
    assert stop["reason"] == "closed"


def test_transcripts_carry_stream_relative_word_times_when_asked(daemon, tmp_path):
    """`/v1/transcribe?words=true` of two prompts 2 s apart: each segment's words lie in
    its speech, in stream time, and the live `transcript` events carry the same words."""
    base = _listener(daemon, "tcp://").replace("tcp://", "http://")
    a, b = (next(p for p in prompts() if p.name == n).samples()
            for n in ("agent-pass", "agent-user"))
    clip = np.concatenate([a, np.zeros(16000, np.float32), b, np.zeros(4000, np.float32)])
    sse = SseReader(base)
    sse.start()
    assert sse.connected.wait(10)
    req = urllib.request.Request(f"{base}/v1/transcribe?words=true", data=_wav(clip, 8000),
                                 headers={"Content-Type": "audio/wav"})
    with urllib.request.urlopen(req, timeout=60) as resp:
        out = json.loads(resp.read())
    segments = [s for s in out["segments"] if s["text"]]
    words = [w for s in segments for w in s["words"]]
    assert len(words) >= 15 and [w["start"] for w in words] == sorted(w["start"] for w in words)
    for s in segments:
        assert s["start_ms"] - 300 <= s["words"][0]["start"] * 1000, s
        assert s["words"][-1]["end"] * 1000 <= s["end_ms"] + 300, s
    second = (a.size + 16000) / 8000
    assert any(w["start"] >= second for w in words)  # stream time, not utterance time
    silent = (a.size / 8000 + 0.3, second - 0.3)  # no word starts in the gap
    assert not [w for w in words if silent[0] < w["start"] < silent[1]], words
    live = sse.wait_for(lambda e: e["type"] == "transcript" and e["stream"] == out["stream_id"]
                        and e["end_ms"] == segments[-1]["end_ms"])
    assert live["words"] == segments[-1]["words"]
    (tmp_path / "two.wav").write_bytes(_wav(clip, 8000))
    lines = daemon.ctl("transcribe", "--words", str(tmp_path / "two.wav")).stdout.splitlines()
    assert [line.split(maxsplit=2)[2] for line in lines] == [w["word"] for w in words]


def test_wyoming_transcribe_round_trip(daemon, dozen):
    from wyoming.asr import Transcribe, Transcript
    from wyoming.audio import AudioChunk, AudioStart, AudioStop
    from wyoming.client import AsyncTcpClient

    host, port = _listener(daemon, "wyoming+tcp://").removeprefix("wyoming+tcp://").rsplit(":", 1)
    chosen = dozen[:3]

    async def one(p: Prompt) -> str:
        pcm = (p.samples() * 32767).astype("<i2").tobytes()
        async with AsyncTcpClient(host, int(port)) as client:
            await client.write_event(Transcribe(language="en").event())
            await client.write_event(AudioStart(rate=8000, width=2, channels=1).event())
            for i in range(0, len(pcm), 3200):  # 200 ms chunks
                await client.write_event(AudioChunk(rate=8000, width=2, channels=1,
                                                    audio=pcm[i: i + 3200]).event())
            await client.write_event(AudioStop().event())
            while True:
                event = await asyncio.wait_for(client.read_event(), 60)
                assert event is not None, "server closed before the transcript"
                if Transcript.is_type(event.type):
                    return Transcript.from_event(event).text

    texts = asyncio.run(_gather(one, chosen))
    score = wer([p.text for p in chosen], texts)
    assert score <= WER_MAX, list(zip([p.text for p in chosen], texts, strict=True))


def test_wyoming_on_english_only_tiny_en_refuses_another_language(daemon):
    from wyoming.asr import Transcribe
    from wyoming.client import AsyncTcpClient
    from wyoming.error import Error
    from wyoming.info import Describe, Info

    host, port = _listener(daemon, "wyoming+tcp://").removeprefix("wyoming+tcp://").rsplit(":", 1)

    async def main() -> tuple[Info, Error]:
        async with AsyncTcpClient(host, int(port)) as client:
            await client.write_event(Describe().event())
            await client.write_event(Transcribe(language="de").event())
            got: dict[str, object] = {}
            while len(got) < 2:
                event = await asyncio.wait_for(client.read_event(), 30)
                assert event is not None
                for cls in (Info, Error):
                    if cls.is_type(event.type):
                        got[cls.__name__] = cls.from_event(event)
            return got["Info"], got["Error"]  # type: ignore[return-value]

    info, err = asyncio.run(main())
    assert info.asr[0].models[0].name == "whisper-tiny.en"
    assert info.asr[0].models[0].languages == ["en"]
    assert err.code == "unsupported_language" and err.text.endswith("transcribes en")


async def _gather(fn, items):
    return await asyncio.gather(*(fn(i) for i in items))


def test_metrics_time_transcripts_and_speech(daemon, dozen):
    from prometheus_client.parser import text_string_to_metric_families

    base = _listener(daemon, "tcp://").replace("tcp://", "http://")

    def counts() -> dict[str, float]:
        with urllib.request.urlopen(f"{base}/metrics", timeout=10) as r:
            text = r.read().decode()
        return {s.name: s.value for fam in text_string_to_metric_families(text)
                for s in fam.samples if s.name.endswith(("_count", "_sum"))}

    before = counts()
    p = dozen[0]
    assert _post_transcribe(base, _wav(p.samples(), 8000))["segments"]
    req = urllib.request.Request(f"{base}/v1/tts", data=json.dumps(
        {"text": "Your call is important to us."}).encode(),
        headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=60) as r:
        assert len(r.read()) > 8000
    deadline = time.monotonic() + 10  # the request's figures come after its last audio
    while time.monotonic() < deadline:
        after = counts()
        if after["cosyvoiced_tts_rtf_count"] > before["cosyvoiced_tts_rtf_count"]:
            break
        time.sleep(0.1)
    for name in ("cosyvoiced_transcript_latency_seconds", "cosyvoiced_tts_rtf"):
        assert after[f"{name}_count"] > before[f"{name}_count"], name
        assert after[f"{name}_sum"] > before[f"{name}_sum"], name
