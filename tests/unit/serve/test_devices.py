"""Devices manager on paced fake PCMs and the fake Speech: playback into the ring, stop
and barge-in flush, capture to a 16 kHz mono listener, half duplex, failed devices,
metrics, and the /v1/play routes. The real ALSA/PulseAudio path is in test_devices_e2e."""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass

import numpy as np
import pytest
from aiohttp import ClientSession
from aiohttp.test_utils import TestServer

from cosyvoiced.audio.alsa.errors import DeviceNotFound
from cosyvoiced.audio.alsa.params import Negotiated, PcmRequest
from cosyvoiced.config.schema import AudioConfig, AudioDeviceConfig
from cosyvoiced.runtime.health import Health
from cosyvoiced.runtime.metrics import Metrics
from cosyvoiced.serve.devices import Devices, DeviceUnavailable, UnknownDevice, base, manager
from cosyvoiced.serve.http.app import make_app
from cosyvoiced.serve.streams import Streams
from cosyvoiced.tts.request import SynthesisOptions
from tests.fakes.daemon import FakeDaemon
from tests.fakes.speech import FakeSpeech

WORD_FRAMES = 2205  # FakeSynthesis: 0.1 s of 0.25 per word at 22050 Hz


class FakePcm:
    """A PCM paced by the clock: playback records what it is given, capture returns
    `level` on every channel."""

    def __init__(self, req: PcmRequest) -> None:
        self.req = req
        self.negotiated = Negotiated(req.rate_hz, req.channels, req.period_frames,
                                     req.period_frames * req.periods, req.format)
        self.xruns = 0
        self.level = 0.0
        self.written: list[tuple[float, np.ndarray]] = []
        self._period_s = req.period_frames / req.rate_hz
        self._t = 0.0

    def start(self) -> None:
        self._t = time.monotonic()

    def _pace(self) -> None:
        self._t += self._period_s
        wait = self._t - time.monotonic()
        if wait > 0:
            time.sleep(wait)

    def read(self, out: np.ndarray) -> int:
        self._pace()
        out[:] = self.level
        return self.req.period_frames

    def write(self, src: np.ndarray) -> int:
        self._pace()
        self.written.append((time.monotonic(), src.copy()))
        return self.req.period_frames

    def close(self) -> None:
        pass


class Opener:
    """Hands out FakePcms by PCM name; `missing` PCMs fail `fails` times first."""

    def __init__(self, missing: dict[str, int] | None = None) -> None:
        self.pcms: dict[str, FakePcm] = {}
        self.missing = dict(missing or {})

    def __call__(self, req: PcmRequest, access: str) -> FakePcm:
        if self.missing.get(req.pcm, 0) > 0:
            self.missing[req.pcm] -= 1
            raise DeviceNotFound(2, req.pcm, "snd_pcm_open: No such file or directory")
        self.pcms[req.pcm] = FakePcm(req)
        return self.pcms[req.pcm]


def spk(name: str = "spk", rate_hz: int = 22050, **kw) -> AudioDeviceConfig:
    return AudioDeviceConfig(name=name, pcm=name, direction="playback", rate_hz=rate_hz,
                             rt_priority=0, **kw)


def mic(name: str = "mic", rate_hz: int = 48000, channels: int = 2) -> AudioDeviceConfig:
    return AudioDeviceConfig(name=name, pcm=name, direction="capture", rate_hz=rate_hz,
                             channels=channels, rt_priority=0)


@dataclass
class Rig:
    devices: Devices
    opener: Opener
    speech: FakeSpeech
    streams: Streams
    metrics: Metrics
    health: Health


def run(devs: list[AudioDeviceConfig], body, *, missing: dict[str, int] | None = None,
        capacity: int = 100, first_audio_s: float = 0.0, **audio) -> None:
    async def main() -> None:
        opener = Opener(missing)
        speech = FakeSpeech(capacity=capacity, first_audio_s=first_audio_s)
        streams, metrics, health = Streams(10), Metrics(), Health(5.0)
        devices = Devices(AudioConfig(devices=tuple(devs), **audio), speech, streams=streams,
                          metrics=metrics, health=health, opener=opener)
        await devices.start()
        try:
            await body(Rig(devices, opener, speech, streams, metrics, health))
        finally:
            await devices.stop()
    asyncio.run(main())


async def until(cond, timeout_s: float = 5.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not cond():
        assert time.monotonic() < deadline, "timed out"
        await asyncio.sleep(0.01)


def played(pcm: FakePcm, since: float = 0.0) -> np.ndarray:
    chunks = [a for t, a in list(pcm.written) if t >= since]
    return np.concatenate(chunks) if chunks else np.zeros(0, np.float32)


@pytest.mark.parametrize("rate_hz", [22050, 16000])
def test_play_speaks_everything_at_the_device_rate_then_ends(rate_hz):
    async def body(rig: Rig) -> None:
        started = await rig.devices.play("one two three four five", SynthesisOptions())
        assert started["device"] == "spk" and started["rate_hz"] == rate_hz
        assert rig.speech.requests[0][1].rate_hz == rate_hz
        assert [s.kind for s in rig.streams.snapshot()] == ["play"]
        dev = rig.devices.playback[0]
        await until(lambda: not dev.speaking)
        await asyncio.sleep(0.05)
        audio = played(rig.opener.pcms["spk"])
        speech = np.count_nonzero(np.abs(audio) > 0.2)
        want = 5 * WORD_FRAMES * rate_hz / 22050
        assert abs(speech - want) <= 0.02 * want, (speech, want)
        assert len(rig.streams) == 0  # the play stream closed when the ring ran dry
        assert dev.ring.stats().underruns == 0

    run([spk(rate_hz=rate_hz)], body)


def test_waiting_for_first_audio_is_not_an_underrun():
    """Regression: the ring was marked playing when the request was made, so the periods
    before the first chunk arrived counted as underruns."""
    async def body(rig: Rig) -> None:
        await rig.devices.play("one two three", SynthesisOptions())
        dev = rig.devices.playback[0]
        await until(lambda: not dev.speaking)
        assert dev.ring.stats().underruns == 0
        assert np.count_nonzero(played(rig.opener.pcms["spk"])) > 0

    run([spk()], body, first_audio_s=0.15)


def test_stop_flushes_the_ring_within_a_period():
    async def body(rig: Rig) -> None:
        pcm_name, dev = "spk", rig.devices.playback[0]
        await rig.devices.play(" ".join(["word"] * 200), SynthesisOptions())
        await until(lambda: played(rig.opener.pcms[pcm_name]).any())
        await asyncio.sleep(0.2)
        assert dev.ring.available() > 0  # speech queued ahead
        assert rig.devices.stop_playing() == ["spk"]
        t_stop = time.monotonic()
        await asyncio.sleep(0.3)
        after = [a for t, a in rig.opener.pcms[pcm_name].written if t > t_stop]
        period_s = 0.01
        late = [a for t, a in rig.opener.pcms[pcm_name].written if t > t_stop + 2 * period_s]
        assert len(after) >= 20 and not np.concatenate(late).any()
        assert not dev.speaking and len(rig.streams) == 0 and dev.stops == 1

    run([spk()], body)


def test_capture_is_mixed_to_mono_resampled_and_heard():
    async def body(rig: Rig) -> None:
        await until(lambda: rig.speech.listens)
        listening = rig.speech.listens[0]
        assert listening.rate_hz == 16000
        pos0, t0 = listening.pos, time.monotonic()
        rig.opener.pcms["mic"].level = 0.5
        await asyncio.sleep(0.5)
        fed = listening.pos - pos0
        assert abs(fed - 16000 * (time.monotonic() - t0)) < 0.1 * 16000
        assert listening.start is not None  # speech (0.5 > 0.1) reached the listener
        assert rig.devices.capture[0].voice_starts == 1

    run([mic()], body)


def test_barge_in_on_the_mic_stops_playback():
    async def body(rig: Rig) -> None:
        await until(lambda: rig.speech.listens)
        dev = rig.devices.playback[0]
        await rig.devices.play(" ".join(["word"] * 200), SynthesisOptions())
        await until(lambda: played(rig.opener.pcms["spk"]).any())
        rig.opener.pcms["mic"].level = 0.5
        await until(lambda: not dev.speaking)
        assert rig.devices.barge_ins == 1 and dev.stops == 1

    run([spk(), mic()], body)


def test_barge_in_off_keeps_speaking():
    async def body(rig: Rig) -> None:
        await until(lambda: rig.speech.listens)
        await rig.devices.play(" ".join(["word"] * 200), SynthesisOptions())
        rig.opener.pcms["mic"].level = 0.5
        await until(lambda: rig.devices.capture[0].voice_starts == 1)
        await asyncio.sleep(0.1)
        assert rig.devices.playback[0].speaking and rig.devices.barge_ins == 0

    run([spk(), mic()], body, barge_in=False)


def test_half_duplex_feeds_silence_while_speaking_and_after_the_tail():
    async def body(rig: Rig) -> None:
        await until(lambda: rig.speech.listens)
        listening, dev = rig.speech.listens[0], rig.devices.playback[0]
        await rig.devices.play("one two three four five", SynthesisOptions())
        rig.opener.pcms["mic"].level = 0.5
        await asyncio.sleep(0.3)
        assert dev.speaking and listening.start is None  # the mic was not heard
        await until(lambda: not dev.speaking)
        t_end = time.monotonic()
        await until(lambda: listening.start is not None)
        assert time.monotonic() - t_end >= 0.2  # echo tail (0.25 s) still ignored
        assert dev.stops == 0 and rig.devices.capture[0].gated_s > 0.3

    run([spk(), mic()], body, half_duplex=True, echo_tail_ms=250)


def test_a_device_that_fails_is_reported_retried_and_recovers(monkeypatch):
    monkeypatch.setattr(base, "RETRY_INITIAL_S", 0.2)

    async def body(rig: Rig) -> None:
        status = {d["name"]: d for d in rig.devices.status()["devices"]}
        assert status["usb"]["state"] == "failed"
        assert status["usb"]["error"]["code"] == "alsa_device_not_found"
        assert status["spk"]["state"] == "running"
        with pytest.raises(DeviceUnavailable, match="'usb'.*alsa_device_not_found"):
            await rig.devices.play("hello", SynthesisOptions(), "usb")
        with pytest.raises(UnknownDevice):
            await rig.devices.play("hello", SynthesisOptions(), "nope")
        assert len(rig.streams) == 0
        assert rig.health.check().healthy  # failed is reported, not a stall
        dev = rig.devices.playback[1]
        await until(lambda: dev.state == "running")
        assert dev.failures == 2 and dev.error is None
        started = await rig.devices.play("hello there", SynthesisOptions(), "usb")
        assert started["device"] == "usb"

    run([spk(), spk("usb")], body, missing={"usb": 2})


def test_counters_reach_the_metrics():
    async def body(rig: Rig) -> None:
        rig.opener.pcms["spk"].xruns = 3
        rig.devices.playback[0].ring.set_playing(True)  # expected to play: short reads count
        await asyncio.sleep(0.1)
        rig.devices.export()
        text = rig.metrics.render().decode()
        assert 'cosyvoiced_xruns_total{direction="playback"} 3.0' in text
        assert 'cosyvoiced_underruns_total{kind="device"}' in text
        assert 'cosyvoiced_ring_fill_ratio{direction="playback"} 0.0' in text
        s = rig.devices.status()["devices"][0]
        assert s["xruns"] == 3 and s["underruns"] > 0 and s["period_frames"] == 220

    run([spk()], body)


def test_a_refused_listener_is_asked_for_again(monkeypatch):
    monkeypatch.setattr(manager, "LISTEN_RETRY_S", 0.2)

    async def body(rig: Rig) -> None:
        await asyncio.sleep(0.3)
        assert not rig.speech.listens and rig.devices.capture[0].state == "running"
        rig.speech.capacity = 100
        await until(lambda: rig.speech.listens)
        assert rig.devices.capture[0].status()["stream"] == "device:mic"

    run([mic()], body, capacity=0)


# -- HTTP --------------------------------------------------------------------------------------


@dataclass
class DevDaemon(FakeDaemon):
    devices: Devices | None = None


def test_play_routes():
    async def body(rig: Rig) -> None:
        server = TestServer(make_app(DevDaemon(devices=rig.devices)))
        await server.start_server()
        try:
            async with ClientSession(base_url=str(server.make_url(""))) as http:
                async with http.post("/v1/play", json={"text": "one two three"}) as r:
                    assert r.status == 202 and (await r.json())["device"] == "spk"
                async with http.post("/v1/play/stop", json={"device": "spk"}) as r:
                    assert r.status == 200 and (await r.json())["stopped"] == ["spk"]
                async with http.post("/v1/play/stop") as r:
                    assert r.status == 200 and (await r.json())["stopped"] == []
                for body_, status, code in [
                        ({"text": "hi", "device": "usb"}, 503, "device_unavailable"),
                        ({"text": "hi", "device": "nope"}, 404, "unknown_device"),
                        ({"device": "spk"}, 400, "missing_field"),
                        ({"text": "hi", "voice": 3}, 400, "bad_parameter"),
                        ({"text": "hi", "voice": "nobody"}, 400, "unknown_voice"),
                        ({"text": ""}, 400, None)]:
                    async with http.post("/v1/play", json=body_) as r:
                        err = (await r.json())["error"]
                        assert r.status == status, (body_, err)
                        assert code is None or err["code"] == code, err
                        if code == "device_unavailable":
                            assert "usb" in err["message"]
                async with http.post("/v1/play", data="text") as r:
                    assert r.status == 415
                async with http.get("/v1/devices") as r:
                    listed = await r.json()
                    assert [(d["name"], d["direction"], d["state"]) for d in
                            listed["devices"]] == [("spk", "playback", "running"),
                                                   ("usb", "playback", "failed")]
                    assert listed["devices"][0]["rate_hz"] == 22050
        finally:
            await server.close()

    run([spk(), spk("usb")], body, missing={"usb": 1000})


def test_no_playback_device_is_a_clear_404():
    async def body(rig: Rig) -> None:
        server = TestServer(make_app(DevDaemon(devices=rig.devices)))
        await server.start_server()
        try:
            async with ClientSession(base_url=str(server.make_url(""))) as http:
                async with http.post("/v1/play", json={"text": "hi"}) as r:
                    assert r.status == 404
                    assert (await r.json())["error"]["code"] == "no_playback_device"
        finally:
            await server.close()

    run([mic()], body)
