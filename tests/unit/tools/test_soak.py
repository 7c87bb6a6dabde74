"""The soak's pure parts: how a client's answer is classified, which underruns and gaps
are a worker kill's, the log tail."""

from __future__ import annotations

import json
import os

from tools.soak.answers import Outcome, http_outcome, is_bad
from tools.soak.honest import CallResult, HonestResult
from tools.soak.probe import LogTail, open_fds
from tools.soak.windows import KILL_GRACE_S, Window, unlogged


def test_http_answers_are_typed_plain_or_bad():
    body = json.dumps({"error": {"code": "websocket_required"}}).encode()
    assert http_outcome(b"HTTP/1.1 426 Upgrade Required", body) == "typed:websocket_required"
    assert http_outcome(b"HTTP/1.1 503 Service Unavailable",
                         b'{"error": {"code": "overloaded"}}') == "typed:overloaded"
    assert http_outcome(b"HTTP/1.1 400 Bad Request", b"Bad status line") == "http:400"
    assert http_outcome(b"HTTP/1.1 500 Internal Server Error", b"oops") == "5xx:500"
    assert http_outcome(b"HTTP/1.1 200 OK", b"RIFF") == "unexpected:200"
    assert http_outcome(b"", b"") == "closed"
    assert http_outcome(b"garbage", b"").startswith("unexpected:")


def test_only_hangs_server_errors_and_surprises_are_bad():
    for good in ("typed:idle_timeout", "http:400", "closed", "hangup", "bounded", "served",
                 "vanished"):
        assert not is_bad(good)
    for bad in ("hung", "5xx:500", "unexpected:200"):
        assert is_bad(bad)


def _call(cid: str, start: float, end: float, gaps: list[float]) -> CallResult:
    return CallResult(cid, start, end, frames=500, speech_frames=100, utterances=2,
                      replies_asked=2, hung_up_by_daemon=False, gaps_at_s=gaps)


def test_underruns_and_gaps_near_a_kill_are_counted_apart():
    w = Window(0, honest=HonestResult(calls=[_call("a", 0, 9, [3.0]),
                                             _call("b", 20, 40, [21.0, 39.0]),
                                             _call("c", 100 + KILL_GRACE_S + 1, 130, [])]))
    w.kills = [(100.0, 4242)]
    w.events = [{"event": "call_ended", "call_id": "a", "underruns": 2, "reason": "hangup"},
                {"event": "call_ended", "call_id": "b", "underruns": 0, "reason": "hangup"},
                {"event": "call_ended", "call_id": "c", "underruns": 1, "reason": "hangup"},
                {"event": "call_ended", "call_id": "x", "underruns": 7, "reason": "peer_gone"}]
    assert w.call_underruns() == (3, 0)  # "x" is not an honest call
    w.honest.calls[1] = _call("b", 90, 105, [95.0, 101.0])
    w.events[1]["underruns"] = 5
    assert w.call_underruns() == (3, 5)
    assert w.peer_gaps() == (2, 1)  # 101.0 is within the grace after the kill at 100
    assert w.logged()["call_ended:peer_gone"] == 1


def test_the_log_tail_returns_whole_lines_once(tmp_path):
    path = tmp_path / "daemon.log"
    path.write_text('{"event": "ready"}\n{"event": "call_st')
    tail = LogTail(path)
    assert [e["event"] for e in tail.read()] == ["ready"]
    with open(path, "a") as f:
        f.write('arted"}\nnot json\n')
    assert [e["event"] for e in tail.read()] == ["call_started", "<raw>"]
    assert tail.read() == []


def test_hostile_drops_are_matched_to_log_lines_over_the_run():
    def o(name: str, outcome: str) -> Outcome:
        return Outcome(name, outcome, 0.0, 1.0)

    w1 = Window(0, hostile=[o("wy_slowloris", "typed:idle_timeout"), o("as_vanish", "vanished"),
                            o("as_oversize_frame", "hangup"), o("http_vanish", "typed:overloaded"),
                            o("ws_plain_get", "typed:websocket_required")],
                honest=HonestResult(calls=[_call("h", 0, 9, [])]))
    w1.honest.calls[0].refused = True
    w1.events = [{"event": "wyoming_idle_timeout"}, {"event": "call_refused"},
                 {"event": "call_refused"}]  # one of them the honest call's
    w2 = Window(1, hostile=[o("wy_slowloris", "typed:idle_timeout")])
    w2.events = [{"event": "call_ended", "reason": "peer_gone"}]  # late, in the next window
    assert unlogged([w1, w2]) == {"wyoming_idle_timeout": (2, 1)}
    w2.events.append({"event": "wyoming_idle_timeout"})
    assert unlogged([w1, w2]) == {}


def test_open_fds_leave_the_model_cache_out(tmp_path):
    cache = tmp_path / "cache"
    (cache / "openvino").mkdir(parents=True)
    (cache / "openvino" / "1.blob").write_bytes(b"x")
    (tmp_path / "ring").write_bytes(b"x")
    before = open_fds([os.getpid()], skip=cache)
    with open(cache / "openvino" / "1.blob", "rb"), open(tmp_path / "ring", "rb"):
        assert open_fds([os.getpid()], skip=cache) == before + 1  # the ring only
        assert open_fds([os.getpid()], skip=tmp_path / "elsewhere") == before + 2
