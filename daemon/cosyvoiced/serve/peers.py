"""Refusing a peer before reading from it: not in `allow_from` (AudioSocket and Wyoming have
no auth), or over a listener's connection limit."""

from __future__ import annotations

import asyncio
import contextlib
from collections import Counter

import structlog

log = structlog.get_logger(__name__)

refused: Counter[str] = Counter()
"""Peers refused since start, per server kind (the log says the 1st, 10th, 100th...)."""


def refuse_peer(writer: asyncio.StreamWriter, kind: str, peername: object,
                reason: str = "") -> None:
    """Close the connection of a peer `kind`'s listener does not take, before reading:
    not in its `allow_from`, or `reason`."""
    refused[kind] += 1
    n = refused[kind]
    if n == 10 ** (len(str(n)) - 1):  # 1, 10, 100...: a flood does not flood the log
        host = peername[0] if isinstance(peername, tuple) else str(peername)
        log.warning("peer_refused", server=kind, peer=host, refused_so_far=n,
                    reason=reason or f"not in {kind}.allow_from (empty: loopback only)")
    with contextlib.suppress(ConnectionError, RuntimeError, OSError):
        writer.close()
