"""CPU lists ("2-15", "0,2,4-7"): the inference CPUs and the thread budget they give.

The list notation itself lives in `cosyvoiced.config.cpus` (the config checks read it
too); here it raises the pool's `CpuConfigError`. Which worker gets which of them is the
plan's (`placement`, on the CPU topology: `topology`).
"""

from __future__ import annotations

import os

from cosyvoiced.config.cpus import CpuListError, format_cpu_list
from cosyvoiced.config.cpus import parse_cpu_list as _parse_cpu_list
from cosyvoiced.workers.errors import CpuConfigError


def parse_cpu_list(text: str) -> tuple[int, ...]:
    """Sorted CPU numbers of a Linux CPU list ("2-15", "0,2,4-7"); "" gives ()."""
    try:
        return _parse_cpu_list(text)
    except CpuListError as exc:
        raise CpuConfigError(str(exc)) from None


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

