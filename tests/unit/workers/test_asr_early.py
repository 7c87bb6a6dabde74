"""Early decode: the utterance so far is decoded once its silence reaches EARLY_MS; the stop
confirms it (the transcript goes out at once, after voice_stopped), resumed speech
retracts it (its result never goes out, the utterance goes on)."""

from __future__ import annotations

import numpy as np

from cosyvoiced.config.schema import VadConfig
from cosyvoiced.listen.asr import Utterance
from cosyvoiced.listen.events import VoiceStarted, VoiceStopped
from cosyvoiced.workers.worker.asr_sched import AsrQueue
from cosyvoiced.workers.worker.utterances import (
    EARLY_MS,
    Confirm,
    ListenTap,
    MelPool,
    Provisional,
    Retract,
)
from tests.fakes.asr import FakeDecoder, utt
from tests.fakes.clock import Clock
from tests.fakes.ring import ListRing

CFG = VadConfig(start_ms=64, stop_ms=512, preroll_ms=256, max_utterance_s=10.0)
WINDOW = 256
SPEECH, QUIET = 0.9, 0.0


STREAM_AT_END = "{stream}@{end_ms}"
"""The fake decoder's text: which utterance (stream, end) it decoded."""


def tone(n: int) -> ListRing:
    t = np.arange(n) / 8000
    return ListRing(0.1 * np.sin(2 * np.pi * 300 * t))


def drive(tap: ListenTap, probs: list[float]) -> None:
    buf = np.zeros(WINDOW, np.float32)
    for p in probs:
        assert tap.read_into(buf) == WINDOW
        tap.on_prob(p)


def windows(ms: int) -> int:
    return ms // 32


def test_a_pause_longer_than_early_ms_is_decoded_early_and_confirmed_by_the_stop():
    out: list = []
    tap = ListenTap("s", 8000, tone(8000 * 10), CFG, MelPool(CFG), out.append)
    drive(tap, [QUIET] * 10 + [SPEECH] * 40 + [QUIET] * (windows(EARLY_MS) - 1))
    assert [type(e) for e in out] == [VoiceStarted]
    drive(tap, [QUIET])  # silence reaches EARLY_MS
    assert [type(e) for e in out] == [VoiceStarted, Provisional]
    early = out[1].utterance
    assert early.end_ms == 50 * 32 and early.start_ms == 10 * 32
    # the provisional utterance holds the frames the stop would have made
    want = (early.end_ms + 200 - (early.start_ms - CFG.preroll_ms)) // 10
    assert abs(early.frames.shape[0] - want) <= 1
    drive(tap, [QUIET] * (windows(CFG.stop_ms) - windows(EARLY_MS)))
    assert [type(e) for e in out] == [VoiceStarted, Provisional, VoiceStopped, Confirm]
    assert out[2].end_ms == early.end_ms and tap.lease is None and tap.pool.in_use == 0


def test_speech_resuming_retracts_the_early_decode_and_the_utterance_goes_on():
    out: list = []
    tap = ListenTap("s", 8000, tone(8000 * 10), CFG, MelPool(CFG), out.append)
    drive(tap, [SPEECH] * 30 + [QUIET] * windows(EARLY_MS + 64) + [SPEECH] * 20)
    assert [type(e) for e in out] == [VoiceStarted, Provisional, Retract]
    drive(tap, [QUIET] * windows(CFG.stop_ms))
    kinds = [type(e) for e in out]
    assert kinds[3:5] == [Provisional, VoiceStopped] and kinds[-1] is Confirm
    assert out[3].utterance.end_ms == out[4].end_ms > out[1].utterance.end_ms


def test_a_short_stop_ms_turns_early_decode_off():
    out: list = []
    cfg = VadConfig(start_ms=64, stop_ms=256, preroll_ms=256)
    tap = ListenTap("s", 8000, tone(8000 * 10), cfg, MelPool(cfg), out.append)
    drive(tap, [SPEECH] * 30 + [QUIET] * windows(cfg.stop_ms))
    assert tap.early_ms is None
    assert [type(e) for e in out] == [VoiceStarted, VoiceStopped, Utterance]


def test_queue_holds_a_provisional_result_until_confirmed():
    clock, out, acks = Clock(), [], []
    q = AsrQueue(FakeDecoder(text=STREAM_AT_END), lambda sid, r: out.append(r.text), clock=clock,
                 on_idle=acks.append)
    q.push(utt("a", clock.t), provisional=True)
    assert q.run() == 1 and out == []  # decoded, held
    assert q.pending("a") == 1
    q.confirm("a")
    assert out == ["a@1000"] and q.pending("a") == 0
    # confirmed before its decode: sent when decoded
    q.push(utt("b", clock.t), provisional=True)
    q.confirm("b")
    assert q.run() == 1 and out[-1] == "b@1000"


def test_queue_drops_a_retracted_job_queued_decoding_or_held():
    clock, out, acks = Clock(), [], []
    dec = FakeDecoder(text=STREAM_AT_END)
    q = AsrQueue(dec, lambda sid, r: out.append(r.text), clock=clock, on_idle=acks.append)
    q.push(utt("queued", clock.t), provisional=True)
    q.retract("queued")
    assert len(q) == 0 and q.pending("queued") == 0 and dec.seen == []
    q.push(utt("held", clock.t), provisional=True)
    q.run()
    q.retract("held")
    assert q.pending("held") == 0
    q.push(utt("decoding", clock.t), provisional=True)
    jobs = q.take()
    q.retract("decoding")  # while its batch runs on the decode thread
    q.push(utt("decoding", clock.t, 2000))  # the utterance went on and ended
    q.close_when_done("decoding")
    results, took = q.decode(jobs)
    q.deliver(jobs, results, took)
    assert out == [] and acks == []  # the void result is dropped; the real one still due
    q.run()
    assert out == ["decoding@2000"] and acks == ["decoding"] and q.retracted == 3
