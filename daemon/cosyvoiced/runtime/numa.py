"""NUMA memory placement: asking the kernel to put a shared mapping's pages on a node.

A worker pinned to one node's cores allocates its own memory there by itself (Linux's
default policy is the node of the CPU that first touches a page, and a worker touches
its buffers only after it is pinned). A ring is mapped by the main process, though, and
its capture side is first written there, so the pool asks for the worker's node with
`mbind(MPOL_PREFERRED)` on the ring's mapping before any sample is written: on a shared
memory segment the policy belongs to the segment, so pages faulted in from either
process land on that node (preferred, not bound: a full node falls back to another).
A warm spare warms up on every inference CPU before it knows its slot: when it adopts
one, the pool moves its pages to the slot's node (`move_pages_to`, migrate_pages(2):
pages it shares with the template, the weights, stay where they are). Only the standard
library; the syscalls go through libc's `syscall`.
"""

from __future__ import annotations

import ctypes
import os
import platform

MPOL_PREFERRED = 1
"""linux/mempolicy.h"""
SYS_MBIND = {"x86_64": 237, "aarch64": 235}
"""mbind's syscall number per machine (glibc has no wrapper; libnuma is not required)."""
SYS_MIGRATE_PAGES = {"x86_64": 256, "aarch64": 238}

_libc = ctypes.CDLL(None, use_errno=True)
_libc.syscall.restype = ctypes.c_long


def node_mask(*nodes: int, span: int = 0) -> tuple[ctypes.Array[ctypes.c_ulong], int]:
    """The kernel's node mask selecting `nodes`, wide enough for node `span` too, and
    its `maxnode` argument."""
    if not nodes or min(nodes) < 0:
        raise ValueError(f"NUMA nodes must be given and >= 0, not {nodes}")
    bits = 8 * ctypes.sizeof(ctypes.c_ulong)
    mask = (ctypes.c_ulong * (max(*nodes, span) // bits + 1))()
    for node in nodes:
        mask[node // bits] |= 1 << (node % bits)
    return mask, len(mask) * bits + 1


def _number(table: dict[str, int], name: str) -> int:
    number = table.get(platform.machine())
    if number is None:
        raise OSError(0, f"{name}: no syscall number known for {platform.machine()}")
    return number


def prefer_node(address: int, length: int, node: int) -> None:
    """Have the pages of [address, address + length) (page aligned) come from `node`
    from now on (OSError where the kernel refuses, e.g. without NUMA support)."""
    number = _number(SYS_MBIND, "mbind")
    mask, maxnode = node_mask(node)
    rc = _libc.syscall(ctypes.c_long(number), ctypes.c_void_p(address),
                       ctypes.c_ulong(length), ctypes.c_int(MPOL_PREFERRED), mask,
                       ctypes.c_ulong(maxnode), ctypes.c_uint(0))
    if rc != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"mbind: {os.strerror(err)}")


def move_pages_to(pid: int, from_nodes: tuple[int, ...], node: int) -> int:
    """Move process `pid`'s pages on `from_nodes` to `node` (those it shares with other
    processes stay, without CAP_SYS_NICE); the pages that could not be moved (OSError
    where the kernel refuses)."""
    number = _number(SYS_MIGRATE_PAGES, "migrate_pages")
    span = max(*from_nodes, node)
    old, maxnode = node_mask(*from_nodes, span=span)
    new, _ = node_mask(node, span=span)
    rc = _libc.syscall(ctypes.c_long(number), ctypes.c_int(pid), ctypes.c_ulong(maxnode),
                       old, new)
    if rc < 0:
        err = ctypes.get_errno()
        raise OSError(err, f"migrate_pages: {os.strerror(err)}")
    return int(rc)
