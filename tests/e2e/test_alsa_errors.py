"""Real ALSA refusing bad input and losing devices (ALSA's pulse PCM on the session's
PulseAudio): typed errors naming the device; the rest keeps running. The same on a fake
backend: tests/unit/audio/alsa/test_errors.py."""

from __future__ import annotations

import time

import pytest

from cosyvoiced.audio.alsa.device import start_device
from cosyvoiced.audio.alsa.errors import DeviceNotFound, PeriodRefused, UnsupportedFormat
from cosyvoiced.audio.alsa.mmap import MmapPcm
from cosyvoiced.audio.alsa.params import PcmRequest
from cosyvoiced.audio.alsa.rw import RwPcm
from tests.unit.audio.alsa.test_errors import RATE, cfg


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


@pytest.mark.parametrize("backend", [RwPcm, MmapPcm])
def test_unknown_pcm_is_device_not_found(backend):
    with pytest.raises(DeviceNotFound) as e:
        backend(req("cv_no_such_pcm"))
    assert e.value.device == "cv_no_such_pcm" and "cv_no_such_pcm" in str(e.value)


def test_missing_pulse_sink_is_device_not_found(pulse_server):
    with pytest.raises(DeviceNotFound) as e:
        RwPcm(req("pulse:cv_no_such_sink"))
    assert "pulse:cv_no_such_sink" in str(e.value)


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


def test_mmap_on_pulse_is_refused_typed(pulse_server):
    """ALSA's pulse plugin offers read/write access only."""
    pcm = pulse_server.playback_pcm()
    with pytest.raises(UnsupportedFormat, match="mmap access not available") as e:
        MmapPcm(req(pcm))
    assert e.value.device == pcm


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
