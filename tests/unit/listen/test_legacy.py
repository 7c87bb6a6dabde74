"""The per-stream listening pipeline: bad input, caps, close mid-utterance, batching."""

from __future__ import annotations

import numpy as np
import pytest
import soxr
from tools.bench.prompts import SOUNDS, load_wav, normalizer

from cosyvoiced.config.schema import AsrConfig, VadConfig
from cosyvoiced.listen.asr import WhisperAsr
from cosyvoiced.listen.events import EventBus
from cosyvoiced.listen.legacy import ListenBatch, ListenError, UnsupportedRate

RATE = 8000


@pytest.fixture(scope="module")
def whisper():
    return WhisperAsr(AsrConfig())


def speech(name="agent-pass"):
    return load_wav(SOUNDS / f"{name}.wav")


def silence(seconds, rate=RATE):
    return np.zeros(int(seconds * rate), dtype=np.float32)


def run(batch, sid, samples, rate=RATE, close=True, frame_ms=20):
    stream = batch.open(sid, rate)
    step = rate * frame_ms // 1000
    events = []
    for i in range(0, samples.shape[0], step):
        stream.feed(samples[i: i + step])
        events += batch.tick()
    if close:
        events += batch.close(sid)
    return stream, events


def kinds(events):
    return [e.type for e in events]


def words(text):
    return normalizer()(text).split()


def test_silence_only_stream_makes_no_events():
    batch = ListenBatch(VadConfig(), AsrConfig(enabled=False))
    stream, events = run(batch, "quiet", silence(3.0))
    assert events == []
    assert stream.stats.windows == 3000 // 32


def test_transcript_for_one_prompt_and_bus(whisper):
    bus = EventBus()
    sub = bus.subscribe()
    batch = ListenBatch(VadConfig(), AsrConfig(), bus=bus, asr=whisper)
    _, events = run(batch, "a", np.concatenate([silence(0.5), speech(), silence(1.0)]))
    assert kinds(events) == ["voice_started", "voice_stopped", "transcript"]
    assert words(events[2].text) == words("Please enter your password followed by the pound key.")
    assert events[2].start_ms == events[0].start_ms and events[2].end_ms == events[1].end_ms
    assert 0 < events[2].latency_ms < 30_000
    assert [e.type for e in sub.drain()] == kinds(events)


def test_nan_inf_are_zeroed_and_counted(whisper):
    batch = ListenBatch(VadConfig(), AsrConfig(), asr=whisper)
    x = np.concatenate([silence(0.5), speech(), silence(1.0)])
    x[100:110] = np.nan
    x[5000:5003] = np.inf
    x[-50:] = -np.inf
    stream, events = run(batch, "nan", x)
    assert stream.stats.sanitized == 10 + 3 + 50
    assert kinds(events) == ["voice_started", "voice_stopped", "transcript"]
    assert "password" in words(events[2].text)


def test_clipping_and_dc_offset(whisper):
    batch = ListenBatch(VadConfig(), AsrConfig(), asr=whisper)
    loud = np.concatenate([silence(0.5), speech() * 6.0, silence(1.0)])  # far past full scale
    stream, events = run(batch, "clip", loud)
    assert stream.stats.clipped > 1000
    assert "password" in words(events[-1].text)
    offset = np.concatenate([silence(0.5), speech(), silence(1.0)]) + 0.4
    stream, events = run(batch, "dc", offset)
    assert kinds(events) == ["voice_started", "voice_stopped", "transcript"]
    assert "password" in words(events[2].text)


def test_int16_input_and_other_rates(whisper):
    batch = ListenBatch(VadConfig(), AsrConfig(), asr=whisper)
    x = np.concatenate([silence(0.5), speech(), silence(1.0)])
    pcm = (x * 32767).astype(np.int16)
    _, events = run(batch, "pcm", pcm)
    assert "password" in words(events[-1].text)
    x48 = soxr.resample(x, RATE, 48000).astype(np.float32)
    _, events = run(batch, "wide", x48, rate=48000)
    assert kinds(events) == ["voice_started", "voice_stopped", "transcript"]
    assert "password" in words(events[2].text)


def test_wrong_rate_and_bad_shapes_are_typed():
    batch = ListenBatch(VadConfig(), AsrConfig(enabled=False))
    with pytest.raises(UnsupportedRate) as e:
        batch.open("x", 11025)
    assert e.value.code == "unsupported_rate"
    stream = batch.open("y", RATE)
    with pytest.raises(ListenError):
        stream.feed(np.zeros((10, 2), dtype=np.float32))
    with pytest.raises(ListenError):
        batch.open("y", RATE)
    batch.close("y")
    with pytest.raises(ListenError):
        stream.feed(np.zeros(10, dtype=np.float32))


def test_utterance_past_the_cap_is_cut_transcribed_and_listening_continues(whisper):
    long = speech("conf-adminmenu-162")  # ~21 s of speech
    batch = ListenBatch(VadConfig(max_utterance_s=5.0), AsrConfig(), asr=whisper)
    stream, events = run(batch, "long", np.concatenate([silence(0.5), long, silence(1.0)]))
    stops = [e for e in events if e.type == "voice_stopped"]
    transcripts = [e for e in events if e.type == "transcript"]
    assert sum(s.reason == "max_length" for s in stops) >= 2
    assert all(s.end_ms - s.start_ms <= 5000 for s in stops)
    assert len(transcripts) == len(stops) == stream.stats.utterances
    text = " ".join(t.text for t in transcripts)
    assert {"conference", "volume", "exit"} <= set(words(text))


def test_stop_mid_utterance_flushes_a_final_transcript(whisper):
    batch = ListenBatch(VadConfig(), AsrConfig(), asr=whisper)
    x = np.concatenate([silence(0.5), speech()[: int(1.6 * RATE)]])  # "Please enter your ..."
    _, events = run(batch, "cut", x)
    assert kinds(events) == ["voice_started", "voice_stopped", "transcript"]
    assert events[1].reason == "closed"
    assert {"please", "enter"} <= set(words(events[2].text))


def test_streams_batched_together_match_each_alone():
    cfg = VadConfig()
    names = ["agent-pass", "vm-goodbye", "auth-thankyou", "calling"]
    signals = [np.concatenate([silence(0.3 + 0.2 * i), speech(n), silence(1.0)])
               for i, n in enumerate(names)]
    alone = []
    for i, x in enumerate(signals):
        b = ListenBatch(cfg, AsrConfig(enabled=False))
        _, ev = run(b, f"s{i}", x)
        alone.append([e.to_dict() for e in ev])
    together = ListenBatch(cfg, AsrConfig(enabled=False))
    streams = [together.open(f"s{i}", RATE) for i in range(len(signals))]
    got: dict[str, list] = {f"s{i}": [] for i in range(len(signals))}
    step = 160
    for pos in range(0, max(x.shape[0] for x in signals), step):
        for s, x in zip(streams, signals, strict=True):
            if pos < x.shape[0]:
                s.feed(x[pos: pos + step])
        for e in together.tick():
            got[e.stream].append(e.to_dict())
    for i in range(len(signals)):
        for e in together.close(f"s{i}"):
            got[e.stream].append(e.to_dict())
    assert [got[f"s{i}"] for i in range(len(signals))] == alone
    assert all(len(a) == 2 for a in alone)
