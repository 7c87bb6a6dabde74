"""ASR inside a worker without the models: the deadline queue, the TTS/ASR pick, the
listen tap (history, preroll, mel only while speech is open, close flush) and the
worker-side close acknowledgement."""

from __future__ import annotations

from dataclasses import dataclass
from types import SimpleNamespace

import numpy as np
import pytest

from cosyvoiced.config.schema import VadConfig
from cosyvoiced.listen.asr import AsrError, Utterance
from cosyvoiced.listen.events import Transcript, VoiceStarted, VoiceStopped
from cosyvoiced.listen.features.spec import WHISPER as WHISPER_SPEC
from cosyvoiced.workers import messages as m
from cosyvoiced.workers.worker.asr_sched import AsrQueue, pick_work
from cosyvoiced.workers.worker.listeners import WorkerListening
from cosyvoiced.workers.worker.utterances import ListenTap, MelPool
from cosyvoiced.workers.worker.vad_tick import VadTicker
from tests.fakes.asr import FakeDecoder, utt
from tests.fakes.clock import Clock
from tests.fakes.ring import ListRing
from tests.fakes.vad import FakeBatch


def test_batches_take_the_earliest_deadlines_first_up_to_max_batch():
    clock, dec, out = Clock(), FakeDecoder(), []
    q = AsrQueue(dec, lambda sid, t: out.append((sid, t)), max_batch=2, clock=clock)
    q.push(utt("late", clock.t + 5.0))  # slack for a batch of two (not overdue)
    q.push(utt("early", clock.t + 1.0))
    q.push(utt("mid", clock.t + 3.0))
    assert q.latest_start_s() == pytest.approx(clock.t + 1.0 + q.deadline_s - q.batch_s)
    assert q.run() == 2
    assert dec.batches == [["early", "mid"]]
    assert q.run() == 1 and dec.batches[-1] == ["late"]
    assert [sid for sid, _ in out] == ["early", "mid", "late"]
    assert q.run() == 0 and q.latest_start_s() is None


def test_closing_a_stream_makes_its_jobs_due_now_and_acks_after_the_last():
    clock, dec, acks, out = Clock(), FakeDecoder(), [], []
    q = AsrQueue(dec, lambda sid, t: out.append(sid), max_batch=1, clock=clock,
                 on_idle=acks.append)
    q.push(utt("other", clock.t - 0.5))
    q.push(utt("closing", clock.t + 10))
    q.push(utt("closing", clock.t + 11))
    assert q.close_when_done("closing") is False
    assert q.close_when_done("idle") is True  # nothing queued: the caller acks at once
    q.run()
    q.run()
    assert out == ["closing", "closing"] and acks == ["closing"]
    q.run()
    assert out[-1] == "other" and acks == ["closing"]


def test_a_failed_batch_reports_a_typed_error_per_utterance_and_the_queue_goes_on():
    dec, out = FakeDecoder(fail=True), []
    clock = Clock()
    q = AsrQueue(dec, lambda sid, r: out.append((sid, r)), clock=clock)
    q.push(utt("a", clock.t + 1.0))
    q.push(utt("b", clock.t + 1.0))
    assert q.run() == 2
    assert [type(r) for _, r in out] == [AsrError, AsrError]
    assert len(q) == 0


@dataclass
class FakeTtsStream:
    ahead: float
    last_synth_s: float

    def ahead_s(self, now_s: float) -> float:
        return self.ahead


class FakeTts:
    def __init__(self, stream: FakeTtsStream | None) -> None:
        self.stream = stream

    def pick(self, now_s: float):
        return self.stream


def test_pick_orders_tts_and_asr_by_latest_start():
    clock = Clock()
    q = AsrQueue(FakeDecoder(), lambda *a: None, clock=clock)
    q.batch_s = 0.2
    now = clock.t
    assert pick_work(FakeTts(None), q, now) is None
    assert pick_work(FakeTts(FakeTtsStream(0.0, 0.1)), q, now) == "tts"
    q.push(utt("a", now - 0.5))  # due at now + 1.0, latest start now + 0.8
    # A new TTS request (nothing ahead) goes before a transcript with slack ...
    assert pick_work(FakeTts(FakeTtsStream(0.0, 0.1)), q, now) == "tts"
    # ... a stream with seconds of audio ahead does not starve the transcript ...
    assert pick_work(FakeTts(FakeTtsStream(2.5, 0.1)), q, now) == "asr"
    # ... and with no TTS work the batch runs at once (work-conserving).
    assert pick_work(FakeTts(None), q, now) == "asr"
    assert pick_work(FakeTts(FakeTtsStream(0.0, 0.1)), None, now) == "tts"


CFG = VadConfig(start_ms=64, stop_ms=320, preroll_ms=256, max_utterance_s=5.0)


def drive(tap: ListenTap, probs: list[float], window: int) -> None:
    buf = np.zeros(window, np.float32)
    for p in probs:
        assert tap.read_into(buf) == window
        tap.on_prob(p)


@pytest.mark.parametrize("rate_hz", [8000, 16000])
def test_tap_makes_mel_only_while_speech_is_open_from_the_preroll(rate_hz):
    window = rate_hz * 32 // 1000
    probs = [0.0] * 20 + [0.9] * 30 + [0.0] * 15 + [0.0] * 5
    t = np.arange(len(probs) * window) / rate_hz
    ring = ListRing(0.1 * np.sin(2 * np.pi * 440 * t))
    out: list = []
    pool = MelPool(CFG)
    tap = ListenTap("s", rate_hz, ring, CFG, pool, out.append)
    tap.early_ms = None  # the plain path (early decode: test_workers_asr_early.py)
    drive(tap, probs[:20], window)
    assert tap.lease is None and not out  # silence: no extractor leased, nothing made
    drive(tap, probs[20:], window)
    kinds = [type(e) for e in out]
    assert kinds == [VoiceStarted, VoiceStopped, Utterance]
    start, stop, u = out
    assert start.start_ms == 20 * 32 and stop.end_ms == 50 * 32 and start.stream == "s"
    # frames from start - preroll to end + 200 ms tail, 10 ms each
    want = (stop.end_ms + 200 - (start.start_ms - CFG.preroll_ms)) // 10
    assert abs(u.frames.shape[0] - want) <= 1
    assert u.frames.shape[1] == 80 and np.isfinite(u.frames).all()
    assert tap.lease is None and pool.in_use == 0 and pool.made == 1


def test_close_reads_the_rest_ends_the_open_utterance_and_releases_the_lease():
    rate, window = 8000, 256
    ring = ListRing(np.full(40 * window + 100, 0.05))
    out: list = []
    pool = MelPool(CFG)
    tap = ListenTap("s", rate, ring, CFG, pool, out.append)
    drive(tap, [0.9] * 10, window)
    assert tap.lease is not None
    calls = []
    tap.close(lambda w: calls.append(w.shape) or 0.9)  # speech to the very end
    assert len(calls) == 30 and ring.available() == 0  # full windows decided, tail read
    assert [type(e) for e in out] == [VoiceStarted, VoiceStopped, Utterance]
    assert out[1].reason == "closed" and out[1].end_ms == 40 * 32
    assert pool.in_use == 0


def test_worker_close_sends_the_transcript_then_the_ack():
    sent: list = []
    ticker = VadTicker(lambda rate: FakeBatch(0.9), 0.0)
    setup = SimpleNamespace(vad=CFG, asr=None, cache_dir=None)
    wl = WorkerListening(setup, ticker, sent.append)
    decoder = FakeDecoder()
    wl.decoder, wl.pool = decoder, MelPool(CFG)
    wl.asr = AsrQueue(decoder, wl._transcribed, on_idle=wl._ack)
    ring = ListRing(np.full(20 * 256, 0.05))
    wl.open("c1", 8000, ring)
    ticker.tick(0.0)  # speech from the start, still open when the caller hangs up
    assert [type(x.event) for x in sent] == [VoiceStarted]
    assert wl.close("c1") is True
    assert not any(isinstance(x, m.StreamClosed) for x in sent)  # not before its transcript
    assert wl.pick(FakeTts(None), 0.0) == "asr"
    wl.run_batch()
    kinds = [type(x.event).__name__ if isinstance(x, m.ListenEvent) else type(x).__name__
             for x in sent]
    assert kinds == ["VoiceStarted", "VoiceStopped", "Transcript", "StreamClosed"]
    assert sent[2].event.text == "text of c1" and len(ticker) == 0
    assert wl.close("c1") is False  # a second close (the handle's) is a no-op


def test_worker_close_without_speech_acks_at_once():
    sent: list = []
    ticker = VadTicker(lambda rate: FakeBatch(0.0), 0.0)
    wl = WorkerListening(SimpleNamespace(vad=CFG, asr=None, cache_dir=None), ticker,
                         sent.append)
    wl.open("q", 16000, ListRing(np.zeros(3000)))
    ticker.tick(0.0)
    wl.close("q")
    assert sent == [m.StreamClosed("q")]


def test_the_filterbank_comes_from_the_cache_without_importing_librosa(tmp_path):
    import subprocess
    import sys

    code = ("import sys; from cosyvoiced.listen.features.spec import WHISPER; "
            "from cosyvoiced.listen.features.stream import MelStream; "
            f"MelStream(WHISPER, cache_dir={str(tmp_path)!r}); "
            "print('librosa' in sys.modules)")

    def run() -> str:
        return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                              check=True, timeout=120).stdout.strip()

    assert run() == "True"  # first run: designed with librosa, saved
    saved = list((tmp_path / "mel").glob("*.npy"))
    assert len(saved) == 1 and "librosa" in saved[0].name
    assert run() == "False"  # from now on: loaded, librosa never imported
    from cosyvoiced.listen.features.filterbank import _design

    assert np.array_equal(np.load(saved[0]), _design(WHISPER_SPEC.rate_hz, WHISPER_SPEC.n_fft,
                                                     WHISPER_SPEC.n_mels, WHISPER_SPEC.fmin_hz,
                                                     WHISPER_SPEC.fmax_hz))
    saved[0].write_bytes(b"garbage")  # a damaged cache file is designed again
    assert run() == "True"


def test_pool_listening_pumps_an_upload_bigger_than_the_ring_and_waits_for_the_ack():
    import asyncio

    from cosyvoiced.audio.ring import Ring
    from cosyvoiced.serve.speech import PoolListening

    async def main() -> tuple[np.ndarray, list, int]:
        ring = Ring.create(4096, policy="drop")
        got: list[np.ndarray] = []
        transcript = Transcript("hello", 0, 100, 5.0, 0.1, "u")

        class Handle:
            stream_id, rate_hz, closed = "u", 8000, False

            def __init__(self) -> None:
                self.ring = ring
                self.events: asyncio.Queue = asyncio.Queue()

            async def flush_close(self, timeout_s: float) -> bool:
                while ring.available():  # the worker side reads the rest
                    await asyncio.sleep(0.001)
                # the worker's transcript, then its ack (the ack is not an event)
                self.events.put_nowait(m.ListenEvent("u", transcript))
                self.closed = True
                return True

        async def consumer() -> None:
            buf = np.zeros(1000, np.float32)
            while True:
                n = ring.read_into(buf)
                if n:
                    got.append(buf[:n].copy())
                await asyncio.sleep(0.001)

        lis = PoolListening(Handle(), backlog_s=None)  # type: ignore[arg-type]  # an upload
        task = asyncio.create_task(consumer())
        upload = np.arange(40_000, dtype=np.float32) / 40_000  # 5 s: ten times the ring
        lis.feed(upload)
        finals = await lis.close()
        task.cancel()
        ring.close()
        ring.unlink()
        return np.concatenate(got), finals, lis.dropped

    data, finals, dropped = asyncio.run(main())
    assert dropped == 0
    assert np.array_equal(data, np.arange(40_000, dtype=np.float32) / 40_000)
    assert [t.text for t in finals] == ["hello"]


def test_a_real_time_listen_stream_holds_a_bounded_backlog_and_counts_the_rest():
    """A peer sending faster than real time (AudioSocket 4 KiB frames as fast as TCP
    goes, Wyoming or WebSocket 1 MiB chunks) holds `backlog_s` beyond the ring, no more."""
    import asyncio

    from cosyvoiced.audio.ring import Ring
    from cosyvoiced.serve.speech import PoolListening

    async def main() -> tuple[int, int, int]:
        ring = Ring.create(4096, policy="drop")  # nobody reads it: the worker is behind

        class Handle:
            stream_id, rate_hz, closed = "c", 8000, False

            def __init__(self) -> None:
                self.ring = ring
                self.events: asyncio.Queue = asyncio.Queue()

        lis = PoolListening(Handle(), backlog_s=2.0)  # type: ignore[arg-type]
        frame = np.zeros(2048, np.float32)  # a 4 KiB slin frame: 0.256 s
        for _ in range(1000):  # 256 s of audio in no time
            lis.feed(frame)
        await asyncio.sleep(0.05)
        held = lis._backlog_n
        lis.feed(np.zeros(8000 * 60, np.float32))  # one huge chunk: dropped whole
        ring.close()
        ring.unlink()
        return held, lis.dropped, lis._backlog_n

    held, dropped, after = asyncio.run(main())
    assert held <= 2 * 8000 and held >= 2 * 8000 - 2048  # 2 s held beyond the ring
    assert dropped == 1000 * 2048 - 4096 - held + 8000 * 60  # everything else counted
    assert after == held


def test_a_stream_is_transcribed_in_its_language_else_asr_language_and_a_wrong_one_is_typed():
    from cosyvoiced.listen.languages import LanguageError

    sent: list = []
    ticker = VadTicker(lambda rate: FakeBatch(0.9), 0.0)
    setup = SimpleNamespace(vad=CFG, asr=SimpleNamespace(enabled=False, language="german"),
                            cache_dir=None)
    wl = WorkerListening(setup, ticker, sent.append)
    decoder = FakeDecoder(languages=("en", "de", "es"))
    wl.decoder, wl.pool = decoder, MelPool(CFG)
    wl.asr = AsrQueue(decoder, wl._transcribed, on_idle=wl._ack)
    for sid, asked in (("c1", "es-MX"), ("c2", "")):
        wl.open(sid, 8000, ListRing(np.full(20 * 256, 0.05)), asked)
    ticker.tick(0.0)
    for sid in ("c1", "c2"):
        wl.close(sid)
    while wl.run_batch():
        pass
    said = {x.stream_id: x.event.language for x in sent
            if isinstance(x, m.ListenEvent) and isinstance(x.event, Transcript)}
    assert said == {"c1": "es", "c2": "de"}
    with pytest.raises(LanguageError) as err:
        wl.open("c3", 8000, ListRing(np.zeros(256)), "fr")
    assert err.value.code == "unsupported_language" and "c3" not in wl.taps
