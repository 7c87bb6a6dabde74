"""Memory per stream apart from load: the daemon's PSS with silent calls held open.

A ramp's PSS also grows with load (longer queues, bigger batches, allocator arenas); a
silent call costs the daemon no synthesis and almost no inference, so the PSS slope
over idle calls is what one more stream itself holds (rings, per-stream VAD/ASR state).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable
from typing import Any

import numpy as np

from tools.loadgen.ramp import Server
from tools.loadgen.stats import pss_mb, tree_pss_mb


async def idle_calls_pss(server: Server, counts: list[int], settle_s: float = 3.0,
                         log: Callable[[str], None] = print
                         ) -> list[tuple[int, float, float]]:
    """PSS of the daemon with `counts[i]` silent calls held open (each sends one 20 ms
    frame a second, so it stays up): what one more stream costs in memory, apart from
    the load-dependent buffers a ramp also grows."""
    from cosyvoiced.testing.audiosocket_peer import Peer

    assert server.ends.audiosocket is not None
    peers: list[Any] = []
    stop = asyncio.Event()
    frame = np.zeros(160, dtype=np.int16)

    async def keep(peer: Any) -> None:
        while not stop.is_set() and not peer.closed:
            await peer.play(frame)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), 1.0)

    out: list[tuple[int, float, float]] = []
    """(calls up, PSS of the daemon and its children, PSS of the main process alone)"""
    tasks: list[asyncio.Task[None]] = []
    try:
        for n in counts:
            while len(peers) < n:
                peer = Peer(*server.ends.audiosocket)
                await peer.connect()
                peers.append(peer)
                tasks.append(asyncio.create_task(keep(peer)))
            await asyncio.sleep(settle_s)
            up = sum(1 for p in peers if not p.closed)
            out.append((up, tree_pss_mb(server.pid), pss_mb([server.pid])))
            log(f"{server.name}: {up} idle calls, pss {out[-1][1]:.1f} MB "
                f"(main process {out[-1][2]:.1f} MB)")
    finally:
        stop.set()
        await asyncio.gather(*tasks, return_exceptions=True)
        await asyncio.gather(*(p.hangup() for p in peers), return_exceptions=True)
    return out
