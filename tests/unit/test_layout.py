"""The package's imports point one way: no cycles, and each stage imports only those below it.

Every import counts, at module level or inside a function, `TYPE_CHECKING` or not: a lazy
import still ties two modules together.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[2] / "daemon" / "cosyvoiced"

# serve -> workers -> tts, listen -> audio -> runtime -> config -> errors (the root error,
# below every stage); the entry points on top.
LAYER = {"errors": -1, "config": 0, "runtime": 1, "audio": 2, "tts": 3, "listen": 3,
         "workers": 4, "serve": 5, "service": 6, "__main__": 6, "ctl": 6, "testing": 6}


def module_name(path: Path) -> str:
    parts = ["cosyvoiced", *path.relative_to(PACKAGE).with_suffix("").parts]
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def modules() -> dict[str, Path]:
    return {module_name(p): p for p in sorted(PACKAGE.rglob("*.py"))}


def imports(name: str, path: Path, known: set[str]) -> set[str]:
    """The package's modules that `name` imports (a package's face counts as its own module)."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    out: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            targets = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                up = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join(up + ([node.module] if node.module else []))
            targets = [f"{base}.{a.name}" if f"{base}.{a.name}" in known else base
                       for a in node.names]
        else:
            continue
        for target in targets:
            while target and target not in known:
                target = target.rpartition(".")[0]
            if target and target != name:
                out.add(target)
    return out


@pytest.fixture(scope="module")
def graph() -> dict[str, set[str]]:
    found = modules()
    return {name: imports(name, path, set(found)) for name, path in found.items()}


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    out: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in graph[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                out.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return out


def stage(module: str) -> str:
    return module.split(".")[1] if "." in module else ""


def test_no_import_cycle(graph):
    assert cycles(graph) == []


def test_the_cycle_check_finds_a_cycle():
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


def test_every_module_belongs_to_a_stage(graph):
    assert sorted(m for m in graph if m != "cosyvoiced" and stage(m) not in LAYER) == []


def test_imports_point_down_the_stages(graph):
    upward = sorted(f"{m} -> {t}" for m, targets in graph.items() if m != "cosyvoiced"
                    for t in targets if t != "cosyvoiced" and LAYER[stage(t)] > LAYER[stage(m)])
    assert upward == []


def test_only_the_entry_points_import_the_servers(graph):
    allowed = {"service", "__main__", "serve"}
    assert sorted(f"{m} -> {t}" for m, targets in graph.items() for t in targets
                  if stage(t) == "serve" and stage(m) not in allowed and stage(m) != "testing") == []


def test_the_worker_side_imports_no_server_and_no_pool(graph):
    worker = {m: t for m, t in graph.items() if m.startswith("cosyvoiced.workers.worker")}
    assert worker, "the worker side moved: update this test"
    assert sorted(f"{m} -> {t}" for m, targets in worker.items() for t in targets
                  if stage(t) == "serve" or t.startswith("cosyvoiced.workers.pool")) == []


def test_config_imports_nothing_above_it(graph):
    assert sorted(f"{m} -> {t}" for m, targets in graph.items() if stage(m) == "config"
                  for t in targets if stage(t) not in ("config", "errors")) == []


# Inside tts/, the order text takes: the front end, the voice as an engine, streaming
# synthesis, the engine that ties them, the CLI on top; errors and requests below them all.
TTS_LAYER = {"errors": 0, "request": 0, "frontend": 1, "voice": 2, "streaming": 3,
             "engine": 4, "cli": 5}


def tts_part(module: str) -> str:
    return module.split(".")[2] if module.count(".") >= 2 else ""


def test_tts_imports_follow_the_path_text_takes(graph):
    tts = {m: t for m, t in graph.items() if m.startswith("cosyvoiced.tts.")}
    assert sorted(m for m in tts if tts_part(m) not in TTS_LAYER) == []
    assert sorted(f"{m} -> {t}" for m, targets in tts.items() for t in targets
                  if t.startswith("cosyvoiced.tts.")
                  and TTS_LAYER[tts_part(t)] > TTS_LAYER[tts_part(m)]) == []
