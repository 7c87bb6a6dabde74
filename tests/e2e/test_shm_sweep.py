"""A daemon killed with every process of its tree (as a cgroup kill does) leaves its rings
in /dev/shm; the next start of the same instance removes them."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import time
from pathlib import Path

import numpy as np

from cosyvoiced.audio import shm
from cosyvoiced.testing.audiosocket_peer import Peer
from tests.fixtures.daemon import DaemonProcess


def _tree(pid: int) -> list[int]:
    out, todo = [], [pid]
    while todo:
        p = todo.pop()
        out.append(p)
        for task in Path(f"/proc/{p}/task").glob("*"):  # each thread's own children
            try:
                todo += [int(k) for k in (task / "children").read_text().split()]
            except OSError:
                pass
    return out


def _segments(d: DaemonProcess) -> set[str]:
    tag = shm.instance_tag(os.path.abspath(d.socket))
    return {n for n in os.listdir("/dev/shm") if n.startswith(shm.instance_prefix(tag))}


def test_rings_left_by_a_killed_daemon_are_swept_at_the_next_start(daemon_factory):
    d = daemon_factory(overrides=('audiosocket.greeting="Hello, thanks for calling."',)).start()
    d.wait_ready()
    listeners = json.loads(d.ctl("--json", "status").stdout)["listeners"]
    host, port = [x for x in listeners if x.startswith("audiosocket://")][0] \
        .removeprefix("audiosocket://").rsplit(":", 1)

    async def calls_then_kill() -> set[str]:
        peers = [Peer(host, int(port)) for _ in range(3)]
        for p in peers:
            await p.connect()
        await asyncio.gather(*(p.play(np.zeros(8000, dtype=np.int16)) for p in peers))
        deadline = time.monotonic() + 30  # a loaded box: the calls' rings come in their time
        while len(left := _segments(d)) < 6 and time.monotonic() < deadline:
            await asyncio.sleep(0.1)
        assert d.proc is not None
        tree = _tree(d.proc.pid)  # main, workers, the resource tracker
        for pid in tree:  # frozen first: a cgroup kill leaves none of them time to clean up
            os.kill(pid, signal.SIGSTOP)
        for pid in tree:
            os.kill(pid, signal.SIGKILL)
        d.proc.wait(10)
        for p in peers:
            await p.close()
        return left

    left = asyncio.run(calls_then_kill())
    assert len(left) >= 6, left  # 3 calls: playout, capture, TTS rings
    time.sleep(1.0)
    assert _segments(d) >= left  # nothing removed them
    d.stop()
    d.notify.path.unlink()

    again = DaemonProcess(d.tmp)
    try:
        again.start()
        again.wait_ready()
        assert not (_segments(again) & left)
        swept = [e for e in again.log_events() if e.get("event") == "shm_swept"]
        assert swept and swept[0]["segments"] >= len(left), swept
    finally:
        again.stop()
