"""A worker's heap: fixed glibc thresholds (`cap_heap`), and freed memory given back to
the kernel (`malloc_trim`). glibc only; standard library only.

glibc keeps what its arenas freed, so without a trim a worker stays at the memory of its
busiest moment; the loop calls `malloc_trim` every `TRIM_EVERY_S` and when its last TTS
stream is done. Under load a worker is never out of streams, and glibc's own thresholds
move: each time a block it had mapped on its own is freed (OpenVINO's activation buffers,
handed back at every trim), the mmap threshold rises to that block's size (up to 32 MB)
and the trim threshold to twice that. From then on every buffer below it (a sentence's
latent, the flow's and the front's outputs, audio chunks) comes from the heap, and up to
64 MB freed at its top stays resident: a busy worker's heap grew with the streams it
interleaves (measured: 1.8 MB per added stream in one process stepping 4 then 16
syntheses in turn, 0.5 MB with the thresholds fixed). `cap_heap` fixes both before the
worker (or the worker template it is forked from) loads anything.
"""

from __future__ import annotations

import ctypes
from typing import Any

M_TRIM_THRESHOLD = -1
M_MMAP_THRESHOLD = -3
"""mallopt's parameter numbers (glibc's malloc.h)."""
MMAP_THRESHOLD_BYTES = 1 << 20
"""Blocks from 1 MB up are mapped on their own and unmapped when freed: a run's large
buffers never stay in the heap (a 1 s audio chunk, 88 KB, and a sentence's latent,
~0.1 MB per second of speech, stay below it)."""
TRIM_THRESHOLD_BYTES = 8 << 20
"""Freed memory at the heap's top beyond this goes back to the kernel at once."""

_LIBC: Any = None


def _libc() -> Any:
    global _LIBC
    if _LIBC is None:
        try:
            lib = ctypes.CDLL(None)
            _LIBC = lib if hasattr(lib, "malloc_trim") and hasattr(lib, "mallopt") else False
        except OSError:
            _LIBC = False
    return _LIBC


def cap_heap(mmap_bytes: int = MMAP_THRESHOLD_BYTES,
             trim_bytes: int = TRIM_THRESHOLD_BYTES) -> bool:
    """Fix glibc's mmap and trim thresholds for this process (and the processes it forks
    from now on): setting them turns off glibc's raising them as large blocks are freed.
    False where there is no glibc, or it refused a value."""
    libc = _libc()
    if libc is False:
        return False
    return bool(libc.mallopt(M_MMAP_THRESHOLD, mmap_bytes)) \
        and bool(libc.mallopt(M_TRIM_THRESHOLD, trim_bytes))


def malloc_trim() -> bool:
    """Hand the heap memory glibc holds freed (in every thread's arena) back to the kernel;
    False where there is no glibc."""
    libc = _libc()
    if libc is False:
        return False
    libc.malloc_trim(0)
    return True
