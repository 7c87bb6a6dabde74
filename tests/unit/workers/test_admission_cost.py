"""Admission's cost model: TTS, VAD and Whisper in one currency (core-seconds per second),
measured in the worker (`LoadMeter`, `AsrRunner`) and summed per worker (`WorkerLoad`)."""

from __future__ import annotations

import time

import pytest

from cosyvoiced.config.schema import WorkersConfig
from cosyvoiced.workers.errors import Overloaded
from cosyvoiced.workers.pool.admission import VAD_WINDOW_S, Admission, WorkerLoad
from cosyvoiced.workers.stats import SPEECH_SHARE_PRIOR, LoadMeter
from cosyvoiced.workers.worker.asr_sched import AsrQueue, AsrRunner
from tests.fakes.asr import FakeDecoder, utt
from tests.fakes.clock import Clock

RTF = 0.067
"""The bundled voice's single-stream RTF at one thread on this box (bench `streams`)."""


def calls(index: int, listening: int, speaking: int = 0) -> WorkerLoad:
    """A worker with `listening` call legs: VAD at 60 us a window, Whisper at 0.3 s of CPU
    per second of speech, callers speaking 35% of the time; `speaking` replies just
    begun (each owes `RTF`)."""
    return WorkerLoad(index, True, 0.0, RTF, 60.0, speaking, listening,
                      listening + speaking, asr_rtf=0.3, speech_share=0.35,
                      owed=speaking * RTF)


def test_a_listen_stream_costs_its_vad_windows_and_its_expected_whisper_decodes():
    w = calls(0, listening=10, speaking=2)
    vad = 60e-6 / VAD_WINDOW_S
    assert w.listen_cost() == pytest.approx(vad + 0.3 * 0.35)
    assert w.load() == pytest.approx(2 * RTF + 10 * (vad + 0.105))
    adm = Admission(busy_max=0.95, max_streams=100)
    assert adm.cost(w, "listen") == pytest.approx(vad + 0.105)
    assert adm.cost(w, "tts") == RTF


def test_whisper_work_of_listen_streams_leaves_no_room_for_more_speech():
    """8 call legs at 35% speech decode 0.84 core-seconds a second: with one reply being
    spoken that worker is full, the other one (no listen streams) takes the next reply.
    Counting the VAD alone, the first worker looked 0.08 busy."""
    adm = Admission(busy_max=0.95, max_streams=100)
    listening = calls(0, listening=8, speaking=1)
    assert listening.load() + RTF > 0.95
    assert adm.choose([listening, calls(1, listening=0, speaking=4)], "tts") == 1
    with pytest.raises(Overloaded):
        adm.can_speak(calls(0, listening=8, speaking=1))
    with pytest.raises(Overloaded):  # nor one more call leg
        adm.choose([calls(0, listening=9)], "listen")
    adm.choose([calls(0, listening=7)], "listen")


def test_the_default_limit_lets_a_worker_run_to_90_percent_of_its_capacity():
    busy_max = WorkersConfig().admit_busy_max
    assert 0.9 <= busy_max < 1.0
    w = WorkerLoad(0, True, 0.0, RTF, 60.0, 0, 0, 0)
    assert w.tts_capacity(busy_max) >= int(0.9 / RTF)  # whole streams


def test_the_busy_figure_is_cpu_time_of_every_thread_counted_once():
    """Busy is the process's CPU seconds per second over its CPUs: a Whisper batch
    decoding while the loop synthesizes is not counted twice (it was, as wall time, the
    decode's added to the loop's)."""
    cpu = [0.0]
    meter = LoadMeter(window_s=1.0, alpha=1.0, cpus=1, cpu_clock=lambda: cpu[0], start_s=0.0)
    cpu[0] = 0.6  # 0.4 s of Whisper and 0.2 s of TTS, overlapping in wall time
    assert meter.roll(1.0)
    assert meter.busy == pytest.approx(0.6)
    two = LoadMeter(window_s=1.0, alpha=1.0, cpus=2, cpu_clock=lambda: cpu[0], start_s=0.0)
    cpu[0] = 1.6
    assert two.roll(1.0) and two.busy == pytest.approx(0.5)  # (1.6 - 0.6) / 2 CPUs


def test_a_loop_that_never_rests_is_busy_whatever_cpu_time_it_got():
    """On a shared box other processes take the core while a step runs: the loop's wall
    time at work says the worker is full though its CPU time does not."""
    cpu = [0.0]
    meter = LoadMeter(window_s=1.0, alpha=1.0, cpu_clock=lambda: cpu[0], start_s=0.0)
    cpu[0] = 0.55
    meter.add_busy(0.97)
    assert meter.roll(1.0) and meter.busy == pytest.approx(0.97)
    cpu[0] = 1.15
    meter.add_busy(0.2)  # the rest was a Whisper decode on its own threads
    assert meter.roll(2.0) and meter.busy == pytest.approx(0.6)


def test_steps_made_ahead_of_every_deadline_are_shown_apart():
    """A worker that spent most of its time running downloads ahead (work-conserving)
    reports that share as `ahead`, a figure for operators."""
    cpu = [0.0]
    meter = LoadMeter(window_s=1.0, alpha=1.0, cpu_clock=lambda: cpu[0], start_s=0.0)
    cpu[0] = 0.9
    meter.add_busy(0.95)
    meter.add_ahead(0.6, 0.58)
    assert meter.roll(1.0)
    assert meter.busy == pytest.approx(0.95)
    assert meter.ahead == pytest.approx(0.95 - max(0.9 - 0.58, 0.95 - 0.6))
    cpu[0] = 1.9  # the next second: all of it due (nothing ran ahead), ahead decays to 0
    meter.add_busy(1.0)
    assert meter.roll(2.0) and meter.ahead == pytest.approx(0.0)


def test_admission_goes_by_what_streams_owe_not_by_how_busy_the_worker_is():
    """A saturated worker reads busy 1.0 whether its streams owe 0.3 of it (requests
    queueing briefly for first audio) or 0.95 (listeners about to run dry): the load ramp
    showed both. Admission takes the first and refuses the second; streams that began
    to speak since the worker's last figure count at `rtf` each."""
    adm = Admission(busy_max=0.9, max_streams=100)
    saturated = WorkerLoad(0, True, 1.0, RTF, 60.0, 15, 0, 15, owed=0.3)
    assert saturated.load() == pytest.approx(0.3)
    assert adm.choose([saturated], "tts") == 0
    owing = WorkerLoad(0, True, 1.0, RTF, 60.0, 15, 0, 15, owed=0.85)
    with pytest.raises(Overloaded, match="0.85 of 0.90"):
        adm.choose([owing], "tts")
    just_started = WorkerLoad(0, True, 0.2, RTF, 60.0, 15, 0, 15, owed=0.3, new=8)
    assert just_started.load() == pytest.approx(0.3 + 8 * RTF)
    with pytest.raises(Overloaded):
        adm.can_speak(just_started)


def test_whisper_rtf_and_speech_share_are_moving_figures():
    meter = LoadMeter(start_s=0.0, cpu_clock=lambda: 0.0)
    assert meter.asr_rtf == 0.0 and meter.speech_share == SPEECH_SHARE_PRIOR
    meter.asr_rtf = 0.5  # the warm-up's figure
    for _ in range(60):
        meter.add_decoded(0.6, 2.0)
    assert meter.asr_rtf == pytest.approx(0.3, rel=0.01)
    meter.add_decoded(1.0, 0.0)  # nothing decoded: ignored
    assert meter.asr_rtf == pytest.approx(0.3, rel=0.01)
    for t in range(1, 121):  # 4 listen streams, 1.4 s of speech a second between them
        meter.add_heard(1.4)
        assert meter.roll(float(t), listening=4)
    assert meter.speech_share == pytest.approx(0.35, rel=0.03)
    meter.add_heard(5.0)
    meter.roll(121.0, listening=0)  # no listen stream open: the figure stays
    assert meter.speech_share == pytest.approx(0.35, rel=0.03)


def _burn(cpu_s: float) -> None:
    end = time.thread_time() + cpu_s
    while time.thread_time() < end:
        pass


class BurningDecoder(FakeDecoder):
    """Spends `cpu_s` of its own thread's CPU per batch."""

    def __init__(self, cpu_s: float) -> None:
        super().__init__(gated=True)
        self.cpu_s = cpu_s

    def transcribe(self, utts):  # type: ignore[no-untyped-def]
        _burn(self.cpu_s)
        return super().transcribe(utts)


def test_the_runner_reports_the_decode_cpu_time_not_the_loop_threads():
    """The loop thread keeps working while a batch decodes; the batch's figure is the
    decode threads' CPU only, and its speech is the batch's utterances."""
    clock = Clock()
    decoded: list[tuple[float, float]] = []
    dec = BurningDecoder(0.15)
    q = AsrQueue(dec, lambda sid, t: None, clock=clock)
    runner = AsrRunner(q, on_decoded=lambda cpu, speech: decoded.append((cpu, speech)))
    try:
        q.push(utt("a", clock.t, end_ms=1500))
        q.push(utt("b", clock.t, end_ms=2500))
        runner.poll()
        assert runner.running
        dec.gate.set()
        _burn(0.3)  # the loop's own work meanwhile (TTS steps, VAD ticks)
        assert runner.wait(10) == 2
    finally:
        runner.close()
    [(cpu_s, speech_s)] = decoded
    assert speech_s == pytest.approx(4.0)
    assert 0.1 <= cpu_s <= 0.25, cpu_s
