"""HAProxy agent-check: one line per connection telling a balancer what this box can take.

HAProxy connects to `agent.listen` every `agent-inter`, reads one line and closes (the
HAProxy configuration manual, "agent-check": words separated by spaces, ended by a
newline). The line is:

* `up ready 100% maxconn:32` while serving with room for one more call, `up ready 0%
  maxconn:32` while it has none (`Capacity.percent`: the box is out of the farm until it
  has room again); `maxconn` is the calls it takes at once, and
  `ready` lifts a `drain` or `maint` this agent (or the box's previous run) said;
* `drain` while the daemon drains on SIGTERM or reloads: no new connections, live
  calls go on;
* `maint` once drained, while the daemon stops;
* `down #stalled: <parts>` while a part of the daemon is stalled (`runtime.health`).

The agent reads nothing (HAProxy's `agent-send` is not used): it writes the line and
closes at once, and holds at most `agent.max_connections` connections. Hand-written: the
protocol is one line out, and HAProxy ships no client library for it.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable
from dataclasses import dataclass

import structlog

from cosyvoiced.config.addr import AGENT_FORMS, ListenAddress, parse_allow_from, peer_allowed
from cosyvoiced.config.listeners import AgentConfig
from cosyvoiced.serve.peers import refuse_peer

log = structlog.get_logger(__name__)

STREAMS_PER_CALL = 2
"""Worker streams a call holds at once: its listening stream and one reply being spoken
(both count against `workers.max_streams`)."""
WRITE_TIMEOUT_S = 1.0
"""A balancer that does not take a one-line reply within this is dropped."""


@dataclass(frozen=True)
class Capacity:
    """What the daemon can take now: the agent's line and /readyz say the same."""

    state: str
    """The daemon's state: "starting", "ready", "reloading", "draining", "stopping"."""
    healthy: bool
    stalled: tuple[str, ...]
    spare: float
    """Spare real-time capacity, 0..1 (`WorkerPool.spare`)."""
    max_calls: int
    """Calls this box takes at once (`max_calls`)."""

    @property
    def percent(self) -> int:
        """The weight percentage HAProxy takes: 100 while the box has room for one more
        call (a spare of at least one call's share, 1 / `max_calls`, and 1%: under the
        `max_streams` cap that is a call's two streams), 0 when it has none.

        Not the spare itself. `balance leastconn` already counts the calls each box holds;
        a weight that also falls with them counted them twice, and the spare moves with
        every greeting and reply in flight while HAProxy hears it an agent interval late:
        calls arriving close together were dealt by stale weights, 12 to one box and 8 to
        the other, and the fuller box (one worker, no other to give a reply to) failed
        where one box with two workers, which spreads its streams evenly, held
        (docs/performance-history.md, "Scale-out on the Xeon"). So boxes with room are
        alike to HAProxy (the configured `weight` says how big each box is) and leastconn
        spreads calls evenly over them, as the pool spreads streams over its workers."""
        return 100 if self.spare >= max(0.01, 1.0 / max(1, self.max_calls)) else 0

    @property
    def serving(self) -> bool:
        """Ready, healthy and with room for one more: /readyz answers 200."""
        return self.state == "ready" and self.healthy and self.percent > 0

    def agent_line(self) -> str:
        """The agent-check reply, newline included."""
        if self.state in ("draining", "reloading", "starting"):
            return "drain\n"
        if self.state != "ready":
            return "maint\n"
        if not self.healthy:
            # "#" starts the description only at the start of a word (HAProxy's
            # tcpcheck.c): "down#x" would be one unknown word
            return f"down #stalled: {', '.join(self.stalled) or 'unknown'}\n"
        return f"up ready {self.percent}% maxconn:{self.max_calls}\n"


def max_calls(streams_max: int, workers_max_streams: int) -> int:
    """Calls a daemon takes at once: the stream registry's cap, and the workers' cap on
    streams with `STREAMS_PER_CALL` each (at least one)."""
    return max(1, min(streams_max, workers_max_streams // STREAMS_PER_CALL))


class AgentServer:
    """The agent-check listener: answers `capacity()` as one line and closes."""

    def __init__(self, config: AgentConfig, capacity: Callable[[], Capacity]) -> None:
        self.config = config
        self.capacity = capacity
        self.bound = ""
        self.answered = 0
        self._server: asyncio.base_events.Server | None = None
        self._open = 0

    async def start(self) -> None:
        addr = ListenAddress.parse(self.config.listen, AGENT_FORMS)
        self._server = await asyncio.start_server(self._accept, addr.host, addr.port)
        self.bound = f"{addr.bracketed_host}:{self._server.sockets[0].getsockname()[1]}"
        log.info("agent_listening", listen=self.bound)

    async def stop(self) -> None:
        if self._server is None:
            return
        self._server.close()
        await self._server.wait_closed()
        self._server = None

    async def _accept(self, _reader: asyncio.StreamReader,
                      writer: asyncio.StreamWriter) -> None:
        peer = writer.get_extra_info("peername")
        if not peer_allowed(peer, parse_allow_from(self.config.allow_from)):
            refuse_peer(writer, "agent", peer)
            return
        if self._open >= self.config.max_connections:
            refuse_peer(writer, "agent", peer, reason="too many agent connections at once")
            return
        self._open += 1
        try:
            writer.write(self.capacity().agent_line().encode("ascii"))
            with contextlib.suppress(ConnectionError, TimeoutError):
                await asyncio.wait_for(writer.drain(), WRITE_TIMEOUT_S)
            self.answered += 1
        finally:
            self._open -= 1
            writer.close()
            with contextlib.suppress(ConnectionError, TimeoutError):
                await asyncio.wait_for(writer.wait_closed(), WRITE_TIMEOUT_S)
