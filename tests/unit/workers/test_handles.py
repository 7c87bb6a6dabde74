"""A stream handle told its worker died: outstanding requests end typed, closed or not."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from cosyvoiced.audio.ring import Ring
from cosyvoiced.workers.errors import WorkerError
from cosyvoiced.workers.pool.handles import TtsHandle


class Host:
    def say(self, *args: Any, **kw: Any) -> None:
        pass

    def speaking_changed(self, handle: TtsHandle) -> None:
        pass

    def send_to(self, handle: Any, msg: object) -> None:
        pass

    def close_stream(self, handle: Any) -> None:
        pass


async def _lost_after(close_first: bool) -> TtsHandle:
    handle = TtsHandle(Host(), "t1", 0, Ring.create(4096), 22050)
    rid = await handle.say("Hello there.")
    if close_first:  # the supervisor scheduled worker_lost, the caller closed meanwhile
        await handle.close()
    else:
        handle.ring.set_playing(True)
    handle.worker_lost("signal SIGSEGV")
    with pytest.raises(WorkerError) as err:
        await handle.wait(rid)
    assert err.value.code == "worker_lost"
    assert str(err.value) == "worker 0 died (signal SIGSEGV) while synthesizing"
    assert not handle.outstanding and handle.lost == 1
    return handle


def test_worker_lost_stops_playback_and_ends_requests_typed() -> None:
    async def run() -> None:
        handle = await _lost_after(close_first=False)
        assert not handle.ring.playing
        await handle.close()

    asyncio.run(run())


def test_worker_lost_on_a_closed_stream_leaves_its_freed_ring_alone() -> None:
    asyncio.run(_lost_after(close_first=True))
