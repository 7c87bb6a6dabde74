"""NUMA memory placement: asking the kernel to put a shared mapping's pages on a node.

A worker pinned to one node's cores allocates its own memory there by itself (Linux's
default policy is the node of the CPU that first touches a page, and a worker touches
its buffers only after it is pinned). A ring is mapped by the main process, though, and
its capture side is first written there, so the pool asks for the worker's node with
`mbind(MPOL_PREFERRED)` on the ring's mapping before any sample is written: on a shared
memory segment the policy belongs to the segment, so pages faulted in from either
process land on that node (preferred, not bound: a full node falls back to another).
Only the standard library; the syscall goes through libc's `syscall`.
"""

from __future__ import annotations

import ctypes
import os
import platform

MPOL_PREFERRED = 1
"""linux/mempolicy.h"""
SYS_MBIND = {"x86_64": 237, "aarch64": 235}
"""mbind's syscall number per machine (glibc has no wrapper; libnuma is not required)."""

_libc = ctypes.CDLL(None, use_errno=True)
_libc.syscall.restype = ctypes.c_long


def node_mask(node: int) -> tuple[ctypes.Array[ctypes.c_ulong], int]:
    """mbind's node mask selecting `node`, and its `maxnode` argument."""
    if node < 0:
        raise ValueError(f"NUMA node must be >= 0, not {node}")
    bits = 8 * ctypes.sizeof(ctypes.c_ulong)
    mask = (ctypes.c_ulong * (node // bits + 1))()
    mask[node // bits] = 1 << (node % bits)
    return mask, len(mask) * bits + 1


def prefer_node(address: int, length: int, node: int) -> None:
    """Have the pages of [address, address + length) (page aligned) come from `node`
    from now on (OSError where the kernel refuses, e.g. without NUMA support)."""
    number = SYS_MBIND.get(platform.machine())
    if number is None:
        raise OSError(0, f"mbind: no syscall number known for {platform.machine()}")
    mask, maxnode = node_mask(node)
    rc = _libc.syscall(ctypes.c_long(number), ctypes.c_void_p(address),
                       ctypes.c_ulong(length), ctypes.c_int(MPOL_PREFERRED), mask,
                       ctypes.c_ulong(maxnode), ctypes.c_uint(0))
    if rc != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"mbind: {os.strerror(err)}")
