"""The README stays true: the config reference matches the schema."""

from __future__ import annotations

import subprocess
import sys


def test_config_reference_matches_schema(repo_root):
    readme = (repo_root / "README.md").read_text()
    begin, end = "<!-- config-reference -->\n", "<!-- /config-reference -->"
    documented = readme[readme.index(begin) + len(begin):readme.index(end)].strip()
    generated = subprocess.run([sys.executable, str(repo_root / "tools" / "configdoc.py")],
                               capture_output=True, text=True, check=True).stdout.strip()
    assert documented == generated, "run `python -m tools.configdoc` and paste its output into README.md"


def test_readme_shows_the_two_commands_and_ci_runs_the_test_one(repo_root):
    readme = (repo_root / "README.md").read_text()
    assert "make run" in readme and "make test" in readme
    ci = (repo_root / ".ci" / "run").read_text()
    assert [line for line in ci.splitlines() if line and not line.startswith(("#", "set ", "cd "))] \
        == ["make test"]
