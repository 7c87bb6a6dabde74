"""Event dataclasses and the bounded, non-blocking event bus."""

from __future__ import annotations

import asyncio
import threading

import pytest

from cosyvoiced.listen.events import EventBus, Transcript, VoiceStarted, VoiceStopped


def test_to_dict_carries_type_and_fields():
    assert VoiceStarted(120, stream="s1").to_dict() == {
        "type": "voice_started", "start_ms": 120, "stream": "s1"}
    assert VoiceStopped(120, 900).to_dict()["reason"] == "silence"
    d = Transcript("hello", 120, 900, 250.0, 0.1, stream="s1").to_dict()
    assert d["type"] == "transcript" and d["text"] == "hello" and d["latency_ms"] == 250.0


def test_every_subscriber_gets_every_event_in_order():
    bus = EventBus()
    a, b = bus.subscribe(), bus.subscribe()
    for i in range(5):
        bus.publish(VoiceStarted(i))
    assert [e.start_ms for e in a.drain()] == [0, 1, 2, 3, 4]
    assert [e.start_ms for e in b.drain()] == [0, 1, 2, 3, 4]


def test_slow_subscriber_drops_its_own_oldest_and_counts():
    bus = EventBus()
    slow = bus.subscribe(maxsize=3)
    fast = bus.subscribe(maxsize=100)
    for i in range(10):
        bus.publish(VoiceStarted(i))
    assert slow.dropped == 7 and fast.dropped == 0
    assert [e.start_ms for e in slow.drain()] == [7, 8, 9]
    assert len(fast.drain()) == 10
    assert bus.dropped == 7
    assert slow.dropped_notice() == {"type": "events_dropped", "stream": None, "count": 7}
    assert slow.dropped_notice() is None and fast.dropped_notice() is None


def test_type_filter_and_close():
    bus = EventBus()
    sub = bus.subscribe(types=["transcript"])
    bus.publish(VoiceStarted(1))
    bus.publish(Transcript("x", 0, 1, 0.0, 0.0))
    assert [e.type for e in sub.drain()] == ["transcript"]
    sub.close()
    bus.publish(Transcript("y", 0, 1, 0.0, 0.0))
    assert sub.get_nowait() is None


def test_async_get_wakes_on_publish_from_another_thread():
    async def main():
        bus = EventBus()
        sub = bus.subscribe()
        t = threading.Timer(0.05, bus.publish, args=(VoiceStarted(42),))
        t.start()
        event = await asyncio.wait_for(sub.get(), timeout=5)
        t.join()
        return event

    assert asyncio.run(main()).start_ms == 42


def test_async_iteration_ends_on_close():
    async def main():
        bus = EventBus()
        sub = bus.subscribe()
        got = []

        async def reader():
            async for e in sub:
                got.append(e.start_ms)

        task = asyncio.create_task(reader())
        for i in range(3):
            bus.publish(VoiceStarted(i))
            await asyncio.sleep(0)
        await asyncio.sleep(0.01)
        sub.close()
        await asyncio.wait_for(task, timeout=5)
        return got

    assert asyncio.run(main()) == [0, 1, 2]


def test_publisher_never_blocks_on_a_stuck_subscriber():
    bus = EventBus()
    bus.subscribe(maxsize=1)  # never read
    for i in range(10000):
        bus.publish(VoiceStarted(i))
    assert bus.dropped == 9999


def test_bad_maxsize():
    with pytest.raises(ValueError):
        EventBus().subscribe(maxsize=0)
