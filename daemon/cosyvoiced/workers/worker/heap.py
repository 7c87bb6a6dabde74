"""Giving a worker's freed heap back to the kernel (`malloc_trim`, glibc only).

glibc keeps what its per-thread arenas freed, so without a trim a worker stays at the
memory of its busiest moment; the loop calls this every `TRIM_EVERY_S`. Standard library
only.
"""

from __future__ import annotations

import ctypes
from typing import Any

_LIBC: Any = None


def malloc_trim() -> bool:
    """Hand the heap memory glibc holds freed (in every thread's arena) back to the kernel;
    False where there is no glibc."""
    global _LIBC
    if _LIBC is None:
        try:
            _LIBC = ctypes.CDLL(None).malloc_trim
        except (OSError, AttributeError):
            _LIBC = False
    if _LIBC is False:
        return False
    _LIBC(0)
    return True
