"""ASR batches in a worker: sized by the earliest deadline's slack, decoded off the loop
thread (the VAD tick goes on meanwhile), delivered on the loop thread."""

from __future__ import annotations

import threading
from types import SimpleNamespace

import numpy as np

from cosyvoiced.config.schema import VadConfig
from cosyvoiced.workers import messages as m
from cosyvoiced.workers.worker.asr_sched import AsrQueue, AsrRunner
from cosyvoiced.workers.worker.listeners import WorkerListening
from cosyvoiced.workers.worker.utterances import MelPool
from cosyvoiced.workers.worker.vad_tick import VadTicker
from tests.fakes.asr import FakeDecoder, utt
from tests.fakes.clock import Clock
from tests.fakes.ring import ListRing
from tests.fakes.vad import FakeBatch


def test_batch_size_follows_the_earliest_deadline_slack():
    clock = Clock()
    q = AsrQueue(FakeDecoder(gated=True), lambda *a: None, max_batch=8, deadline_s=1.5, clock=clock)
    q.batch_s = 0.3  # per utterance
    for i in range(10):
        q.push(utt(f"s{i}", clock.t))  # all due in 1.5 s: room for five at 0.3 s each
    assert len(q.take()) == 5
    clock.t += 10.0  # the rest are overdue: one at a time
    assert len(q.take()) == 1
    q.batch_s = 0.01
    clock.t -= 10.0
    assert len(q.take()) == 4  # plenty of slack: capped by what is queued (and max_batch)


def test_the_runner_decodes_off_the_loop_thread_and_delivers_on_it():
    clock = Clock()
    dec, out, busy = FakeDecoder(gated=True), [], []
    q = AsrQueue(dec, lambda sid, t: out.append((sid, threading.get_ident())), clock=clock)
    runner = AsrRunner(q, on_decoded=lambda cpu_s, speech_s: busy.append(speech_s))
    try:
        q.push(utt("a", clock.t))
        assert runner.wake_in() == 0.0
        assert runner.poll() == 0 and runner.running  # started, not done
        assert runner.poll() == 0 and not out
        assert runner.wake_in() == AsrRunner.POLL_S  # the loop keeps polling, not spinning
        q.push(utt("b", clock.t))  # queued meanwhile: waits for the running batch
        dec.gate.set()
        assert runner.wait(5) == 1
        assert out == [("a", threading.get_ident())]
        assert dec.threads[0] != threading.get_ident()
        assert runner.running  # "b" started right after
        assert runner.wait(5) == 1 and [s for s, _ in out] == ["a", "b"]
        assert len(busy) == 2 and runner.wake_in() is None
    finally:
        runner.close()


def test_the_vad_tick_goes_on_while_a_batch_decodes():
    cfg = VadConfig(start_ms=64, stop_ms=128, preroll_ms=64)
    sent: list = []
    batch = FakeBatch(0.9)
    ticker = VadTicker(lambda rate: batch, 0.0)
    wl = WorkerListening(SimpleNamespace(vad=cfg, asr=None, cache_dir=None), ticker,
                         sent.append)
    dec = FakeDecoder(gated=True)
    wl.decoder, wl.pool = dec, MelPool(cfg)
    wl.asr = AsrQueue(dec, wl._transcribed, on_idle=wl._ack)
    wl.runner = AsrRunner(wl.asr)
    try:
        ring = ListRing()
        wl.open("c", 8000, ring)
        ring.write(np.full(10 * 256, 0.05))
        ticker.tick(0.0)
        batch.prob = 0.0
        ring.write(np.full(10 * 256, 0.05))
        ticker.tick(1.0)  # speech ended: an utterance is queued
        assert len(wl.asr) == 1 and wl.pick(FakeTts(), 0.0) == "asr"
        wl.run_batch()  # starts the decode, returns at once
        assert wl.runner.running and wl.pick(FakeTts(), 0.0) is None
        assert wl.wake_in() == AsrRunner.POLL_S
        ring.write(np.full(20 * 256, 0.05))
        assert ticker.tick(2.0) == 20  # windows still read while Whisper works
        dec.gate.set()
        wl.runner.wait(5)
        kinds = [type(x.event).__name__ for x in sent if isinstance(x, m.ListenEvent)]
        assert kinds == ["VoiceStarted", "VoiceStopped", "Transcript"]
    finally:
        wl.runner.close()


class FakeTts:
    def pick(self, now_s: float):
        return None
