"""The HAProxy agent-check listener over real TCP, its reply grammar, and /readyz."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

import pytest
from aiohttp import ClientSession
from aiohttp.test_utils import TestServer

from cosyvoiced.config.listeners import AgentConfig
from cosyvoiced.serve.agent import AgentServer, Capacity, max_calls
from cosyvoiced.serve.http.app import make_app
from tests.fakes.daemon import FakeDaemon


def cap(state: str = "ready", spare: float = 0.37, healthy: bool = True,
        stalled: tuple[str, ...] = ()) -> Capacity:
    return Capacity(state, healthy, stalled, spare, 32)


def test_agent_line_follows_state_health_and_room_for_a_call():
    assert cap().agent_line() == "up ready 100% maxconn:32\n"
    assert cap(spare=1.0).agent_line() == "up ready 100% maxconn:32\n"
    assert cap(spare=0.04).percent == 100
    assert cap(spare=0.03).agent_line() == "up ready 0% maxconn:32\n"  # < one call of 32
    assert Capacity("ready", True, (), 0.01, 5000).percent == 100  # at least 1% left
    assert Capacity("ready", True, (), 0.009, 5000).percent == 0
    assert cap(spare=-0.2).percent == 0 and cap(spare=3.0).percent == 100
    for state in ("draining", "reloading", "starting"):
        assert cap(state).agent_line() == "drain\n"
    assert cap("stopping").agent_line() == "maint\n"
    assert cap(healthy=False, stalled=("workers", "event_loop")).agent_line() == \
        "down #stalled: workers, event_loop\n"
    assert cap("draining", healthy=False).agent_line() == "drain\n"  # draining wins


def _leastconn_split(percent: Callable[[float], int], calls: int = 20,
                     gap_s: float = 0.15) -> list[int]:
    """Calls dealt by HAProxy's leastconn ((calls + 1) / weight, weight 0 skipped) over
    two alike boxes whose agents are read once a second. A call's listening costs 4% of
    a box; box 0 has a reply in flight (30%) when the agent is read at 1 s."""
    conns, weights = [0, 0], [100, 100]
    for i in range(calls):
        t = i * gap_s
        if int(t) != int(t - gap_s):  # an agent-inter went by: weights from the spare now
            weights = [percent(1.0 - 0.04 * conns[b] - (0.3 if b == 0 and int(t) == 1
                                                        else 0.0)) for b in (0, 1)]
        box = min((b for b in (0, 1) if weights[b] > 0),
                  key=lambda b: ((conns[b] + 1) / weights[b], b))
        conns[box] += 1
    return conns


def test_weight_is_not_the_spare_so_leastconn_deals_calls_evenly():
    """Regression: with the spare as the weight, a reply in flight on one box when the
    agent was read sent that box's share of the next second's calls to the other (12 and
    8 of 20 in the scaleout bench), and the fuller box, with one worker, failed."""
    assert _leastconn_split(lambda spare: cap(spare=spare).percent) == [10, 10]
    spare_as_weight = _leastconn_split(lambda spare: max(0, min(100, int(spare * 100))))
    assert abs(spare_as_weight[0] - spare_as_weight[1]) >= 2  # what the old weight did


def test_serving_needs_ready_healthy_and_room():
    assert cap().serving
    assert not cap(spare=0.005).serving
    assert not cap("draining").serving
    assert not cap(healthy=False).serving


def test_max_calls_counts_two_worker_streams_per_call():
    assert max_calls(64, 64) == 32
    assert max_calls(3, 64) == 3
    assert max_calls(64, 8) == 4
    assert max_calls(64, 1) == 1


async def _read_line(port: int) -> bytes:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    data = await asyncio.wait_for(reader.read(), 5)  # to EOF: the agent closes
    writer.close()
    return data


def test_agent_answers_one_line_per_connection_and_closes():
    state = {"cap": cap()}

    async def main():
        agent = AgentServer(AgentConfig(listen="127.0.0.1:0"), lambda: state["cap"])
        await agent.start()
        port = int(agent.bound.rsplit(":", 1)[1])
        try:
            first = await _read_line(port)
            state["cap"] = cap("draining")
            second = await _read_line(port)
            many = await asyncio.gather(*(_read_line(port) for _ in range(40)))
        finally:
            await agent.stop()
        return first, second, many, agent.answered

    first, second, many, answered = asyncio.run(main())
    assert first == b"up ready 100% maxconn:32\n"
    assert second == b"drain\n"
    assert all(m in (b"drain\n", b"") for m in many)  # over the cap: closed unanswered
    assert answered >= 2 + sum(1 for m in many if m)


def test_agent_over_its_connection_cap_closes_without_answering():
    async def main():
        agent = AgentServer(AgentConfig(listen="127.0.0.1:0", max_connections=1), cap)
        agent._open = 1  # one answer still being written
        await agent.start()
        port = int(agent.bound.rsplit(":", 1)[1])
        try:
            return await _read_line(port), agent.answered
        finally:
            await agent.stop()

    assert asyncio.run(main()) == (b"", 0)


def test_agent_refuses_peers_allow_from_does_not_list():
    async def main():
        agent = AgentServer(AgentConfig(listen="127.0.0.1:0", allow_from=("10.9.0.0/16",)),
                            cap)
        await agent.start()
        port = int(agent.bound.rsplit(":", 1)[1])
        try:
            return await _read_line(port)
        finally:
            await agent.stop()

    assert asyncio.run(main()) == b""  # loopback is not in the list given


@pytest.mark.parametrize(("ready", "spare", "status"), [(True, 0.5, 200), (True, 0.0, 503),
                                                       (False, 0.5, 503)])
def test_readyz_says_the_agents_capacity(ready, spare, status):
    async def main():
        server = TestServer(make_app(FakeDaemon(ready=ready, spare=spare)))
        await server.start_server()
        try:
            async with ClientSession(base_url=str(server.make_url(""))) as http, \
                    http.get("/readyz") as r:
                return r.status, await r.json()
        finally:
            await server.close()

    got, body = asyncio.run(main())
    assert got == status
    assert body["ready"] is (status == 200)
    weight = 100 if spare >= 1 / 32 else 0
    assert body["weight_percent"] == weight and body["max_calls"] == 32
    assert body["agent"] in (f"up ready {weight}% maxconn:32", "drain")
