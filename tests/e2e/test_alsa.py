"""ALSA threads on real, paced devices: a PulseAudio null sink through ALSA's pulse PCM.

The playback thread plays a chirp and a real Asterisk prompt into the sink; the capture
thread records the sink's monitor; cross-correlation finds every copy of the signal and
the rings' counters, sampled against the clock, give the loopback latency.
"""

from __future__ import annotations

import os
import sys
import time

import numpy as np
import pytest

from cosyvoiced.audio.alsa.device import start_device
from cosyvoiced.audio.resample import StreamResampler
from cosyvoiced.audio.ring import Ring
from cosyvoiced.config.schema import AudioDeviceConfig
from cosyvoiced.testing.prompts import SOUNDS, load_wav

RATE = 16000
PROMPT = SOUNDS / "vm-goodbye.wav"


def chirp(seconds: float = 0.8, f0: float = 200.0, f1: float = 4000.0) -> np.ndarray:
    t = np.arange(int(RATE * seconds)) / RATE
    x = 0.5 * np.sin(2 * np.pi * (f0 * t + (f1 - f0) * t * t / (2 * seconds)))
    ramp = int(0.01 * RATE)
    x[:ramp] *= np.linspace(0, 1, ramp)
    x[-ramp:] *= np.linspace(1, 0, ramp)
    return x.astype(np.float32)


def prompt() -> np.ndarray:
    x = load_wav(PROMPT)  # checks 16-bit mono at 8 kHz
    r = StreamResampler(8000, RATE)
    return np.concatenate([r.process(x), r.flush()])


def silence(seconds: float) -> np.ndarray:
    return np.zeros(int(RATE * seconds), np.float32)


def device(name: str, pcm: str, direction: str, **kw) -> AudioDeviceConfig:
    # 8 periods (80 ms): the pulse plugin moves data on its own non-realtime thread, which a
    # busy shared CI box can hold off for longer than 40 ms (the server then plays silence).
    return AudioDeviceConfig(name=name, pcm=pcm, direction=direction, rate_hz=RATE,
                             channels=1, period_ms=10.0, periods=8, access="rw",
                             **{"rt_priority": 10, **kw})


def find(recording: np.ndarray, template: np.ndarray, around: int, window: int):
    """Best normalized correlation of `template` in recording[around-window : ...]."""
    lo = max(0, around - window)
    hi = min(len(recording), around + window + len(template))
    seg = recording[lo:hi].astype(np.float64)
    tpl = template.astype(np.float64)
    n = len(seg) + len(tpl)
    nfft = 1 << (n - 1).bit_length()
    corr = np.fft.irfft(np.fft.rfft(seg, nfft) * np.conj(np.fft.rfft(tpl, nfft)), nfft)
    corr = corr[: len(seg) - len(tpl) + 1]
    csum = np.concatenate([[0.0], np.cumsum(seg * seg)])
    energy = csum[len(tpl):] - csum[: len(seg) - len(tpl) + 1]  # sliding window energy
    norm = corr / (np.sqrt(np.maximum(energy, 1e-12)) * np.linalg.norm(tpl))
    k = int(np.argmax(norm))
    return lo + k, float(norm[k])


class Loop:
    """Drive a playback and a capture thread from the test: feed, drain, sample clocks."""

    def __init__(self, pulse, *, seconds_capacity: float = 2.0) -> None:
        self.play_ring = Ring.create(int(RATE * 1.0), policy="refuse")
        self.cap_ring = Ring.create(int(RATE * seconds_capacity), policy="drop")
        self.play = start_device(device("spk", pulse.playback_pcm(), "playback"), self.play_ring)
        self.cap = start_device(device("mic", pulse.capture_pcm(), "capture"), self.cap_ring)
        self.play.wait_ready()
        self.cap.wait_ready()
        self.chunk = np.empty(RATE, np.float32)
        self.recorded: list[np.ndarray] = []
        self.rec_base = 0
        self.play_clock: list[tuple[float, int]] = []
        self.cap_clock: list[tuple[float, int]] = []

    def warm_up(self, timeout_s: float = 10.0) -> None:
        """PulseAudio's null sink takes a moment to start pulling a new stream."""
        deadline = time.monotonic() + timeout_s
        p0 = None
        while time.monotonic() < deadline:
            self.drain(keep=False)
            if self.play.periods > 10 and self.cap.periods > 10:
                if p0 is None:
                    p0, t0 = self.play.periods, time.monotonic()
                elif time.monotonic() - t0 > 0.5:
                    rate = (self.play.periods - p0) / (time.monotonic() - t0)
                    if rate > 80:  # ~100 periods/s when paced
                        break
                    p0, t0 = self.play.periods, time.monotonic()
            time.sleep(0.01)
        else:
            pytest.fail("pulse streams did not start")
        self.drain(keep=False)
        self.rec_base = self.cap_ring.stats().read_frames

    def drain(self, keep: bool = True) -> None:
        while True:
            n = self.cap_ring.read_into(self.chunk)
            if n == 0:
                return
            if keep:
                self.recorded.append(self.chunk[:n].copy())

    def sample_clocks(self) -> None:
        now = time.monotonic()
        self.play_clock.append((now, self.play_ring.stats().read_frames))
        self.cap_clock.append((now, self.cap_ring.stats().written_frames))

    def play_signal(self, signal: np.ndarray, tail_s: float = 0.6) -> int:
        """Feed `signal`; return the play-ring frame index of its first sample."""
        start = self.play_ring.stats().written_frames
        self.play_ring.set_playing(True)
        off = 0
        while off < len(signal):
            off += self.play_ring.write(signal[off:off + 4096])
            self.drain()
            self.sample_clocks()
            time.sleep(0.005)
        self.play_ring.set_playing(False)
        t_end = time.monotonic() + tail_s + 1.0
        while time.monotonic() < t_end:
            self.drain()
            self.sample_clocks()
            time.sleep(0.005)
        # Counters as the signal ends (analysis afterwards leaves the capture ring undrained).
        self.end_stats = (self.play_ring.stats(), self.cap_ring.stats(),
                          self.play.xruns, self.cap.xruns)
        return start

    def recording(self) -> np.ndarray:
        return np.concatenate(self.recorded)

    def stop(self) -> None:
        self.play.stop()
        self.cap.stop()
        for r in (self.play_ring, self.cap_ring):
            r.close()
            r.unlink()


def _time_of(clock: list[tuple[float, int]], frame: float) -> float:
    t = np.array([c[0] for c in clock])
    f = np.array([c[1] for c in clock], dtype=np.float64)
    return float(np.interp(frame, f, t))


@pytest.fixture
def loop(pulse_server):
    lp = Loop(pulse_server)
    try:
        lp.warm_up()
        yield lp
    finally:
        lp.stop()


LOOPBACK_S = 8.0
"""Three chirp-and-prompt blocks (8.6 s): the later copies must sit at the first one's lag."""


def test_loopback_chirp_and_prompt_8s_every_copy_heard(loop):
    """Every copy is heard, at a fixed lag unless an xrun was counted. Zero xruns is a figure
    of the paced box (suite `io`), not something a shared CI box can promise: here an xrun
    must be counted and recovered from without a reopen, and only shift later copies."""
    c, p = chirp(), prompt()
    block = [silence(0.4), c, silence(0.4), p, silence(0.4)]
    offsets, parts, n = [], [], 0
    while n < LOOPBACK_S * RATE:
        for piece in block:
            if piece is c or piece is p:
                offsets.append((n, piece))
            parts.append(piece)
            n += len(piece)
    signal = np.concatenate(parts)
    t0 = time.monotonic()
    start = loop.play_signal(signal)
    assert time.monotonic() - t0 >= len(signal) / RATE - 2.0  # paced in real time
    rec = loop.recording()
    assert len(rec) >= len(signal)
    ps, cs, play_xruns, cap_xruns = loop.end_stats
    xruns = play_xruns + cap_xruns
    for t in (loop.play, loop.cap):
        assert t.reopens == 0 and t.error is None
    assert ps.underruns == 0, ps
    assert cs.overruns == 0, cs
    # The first copy anchors the alignment; later copies must sit at the same lag.
    lag = None
    scores, latencies = [], []
    for k, (pos, tpl) in enumerate(offsets):
        if lag is None:
            at, score = find(rec, tpl, around=pos, window=RATE)
            lag = at - pos
        elif xruns == 0:
            at, score = find(rec, tpl, around=pos + lag, window=RATE // 10)
            assert abs((at - pos) - lag) <= 2, f"copy {k} drifted: {at - pos} vs {lag}"
        else:  # a playback xrun plays silence: later copies come late, never early
            at, score = find(rec, tpl, around=pos + lag, window=RATE)
            assert at - pos >= lag - 2, f"copy {k} early after {xruns} xruns"
            lag = at - pos
        scores.append(score)
        t_play = _time_of(loop.play_clock, start + pos)
        t_cap = _time_of(loop.cap_clock, loop.rec_base + at)
        latencies.append(t_cap - t_play)
    assert min(scores) >= 0.9, scores
    lat_ms = 1000 * float(np.median(latencies))
    print(f"\nloopback: {xruns} xruns, {len(offsets)} copies, min corr {min(scores):.4f}, "
          f"ring-to-ring latency median {lat_ms:.1f} ms "
          f"(min {1000 * min(latencies):.1f}, max {1000 * max(latencies):.1f})")
    assert 0 < lat_ms < 1000


def test_capture_ring_overrun_is_counted_and_audio_resumes(loop):
    """Stall the capture ring's consumer: the ring drops whole periods, counts them, and
    audio flows again once the consumer is back."""
    c = chirp(0.5)
    loop.play_signal(np.concatenate([silence(0.2), c, silence(0.2)]), tail_s=0.2)
    before = loop.cap_ring.stats()
    assert before.overruns == 0
    loop.play_ring.set_playing(True)
    loop.play_ring.write(np.concatenate([c, silence(2.0), c])[:RATE])  # fits in 1 s ring
    time.sleep(2.0 + 0.5)  # nobody drains: a 2 s capture ring fills and overruns
    after = loop.cap_ring.stats()
    assert after.overruns > 0 and after.dropped_frames >= after.overruns * 160
    assert after.fill_frames > loop.cap_ring.capacity_frames - 2 * 160
    periods = loop.cap.periods
    loop.recorded.clear()
    loop.drain(keep=False)
    sig = np.concatenate([silence(0.3), c, silence(0.3)])
    loop.rec_base = loop.cap_ring.stats().read_frames
    loop.play_signal(sig, tail_s=0.5)
    rec = loop.recording()
    _, score = find(rec, c, around=int(0.3 * RATE), window=RATE)
    # resumed: the chirp is there (silence or noise scores < 0.2); 0.84 was seen on a
    # loaded box, where the sound server itself may drop a fragment after the stall
    assert score >= 0.75
    assert loop.cap.periods > periods and loop.cap.xruns == 0


def test_audio_thread_survives_a_gil_stall(loop):
    """Stall the capture and playback threads themselves (hold the GIL for 0.6 s): they
    keep running, the watchdog timestamp moves again, audio resumes."""
    c = chirp(0.5)
    old = sys.getswitchinterval()
    sys.setswitchinterval(5.0)
    try:
        t0 = time.monotonic()
        while time.monotonic() - t0 < 0.6:
            pass
    finally:
        sys.setswitchinterval(old)
    stalled_at = time.monotonic()
    loop.recorded.clear()
    loop.drain(keep=False)
    loop.rec_base = loop.cap_ring.stats().read_frames
    loop.play_signal(np.concatenate([silence(0.3), c, silence(0.3)]), tail_s=2.5)
    rec = loop.recording()
    _, score = find(rec, c, around=int(0.3 * RATE), window=3 * RATE)
    assert score >= 0.9
    for t in (loop.play, loop.cap):
        assert t.last_progress_s > stalled_at and t.is_alive()


def test_audio_threads_are_fifo_alone(loop):
    for t in (loop.play, loop.cap):
        assert t.realtime is True
        assert os.sched_getscheduler(t.native_id) == os.SCHED_FIFO
        with open(f"/proc/self/task/{t.native_id}/sched") as f:
            policy = [ln for ln in f if ln.startswith("policy")][0]
        assert policy.split()[-1] == "1"  # SCHED_FIFO
    assert os.sched_getscheduler(0) == os.SCHED_OTHER  # the main thread is untouched
