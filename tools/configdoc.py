#!/usr/bin/env python3
"""The config reference (Markdown) from the schema's field docs: `python -m tools.configdoc`.

docs/config.md holds this output between the `<!-- config-reference -->` markers
(`--write` puts it there; the hand-written text around them stays); a test fails when
the two differ, so the reference cannot drift from the schema.
"""

from __future__ import annotations

import ast
import dataclasses
import json
import sys
import typing
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
SCHEMA = [REPO / "daemon" / "cosyvoiced" / "config" / name
          for name in ("schema.py", "listeners.py")]
"""The modules whose dataclasses make up `Config`."""


def field_docs() -> dict[str, dict[str, str]]:
    """{class name: {field: doc}} from the strings right under each field."""
    out: dict[str, dict[str, str]] = {}
    for node in (n for path in SCHEMA for n in ast.parse(path.read_text()).body):
        if isinstance(node, ast.ClassDef):
            docs: dict[str, str] = {}
            body = node.body
            for a, b in zip(body, body[1:], strict=False):
                if (isinstance(a, ast.AnnAssign) and isinstance(a.target, ast.Name)
                        and isinstance(b, ast.Expr) and isinstance(b.value, ast.Constant)):
                    docs[a.target.id] = " ".join(str(b.value.value).split())
            out[node.name] = docs
    return out


def render() -> str:
    from cosyvoiced.config.schema import Config

    docs = field_docs()
    lines: list[str] = []
    for section in dataclasses.fields(Config):
        cls = type(getattr(Config(), section.name))
        lines += [f"### `[{section.name}]`", "", "| key | default | live | meaning |",
                  "|---|---|---|---|"]
        hints = typing.get_type_hints(cls)
        for f in dataclasses.fields(cls):
            default = f.default
            if typing.get_origin(hints[f.name]) is tuple and dataclasses.is_dataclass(
                    typing.get_args(hints[f.name])[0]):
                sub = typing.get_args(hints[f.name])[0]
                sub_docs = docs.get(sub.__name__, {})
                extra = "; ".join(f"`{g.name}` ({json.dumps(g.default)}): {sub_docs.get(g.name, '')}"
                                  for g in dataclasses.fields(sub))
                doc = f"{docs[cls.__name__].get(f.name, '')} Each: {extra}"
            elif dataclasses.is_dataclass(default):  # a table of named strings
                doc = docs[cls.__name__].get(f.name, "")
                default = {g.name: getattr(default, g.name) for g in dataclasses.fields(default)}
            else:
                doc = docs[cls.__name__].get(f.name, "")
            rng = ""
            lo, hi = f.metadata.get("min"), f.metadata.get("max")
            if lo is not None or hi is not None:
                rng = f" ({lo} to {hi})"
            live = "yes" if f.metadata.get("live") else "restart"
            shown = json.dumps(list(default) if isinstance(default, tuple) else default)
            lines.append(f"| `{f.name}` | `{shown}` | {live} | {doc}{rng} |")
        lines.append("")
    return "\n".join(lines).rstrip() + "\n"


def write_docs(path: Path = REPO / "docs" / "config.md") -> None:
    """Replace what is between the markers of `path` with `render()`."""
    text = path.read_text()
    begin, end = "<!-- config-reference -->\n", "<!-- /config-reference -->"
    head, rest = text.split(begin, 1)
    path.write_text(head + begin + render() + end + rest.split(end, 1)[1])


if __name__ == "__main__":
    if sys.argv[1:] == ["--write"]:
        write_docs()
    else:
        sys.stdout.write(render())
