"""Bad input and vanishing devices: typed errors naming the device; the rest keeps running
(on a fake backend here; on real ALSA in tests/e2e/test_alsa_errors.py)."""

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
from cosyvoiced.audio.alsa.params import Negotiated, PcmRequest
from cosyvoiced.config.schema import AudioDeviceConfig

RATE = 16000


def cfg(pcm: str, direction: str = "playback", **kw) -> AudioDeviceConfig:
    base = dict(name=pcm, pcm=pcm, direction=direction, rate_hz=RATE, channels=1,
                period_ms=10.0, periods=4, access="rw", rt_priority=0,
                reopen_backoff_max_s=0.2)
    base.update(kw)
    return AudioDeviceConfig(**base)


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
