"""mmap backend (ctypes libasound) on ALSA's null and file PCMs (both accept mmap access;
neither is paced). PulseAudio's plugin refuses mmap: see test_alsa_errors."""

from __future__ import annotations

import errno
import time

import numpy as np
import pytest

from cosyvoiced.audio.alsa import mmap as mmap_backend
from cosyvoiced.audio.alsa.device import start_device
from cosyvoiced.audio.alsa.mmap import MmapPcm
from cosyvoiced.audio.alsa.params import PcmRequest
from cosyvoiced.audio.ring import Ring
from cosyvoiced.config.schema import AudioDeviceConfig

RATE = 16000


def cfg(pcm: str, direction: str, **kw) -> AudioDeviceConfig:
    base = dict(name=pcm, pcm=pcm, direction=direction, rate_hz=RATE, channels=1,
                period_ms=10.0, periods=4, access="mmap", rt_priority=0)
    base.update(kw)
    return AudioDeviceConfig(**base)


@pytest.fixture
def ring_factory():
    made: list[Ring] = []

    def make(frames: int, **kw) -> Ring:
        r = Ring.create(frames, **kw)
        made.append(r)
        return r

    yield make
    for r in made:
        r.close()
        r.unlink()


def test_mmap_negotiates_and_starts_explicitly_on_null():
    pcm = MmapPcm(PcmRequest("null", "playback", RATE, 2, 160, 4, "S16_LE"))
    try:
        n = pcm.negotiated
        assert (n.rate_hz, n.channels, n.period_frames, n.buffer_frames) == (RATE, 2, 160, 640)
        assert pcm.state() == "PREPARED"  # start_threshold = boundary: nothing auto-starts
        pcm.start()  # silence pre-fill, then snd_pcm_start
        assert pcm.state() == "RUNNING"
        frames = np.zeros((160, 2), np.int16)
        assert pcm.write(frames) == 160
    finally:
        pcm.close()


def test_mmap_capture_thread_on_null(ring_factory):
    ring = ring_factory(RATE, policy="drop")
    t = start_device(cfg("null", "capture"), ring)
    try:
        assert t.wait_ready().period_frames == 160
        time.sleep(0.2)
    finally:
        t.stop()
    s = ring.stats()
    assert t.periods > 100 and t.xruns == 0 and t.error is None
    assert s.written_frames > 0 and s.overruns > 0  # unpaced: nobody drains, so it drops
    # (null's mmap area is not cleared on capture: only the counts are meaningful here)
    assert ring.read_into(np.empty(1000, np.float32)) == 1000


def test_mmap_playback_is_bit_exact_through_the_file_pcm(tmp_path, ring_factory):
    """ALSA's `file` PCM (over null) writes what it plays to a file: the signal written
    to the ring must come out unchanged, after the pre-filled silence."""
    out_path = tmp_path / "played.raw"
    ring = ring_factory(RATE, policy="refuse")
    rng = np.random.default_rng(5)
    signal = (rng.random(RATE // 2, dtype=np.float32) - 0.5).astype(np.float32)
    ring.write(signal)
    ring.set_playing(True)
    t = start_device(cfg(f"file:'{out_path}',raw", "playback"), ring)
    try:
        t.wait_ready()
        deadline = time.monotonic() + 5
        while ring.available() and time.monotonic() < deadline:
            time.sleep(0.01)
        ring.set_playing(False)
        time.sleep(0.05)
    finally:
        t.stop()
    played = np.fromfile(out_path, dtype=np.float32)
    assert (played[:640] == 0).all()  # the silence pre-fill (one buffer)
    starts = np.flatnonzero(played == signal[0])
    assert len(starts) and np.array_equal(played[starts[0]:starts[0] + len(signal)], signal)
    assert ring.stats().underruns >= 1  # short reads while flagged playing, counted


class _XrunOnce:
    """libasound with one -EPIPE from snd_pcm_avail_update after `after` calls."""

    def __init__(self, lib, after: int) -> None:
        self._lib = lib
        self._after = after
        self.injected = 0

    def snd_pcm_avail_update(self, pcm):
        self._after -= 1
        if self._after == 0:
            self.injected += 1
            return -errno.EPIPE
        return self._lib.snd_pcm_avail_update(pcm)

    def __getattr__(self, name):
        return getattr(self._lib, name)


@pytest.mark.parametrize("direction", ["capture", "playback"])
def test_mmap_xrun_is_recovered_and_counted(monkeypatch, ring_factory, direction):
    fake = _XrunOnce(mmap_backend.lib, after=200)
    monkeypatch.setattr(mmap_backend, "lib", fake)
    ring = ring_factory(RATE, policy="drop" if direction == "capture" else "refuse")
    t = start_device(cfg("null", direction), ring)
    try:
        t.wait_ready()
        deadline = time.monotonic() + 5
        while fake.injected == 0 and time.monotonic() < deadline:
            time.sleep(0.005)
        periods = t.periods
        time.sleep(0.1)
        assert t.periods > periods + 10  # recovered (snd_pcm_recover + restart): flowing
    finally:
        t.stop()
    assert fake.injected == 1 and t.xruns == 1 and t.error is None and t.reopens == 0


def test_mmap_s16_device_with_float_ring_converts(ring_factory, tmp_path):
    out_path = tmp_path / "s16.raw"
    ring = ring_factory(RATE, policy="refuse")
    ring.write(np.full(1600, 0.5, np.float32))
    t = start_device(cfg(f"file:'{out_path}',raw", "playback", format="S16_LE"), ring)
    try:
        assert t.wait_ready().format == "S16_LE"
        deadline = time.monotonic() + 5
        while ring.available() and time.monotonic() < deadline:
            time.sleep(0.01)
        time.sleep(0.05)
    finally:
        t.stop()
    played = np.fromfile(out_path, dtype=np.int16)
    assert (played == 16384).sum() == 1600
