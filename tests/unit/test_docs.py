"""The docs stay true: the config reference matches the schema, the README stays short
and shows the two commands, and every link and named path resolves inside the repo."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

README_MAX_BYTES = 8192
PERFORMANCE_MAX_BYTES = 15_000
"""docs/performance.md holds the latest figures only; the dated runs go to
docs/performance-history.md (`tools.loadgen --docs` writes its rows there, one per ramp
and CPU family)."""


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


def test_performance_page_is_short(repo_root):
    size = (repo_root / "docs" / "performance.md").stat().st_size
    assert size <= PERFORMANCE_MAX_BYTES, \
        f"docs/performance.md is {size} bytes: move dated runs into docs/performance-history.md"


def slug(heading: str) -> str:
    """GitHub's anchor for a Markdown heading."""
    text = re.sub(r"[^\w\- ]", "", heading.strip().lower())
    return text.replace(" ", "-")


def anchors(page: Path) -> set[str]:
    return {slug(m) for m in re.findall(r"^#{1,6} +(.+?) *$", page.read_text(), re.M)}


LINK = re.compile(r"!?\[[^\]]*\]\(([^)\s]+)\)")
REF_DEF = re.compile(r"^\[([^\]]+)\]:\s*(\S+)", re.M)
"""A reference-style link's target: `[name]: path#anchor` on a line of its own."""
REF_USE = re.compile(r"\]\[([^\]]+)\]")
"""A reference-style link: `[text][name]`."""


def broken_links(pages: list[Path], repo_root: Path) -> list[str]:
    """Every link of `pages` (inline `](path#anchor)` and reference-style) whose file is
    not in the repo, or whose #anchor names no heading of that Markdown file (GitHub's
    slugs); and every `[text][name]` with no `[name]: ...` (it renders as plain text)."""
    bad = []
    for page in pages:
        text = page.read_text()
        rel = page.relative_to(repo_root)
        defined = {name.lower(): target for name, target in REF_DEF.findall(text)}
        bad += [f"{rel}: [{name}] is used but not defined" for name in REF_USE.findall(text)
                if name.lower() not in defined]
        for target in [*LINK.findall(text), *defined.values()]:
            if re.match(r"[a-z][a-z0-9+.-]*:", target):  # http:, https:, mailto:
                continue
            path, _, anchor = target.partition("#")
            dest = (page.parent / path).resolve() if path else page
            if not dest.is_relative_to(repo_root):
                bad.append(f"{rel}: {target} points outside the repo")
            elif not dest.is_file():
                bad.append(f"{rel}: {target} is not a file in the repo")
            elif anchor and dest.suffix == ".md" and anchor not in anchors(dest):
                bad.append(f"{rel}: {target} names no heading of {dest.name}")
    return bad


def test_every_link_resolves_inside_the_repo(repo_root):
    assert broken_links(doc_pages(repo_root), repo_root) == []


def test_a_broken_link_or_anchor_is_caught(tmp_path):
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "b.md").write_text("# B\n\n## The run of 2026-12-04, night (`make bench`)\n")
    page = tmp_path / "docs" / "a.md"
    page.write_text("# A\n\n[ok](b.md#the-run-of-2026-12-04-night-make-bench) [self](#a) "
                    "[ok too][run]\n\n[run]: b.md#b\n")
    assert broken_links([page], tmp_path) == []
    page.write_text("# A\n\n[moved](b.md#load-ramp) [gone](c.md) [up](../../x.md) "
                    "[undefined][nowhere] [bad ref][run]\n\n[run]: b.md#soak\n")
    assert broken_links([page], tmp_path) == [
        "docs/a.md: [nowhere] is used but not defined",
        "docs/a.md: b.md#load-ramp names no heading of b.md",
        "docs/a.md: c.md is not a file in the repo",
        "docs/a.md: ../../x.md points outside the repo",
        "docs/a.md: b.md#soak names no heading of b.md"]


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
