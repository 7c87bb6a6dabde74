"""SPSC shared-memory ring: wrap-around, policies, counters, two processes, allocations."""

from __future__ import annotations

import multiprocessing as mp
import os
import time
from collections import deque

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from cosyvoiced.audio import ring as ring_module
from cosyvoiced.audio.ring import Ring, RingError
from tests.alloc import traced


@pytest.fixture
def make_ring():
    made: list[Ring] = []

    def make(*args, **kwargs) -> Ring:
        ring = Ring.create(*args, **kwargs)
        made.append(ring)
        return ring

    yield make
    for ring in made:
        ring.close()
        ring.unlink()


ops = st.lists(st.tuples(st.sampled_from(["w", "r"]), st.integers(0, 40)), max_size=60)


@settings(max_examples=150, deadline=None)
@given(ops=ops, cap_pow=st.integers(0, 5), channels=st.integers(1, 3),
       policy=st.sampled_from(["drop", "refuse"]), playing=st.booleans())
def test_ring_matches_a_fifo_model(ops, cap_pow, channels, policy, playing):
    ring = Ring.create(1 << cap_pow, channels=channels, dtype=np.int16, policy=policy)
    try:
        cap = ring.capacity_frames
        assert cap == 1 << cap_pow
        ring.set_playing(playing)
        model: deque[int] = deque()
        nxt = 0
        overruns = dropped = underruns = under_frames = 0
        written = read = 0
        for op, k in ops:
            if op == "w":
                seq = np.arange(nxt, nxt + k) % 30000
                frames = np.repeat(seq[:, None], channels, axis=1).astype(np.int16)
                if channels == 1:
                    frames = frames[:, 0]
                got = ring.write(frames)
                room = cap - len(model)
                if k > room and policy == "drop":
                    assert got == 0
                    overruns += 1
                    dropped += k
                else:
                    assert got == min(k, room)
                model.extend(seq[:got].tolist())
                nxt += got
                written += got
            else:
                out = np.full((k, channels) if channels > 1 else (k,), -1, np.int16)
                got = ring.read_into(out)
                expect = [model.popleft() for _ in range(min(k, len(model)))]
                assert got == len(expect)
                flat = out if channels == 1 else out[:, channels - 1]
                assert flat[:got].tolist() == expect
                assert (out[got:] == -1).all()  # the rest is untouched
                if got < k and playing:
                    underruns += 1
                    under_frames += k - got
                read += got
            s = ring.stats()
            assert s.fill_frames == len(model) == ring.available()
            assert ring.room() == cap - len(model)
            assert (s.written_frames, s.read_frames) == (written, read)
            assert (s.overruns, s.dropped_frames) == (overruns, dropped)
            assert (s.underruns, s.underrun_frames) == (underruns, under_frames)
    finally:
        ring.close()
        ring.unlink()


def test_capacity_rounds_up_to_power_of_two(make_ring):
    assert make_ring(1000).capacity_frames == 1024
    assert make_ring(1024).capacity_frames == 1024
    assert make_ring(1).capacity_frames == 1


def test_counters_wrap_many_times(make_ring):
    ring = make_ring(8, dtype=np.float32)
    out = np.empty(5, np.float32)
    for i in range(1000):
        x = np.arange(5 * i, 5 * i + 5, dtype=np.float32)
        assert ring.write(x) == 5
        assert ring.read_into(out) == 5
        np.testing.assert_array_equal(out, x)
    assert ring.stats().written_frames == 5000


def test_flush_request_is_honoured_by_consumer(make_ring):
    ring = make_ring(64, policy="refuse")
    ring.write(np.ones(40, np.float32))
    ring.request_flush()
    out = np.zeros(10, np.float32)
    assert ring.read_into(out) == 0
    assert ring.available() == 0
    ring.write(np.full(10, 2.0, np.float32))
    assert ring.read_into(out) == 10 and (out == 2.0).all()


def test_flush_keeps_what_was_written_after_the_request(make_ring):
    # regression: a flush honoured late used to discard the next utterance's start too
    ring = make_ring(64, policy="refuse")
    ring.write(np.ones(20, np.float32))
    ring.request_flush()
    ring.write(np.full(8, 3.0, np.float32))
    out = np.zeros(10, np.float32)
    assert ring.read_into(out) == 8 and (out[:8] == 3.0).all()
    ring.request_flush()  # nothing new written since the last flush point: no-op
    ring.write(np.full(4, 5.0, np.float32))
    ring.request_flush()
    assert ring.read_into(out) == 0


def test_attach_sees_the_same_ring(make_ring):
    ring = make_ring(256, channels=2, dtype=np.int16, policy="refuse")
    other = Ring.attach(ring.name)
    try:
        assert (other.capacity_frames, other.channels, other.dtype, other.policy) == (
            256, 2, np.dtype(np.int16), "refuse")
        ring.write(np.ones((10, 2), np.int16))
        out = np.zeros((16, 2), np.int16)
        ring.set_playing(True)
        assert other.read_into(out) == 10
        assert ring.stats().underruns == 1  # consumer counted, producer sees it
        with pytest.raises(RingError, match="only its creator"):
            other.unlink()
    finally:
        other.close()


def test_bad_input_is_typed(make_ring):
    ring = make_ring(16, channels=2)
    with pytest.raises(RingError):
        ring.write(np.zeros((4, 2), np.int16))
    with pytest.raises(RingError):
        ring.write(np.zeros(4, np.float32))
    with pytest.raises(RingError, match="no ring named"):
        Ring.attach("cv-no-such-ring")
    with pytest.raises(RingError):
        Ring.create(16, dtype=np.float64)
    with pytest.raises(RingError):
        Ring.create(16, policy="overwrite")  # type: ignore[arg-type]
    assert RingError.code == "ring_error"


def test_steady_state_allocates_nothing(make_ring):
    period = 4096  # large: any per-call data buffer would dwarf object churn
    ring = make_ring(3 * period + 7, dtype=np.float32, policy="drop")
    src = np.arange(period, dtype=np.float32)
    dst = np.empty(period, np.float32)

    def cycle():
        ring.write(src)
        ring.write(src)
        ring.read_into(dst)
        ring.read_into(dst)
        ring.available()

    for _ in range(100):
        cycle()
    t = traced(cycle, 5000, ring_module.__file__, __file__)
    assert ring.stats().written_frames == 5100 * 2 * period  # wrapped thousands of times
    assert t.retained_bytes < 512, t
    assert t.peak_bytes < period, t  # no transient data buffer (one would be 4 x period)


TWO_PROCESS_FRAMES = 256 * 4096
"""256 turns of the 4096-frame ring, in ~3000 writes and 2300 reads or more, of random sizes."""


def _produce(name: str, frames_total: int, total, done) -> None:
    ring = Ring.attach(name)
    rng = np.random.default_rng(7)
    sizes = rng.integers(1, 700, 4096)
    base = np.arange(1024, dtype=np.uint32)
    frames = np.empty((1024, 2), np.int16)
    seq = 0
    k = 0
    while seq < frames_total:
        n = int(sizes[k & 4095])
        k += 1
        vals = base[:n] + np.uint32(seq)
        frames[:n, 0] = (vals & 0xFFFF).astype(np.uint16).view(np.int16)
        frames[:n, 1] = (vals >> 16).astype(np.uint16).view(np.int16)
        off = 0
        while off < n:
            off += ring.write(frames[off:n])
        seq += n
    total.value = seq
    done.set()
    ring.close()


def test_two_processes_every_sample_once_in_order(make_ring):
    ring = make_ring(4096, channels=2, dtype=np.int16, policy="refuse")
    ctx = mp.get_context("spawn")
    total = ctx.Value("q", -1)
    done = ctx.Event()
    child = ctx.Process(target=_produce, args=(ring.name, TWO_PROCESS_FRAMES, total, done))
    child.start()
    out = np.empty((900, 2), np.int16)
    rng = np.random.default_rng(3)
    got = 0
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            n = ring.read_into(out[: int(rng.integers(1, 900))])
            if n:
                lo = out[:n, 0].view(np.uint16).astype(np.uint64)
                hi = out[:n, 1].view(np.uint16).astype(np.uint64)
                seq = lo | (hi << np.uint64(16))
                expect = np.arange(got, got + n, dtype=np.uint64)
                if not np.array_equal(seq, expect):
                    bad = int(np.argmax(seq != expect))
                    pytest.fail(f"frame {got + bad}: got {seq[bad]}, want {expect[bad]}")
                got += n
            elif done.is_set() and got == total.value:
                break
    finally:
        child.join(30)
    assert child.exitcode == 0
    assert got == total.value >= TWO_PROCESS_FRAMES
    s = ring.stats()
    assert s.written_frames == s.read_frames == got and s.overruns == 0


def _open_fds() -> int:
    return len(os.listdir("/proc/self/fd"))


def _mapped(name: str) -> bool:
    with open("/proc/self/maps") as f:
        return any(line.rstrip().split("/")[-1].split(" ")[0] == name for line in f)


def test_rings_keep_no_fd_open_once_mapped():
    # 200 streams x 2 rings each must not cost 400 fds in the daemon (or its workers).
    n = 40
    before = _open_fds()
    made = [Ring.create(64, dtype=np.int16, policy="refuse") for _ in range(n)]
    attached = [Ring.attach(r.name) for r in made]
    try:
        assert _open_fds() - before < n // 4
        for i, (ring, other) in enumerate(zip(made, attached, strict=True)):
            assert ring.write(np.full(8, i, np.int16)) == 8
            out = np.zeros(8, np.int16)
            assert other.read_into(out) == 8 and (out == i).all()
    finally:
        for ring, other in zip(made, attached, strict=True):
            other.close()
            ring.close()
            ring.unlink()
    for ring in made:
        assert not os.path.exists(f"/dev/shm/{ring.name}")
        assert not _mapped(ring.name)
        with pytest.raises(RingError, match="no ring"):
            Ring.attach(ring.name)
    assert _open_fds() - before < n // 4


def test_closed_ring_frees_its_mapping_and_can_still_be_unlinked():
    ring = Ring.create(64)
    other = Ring.attach(ring.name)
    assert _mapped(ring.name)
    other.close()
    ring.close()
    assert not _mapped(ring.name)
    assert os.path.exists(f"/dev/shm/{ring.name}")  # closing does not unlink
    ring.unlink()
    assert not os.path.exists(f"/dev/shm/{ring.name}")
