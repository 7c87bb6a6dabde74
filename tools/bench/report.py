"""What a benchmark suite returns: a table, free-form figures and targets."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any


@dataclass
class Target:
    name: str
    value: float
    goal: str
    """Human-readable goal, e.g. "<= 0.6" or ">= 1000"."""
    ok: bool


@dataclass
class Report:
    suite: str
    columns: list[str]
    rows: list[list[Any]] = field(default_factory=list)
    figures: dict[str, Any] = field(default_factory=dict)
    targets: list[Target] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    def target(self, name: str, value: float, goal: str, ok: bool) -> None:
        self.targets.append(Target(name, float(value), goal, bool(ok)))

    def to_json(self) -> dict[str, Any]:
        return {
            "suite": self.suite,
            "columns": self.columns,
            "rows": self.rows,
            "figures": self.figures,
            "notes": self.notes,
            "targets": [t.__dict__ for t in self.targets],
        }

    def render(self) -> str:
        def fmt(v: Any) -> str:
            return f"{v:.4g}" if isinstance(v, float) else str(v)

        cells = [self.columns] + [[fmt(v) for v in row] for row in self.rows]
        widths = [max(len(r[i]) for r in cells) for i in range(len(self.columns))]
        lines = [f"# {self.suite}"]
        for n, row in enumerate(cells):
            lines.append("  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)))
            if n == 0:
                lines.append("  ".join("-" * w for w in widths))
        lines += [f"note: {n}" for n in self.notes]
        lines.append("")
        lines += [f"{t.name}  {t.value:.4g}  {t.goal}  {'ok' if t.ok else 'FAIL'}"
                  for t in self.targets]
        return "\n".join(lines)


def cpu_flags() -> str:
    """The CPU's model name and its AMX / AVX512-BF16 flags (what the figures ran on), as
    `grep -o 'amx[a-z_0-9]*\\|avx512_bf16' /proc/cpuinfo | sort -u` lists them."""
    try:
        text = Path("/proc/cpuinfo").read_text()
    except OSError:
        return "unknown"
    model = re.search(r"^model name\s*:\s*(.+)$", text, re.M)
    flags = sorted(set(re.findall(r"\b(amx[a-z_0-9]*|avx512_bf16)\b", text)))
    return f"{model.group(1) if model else 'unknown'}; flags: {' '.join(flags) or 'none'}"
