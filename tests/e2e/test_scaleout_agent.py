"""Every line the agent says, read by real HAProxy (the shipped config on loopback): the
weight it sets, maxconn, drain, maint, down and back up. The AudioSocket port is a plain
listener here: HAProxy's checks never open a call."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator

import pytest

from cosyvoiced.config.listeners import AgentConfig
from cosyvoiced.serve.agent import AgentServer, Capacity
from cosyvoiced.testing.haproxy import Box, Haproxy, free_port


class AgentThread(threading.Thread):
    """The real AgentServer on its own event loop; `capacity` is what it says next."""

    def __init__(self) -> None:
        super().__init__(daemon=True)
        self.capacity = Capacity("ready", True, (), 1.0, 4)
        self.loop = asyncio.new_event_loop()
        self.server = AgentServer(AgentConfig(listen="127.0.0.1:0"), lambda: self.capacity)
        self.started = threading.Event()

    def run(self) -> None:
        asyncio.set_event_loop(self.loop)
        self.loop.run_until_complete(self.server.start())
        self.started.set()
        self.loop.run_forever()

    @property
    def port(self) -> int:
        return int(self.server.bound.rsplit(":", 1)[1])

    def stop(self) -> None:
        asyncio.run_coroutine_threadsafe(self.server.stop(), self.loop).result(5)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.join(5)
        self.loop.close()


@pytest.fixture
def agent_behind_haproxy(tmp_path) -> Iterator[tuple[AgentThread, Haproxy]]:
    agent = AgentThread()
    agent.start()
    assert agent.started.wait(10)
    box = Box(free_port(), free_port(), agent.port)
    unused = Box(free_port(), free_port(), free_port())  # box2: nothing there (DOWN)
    proxy = Haproxy(tmp_path, (box, unused))
    try:
        yield agent, proxy.start()
    finally:
        proxy.stop()
        agent.stop()


def test_haproxy_follows_every_agent_line(agent_behind_haproxy):
    agent, proxy = agent_behind_haproxy

    def says(cap: Capacity, status: str, weight: int | None = None) -> None:
        agent.capacity = cap
        proxy.wait_for(lambda s: s["box1"]["status"].startswith(status)
                       and (weight is None or int(s["box1"]["weight"]) == weight),
                       f"{cap.agent_line().strip()!r} -> {status} {weight}", 6.0)

    says(Capacity("ready", True, (), 0.37, 4), "UP", 100)  # room for a call: full weight
    # 100 is also the configured weight: the agent was heard once maxconn came from it
    proxy.wait_for(lambda s: s["box1"]["slim"] == "4", "maxconn 4 from the agent", 6.0)
    says(Capacity("ready", True, (), 0.0, 4), "UP", 0)  # full: out of the farm
    says(Capacity("draining", True, (), 0.5, 4), "DRAIN")
    says(Capacity("ready", True, (), 0.8, 4), "UP", 100)  # `ready` lifts the drain
    says(Capacity("ready", False, ("workers", "event_loop"), 0.8, 4), "DOWN")
    says(Capacity("ready", True, (), 0.6, 4), "UP", 100)
    says(Capacity("stopping", True, (), 0.0, 4), "MAINT")
    says(Capacity("ready", True, (), 1.0, 4), "UP", 100)  # a restarted daemon
