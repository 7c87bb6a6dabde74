"""The docs stay true: the config reference matches the schema, the README stays short
and shows the two commands, and every link and named path resolves inside the repo."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

README_MAX_BYTES = 8192


def doc_pages(repo_root: Path) -> list[Path]:
    return [repo_root / "README.md", *sorted((repo_root / "docs").glob("*.md"))]


def test_config_reference_matches_schema(repo_root):
    page = (repo_root / "docs" / "config.md").read_text()
    begin, end = "<!-- config-reference -->\n", "<!-- /config-reference -->"
    documented = page[page.index(begin) + len(begin):page.index(end)].strip()
    generated = subprocess.run([sys.executable, "-m", "tools.configdoc"], cwd=repo_root,
                               capture_output=True, text=True, check=True).stdout.strip()
    assert documented == generated, "run `python -m tools.configdoc --write` (docs/config.md)"


def test_readme_shows_the_two_commands_and_ci_runs_the_test_one(repo_root):
    readme = (repo_root / "README.md").read_text()
    assert "make run" in readme and "make test" in readme
    ci = (repo_root / ".ci" / "run").read_text()
    assert [line for line in ci.splitlines() if line and not line.startswith(("#", "set ", "cd "))] \
        == ["make test"]


def test_readme_is_short(repo_root):
    size = (repo_root / "README.md").stat().st_size
    assert size <= README_MAX_BYTES, f"README.md is {size} bytes: move detail into docs/"


def slug(heading: str) -> str:
    """GitHub's anchor for a Markdown heading."""
    text = re.sub(r"[^\w\- ]", "", heading.strip().lower())
    return text.replace(" ", "-")


def anchors(page: Path) -> set[str]:
    return {slug(m) for m in re.findall(r"^#{1,6} +(.+?) *$", page.read_text(), re.M)}


LINK = re.compile(r"!?\[[^\]]*\]\(([^)\s]+)\)")


def test_every_link_resolves_inside_the_repo(repo_root):
    bad = []
    for page in doc_pages(repo_root):
        for target in LINK.findall(page.read_text()):
            if re.match(r"[a-z][a-z0-9+.-]*:", target):  # http:, https:, mailto:
                continue
            path, _, anchor = target.partition("#")
            dest = (page.parent / path).resolve() if path else page
            rel = page.relative_to(repo_root)
            if not dest.is_relative_to(repo_root):
                bad.append(f"{rel}: {target} points outside the repo")
            elif not dest.is_file():
                bad.append(f"{rel}: {target} is not a file in the repo")
            elif anchor and dest.suffix == ".md" and anchor not in anchors(dest):
                bad.append(f"{rel}: {target} names no heading of {dest.name}")
    assert bad == []


PATH = re.compile(r"`((?:daemon|tools|tests|configs|systemd|docs)/[\w./*-]*)`")
IN_PACKAGE = re.compile(r"`((?:config|runtime|audio|tts|listen|workers|serve|testing)/[\w./-]*)`")
"""A path inside daemon/cosyvoiced/, as docs/architecture.md writes them."""
MODULE = re.compile(r"`(cosyvoiced(?:\.\w+)+)`")


def test_every_path_and_module_the_docs_name_exists(repo_root):
    package = repo_root / "daemon"
    bad = []
    for page in doc_pages(repo_root):
        text = page.read_text()
        for path in PATH.findall(text):
            if not (list(repo_root.glob(path)) if "*" in path else (repo_root / path).exists()):
                bad.append(f"{page.name}: {path}")
        for path in IN_PACKAGE.findall(text) if page.name == "architecture.md" else ():
            if not (package / "cosyvoiced" / path).exists():
                bad.append(f"{page.name}: {path} (in daemon/cosyvoiced/)")
        for module in MODULE.findall(text):
            base = package.joinpath(*module.split("."))
            if not (base.with_suffix(".py").is_file() or (base / "__init__.py").is_file()):
                bad.append(f"{page.name}: {module}")
    assert bad == []
