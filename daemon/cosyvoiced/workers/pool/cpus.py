"""CPU lists ("2-15", "0,2,4-7") and how the inference CPUs are shared among workers.

Each worker gets its own contiguous share of the CPU list, at least `onnx_threads` CPUs,
so no two ONNX thread pools fight over a core.
"""

from __future__ import annotations

import os
from typing import Any

from cosyvoiced.workers.errors import CpuConfigError


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
            raise CpuConfigError(f"bad CPU list {text!r}: {part!r} is not N or N-M") from None
        if first < 0 or last < first:
            raise CpuConfigError(f"bad CPU list {text!r}: {part!r} is not an ascending range")
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


def inference_cpus(text: str, allowed: set[int] | None = None) -> tuple[int, ...]:
    """The configured CPUs, checked against this process's affinity (empty: all allowed)."""
    allowed = set(os.sched_getaffinity(0)) if allowed is None else allowed
    cpus = parse_cpu_list(text)
    if not cpus:
        return tuple(sorted(allowed))
    missing = sorted(set(cpus) - allowed)
    if missing:
        raise CpuConfigError(f"workers.cpus {text!r} names CPUs this process may not use: "
                             f"{format_cpu_list(missing)} (allowed: {format_cpu_list(allowed)})")
    return cpus


def check_threads(count: int, onnx_threads: int, ncpus: int) -> None:
    """Total ONNX threads (workers x threads) must not exceed the CPUs given."""
    if count * onnx_threads > ncpus:
        raise CpuConfigError(
            f"workers.count x workers.onnx_threads = {count} x {onnx_threads} = "
            f"{count * onnx_threads} ONNX threads, but workers.cpus gives only {ncpus} CPU(s)")


def share_cpus(cpus: tuple[int, ...], count: int, onnx_threads: int) -> list[tuple[int, ...]]:
    """Split `cpus` into `count` contiguous shares (the first ones get any remainder)."""
    check_threads(count, onnx_threads, len(cpus))
    base, extra = divmod(len(cpus), count)
    shares: list[tuple[int, ...]] = []
    start = 0
    for i in range(count):
        n = base + (1 if i < extra else 0)
        shares.append(cpus[start:start + n])
        start += n
    return shares


def config_problems(config: Any) -> list[tuple[str, str]]:
    """Cross-field checks of `[workers]` for the config loader: (dotted key, message).

    Only what the config itself says is checked here (a config written for a 16-core box
    stays valid on a laptop); whether the CPUs exist on this machine, and the thread
    budget when `cpus` is empty (all allowed CPUs), are checked when the pool starts.
    """
    w = config.workers
    try:
        cpus = parse_cpu_list(w.cpus)
    except CpuConfigError as exc:
        return [("workers.cpus", str(exc))]
    if cpus and w.count * w.onnx_threads > len(cpus):
        return [("workers.onnx_threads",
                 f"workers.count x workers.onnx_threads = {w.count} x {w.onnx_threads} = "
                 f"{w.count * w.onnx_threads} ONNX threads is more than the "
                 f"{len(cpus)} CPU(s) of workers.cpus ({w.cpus!r}); lower one of them "
                 f"or give more CPUs")]
    return []
