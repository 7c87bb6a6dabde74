"""A `--quick` load ramp against the real daemon: every stream kind (HTTP TTS, Wyoming,
AudioSocket calls with real prompts), then the TTS-only side by side with Piper's own
HTTP server (when it answers within 10 s); the files come out and the ramp ends at a
knee or cleanly."""

from __future__ import annotations

import json

import pytest

pytestmark = pytest.mark.timeout(240)


def test_quick_ramp_writes_json_markdown_and_plots(daemon_factory, repo_root, tmp_path):
    d = daemon_factory(overrides=("workers.count=2", 'workers.cpus="0-1"')).start()
    d.wait_ready()
    status = json.loads(d.ctl("--json", "status").stdout)
    url = next(x for x in status["listeners"] if x.startswith("tcp://")).replace("tcp://",
                                                                                  "http://")
    from tools.loadgen import cli as loadgen

    out = tmp_path / "ramp"
    # one 5 s step per ramp (the steps and the knee rule are unit-tested): its replies are
    # those downloaded in it (a reply of 3-6 s is made in about a second), a call's prompt
    # is transcribed within it
    rc = loadgen.main(["--url", url, "--quick", "--interval-s", "5", "--max-steps", "1",
                       "--mix", "call=1,tts=1,wyoming=1", "--peers", "piper-http",
                       "--peer-timeout-s", "10", "--out", str(out)])
    assert rc == 0
    doc = json.loads((out / "loadgen.json").read_text())
    for name in ("latency.png", "resources.png", "failures.png"):
        assert (out / name).read_bytes()[:4] == b"\x89PNG"
    md = (out / "loadgen.md").read_text()
    assert "| server | mix | streams |" in md and "latency ratio" in md

    ramps = {(r["server"], ",".join(r["mix"])): r for r in doc["ramps"]}
    mixed = ramps[("cosyvoiced", "call,tts,wyoming")]
    assert ("cosyvoiced", "tts") in ramps
    if "piper-http" not in doc.get("peers_not_run", {}):
        assert ("piper-http", "piper") in ramps
    for r in ramps.values():
        steps = r["steps"]
        assert [s["streams"] for s in steps] == [2]
        # a knee, or a clean finish
        assert r["knee_step"] in (None, 0)
        if r["knee_step"] is not None:
            assert r["knee_reasons"]
        first = steps[0]
        assert first["replies"] > 0 and first["ttfa_p50_ms"] > 0
        assert first["cpu_pct"] > 0 and first["pss_mb"] > 50
    # every kind was really driven: the calls were transcribed, workers reported busy
    assert any(s["transcript_p95_ms"] for s in mixed["steps"])
    assert all(s["worker_busy"] and len(s["worker_busy"]) == 2 for s in mixed["steps"])
    assert doc["machine"]["nproc"] >= 1 and doc["loadavg_before"] >= 0
