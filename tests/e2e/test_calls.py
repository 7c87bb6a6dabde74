"""AudioSocket calls against the real daemon: real prompts in at real-time pace, real
speech out on the 20 ms clock, barge-in, and a peer that sends garbage."""

from __future__ import annotations

import asyncio
import functools
import signal
import time
import urllib.request

import numpy as np

from cosyvoiced.testing.audiosocket_peer import Peer, inter_frame_gaps_ms
from cosyvoiced.testing.events import follow_events
from cosyvoiced.testing.prompts import prompts, wer

GREETING = "Hello, thanks for calling."
LONG_GREETING = ("Thank you for calling the support line. Please listen carefully, as our "
                 "menu options have changed. For billing, press one. For technical support, "
                 "press two. For everything else, stay on the line.")


def _ports(d) -> tuple[str, int, str]:
    listeners = d.listeners()
    sock = [x for x in listeners if x.startswith("audiosocket://")][0]
    host, port = sock.removeprefix("audiosocket://").rsplit(":", 1)
    http = [x for x in listeners if x.startswith("tcp://")][0].replace("tcp://", "http://")
    return host, int(port), http


def _pcm(x: np.ndarray) -> np.ndarray:
    return np.clip(x * 32767, -32768, 32767).astype(np.int16)


def _onset_s(x: np.ndarray, rate: int = 8000) -> float:
    """First 10 ms block whose RMS is above -35 dBFS."""
    block = rate // 100
    n = x.shape[0] // block
    rms = np.sqrt((x[: n * block].reshape(n, block) ** 2).mean(axis=1))
    return float(np.argmax(rms > 10 ** (-35 / 20)) * block / rate)


_events = functools.partial(follow_events, stamped=True)
"""The daemon's events, each as (time.monotonic(), event)."""


async def _until_ended(events: list, peers: list[Peer], timeout_s: float = 30.0) -> None:
    """Until every call of `peers` has its `call_ended` in `events` (from `_events`): a
    call's last transcript is published before it (its listening stream is flushed first)."""
    want = {str(p.call.call_id) for p in peers}
    deadline = time.monotonic() + timeout_s
    while not want <= {e["stream"] for _, e in events if e["type"] == "call_ended"}:
        assert time.monotonic() < deadline, "a call_ended never came"
        await asyncio.sleep(0.05)


def test_twenty_concurrent_calls_paced_and_isolated(daemon_factory):
    # admission is tested elsewhere; here every call must be admitted on a shared box
    d = daemon_factory(overrides=(f'audiosocket.greeting="{GREETING}"',
                                  "workers.admit_busy_max=4.0")).start()
    d.wait_ready()
    host, port, http = _ports(d)
    corpus = [p for p in prompts() if 1.0 < p.samples().shape[0] / 8000 < 4.0][:20]
    assert len(corpus) == 20

    async def one(i: int) -> Peer:
        await asyncio.sleep(0.2 * i)  # calls arrive over 4 s, as they do at a call center
        peer = Peer(host, port)
        await peer.connect()
        await peer.play(np.zeros(8000 * 3, dtype=np.int16))  # listen to the greeting
        speech = _pcm(corpus[i].samples())
        await peer.play(np.concatenate([speech, np.zeros(8000 * 2, dtype=np.int16)]))
        await peer.hangup()
        return peer

    async def garbage() -> Peer:
        await asyncio.sleep(1.0)
        peer = Peer(host, port)
        await peer.connect()
        await peer.send_raw(b"\x7f\x00\x05hello")
        await peer.wait_closed(10)
        await peer.close()
        return peer

    async def main():
        events: list = []
        stop = asyncio.Event()
        watcher = asyncio.create_task(_events(http, events, stop))
        await asyncio.sleep(0.3)
        results = await asyncio.gather(*(one(i) for i in range(20)), garbage())
        await _until_ended(events, results[:20])  # the last transcripts
        stop.set()
        watcher.cancel()
        return results, events

    results, events = asyncio.run(main())
    calls, bad = results[:20], results[20]
    assert bad.call.hangup_at_s is not None  # the garbage call was ended, politely
    gaps = []
    for peer in calls:
        call = peer.call
        assert call.speech_frames(), f"call {call.call_id} got no greeting"
        assert all(len(r.pcm) == 320 for r in call.received)
        # most of the greeting arrived (the rest of the frames are comfort silence)
        assert len(call.speech_frames()) * 160 >= 0.8 * 8000
        gaps.append(inter_frame_gaps_ms(call.audio_times()[:40]))
    all_gaps = np.concatenate(gaps)
    jitter = np.abs(all_gaps - 20.0)
    p50, p99 = float(np.percentile(jitter, 50)), float(np.percentile(jitter, 99))
    print(f"inter-frame jitter over 20 calls: p50 {p50:.2f} ms, p99 {p99:.2f} ms, "
          f"mean gap {all_gaps.mean():.2f} ms")
    # Paced, not bursty: most frames 20 ms apart and no drift. (This box's two cores are
    # busy with the workers here, so the p99 bound is loose; the `calls` bench reports it.)
    assert p50 < 2.0 and 19.0 < all_gaps.mean() < 21.5
    assert p99 < 25.0
    started = {e["stream"] for _, e in events if e["type"] == "voice_started"}
    assert {str(p.call.call_id) for p in calls} <= started  # every caller was heard
    heard: dict[str, list[str]] = {}
    for _, e in events:
        if e["type"] == "transcript":
            heard.setdefault(e["stream"], []).append(e["text"])
    hyps = [" ".join(heard.get(str(p.call.call_id), [])) for p in calls]
    assert all(hyps), "a call's prompt was not transcribed"
    score = wer([c.text for c in corpus], hyps)
    print(f"20-call transcripts: WER {score:.1f}%")
    assert score <= 25.0, list(zip([c.text for c in corpus], hyps, strict=True))
    metrics = urllib.request.urlopen(f"{http}/metrics", timeout=10).read().decode()
    underruns = [float(line.split()[-1]) for line in metrics.splitlines()
                 if line.startswith('cosyvoiced_underruns_total{kind="call"}')]
    assert underruns == [0.0], underruns  # every greeting played without a gap
    late = _tick_late(metrics)
    print("daemon clock wake-up lateness, share of ticks above: "
          + ", ".join(f"{le * 1000:g} ms {share:.2%}" for le, share in late.items()))
    # The source clock keeps its deadlines: almost no tick a whole frame late. (How late
    # it wakes depends on the box: a clean-clone run saw 1.8% of ticks over 5 ms; the
    # `calls` bench reports the delivered jitter.)
    assert late[0.02] < 0.02, late
    d.signal(signal.SIGTERM)
    assert d.wait(60) == 0


def _tick_late(metrics: str) -> dict[float, float]:
    """Share of call-clock ticks later than each histogram bound (from /metrics)."""
    from prometheus_client.parser import text_string_to_metric_families
    fam = next(f for f in text_string_to_metric_families(metrics)
               if f.name == "cosyvoiced_audiosocket_tick_late_seconds")
    buckets = {float(s.labels["le"]): s.value for s in fam.samples
               if s.name.endswith("_bucket")}
    total = buckets[float("inf")]
    assert total > 100  # the clock ran through the calls
    return {le: 1 - n / total for le, n in sorted(buckets.items()) if le != float("inf")}


def test_barge_in_stops_speech_quickly(daemon_factory):
    d = daemon_factory(overrides=(f'audiosocket.greeting="{LONG_GREETING}"',)).start()
    d.wait_ready()
    host, port, http = _ports(d)
    prompt = next(p for p in prompts() if 1.5 < p.samples().shape[0] / 8000 < 4.0)
    speech = prompt.samples()
    onset = _onset_s(speech)

    async def main():
        events: list = []
        stop = asyncio.Event()
        watcher = asyncio.create_task(_events(http, events, stop))
        await asyncio.sleep(0.3)
        peer = Peer(host, port)
        await peer.connect()
        await peer.play(np.zeros(8000 * 3, dtype=np.int16))
        t_speech = time.monotonic() + onset
        await peer.play(np.concatenate([_pcm(speech), np.zeros(8000, dtype=np.int16)]))
        await peer.hangup()
        stop.set()
        watcher.cancel()
        return peer, t_speech, events

    peer, t_speech, events = asyncio.run(main())
    cid = str(peer.call.call_id)
    vad = [t for t, e in events if e["type"] == "voice_started" and e["stream"] == cid]
    assert vad, "no voice_started for the caller"
    times = np.array([r.at_s for r in peer.call.speech_frames()])  # not comfort silence
    assert (times < t_speech).sum() > 100  # it was speaking before the caller started
    last = float(times.max())
    print(f"barge-in: last frame {1000 * (last - t_speech):.0f} ms after speech onset, "
          f"{1000 * (last - vad[0]):.0f} ms after voice_started reached the test")
    assert last - t_speech < 0.4
    assert (times > vad[0] + 0.02).sum() <= 1  # at most one frame after the event
    d.signal(signal.SIGTERM)
    assert d.wait(60) == 0


def _rss_mb(pid: int) -> float:
    with open(f"/proc/{pid}/status") as f:
        return next(int(x.split()[1]) for x in f if x.startswith("VmRSS:")) / 1024


def test_a_peer_flooding_audio_holds_bounded_memory_while_a_caller_is_served(daemon_factory):
    """A peer sending 4 KiB audio frames as fast as TCP goes (~16x real time and more)
    costs the daemon bounded memory (what runs over `LEAD_S` ahead of real time is
    dropped as it is read, and counted), and a caller on the same daemon still hears its
    greeting."""
    from cosyvoiced.serve.audiosocket.frames import Audio

    d = daemon_factory(overrides=(f'audiosocket.greeting="{GREETING}"',)).start()
    d.wait_ready()
    host, port, http = _ports(d)
    base_mb = _rss_mb(d.proc.pid)
    frame = Audio(np.zeros(2048, dtype="<i2").tobytes()).encode()

    async def flood() -> tuple[int, float]:
        peer = Peer(host, port)
        await peer.connect()
        sent, peak, t0 = 0, 0.0, time.monotonic()
        while time.monotonic() - t0 < 6.0 and not peer.closed:
            await peer.send_raw(frame * 16)
            sent += 16
            if sent % 1024 == 0:
                peak = max(peak, _rss_mb(d.proc.pid))
        await peer.hangup()
        return sent, peak

    async def caller() -> Peer:
        await asyncio.sleep(1.0)
        peer = Peer(host, port)
        await peer.connect()
        await peer.play(np.zeros(8000 * 3, dtype=np.int16))
        await peer.hangup()
        return peer

    async def main():
        return await asyncio.gather(flood(), caller())

    (sent, peak_mb), honest = asyncio.run(main())
    audio_s = sent * 2048 / 8000
    assert audio_s > 60, sent  # the peer did send far faster than real time
    # the backlog is 2 s of float32 at 8 kHz per call: 64 KB; allow for everything else
    assert peak_mb - base_mb < 64, (base_mb, peak_mb)
    assert len(honest.call.speech_frames()) * 160 > 8000  # the greeting reached the caller
    with urllib.request.urlopen(f"{http}/metrics", timeout=10) as r:
        metrics = r.read().decode()
    dropped = sum(float(ln.split()[-1]) for ln in metrics.splitlines()
                  if ln.startswith("cosyvoiced_dropped_frames_total") and 'kind="call"' in ln)
    assert dropped > 0.8 * (audio_s - 8.0) * 8000, dropped  # samples, all but ~7 s
    d.signal(signal.SIGTERM)
    assert d.wait() == 0
