"""Linux CPU lists ("2-15", "0,2,4-7"): parsing and the kernel's own notation.

In config because the loader checks `workers.cpus` (and the thread budget it gives)
before anything starts; the worker pool reads the same list with the same parser.
"""

from __future__ import annotations

from cosyvoiced.errors import CosyvoicedError


class CpuListError(CosyvoicedError):
    """A malformed CPU list."""

    code = "bad_cpus"


def parse_cpu_list(text: str) -> tuple[int, ...]:
    """Sorted CPU numbers of a Linux CPU list ("2-15", "0,2,4-7"); "" gives ()."""
    cpus: set[int] = set()
    for part in text.replace(" ", "").split(","):
        if not part:
            continue
        lo, sep, hi = part.partition("-")
        try:
            first = int(lo)
            last = int(hi) if sep else first
        except ValueError:
            raise CpuListError(f"bad CPU list {text!r}: {part!r} is not N or N-M") from None
        if first < 0 or last < first:
            raise CpuListError(f"bad CPU list {text!r}: {part!r} is not an ascending range")
        cpus.update(range(first, last + 1))
    return tuple(sorted(cpus))


def format_cpu_list(cpus: tuple[int, ...] | list[int] | set[int]) -> str:
    """The kernel's own notation (as in /proc/PID/status Cpus_allowed_list): "0-3,6"."""
    out: list[str] = []
    items = sorted(cpus)
    i = 0
    while i < len(items):
        j = i
        while j + 1 < len(items) and items[j + 1] == items[j] + 1:
            j += 1
        out.append(str(items[i]) if i == j else f"{items[i]}-{items[j]}")
        i = j + 1
    return ",".join(out)
