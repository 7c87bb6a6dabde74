"""Workers, logic only: CPU lists, EDF/FIFO picking, cancel, the VAD tick, admission."""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import pytest

from cosyvoiced.listen.vad import WINDOW_MS
from cosyvoiced.workers import messages as m
from cosyvoiced.workers.errors import CpuConfigError, Overloaded
from cosyvoiced.workers.pool.admission import Admission, WorkerLoad
from cosyvoiced.workers.pool.cpus import (
    check_threads,
    format_cpu_list,
    inference_cpus,
    parse_cpu_list,
)
from cosyvoiced.workers.worker.tts_sched import SayJob, TtsScheduler
from cosyvoiced.workers.worker.vad_tick import DC_TAU_S, VadGroup, VadTicker
from tests.fakes.ring import ListRing, PlaybackRing
from tests.fakes.vad import FakeBatch

# --- CPU lists ------------------------------------------------------------------------


def test_cpu_lists_parse_and_format_round_trip():
    assert parse_cpu_list("2-5,7, 9-10") == (2, 3, 4, 5, 7, 9, 10)
    assert parse_cpu_list("") == ()
    assert format_cpu_list((0, 1, 2, 3, 6, 8, 9)) == "0-3,6,8-9"
    for bad in ("a", "3-1", "1-", "-2"):
        with pytest.raises(CpuConfigError):
            parse_cpu_list(bad)


def test_cpus_are_checked_against_the_process_affinity():
    assert inference_cpus("", {0, 1}) == (0, 1)
    assert inference_cpus("1", {0, 1}) == (1,)
    with pytest.raises(CpuConfigError, match="may not use: 2-3"):
        inference_cpus("0-3", {0, 1})


def test_cpus_are_shared_without_oversubscription():
    # which worker gets which CPUs: test_placement
    with pytest.raises(CpuConfigError, match=r"workers.count x workers.onnx_threads = 2 x 2"):
        check_threads(2, 2, 2)


def test_config_rejects_more_onnx_threads_than_cpus():
    from cosyvoiced.config import ConfigError, load_config

    with pytest.raises(ConfigError) as err:
        load_config(None, ["workers.count=2", "workers.onnx_threads=2", 'workers.cpus="0-1"'])
    text = str(err.value)
    assert "workers.onnx_threads" in text and "workers.count" in text
    load_config(None, ["workers.count=2", "workers.onnx_threads=1", 'workers.cpus="0-1"'])


# --- the TTS scheduler ----------------------------------------------------------------


@dataclass
class FakeChunk:
    audio: np.ndarray
    is_last: bool


class BadRequest(Exception):
    code = "empty_text"


RATE = 1000


def clauses_gen(job: SayJob, _stream: object):
    if job.text == "bad":
        raise BadRequest("text is empty")
    lengths = [int(x) for x in job.text.split()]
    for i, n in enumerate(lengths):
        yield FakeChunk(np.zeros(n, np.float32), i == len(lengths) - 1)


def make_sched(policy: str = "edf", lookahead_s: float = 1.5, work_conserving: bool = True):
    events: list[object] = []
    sched = TtsScheduler(clauses_gen, events.append, policy=policy, lookahead_s=lookahead_s,
                         work_conserving=work_conserving, clock=lambda: 0.0)
    return sched, events


def test_edf_serves_the_stream_closest_to_running_dry():
    sched, _ = make_sched(work_conserving=False)
    rings = {name: PlaybackRing() for name in "abc"}
    for name, ring in rings.items():
        sched.open(name, ring, RATE)
        sched.say(name, SayJob(1, "500 500 500", None, 0.0))
    rings["a"].fill, rings["b"].fill, rings["c"].fill = 900, 100, 500
    assert sched.pick(0.0).id == "b"
    rings["b"].fill = 1600  # 1.6 s ahead: over the lookahead, must wait
    assert sched.pick(0.0).id == "c"
    rings["a"].fill = rings["c"].fill = 1500
    assert sched.pick(0.0) is None
    assert sched.wake_in(0.0) is not None


def steps_of(text: str):
    """What the engine would say of the clauses_gen steps left (whole-graph steps)."""
    from cosyvoiced.tts.streaming.synthesis import Step

    return lambda: [Step(0, int(n) / RATE) for n in text.split()]


def test_spare_time_goes_beyond_the_lookahead_while_the_ring_has_room():
    sched, _ = make_sched()
    a, b = PlaybackRing(capacity=2000), PlaybackRing()
    for name, ring in (("a", a), ("b", b)):
        sched.open(name, ring, RATE)
        job = SayJob(1, "500 500 500", None, 0.0)
        job.steps = steps_of(job.text)
        sched.say(name, job)
    a.fill, b.fill = 1500, 100  # a: at its lookahead, room for one step
    assert sched.pick(0.0).id == "b"  # due first: deadlines before spare time
    assert not sched.ahead_step
    b.fill = 1700  # nobody due: the one with least in its ring gets a spare step
    assert sched.pick(0.0).id == "a"
    assert sched.ahead_step  # the load meter shows it apart
    a.fill = 1900  # 0.1 s of room for a 0.5 s step: made now, it would wait in memory
    assert sched.pick(0.0).id == "b"
    b.fill = 1 << 20
    assert sched.pick(0.0) is None
    assert sched.wake_in(0.0) == pytest.approx(0.4)  # when a's ring has room at 1x
    off, _ = make_sched(work_conserving=False)
    off.open("a", PlaybackRing(), RATE)
    off.say("a", SayJob(1, "500", None, 0.0))
    off.streams["a"].ring.fill = 1600
    assert off.pick(0.0) is None


def test_what_streams_owe_is_the_rate_of_their_synthesis_left():
    """`owed` (admission's load): a stream with speech left to make owes its RTF over it,
    however far ahead of its listener it is; a new request owes all of it whatever its
    first-audio budget; a stream with everything made owes nothing."""
    sched, _ = make_sched(work_conserving=False)
    rtf = 0.08
    for name in "abc":
        sched.open(name, PlaybackRing(), RATE)
    ahead = SayJob(1, "500 500 500", None, 0.0)
    ahead.steps = steps_of(ahead.text)
    sched.say("a", ahead)
    sched.streams["a"].ring.fill = 1500  # 1.5 s ahead: slack for the order, not room
    sched.say("b", SayJob(2, "x" * 30, None, 0.0))  # not started: its speech from its text
    sched.streams["c"].ring.fill = 3000  # only playing out
    assert sched.owed(rtf) == pytest.approx(2 * rtf)
    while sched.streams["a"].has_work():  # a made all of it: it owes nothing more
        sched._run_step(sched.streams["a"])
    assert sched.owed(rtf) == pytest.approx(rtf)
    sched.first_audio_s = 2.0  # the budget is latency, not capacity
    assert sched.owed(rtf) == pytest.approx(rtf)


def test_new_request_goes_before_streams_that_have_audio_ahead():
    sched, events = make_sched()
    busy, new = PlaybackRing(), PlaybackRing()
    sched.open("busy", busy, RATE)
    sched.open("new", new, RATE)
    sched.say("busy", SayJob(1, "400 400 400 400", None, 0.0))
    assert sched.step(0.0)  # busy gets its first clause
    sched.say("new", SayJob(2, "300", None, 0.0))
    assert sched.pick(0.0).id == "new"
    assert sched.step(0.0)
    kinds = [type(e).__name__ for e in events if getattr(e, "stream_id", "") == "new"]
    assert kinds == ["FirstAudio", "SayDone"]


def test_fifo_ignores_deadlines_and_lookahead():
    sched, _ = make_sched("fifo")
    a, b = PlaybackRing(), PlaybackRing()
    sched.open("a", a, RATE)
    sched.open("b", b, RATE)
    sched.say("a", SayJob(1, "100 100", None, 0.0))
    sched.say("b", SayJob(2, "100 100", None, 0.0))
    a.fill = 10_000  # far ahead: EDF would wait, FIFO does not
    order = []
    while (s := sched.pick(0.0)) is not None:
        order.append(s.id)
        sched.step(0.0)
    assert order == ["a", "b", "a", "b"]


def test_say_done_only_after_all_audio_is_in_the_ring():
    sched, events = make_sched()
    ring = PlaybackRing(capacity=150)
    sched.open("s", ring, RATE)
    sched.say("s", SayJob(7, "100 100", None, 0.0))
    sched.step(0.0)
    sched.step(0.0)  # synthesized both; only 150 fit
    assert not any(isinstance(e, m.SayDone) for e in events)
    ring.fill = 0
    sched.flush(0.0)
    done = [e for e in events if isinstance(e, m.SayDone)]
    assert done and done[0].samples == 200 and not ring.playing


def test_cancel_drops_queued_work_at_once():
    sched, events = make_sched()
    ring = PlaybackRing(capacity=50)
    sched.open("s", ring, RATE)
    sched.say("s", SayJob(1, "100 100 100", None, 0.0))
    sched.say("s", SayJob(2, "100", None, 0.0))
    sched.step(0.0)
    sched.cancel("s")
    cancelled = {e.request_id for e in events if isinstance(e, m.SayDone) and e.cancelled}
    assert cancelled == {1, 2}
    assert ring.flushes == 1 and not ring.playing
    assert sched.pick(0.0) is None and sched.streams["s"].pending_samples == 0


def test_a_bad_request_fails_alone():
    sched, events = make_sched()
    ring = PlaybackRing()
    sched.open("s", ring, RATE)
    sched.say("s", SayJob(1, "bad", None, 0.0))
    sched.say("s", SayJob(2, "100", None, 0.0))
    while sched.step(0.0):
        pass
    errors = [e for e in events if isinstance(e, m.StreamError)]
    assert [(e.request_id, e.code) for e in errors] == [(1, "empty_text")]
    assert any(isinstance(e, m.SayDone) and e.request_id == 2 for e in events)


# --- the VAD tick ---------------------------------------------------------------------


def test_vad_group_runs_one_batch_per_round_and_keeps_streams_apart():
    batch = FakeBatch(window=4)
    group = VadGroup(batch)
    got: dict[str, list[float]] = {"a": [], "b": [], "c": []}
    rings = {"a": ListRing(np.full(8, 0.1, np.float32)),    # two windows
             "b": ListRing(np.full(4, 0.2, np.float32)),    # one window
             "c": ListRing(np.full(3, 0.3, np.float32))}    # not a full window
    for name, ring in rings.items():
        group.add(name, ring, got[name].append)
    assert group.tick() == 3
    assert batch.runs == [2, 1]
    k = math.exp(-WINDOW_MS / 1000 / DC_TAU_S)  # each stream's DC offset is tracked, removed
    assert got["a"] == pytest.approx([0.1 * k, 0.1 * k * k], rel=1e-5)
    assert got["b"] == pytest.approx([0.2 * k + 0.001], rel=1e-5)
    assert got["c"] == [] and rings["c"].available() == 3


def test_vad_ticker_ticks_on_its_period():
    ticker = VadTicker(lambda rate: FakeBatch(window=4), period_s=0.016)
    ring = ListRing(np.zeros(40, np.float32))
    ticker.add("s", 16000, ring, lambda p: None)
    assert ticker.tick(10.0) == 10
    assert ticker.tick(10.001) == 0  # not due yet
    assert ticker.due_in(10.001) == pytest.approx(0.015)
    assert ticker.remove("s") and len(ticker) == 0


# --- admission ------------------------------------------------------------------------


def load(index: int, speaking: int = 0, owed: float | None = None, rtf: float = 0.1,
         alive: bool = True) -> WorkerLoad:
    """A worker with `speaking` streams that owe `owed` (default: each just begun, `rtf`)."""
    owed = speaking * rtf if owed is None else owed
    return WorkerLoad(index, alive, 0.0, rtf, 60.0, speaking, 0, speaking, owed=owed)


def test_admission_spreads_streams_then_picks_the_least_loaded():
    adm = Admission(busy_max=0.85, max_streams=10)
    assert adm.choose([load(0, speaking=3), load(1, speaking=1)], "tts") == 1
    assert adm.choose([load(0, owed=0.1), load(1, owed=0.5)], "tts") == 0
    # equal stream counts first: idle open streams may speak any moment
    busy_few = WorkerLoad(0, True, 0.5, 0.1, 60.0, 0, 0, 1, owed=0.5)
    idle_many = WorkerLoad(1, True, 0.0, 0.1, 60.0, 0, 0, 3)
    assert adm.choose([busy_few, idle_many], "tts") == 0
    assert adm.choose([load(0, alive=False), load(1, speaking=5)], "tts") == 1


def test_admission_takes_a_worker_with_room_when_the_emptiest_one_is_full():
    """Regression: the worker with the fewest streams was the only one considered, so a
    slow one (high RTF) refused streams another worker could still carry."""
    adm = Admission(busy_max=0.4, max_streams=10)
    slow_empty = WorkerLoad(0, True, 0.0, 0.57, 60.0, 0, 0, 0)
    fast_busy = WorkerLoad(1, True, 0.14, 0.14, 60.0, 1, 0, 1, owed=0.14)
    assert adm.choose([slow_empty, fast_busy], "tts") == 1
    assert adm.refused == 0


def test_admission_idle_worker_with_a_stale_high_rtf_still_takes_one_tts_stream():
    """Regression: an RTF figure measured while other jobs held the CPU (wall time, 1.6)
    refused every request on idle workers, and nothing re-measured it."""
    adm = Admission(busy_max=0.85, max_streams=10)
    stale = [load(0, rtf=1.6), load(1, rtf=1.1)]
    assert adm.choose(stale, "tts") == 0  # fewest streams, then least loaded
    adm.can_speak(load(1, rtf=1.6))
    with pytest.raises(Overloaded):  # one stream already speaking: the figure is fresh
        adm.choose([load(0, speaking=1, rtf=1.6), load(1, speaking=1, rtf=1.1)], "tts")
    with pytest.raises(Overloaded):  # busy with listening: no room at all
        adm.choose([load(0, owed=0.9, rtf=1.6)], "tts")
    assert adm.refused == 2


def test_admission_refuses_beyond_real_time_capacity_with_a_typed_error():
    adm = Admission(busy_max=0.85, max_streams=100)
    full = [load(0, speaking=8), load(1, speaking=8)]  # 0.8 + 0.1 > 0.85
    with pytest.raises(Overloaded) as err:
        adm.choose(full, "tts")
    assert err.value.code == "overloaded" and adm.refused == 1
    with pytest.raises(Overloaded):
        adm.can_speak(load(0, owed=0.9))
    adm.can_speak(load(0, speaking=2))
    with pytest.raises(Overloaded, match="max_streams"):
        Admission(0.85, max_streams=2).check_cap(2)


def test_malloc_trim_gives_a_threads_freed_heap_back():
    """What the worker loop calls every TRIM_EVERY_S: memory a thread freed in the middle
    of its arena stays resident until trimmed (run in a fresh interpreter)."""
    import subprocess
    import sys

    script = """
import os, threading
from cosyvoiced.workers.worker.heap import malloc_trim
def rss_mb():
    return int(open("/proc/self/statm").read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20
kept = []
def churn():
    blocks = [bytearray(100_000) for _ in range(2000)]  # 200 MB in 100 kB heap blocks
    kept.extend(blocks[::2])  # every other one stays: the freed half is full of holes
t = threading.Thread(target=churn)
t.start()
t.join()
before = rss_mb()
assert malloc_trim()
print(before, rss_mb())
"""
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                         timeout=60, check=True).stdout.split()
    before, after = float(out[0]), float(out[1])
    assert before - after > 60, (before, after)  # ~100 MB were held freed


def test_the_worker_rtf_is_speech_made_per_second_of_work_whatever_the_step_sizes():
    from cosyvoiced.workers.stats import LoadMeter

    meter = LoadMeter()
    meter.rtf = 0.2  # the warm-up's figure, worth one second of speech
    for _ in range(20):  # sentences: the front with a small first chunk, then 1 s chunks
        meter.add_clause(0.045, 0.25)
        for _ in range(5):
            meter.add_clause(0.06, 1.0)
    total = (0.045 + 5 * 0.06) / (0.25 + 5)
    assert meter.rtf == pytest.approx(total, rel=0.1)
    # an average of per-step ratios would count the small first chunk's 0.18 as a step
    assert meter.rtf < (0.045 / 0.25 + 5 * 0.06) / 6 * 0.9


def test_admission_spare_is_the_room_under_busy_max_and_the_stream_cap():
    adm = Admission(busy_max=0.8, max_streams=10)
    assert adm.spare([load(0), load(1)], 0) == pytest.approx(1.0)
    # worker 0 at 0.4 of 0.8, worker 1 idle: 0.4 + 0.8 of 1.6 left
    assert adm.spare([load(0, speaking=4, rtf=0.1), load(1)], 4) == pytest.approx(0.6, abs=1e-9)
    assert adm.spare([load(0, owed=0.95), load(1, alive=False)], 0) == 0.0
    assert adm.spare([load(0), load(1, alive=False)], 0) == pytest.approx(0.5)  # one lost
    assert adm.spare([load(0)], 8) == pytest.approx(0.2)  # the cap binds first
    assert adm.spare([load(0)], 12) == 0.0
    assert adm.spare([], 0) == 0.0
    # room that one more speaking stream does not fit in is no room: 0.75 + 0.1 > 0.8
    assert adm.spare([load(0, speaking=1, owed=0.75)], 1) == 0.0
    with pytest.raises(Overloaded):
        adm.can_speak(load(0, speaking=1, owed=0.75))
    # an idle voice always takes one stream (a stale RTF), so its room counts
    assert adm.spare([load(0, owed=0.2, rtf=1.6)], 0) == pytest.approx(0.75)
    # where spare is 0, choose refuses
    with pytest.raises(Overloaded):
        adm.choose([load(0, owed=0.95), load(1, alive=False)], "listen")


@pytest.mark.parametrize(("rlimit", "cap_eff", "may"), [
    (20, "0000000000000000", True),   # systemd LimitNICE=+0
    (0, "000001fffeffffff", True),    # root with every capability
    (0, "00000000a80425fb", False),   # root in a default container: no CAP_SYS_NICE
    (10, "0000000000000000", False),  # down to nice 10 only
])
def test_may_renice_to_0_needs_the_rlimit_or_cap_sys_nice(monkeypatch, tmp_path, rlimit,
                                                           cap_eff, may):
    import resource

    from cosyvoiced.workers.worker import affinity

    status = tmp_path / "status"
    status.write_text(f"Name:\tpython\nCapInh:\t0000000000000000\nCapEff:\t{cap_eff}\n")
    monkeypatch.setattr(affinity, "STATUS", str(status))
    monkeypatch.setattr(resource, "getrlimit", lambda which: (rlimit, rlimit))
    assert affinity.may_renice_to(0) is may
