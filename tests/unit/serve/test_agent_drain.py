"""The drain order on SIGTERM with a balancer's agent: `drain` is said first, new streams
are still taken for `agent.drain_grace_s`, then refused while live ones finish."""

from __future__ import annotations

import asyncio
from dataclasses import replace

import pytest

from cosyvoiced.config import Config
from cosyvoiced.config.listeners import AgentConfig
from cosyvoiced.serve.agent import AgentServer
from cosyvoiced.serve.streams import Refused
from cosyvoiced.service import Daemon


def _daemon(grace_s: float, with_agent: bool) -> Daemon:
    config = replace(Config(), agent=AgentConfig(listen="127.0.0.1:0", drain_grace_s=grace_s))
    d = Daemon(config, None)
    d.state = "ready"
    if with_agent:
        d.agent = AgentServer(config.agent, d.capacity)
    return d


def test_sigterm_says_drain_then_takes_streams_for_the_grace_then_refuses():
    d = _daemon(0.4, with_agent=True)

    async def main():
        live = d.streams.open("call", "live")
        task = asyncio.create_task(d._drain_streams(5.0))
        await asyncio.sleep(0.05)
        d.state = "draining"  # what _shutdown sets before draining
        assert d.capacity().agent_line() == "drain\n"
        late = d.streams.open("call", "routed-before-haproxy-heard")  # within the grace
        await asyncio.sleep(0.5)
        with pytest.raises(Refused) as info:
            d.streams.open("call", "after-the-grace")
        assert info.value.code == "draining"
        assert not task.done()  # the live calls go on
        d.streams.close(live.id)
        d.streams.close(late.id)
        return await asyncio.wait_for(task, 2.0)

    assert asyncio.run(main()) is True


def test_without_an_agent_new_streams_are_refused_at_once():
    d = _daemon(5.0, with_agent=False)

    async def main():
        task = asyncio.create_task(d._drain_streams(1.0))
        await asyncio.sleep(0.05)
        with pytest.raises(Refused):
            d.streams.open("call", "x")
        return await task

    assert asyncio.run(main()) is True


def test_the_grace_counts_within_the_drain_timeout():
    d = _daemon(5.0, with_agent=True)

    async def main():
        d.streams.open("call", "never-ends")
        t0 = asyncio.get_running_loop().time()
        drained = await d._drain_streams(0.3)
        return drained, asyncio.get_running_loop().time() - t0

    drained, took = asyncio.run(main())
    assert drained is False and took < 1.0
