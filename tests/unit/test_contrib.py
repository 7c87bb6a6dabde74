"""contrib/: the Prometheus rules pass `promtool check rules` and their own `promtool test
rules`, and every Grafana panel's query is valid PromQL (checked by promtool as a rule).
Which metric names they may use is checked against a real daemon in
tests/e2e/test_contrib.py."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import yaml

from tests.fixtures.contrib import (
    DASHBOARD,
    GRAFANA_VARS,
    RULES,
    RULES_TEST,
    dashboard_exprs,
    rule_exprs,
)


def _promtool(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["promtool", *args], cwd=cwd, capture_output=True, text=True,
                          timeout=60)


def test_alert_rules_pass_promtool_check_and_their_unit_tests():
    check = _promtool("check", "rules", RULES.name, cwd=RULES.parent)
    assert check.returncode == 0, check.stdout + check.stderr
    assert f"SUCCESS: {len(rule_exprs())} rules found" in check.stdout
    tested = _promtool("test", "rules", RULES_TEST.name, cwd=RULES.parent)
    assert tested.returncode == 0, tested.stdout + tested.stderr


def test_promtool_rejects_a_broken_rule(tmp_path):
    # the check above can fail: an unbalanced expression is refused
    bad = tmp_path / "bad.yml"
    bad.write_text("groups:\n  - name: x\n    rules:\n      - alert: X\n"
                   "        expr: sum(rate(cosyvoiced_underruns_total[5m])\n")
    assert _promtool("check", "rules", bad.name, cwd=tmp_path).returncode != 0


def test_every_dashboard_query_is_valid_promql(tmp_path):
    rules = []
    for n, expr in enumerate(dashboard_exprs()):
        for var, value in GRAFANA_VARS.items():
            expr = expr.replace(var, value)
        assert "$" not in expr, expr  # a Grafana variable this test does not know
        rules.append({"record": f"dashboard:panel_{n}", "expr": expr})
    path = tmp_path / "dashboard.yml"
    path.write_text(yaml.safe_dump({"groups": [{"name": "dashboard", "rules": rules}]}))
    check = _promtool("check", "rules", path.name, cwd=tmp_path)
    assert check.returncode == 0, check.stdout + check.stderr


def test_dashboard_is_importable():
    doc = json.loads(DASHBOARD.read_text())
    assert doc["uid"] == "cosyvoiced" and doc["schemaVersion"] >= 36
    names = {v["name"] for v in doc["templating"]["list"]}
    assert {"datasource", "instance"} <= names
    ids = [p["id"] for p in doc["panels"]]
    assert len(ids) == len(set(ids))
    for p in doc["panels"]:
        assert p["datasource"]["uid"] == "${datasource}", p["title"]
        assert p["targets"], p["title"]
