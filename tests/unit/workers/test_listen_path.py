"""The listening path that ships, in process: a capture ring read by the worker's batched
VAD tick (real Silero), the `ListenTap` (history, log-mel while speech is open), the ASR
queue (real Whisper) and the messages a worker sends. Bad input, the DC offset, the
utterance cap, close mid-utterance, batching across streams.

What the worker never sees is tested where it happens: int16 and rates other than 8 and
16 kHz are converted by the front ends (HTTP, Wyoming, AudioSocket) before the ring, and
the ring only carries mono float32.
"""

from __future__ import annotations

from collections.abc import Iterator
from types import SimpleNamespace

import numpy as np
import pytest
import soxr
from tools.bench.npalloc import counting

from cosyvoiced.audio.ring import Ring
from cosyvoiced.config.schema import AsrConfig, VadConfig
from cosyvoiced.listen.asr import WhisperAsr
from cosyvoiced.listen.vad import SileroBatch, VadError
from cosyvoiced.testing.prompts import SOUNDS, load_wav, normalizer
from cosyvoiced.workers import messages as m
from cosyvoiced.workers.worker.asr_sched import AsrQueue
from cosyvoiced.workers.worker.listeners import WorkerListening
from cosyvoiced.workers.worker.utterances import ListenTap, MelPool
from cosyvoiced.workers.worker.vad_tick import VadTicker
from tests.fakes.ring import ListRing
from tests.fakes.vad import FakeBatch

RATE = 8000


@pytest.fixture(scope="module")
def whisper() -> WhisperAsr:
    return WhisperAsr(AsrConfig())


class Listening:
    """One worker's listening side (as `Worker` builds it), with the model shared by tests."""

    def __init__(self, vad: VadConfig | None = None, whisper: WhisperAsr | None = None,
                 make_batch=None) -> None:
        cfg = vad or VadConfig()
        self.sent: list[object] = []
        self.ticker = VadTicker(make_batch or (lambda rate: SileroBatch(rate, 8)), 0.0)
        self.wl = WorkerListening(SimpleNamespace(vad=cfg, asr=None, cache_dir=None),
                                  self.ticker, self.sent.append)
        if whisper is not None:
            self.wl.decoder, self.wl.pool = whisper, MelPool(cfg)
            self.wl.asr = AsrQueue(whisper, self.wl._transcribed, on_idle=self.wl._ack)
        self.rings: dict[str, Ring] = {}
        self.rates: dict[str, int] = {}

    def open(self, sid: str, rate: int = RATE, words: bool = False) -> Ring:
        ring = self.rings[sid] = Ring.create(rate * 2)
        self.rates[sid] = rate
        self.wl.open(sid, rate, ring, words=words)
        return ring

    def feed(self, sid: str, samples: np.ndarray, frame_ms: int = 20) -> None:
        """Write 20 ms frames as a call would, one VAD tick after each."""
        ring = self.rings[sid]
        step = self.rates[sid] * frame_ms // 1000
        x = np.asarray(samples, dtype=np.float32)
        for i in range(0, x.shape[0], step):
            assert ring.write(x[i: i + step]) == min(step, x.shape[0] - i)
            self.ticker.tick(0.0)

    def close(self, sid: str) -> list[object]:
        """Close, decode what is queued; the stream's messages, the ack last."""
        assert self.wl.close(sid)
        while self.wl.asr is not None and len(self.wl.asr):
            self.wl.run_batch()
        ring = self.rings.pop(sid)
        ring.close()
        ring.unlink()
        return [x for x in self.sent if getattr(x, "stream_id", None) == sid]

    def run(self, sid: str, samples: np.ndarray, rate: int = RATE) -> list[object]:
        self.open(sid, rate)
        self.feed(sid, samples)
        return self.close(sid)

    def shut(self) -> None:
        for ring in self.rings.values():
            ring.close()
            ring.unlink()


@pytest.fixture
def listening() -> Iterator[list[Listening]]:
    made: list[Listening] = []
    yield made
    for lis in made:
        lis.shut()


def events(msgs: list[object]) -> list:
    assert isinstance(msgs[-1], m.StreamClosed)  # the ack comes after the last transcript
    errors = [x for x in msgs if isinstance(x, m.StreamError)]
    assert not errors, errors
    return [x.event for x in msgs if isinstance(x, m.ListenEvent)]


def kinds(evs: list) -> list[str]:
    return [e.type for e in evs]


def speech(name: str = "agent-pass") -> np.ndarray:
    return load_wav(SOUNDS / f"{name}.wav")


def silence(seconds: float, rate: int = RATE) -> np.ndarray:
    return np.zeros(int(seconds * rate), dtype=np.float32)


def words(text: str) -> list[str]:
    return normalizer()(text).split()


def test_silence_only_stream_makes_no_events(listening):
    lis = Listening()
    listening.append(lis)
    lis.open("quiet")
    lis.feed("quiet", silence(3.0))
    tap, group = lis.wl.taps["quiet"], lis.ticker.groups[RATE]
    msgs = lis.close("quiet")
    assert msgs == [m.StreamClosed("quiet")]
    assert group.windows + tap.windows == 3000 // 32  # every full window decided


def test_transcript_for_one_prompt_and_the_messages(listening, whisper):
    lis = Listening(whisper=whisper)
    listening.append(lis)
    msgs = lis.run("a", np.concatenate([silence(0.5), speech(), silence(1.0)]))
    evs = events(msgs)
    assert kinds(evs) == ["voice_started", "voice_stopped", "transcript"]
    assert all(e.stream == "a" for e in evs[:2])
    assert words(evs[2].text) == words("Please enter your password followed by the pound key.")
    assert evs[2].start_ms == evs[0].start_ms and evs[2].end_ms == evs[1].end_ms
    assert 0 < evs[2].latency_ms < 30_000


def test_word_times_are_stream_relative_and_only_where_asked(listening, whisper):
    lis = Listening(whisper=whisper)
    listening.append(lis)
    clip = np.concatenate([silence(1.5), speech(), silence(1.0)])
    lis.open("plain")
    lis.wl.setup.asr = AsrConfig(word_timestamps=True)  # for streams that cannot ask
    lis.open("config")
    lis.wl.setup.asr = None
    lis.open("asked", words=True)
    assert [lis.wl.taps[s].words for s in ("plain", "config", "asked")] == [False, True, True]
    got = {}
    for sid in ("plain", "config", "asked"):
        lis.feed(sid, clip)
        got[sid] = next(e for e in events(lis.close(sid)) if e.type == "transcript")
    assert got["plain"].words is None and "words" not in got["plain"].to_dict()
    t = got["asked"]
    assert [w.word for w in t.words] == t.text.split()
    # stream time: after the 1.5 s of silence, inside what the VAD heard
    assert t.start_ms / 1000 - 0.031 <= t.words[0].start_s and t.words[0].start_s >= 1.4
    assert t.words[-1].end_s <= t.end_ms / 1000 + 0.3
    assert [w.start_s for w in t.words] == sorted(w.start_s for w in t.words)
    assert got["config"].words == t.words


def test_nan_is_zeroed_inf_clipped_both_counted(listening, whisper):
    lis = Listening(whisper=whisper)
    listening.append(lis)
    x = np.concatenate([silence(0.5), speech(), silence(1.0)])
    x[100:110] = np.nan
    x[5000:5003] = np.inf
    x[-300:-250] = -np.inf
    lis.open("nan")
    lis.feed("nan", x)
    guard = lis.wl.taps["nan"].guard
    evs = events(lis.close("nan"))
    assert guard.nan == 10 and guard.bad_windows == 1
    assert guard.clipped == 3 + 50  # inf is full scale (+-1), not silence
    assert kinds(evs) == ["voice_started", "voice_stopped", "transcript"]
    assert "password" in words(evs[2].text)


def test_clipping_and_dc_offset(listening, whisper):
    lis = Listening(whisper=whisper)
    listening.append(lis)
    loud = np.concatenate([silence(0.5), speech() * 6.0, silence(1.0)])  # far past full scale
    lis.open("clip")
    lis.feed("clip", loud)
    guard = lis.wl.taps["clip"].guard
    evs = events(lis.close("clip"))
    assert guard.clipped > 1000
    assert "password" in words(evs[-1].text)
    offset = np.concatenate([silence(0.5), speech(), silence(1.0)]) + 0.4
    evs = events(lis.run("dc", offset))
    assert kinds(evs) == ["voice_started", "voice_stopped", "transcript"]
    assert "password" in words(evs[2].text)


class Recording(FakeBatch):
    """A fake VAD that keeps every window it is given."""

    def __init__(self) -> None:
        super().__init__(0.0)
        self.seen: list[np.ndarray] = []

    def run(self, slots, windows):
        self.seen += [w.copy() for w in windows]
        return super().run(slots, windows)


@pytest.mark.parametrize("asr", [False, True])
def test_the_dc_offset_is_removed_before_the_vad_and_the_mel(asr):
    """A constant +0.3 (a cheap sound card) is gone from what the VAD hears within about a
    second, with ASR off (the tick cleans the ring) and on (the tap does, and its history,
    which the log-mel is made from, holds the very samples the VAD got)."""
    batch = Recording()
    cfg = VadConfig()
    sent: list[object] = []
    ticker = VadTicker(lambda rate: batch, 0.0)
    wl = WorkerListening(SimpleNamespace(vad=cfg, asr=None, cache_dir=None), ticker,
                         sent.append)
    if asr:
        wl.pool = MelPool(cfg)
    rng = np.random.default_rng(3)
    x = (rng.standard_normal(RATE * 3) * 0.05 + 0.3).astype(np.float32)
    ring = ListRing(x)
    wl.open("dc", RATE, ring)
    tap = wl.taps["dc"]
    while ticker.tick(0.0):
        pass
    seen = np.stack(batch.seen)
    assert seen.shape == (x.shape[0] // batch.window, batch.window)
    means = seen.mean(axis=1)
    assert means[0] > 0.25  # the tracker starts from no offset ...
    late = means[RATE * 2 // batch.window:]  # ... and after 2 s (tau 1 s) it is gone
    assert np.abs(late).max() < 0.05, late
    np.testing.assert_allclose(seen - means[:, None], (x[: seen.size].reshape(seen.shape)
                               - x[: seen.size].reshape(seen.shape).mean(axis=1)[:, None]),
                               atol=1e-5)  # only the offset is taken, not the signal
    if asr:
        hist = tap.history.read(0)  # what it holds
        np.testing.assert_array_equal(hist, seen.reshape(-1)[-hist.shape[0]:])
    wl.close("dc")


def test_sixteen_khz_input_is_transcribed(listening, whisper):
    lis = Listening(whisper=whisper)
    listening.append(lis)
    x = np.concatenate([silence(0.5), speech(), silence(1.0)])
    x16 = soxr.resample(x, RATE, 16000).astype(np.float32)
    evs = events(lis.run("wide", x16, rate=16000))
    assert kinds(evs) == ["voice_started", "voice_stopped", "transcript"]
    assert "password" in words(evs[2].text)


def test_wrong_rate_and_a_second_open_are_typed_errors(listening):
    lis = Listening()
    listening.append(lis)
    with pytest.raises(VadError) as e:
        lis.wl.open("x", 11025, ListRing(np.zeros(10)))
    assert e.value.code == "unsupported_rate" and "x" not in lis.wl.taps
    lis.open("y")
    with pytest.raises(VadError) as e:
        lis.wl.open("y", RATE, ListRing(np.zeros(10)))
    assert e.value.code == "stream_exists"
    assert len(lis.ticker) == 1 and len(lis.ticker.groups[RATE]) == 1  # the first untouched
    assert lis.close("y") == [m.StreamClosed("y")]
    assert lis.wl.close("y") is False  # closed once only


def test_utterance_past_the_cap_is_cut_transcribed_and_listening_continues(listening,
                                                                           whisper):
    lis = Listening(VadConfig(max_utterance_s=5.0), whisper=whisper)
    listening.append(lis)
    long = speech("conf-adminmenu-162")  # ~21 s of speech
    lis.open("long")
    lis.feed("long", np.concatenate([silence(0.5), long, silence(1.0)]))
    tap = lis.wl.taps["long"]
    evs = events(lis.close("long"))
    stops = [e for e in evs if e.type == "voice_stopped"]
    transcripts = [e for e in evs if e.type == "transcript"]
    assert sum(s.reason == "max_length" for s in stops) >= 2
    assert all(s.end_ms - s.start_ms <= 5000 for s in stops)
    assert len(transcripts) == len(stops) == tap.utterances
    text = " ".join(t.text for t in transcripts)
    assert {"conference", "volume", "exit"} <= set(words(text))


def test_close_mid_utterance_flushes_a_final_transcript(listening, whisper):
    lis = Listening(whisper=whisper)
    listening.append(lis)
    x = np.concatenate([silence(0.5), speech()[: int(1.6 * RATE)]])  # "Please enter your ..."
    evs = events(lis.run("cut", x))
    assert kinds(evs) == ["voice_started", "voice_stopped", "transcript"]
    assert evs[1].reason == "closed"
    assert {"please", "enter"} <= set(words(evs[2].text))


def test_streams_batched_together_match_each_alone(listening):
    names = ["agent-pass", "vm-goodbye", "auth-thankyou", "calling"]
    signals = [np.concatenate([silence(0.3 + 0.2 * i), speech(n), silence(1.0)])
               for i, n in enumerate(names)]
    alone = []
    for i, x in enumerate(signals):
        lis = Listening()
        listening.append(lis)
        alone.append([e.to_dict() for e in events(lis.run(f"s{i}", x))])
    together = Listening()
    listening.append(together)
    sids = [f"s{i}" for i in range(len(signals))]
    rings = [together.open(sid) for sid in sids]
    step = 160
    for pos in range(0, max(x.shape[0] for x in signals), step):
        for ring, x in zip(rings, signals, strict=True):
            if pos < x.shape[0]:
                assert ring.write(x[pos: pos + step]) == x[pos: pos + step].shape[0]
        together.ticker.tick(0.0)
    assert together.ticker.groups[RATE].runs < together.ticker.groups[RATE].windows  # batched
    got = [[e.to_dict() for e in events(together.close(sid))] for sid in sids]
    assert got == alone
    assert all(len(a) == 2 for a in alone)


class Quiet(FakeBatch):
    """A fake VAD that allocates nothing per run."""

    def __init__(self) -> None:
        super().__init__(0.0)
        self.probs = np.zeros(self.capacity, np.float32)

    def run(self, slots, windows):
        return self.probs[: len(slots)]


def test_cleaning_and_dc_removal_allocate_nothing_on_clean_audio():
    rng = np.random.default_rng(1)
    x = (rng.standard_normal(RATE * 4) * 0.1 + 0.2).astype(np.float32)
    ticker = VadTicker(lambda rate: Quiet(), 0.0)
    wl = WorkerListening(SimpleNamespace(vad=VadConfig(), asr=None, cache_dir=None), ticker,
                         lambda msg: None)
    for i in range(4):  # the tick cleans the rings (ASR off)
        wl.open(f"s{i}", RATE, ListRing(x))
    group = ticker.groups[RATE]
    tap = ListenTap("t", RATE, ListRing(x), VadConfig(), None, lambda e: None)
    buf = np.zeros(group.window, np.float32)
    group.tick_once()
    tap.read_into(buf)
    with counting() as c:
        for _ in range(50):
            assert group.tick_once() == 4
            assert tap.read_into(buf) == group.window
    assert c.calls == 0
    assert abs(float(group.dc.dc[0]) - 0.2) < 0.1 and abs(float(tap.dc.dc[0]) - 0.2) < 0.1
