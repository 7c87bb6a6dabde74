"""Bad input and vanishing devices: typed errors naming the device; the rest keeps running."""

from __future__ import annotations

import errno
import threading
import time

import numpy as np
import pytest

from cosyvoiced.audio.alsa.device import start_device
from cosyvoiced.audio.alsa.errors import (
    AlsaError,
    DeviceGone,
    DeviceNotFound,
    PeriodRefused,
    UnsupportedFormat,
    XrunError,
    check,
    classify,
)
from cosyvoiced.audio.alsa.mmap import MmapPcm
from cosyvoiced.audio.alsa.params import Negotiated, PcmRequest
from cosyvoiced.audio.alsa.rw import RwPcm
from cosyvoiced.audio.ring import Ring
from cosyvoiced.config.schema import AudioDeviceConfig

RATE = 16000


@pytest.fixture
def rings():
    made: list[Ring] = []

    def make(policy: str = "drop") -> Ring:
        ring = Ring.create(RATE, policy=policy)
        made.append(ring)
        return ring

    yield make
    for r in made:
        r.close()
        r.unlink()


def cfg(pcm: str, direction: str = "playback", **kw) -> AudioDeviceConfig:
    base = dict(name=pcm, pcm=pcm, direction=direction, rate_hz=RATE, channels=1,
                period_ms=10.0, periods=4, access="rw", rt_priority=0,
                reopen_backoff_max_s=0.2)
    base.update(kw)
    return AudioDeviceConfig(**base)


def req(pcm: str, **kw) -> PcmRequest:
    base = dict(pcm=pcm, direction="playback", rate_hz=RATE, channels=1, period_frames=160,
                periods=4, format="FLOAT_LE")
    base.update(kw)
    return PcmRequest(**base)


def advancing(thread, timeout_s: float = 5.0, periods: int = 20) -> bool:
    """The thread moved `periods` periods within the timeout (PulseAudio's null sink
    takes up to ~1.5 s to start pulling a new stream)."""
    start = thread.periods
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if thread.periods >= start + periods:
            return True
        time.sleep(0.02)
    return False


# -- the one gate --------------------------------------------------------------------------


def test_check_passes_success_and_types_failures():
    assert check(5, "dev", "avail_update") == 5
    with pytest.raises(XrunError) as e:
        check(-errno.EPIPE, "hw:9", "mmap_commit")
    assert e.value.device == "hw:9" and e.value.errno == errno.EPIPE and "hw:9" in str(e.value)
    assert classify(errno.ENODEV, "readi") is DeviceGone
    assert classify(errno.ENOENT, "snd_pcm_open") is DeviceNotFound
    assert classify(errno.EINVAL, "hw_params_set_format") is UnsupportedFormat
    assert classify(errno.EINVAL, "hw_params_set_period_size") is PeriodRefused
    assert issubclass(PeriodRefused, UnsupportedFormat) and issubclass(DeviceGone, AlsaError)


# -- a fake device at the backend interface ------------------------------------------------


class FlakyBackend:
    """Streams a few periods, then reports -ENODEV, as an unplugged card does."""

    def __init__(self, periods_before_gone: int | None) -> None:
        self.negotiated = Negotiated(rate_hz=RATE, channels=1, period_frames=160,
                                     buffer_frames=640, format="FLOAT_LE")
        self.xruns = 0
        self._left = periods_before_gone

    def start(self) -> None:
        pass

    def read(self, out: np.ndarray) -> int:
        time.sleep(0.002)
        if self._left is not None:
            if self._left == 0:
                raise DeviceGone(errno.ENODEV, "fake:usb", "readi: No such device")
            self._left -= 1
        out[:] = 0.25
        return 160

    write = read

    def close(self) -> None:
        pass


def test_vanished_device_is_reopened_with_backoff(rings):
    attempts: list[float] = []
    script = ["ok-gone", "missing", "missing", "missing", "ok"]

    def opener(request: PcmRequest, access: str):
        attempts.append(time.monotonic())
        step = script.pop(0) if script else "ok"
        if step == "missing":
            raise DeviceNotFound(errno.ENODEV, request.pcm, "snd_pcm_open: No such device")
        return FlakyBackend(5 if step == "ok-gone" else None)

    ring = rings()
    t = start_device(cfg("fake:usb", "capture"), ring, opener=opener, backoff_initial_s=0.02)
    try:
        t.wait_ready()
        deadline = time.monotonic() + 5
        while t.reopens < 1 and time.monotonic() < deadline:
            time.sleep(0.01)
        periods = t.periods
        time.sleep(0.1)
        assert t.periods > periods  # streaming again after the reopen
    finally:
        t.stop()
    assert (t.gone, t.open_failures, t.reopens) == (1, 3, 1)
    gaps = np.diff(attempts[1:5])
    assert gaps[0] >= 0.015 and gaps[1] >= 0.035 and gaps[2] >= 0.075  # 20, 40, 80 ms
    assert ring.stats().written_frames >= 160 * 6


def test_first_open_failure_is_reported_and_thread_exits(rings):
    def opener(request: PcmRequest, access: str):
        raise UnsupportedFormat(errno.EINVAL, request.pcm, "format FLOAT_LE refused")

    t = start_device(cfg("fake:dac"), rings("refuse"), opener=opener)
    with pytest.raises(UnsupportedFormat) as e:
        t.wait_ready()
    assert e.value.device == "fake:dac" and e.value.code == "alsa_unsupported_format"
    t.join(2)
    assert not t.is_alive() and t.error is e.value


# -- real ALSA -------------------------------------------------------------------------------


@pytest.mark.e2e
@pytest.mark.parametrize("backend", [RwPcm, MmapPcm])
def test_unknown_pcm_is_device_not_found(backend):
    with pytest.raises(DeviceNotFound) as e:
        backend(req("cv_no_such_pcm"))
    assert e.value.device == "cv_no_such_pcm" and "cv_no_such_pcm" in str(e.value)


@pytest.mark.e2e
def test_missing_pulse_sink_is_device_not_found(pulse_server):
    with pytest.raises(DeviceNotFound) as e:
        RwPcm(req("pulse:cv_no_such_sink"))
    assert "pulse:cv_no_such_sink" in str(e.value)


@pytest.mark.e2e
@pytest.mark.parametrize(("change", "error", "words"), [
    (dict(rate_hz=44100), UnsupportedFormat, "44100 Hz"),
    (dict(rate_hz=7), UnsupportedFormat, "7 Hz"),
    (dict(channels=40), UnsupportedFormat, "40 channel"),
    (dict(format="DSD_U8"), UnsupportedFormat, "DSD_U8"),
    (dict(period_frames=4), PeriodRefused, "4-frame period"),
])
def test_refused_parameters_are_typed_and_name_the_device(pulse_server, change, error, words):
    pcm = pulse_server.playback_pcm()
    with pytest.raises(error) as e:
        RwPcm(req(pcm, **change))
    assert e.value.device == pcm and words in str(e.value)


@pytest.mark.e2e
def test_mmap_on_pulse_is_refused_typed(pulse_server):
    """ALSA's pulse plugin offers read/write access only."""
    pcm = pulse_server.playback_pcm()
    with pytest.raises(UnsupportedFormat, match="mmap access not available") as e:
        MmapPcm(req(pcm))
    assert e.value.device == pcm


@pytest.mark.e2e
def test_bad_device_fails_alone_while_others_keep_running(pulse_server, rings):
    good = start_device(cfg(pulse_server.playback_pcm()), rings("refuse"))
    bad = start_device(cfg("cv_no_such_pcm"), rings("refuse"))
    try:
        good.wait_ready()
        with pytest.raises(DeviceNotFound):
            bad.wait_ready()
        assert advancing(good) and good.error is None
    finally:
        good.stop()
        bad.stop()


@pytest.mark.e2e
def test_sink_vanishing_mid_stream_reopens_with_backoff(pulse_server, rings):
    sink = pulse_server.sink2
    bystander = start_device(cfg(pulse_server.playback_pcm(), rt_priority=0), rings("refuse"))
    play = start_device(cfg(pulse_server.playback_pcm(sink)), rings("refuse"))
    cap = start_device(cfg(pulse_server.capture_pcm(sink), "capture"), rings())
    threads = (bystander, play, cap)
    try:
        for t in threads:
            t.wait_ready()
        time.sleep(0.5)
        kills = pulse_server.streams_on(sink)
        assert len(kills) == 2
        pulse_server.unload_sink(sink)  # its streams move to the default sink...
        for cmd in kills:
            pulse_server.cli(cmd)  # ...and die: their PCMs fail mid-stream
        deadline = time.monotonic() + 5
        while (play.open_failures < 2 or cap.open_failures < 2) and time.monotonic() < deadline:
            time.sleep(0.02)
        assert play.gone == 1 and cap.gone == 1
        assert play.open_failures >= 2 and cap.open_failures >= 2  # sink still missing
        assert play.is_alive() and cap.is_alive()
        b, t_b = bystander.periods, time.monotonic()
        pulse_server.load_sink(sink)
        deadline = time.monotonic() + 5
        while (play.reopens < 1 or cap.reopens < 1) and time.monotonic() < deadline:
            time.sleep(0.02)
        assert play.reopens == 1 and cap.reopens == 1
        assert advancing(play) and advancing(cap)
        time.sleep(max(0.0, 1.5 - (time.monotonic() - t_b)))  # >= 150 periods of 10 ms
        # the rest kept running (>= 50 of ~150 periods: a starved CI box paces PulseAudio late)
        assert bystander.periods > b + 50 and bystander.gone == 0
    finally:
        for t in threads:
            t.stop()
        if sink not in pulse_server.sink_modules:
            pulse_server.load_sink(sink)


def test_stop_is_prompt_even_while_reopening(rings):
    def opener(request: PcmRequest, access: str):
        if not hasattr(opener, "done"):
            opener.done = True
            return FlakyBackend(0)
        raise DeviceNotFound(errno.ENODEV, request.pcm, "gone")

    t = start_device(cfg("fake:x", "capture", reopen_backoff_max_s=30.0), rings(),
                     opener=opener, backoff_initial_s=10.0)
    t.wait_ready()
    time.sleep(0.1)
    t0 = time.monotonic()
    t.stop()
    assert not t.is_alive() and time.monotonic() - t0 < 1.0
    assert threading.active_count() >= 1
