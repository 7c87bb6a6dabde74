"""The shipped HAProxy config and dialplan snippet: valid for Debian's haproxy, and saying
what docs/operations.md says they do."""

from __future__ import annotations

import re

from cosyvoiced.config.listeners import AgentConfig
from cosyvoiced.serve.agent import Capacity
from cosyvoiced.testing.haproxy import REPO, SHIPPED, Box, check_config, render


def _section(text: str, name: str) -> str:
    """The lines of one `frontend`/`backend` section."""
    m = re.search(rf"^(frontend|backend) {name}\n(.*?)(?=^\S|\Z)", text, re.M | re.S)
    assert m, name
    return m.group(2)


def test_shipped_haproxy_config_is_valid_without_warnings():
    res = check_config(SHIPPED)
    assert res.returncode == 0, res.stderr
    assert "WARNING" not in res.stdout + res.stderr, res.stdout + res.stderr


def test_calls_backend_balances_on_the_agent_and_never_retries_a_started_call():
    text = SHIPPED.read_text()
    calls = _section(text, "cosyvoiced_calls")
    assert "mode tcp" in calls and "balance leastconn" in calls
    assert "agent-check" in calls and "agent-inter 1s" in calls and "agent-port" in calls
    assert re.search(r"timeout tunnel \d+h", calls)
    assert "on-marked-down shutdown-sessions" not in calls  # a marked-down box keeps its calls
    # retries only ever reopen a connection that failed to open (HAProxy's `retries`)
    assert "retry-on" not in text
    # the agent's drain grace covers one agent interval
    assert AgentConfig().drain_grace_s >= 1.0
    api = _section(text, "cosyvoiced_api")
    assert "mode http" in api and "option httpchk GET /readyz" in api
    assert "agent-check" not in api  # maxconn from the agent counts calls, not requests


def test_rendered_config_for_loopback_is_valid(tmp_path):
    boxes = (Box(20001, 20002, 20003), Box(20011, 20012, 20013))
    path = tmp_path / "h.cfg"
    path.write_text(render(boxes, 20100, 20101, tmp_path / "s.sock"))
    text = path.read_text()
    assert not [line for line in text.splitlines()
                if "10.0.0." in line and not line.lstrip().startswith("#")]
    assert "server box1 127.0.0.1:20001 agent-port 20003 port 20003" in text
    assert check_config(path).returncode == 0


def test_dialplan_dials_the_haproxy_frontend():
    text = (REPO / "contrib" / "asterisk" / "extensions.conf").read_text()
    assert "AudioSocket(${UUID()},10.0.0.10:9092)" in text  # haproxy's bind, not a box
    assert "bind 10.0.0.10:9092" in SHIPPED.read_text()
    assert text.index(",Answer()") < text.index(",AudioSocket(")


def test_agent_words_are_ones_haproxy_reads():
    """Every word the agent says is in HAProxy's agent-check grammar."""
    words = set()
    for state in ("ready", "draining", "stopping"):
        for healthy in (True, False):
            line = Capacity(state, healthy, ("workers",), 0.5, 4).agent_line()
            assert line.endswith("\n") and line.count("\n") == 1
            words |= set(line.partition("#")[0].split())  # after a word-initial '#': text
            assert "#" not in line or " #" in line
    for w in words:
        assert (w in {"up", "ready", "drain", "maint", "down"} or re.fullmatch(r"\d{1,3}%", w)
                or re.fullmatch(r"maxconn:\d+", w)), w
