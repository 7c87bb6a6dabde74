"""Every metric name the Grafana dashboard and the Prometheus alerts use is one that a
real daemon's `GET /metrics` exports (a renamed metric would leave an alert silent)."""

from __future__ import annotations

import json
import os
import re
import signal
import time
import urllib.request

from prometheus_client.parser import text_string_to_metric_families

from tests.fixtures.contrib import dashboard_exprs, metric_names, rule_exprs

SUFFIXES = {"counter": ("_total", "_created"), "histogram": ("_bucket", "_sum", "_count",
                                                             "_created"),
            "gauge": ("",), "summary": ("", "_sum", "_count", "_created")}
PROMETHEUS_OWN = {"up"}
"""Series Prometheus makes itself for each scrape target."""


def exported_names(text: str) -> set[str]:
    names = set()
    for family in text_string_to_metric_families(text):
        names.update(family.name + s for s in SUFFIXES.get(family.type, ("",)))
    return names


def test_dashboard_and_alerts_use_only_exported_metrics(daemon_factory):
    d = daemon_factory().start()
    d.wait_ready()
    base = next(x for x in json.loads(d.ctl("--json", "status").stdout)["listeners"]
                if x.startswith("tcp://")).replace("tcp://", "http://")
    with urllib.request.urlopen(f"{base}/metrics", timeout=10) as resp:
        text = resp.read().decode()
    exported = exported_names(text) | PROMETHEUS_OWN
    used: dict[str, set[str]] = {}
    for where, exprs in (("alerts.yml", rule_exprs()), ("cosyvoiced.json", dashboard_exprs())):
        for expr in exprs:
            for name in metric_names(expr):
                used.setdefault(name, set()).add(where)
    missing = {n: sorted(w) for n, w in used.items() if n not in exported}
    assert missing == {}, f"not exported by /metrics: {missing}"
    # the gauges read at scrape time carry live values
    up = re.search(r"^cosyvoiced_workers_up (\S+)$", text, re.M)
    configured = re.search(r"^cosyvoiced_workers (\S+)$", text, re.M)
    assert up and configured and float(up.group(1)) == float(configured.group(1)) >= 1, text
    assert "cosyvoiced_health_stalled_parts 0.0" in text
    # and the check can fail: a name nobody exports is caught
    assert "cosyvoiced_underruns" not in exported  # the counter is _total

    # a worker killed: the restart is counted, as CosyvoicedWorkerRestarts reads it
    status = json.loads(d.ctl("--json", "status").stdout)
    os.kill(status["workers"]["workers"][0]["pid"], signal.SIGKILL)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        with urllib.request.urlopen(f"{base}/metrics", timeout=10) as resp:
            text = resp.read().decode()
        if re.search(r"^cosyvoiced_worker_restarts_total 1\.0$", text, re.M):
            break
        time.sleep(0.5)
    else:
        raise AssertionError("worker restart not counted in /metrics")
    d.signal(signal.SIGTERM)
    assert d.wait() == 0
