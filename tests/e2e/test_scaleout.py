"""Two real daemons behind real HAProxy (Debian's, running the shipped contrib config) on
loopback: calls spread by what each daemon's agent says it can take, a saturated daemon
skipped until it has room again, a drained stop that finishes its calls, and a killed
daemon taken out within the check interval.

The tests share one HAProxy and one pair of daemons (starting them is most of the time)
and run in file order: the drain test stops daemon A, the next test starts it again."""

from __future__ import annotations

import asyncio
import signal
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pytest
from aiohttp import ClientSession, ClientTimeout

from cosyvoiced.testing.audiosocket_peer import Peer
from cosyvoiced.testing.events import follow_events
from cosyvoiced.testing.haproxy import Box, Haproxy
from cosyvoiced.testing.prompts import Prompt, prompts, wer
from tests.fixtures.daemon import DaemonProcess

GREETING = "Hello, thanks for calling."
A_MAX_STREAMS = 8
"""Daemon A's workers.max_streams: 4 calls at once (a call holds a listening and a
speaking worker stream), so its agent says maxconn:4."""
CHECK_S = 1.0
"""inter and agent-inter of the shipped config."""
COMMON = ("workers.spare=false",  # two daemons on two cores: no warm spares
          "workers.admit_busy_max=2.0",  # a shared box: admit the calls, test the spread
          "service.drain_timeout_s=30", "agent.drain_grace_s=2.0",
          f'audiosocket.greeting="{GREETING}"')


@dataclass
class Pair:
    tmp: Path
    boxes: tuple[Box, Box]
    a: DaemonProcess
    b: DaemonProcess
    haproxy: Haproxy
    started: list[DaemonProcess] = field(default_factory=list)

    def start_a(self, name: str) -> DaemonProcess:
        sub = self.tmp / name
        sub.mkdir()
        # A is filled with HTTP syntheses to saturate it: no stream slots kept for calls
        self.a = DaemonProcess(sub, overrides=(*COMMON, *self.boxes[0].overrides(),
                                               f"workers.max_streams={A_MAX_STREAMS}",
                                               "workers.streams_reserved_for_calls=0"))
        self.started.append(self.a.start())
        return self.a

    def http(self, d: DaemonProcess) -> str:
        return f"http://127.0.0.1:{self.boxes[0 if d is self.a else 1].http}"


@pytest.fixture(scope="module")
def pair(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Pair]:
    tmp = tmp_path_factory.mktemp("scaleout")
    boxes = (Box.free(), Box.free())
    (tmp / "b").mkdir()
    b = DaemonProcess(tmp / "b", overrides=(*COMMON, *boxes[1].overrides()))
    p = Pair(tmp, boxes, None, b, Haproxy(tmp, boxes))  # type: ignore[arg-type]
    try:
        p.started.append(b.start())
        p.start_a("a")
        p.a.wait_ready()
        b.wait_ready()
        p.haproxy.start()
        _wait_serving(p)
        yield p
    finally:
        for d in p.started:
            d.stop()
        p.haproxy.stop()


def _wait_serving(p: Pair, timeout_s: float = 20.0) -> None:
    p.haproxy.wait_for(lambda s: all(v["status"] == "UP" and int(v["weight"]) > 0
                                     for v in s.values()), "both boxes up", timeout_s)


def _stot(p: Pair) -> dict[str, int]:
    return {k: int(v["stot"]) for k, v in p.haproxy.servers().items()}


def _corpus(n: int) -> list[Prompt]:
    out = [q for q in prompts() if 1.0 < q.samples().shape[0] / 8000 < 2.5][:n]
    assert len(out) == n
    return out


def _pcm(x: np.ndarray) -> np.ndarray:
    return np.clip(x * 32767, -32768, 32767).astype(np.int16)


async def _call(port: int, prompt: Prompt | None, delay_s: float = 0.0) -> Peer:
    """A caller through HAProxy: hears the greeting, says the prompt, waits for the
    transcript, hangs up."""
    await asyncio.sleep(delay_s)
    peer = Peer("127.0.0.1", port)
    await peer.connect()
    # the greeting (~1.5 s) whole, even when it starts late on a busy box: speaking over
    # it would cut it (barge-in)
    await peer.play(np.zeros(int(8000 * 2.5), dtype=np.int16))
    if prompt is not None:
        speech = _pcm(prompt.samples())
        await peer.play(np.concatenate([speech, np.zeros(int(8000 * 1.5), dtype=np.int16)]))
    await peer.hangup()
    return peer


class Watch:
    """Every event of both daemons while a phase runs."""

    def __init__(self, p: Pair) -> None:
        self.urls = {"a": p.http(p.a), "b": p.http(p.b)}
        self.seen: dict[str, list[dict]] = {"a": [], "b": []}
        self._stop = asyncio.Event()
        self._tasks: list[asyncio.Task[None]] = []

    async def __aenter__(self) -> Watch:
        self._tasks = [asyncio.create_task(follow_events(u, self.seen[k], self._stop))
                       for k, u in self.urls.items()]
        await asyncio.sleep(0.3)
        return self

    async def __aexit__(self, *exc: object) -> None:
        deadline = time.monotonic() + 10.0
        while not self._all_ended() and time.monotonic() < deadline:  # the last transcripts
            await asyncio.sleep(0.05)
        self._stop.set()
        for t in self._tasks:
            t.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)

    def _all_ended(self) -> bool:
        """Every call a daemon's feed saw start has its `call_ended` there (a call's last
        transcript is published before it), or the feed is gone (its daemon stopped)."""
        for task, evs in zip(self._tasks, self.seen.values(), strict=True):
            started = {e.get("stream") for e in evs if e["type"] == "call_started"}
            ended = {e.get("stream") for e in evs if e["type"] == "call_ended"}
            if not (task.done() or started <= ended):
                return False
        return True

    def owner(self, peer: Peer) -> str | None:
        cid = str(peer.call.call_id)
        got = [k for k, evs in self.seen.items() if any(e.get("stream") == cid for e in evs)]
        return got[0] if len(got) == 1 else None

    def heard(self, peer: Peer) -> str:
        cid = str(peer.call.call_id)
        return " ".join(e["text"] for evs in self.seen.values() for e in evs
                        if e.get("stream") == cid and e["type"] == "transcript")


def _answered(peer: Peer) -> bool:
    return peer.call.speech_samples() >= 0.8 * 8000  # most of the greeting


def test_twelve_calls_spread_by_capacity_each_transcribed_and_answered(pair):
    corpus = _corpus(12)
    before = _stot(pair)

    async def main():
        async with Watch(pair) as w:
            peers = await asyncio.gather(*(_call(pair.haproxy.calls_port, corpus[i], 0.25 * i)
                                           for i in range(12)))
        return w, peers

    w, peers = asyncio.run(main())
    owners = [w.owner(x) for x in peers]
    after = _stot(pair)
    on_a = after["box1"] - before["box1"]
    print(f"12 calls: {on_a} on A (max_streams={A_MAX_STREAMS}), "
          f"{after['box2'] - before['box2']} on B; owners {owners}")
    assert None not in owners, "a call was not heard by exactly one daemon"
    assert owners.count("a") == on_a and owners.count("b") == 12 - on_a
    assert 1 <= on_a <= 4  # spread, and never beyond what A said it takes
    assert all(_answered(x) for x in peers), [x.call.speech_samples() for x in peers]
    hyps = [w.heard(x) for x in peers]
    assert all(hyps), "a call's prompt was not transcribed"
    score = wer([c.text for c in corpus], hyps)
    print(f"12 calls through haproxy: WER {score:.1f}%")
    assert score <= 30.0, list(zip([c.text for c in corpus], hyps, strict=True))


async def _hold_syntheses(http: str, n: int) -> tuple[ClientSession, list]:
    """Up to `n` long syntheses on one daemon whose audio nobody reads (each holds a worker
    stream until its connection closes), until the daemon refuses one as `overloaded`:
    either way the daemon is full."""
    s = ClientSession(timeout=ClientTimeout(total=None))
    held = []
    for k in range(n):  # every sentence its own: none is said from the prompt cache
        text = " ".join(f"This is reply {k} part {i} that nobody listens to, read out slowly."
                        for i in range(12))
        r = await s.post(f"{http}/v1/tts", json={"text": text})
        held.append(r)
        if r.status != 200:
            assert r.status == 503 and (await r.json())["error"]["code"] == "overloaded"
            break
    return s, held


def test_a_saturated_daemon_gets_no_calls_until_it_has_room_again(pair):
    _wait_serving(pair)

    async def main():
        session, held = await _hold_syntheses(pair.http(pair.a), A_MAX_STREAMS)
        try:
            took = await asyncio.to_thread(pair.haproxy.wait_for,
                                           lambda s: int(s["box1"]["weight"]) == 0,
                                           "box1 at weight 0", 5 * CHECK_S)
            print(f"A full: weight 0 after {took:.2f} s")
            before = _stot(pair)
            peers = await asyncio.gather(*(_call(pair.haproxy.calls_port, None, 0.2 * i)
                                           for i in range(3)))
            during = _stot(pair)
        finally:
            for r in held:
                r.close()
            await session.close()
        took = await asyncio.to_thread(pair.haproxy.wait_for,
                                       lambda s: int(s["box1"]["weight"]) >= 50,
                                       "box1 weight back", 10 * CHECK_S)
        print(f"A freed: weight {pair.haproxy.servers()['box1']['weight']} after {took:.2f} s")
        again = await asyncio.gather(*(_call(pair.haproxy.calls_port, None) for _ in range(2)))
        return before, during, _stot(pair), peers, again

    before, during, after, peers, again = asyncio.run(main())
    assert during["box1"] == before["box1"] and during["box2"] == before["box2"] + 3
    assert all(_answered(x) for x in peers)
    assert after["box1"] - during["box1"] >= 1  # A takes calls again
    assert all(_answered(x) for x in again)


def test_sigterm_drains_a_new_calls_go_to_b_and_a_finishes_its_calls(pair):
    _wait_serving(pair)
    corpus = _corpus(6)
    a = pair.a

    async def main():
        async with Watch(pair) as w:
            first = [asyncio.create_task(_call(pair.haproxy.calls_port, corpus[i], 0.15 * i))
                     for i in range(6)]
            await asyncio.sleep(0.15 * 5 + 0.5)  # every call connected, greetings playing
            t_term = time.monotonic()
            a.signal(signal.SIGTERM)
            took = await asyncio.to_thread(pair.haproxy.wait_for,
                                           lambda s: s["box1"]["status"].startswith(("DRAIN", "MAINT")),
                                           "box1 draining", 3 * CHECK_S)
            before = _stot(pair)
            late = await asyncio.gather(*(_call(pair.haproxy.calls_port, None, 0.2 * i)
                                          for i in range(3)))
            during = _stot(pair)
            peers = await asyncio.gather(*first)
        return w, peers, late, before, during, took, t_term

    w, peers, late, before, during, took, t_term = asyncio.run(main())
    print(f"drain seen by haproxy {took:.2f} s after SIGTERM")
    owners = [w.owner(x) for x in peers]
    print("greeting samples heard:", [(o, x.call.speech_samples())
                                      for x, o in zip(peers, owners, strict=True)])
    assert "a" in owners and None not in owners, owners
    assert during["box1"] == before["box1"] and during["box2"] == before["box2"] + 3
    assert all(_answered(x) for x in late)
    greeting = max(x.call.speech_samples() for x, o in zip(peers, owners, strict=True)
                   if o == "b") if "b" in owners else None
    for x, o in zip(peers, owners, strict=True):
        got = x.call.speech_samples()
        assert _answered(x), got
        if o == "a" and greeting:  # the whole greeting, as B's callers heard it (+-4%)
            assert got >= 0.9 * greeting, (got, greeting)  # a cut one: < 0.4
        assert x.call.hangup_at_s is None or x.call.hangup_at_s > t_term + 2.0
    assert all(w.heard(x) for x in peers), "a call's prompt was not transcribed"
    assert a.wait(40) == 0
    events = [e.get("event") for e in a.log_events()]
    assert "draining" in events and "drain_incomplete" not in events


def test_kill_9_is_marked_down_within_the_check_interval_and_b_takes_new_calls(pair):
    if pair.a.proc is None or pair.a.proc.poll() is not None:
        pair.start_a("a2").wait_ready()  # like `systemctl restart`: same ports
    _wait_serving(pair, 30.0)
    a = pair.a
    assert a.proc is not None
    t0 = time.monotonic()
    a.proc.kill()
    down = pair.haproxy.wait_for(lambda s: s["box1"]["status"].startswith("DOWN"),
                                 "box1 down", 10.0)
    print(f"kill -9: marked down after {down:.2f} s (inter {CHECK_S} s, fall 2)")
    assert down <= 2 * CHECK_S + 1.5  # fall 2 at inter 1 s, and one check in flight
    peers = asyncio.run(_gather_calls(pair.haproxy.calls_port, 2))
    assert all(_answered(x) for x in peers)
    first = min(x.call.received[0].at_s for x in peers)
    print(f"first call answered by B {first - t0:.2f} s after kill -9")


async def _gather_calls(port: int, n: int) -> list[Peer]:
    return await asyncio.gather(*(_call(port, None, 0.1 * i) for i in range(n)))
