"""Count numpy array-data allocation calls (not live bytes) while a block runs.

numpy (>= 1.22) routes every array-data allocation through a replaceable handler
(`PyDataMem_SetHandler`, NEP 49). `counting()` installs one that forwards to libc and
counts each malloc/calloc/realloc, so temporaries freed within the block are counted too
(tracemalloc snapshots only show what is still alive). The handler is a context variable:
it applies to the calling thread's context only, and is restored on exit. Arrays created
inside the block keep the handler for their free, so its callbacks are kept alive forever.
"""

from __future__ import annotations

import ctypes
from collections.abc import Iterator
from contextlib import contextmanager

import numpy as np

_MALLOC = ctypes.CFUNCTYPE(ctypes.c_void_p, ctypes.c_void_p, ctypes.c_size_t)
_CALLOC = ctypes.CFUNCTYPE(ctypes.c_void_p, ctypes.c_void_p, ctypes.c_size_t, ctypes.c_size_t)
_REALLOC = ctypes.CFUNCTYPE(ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_size_t)
_FREE = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_size_t)


class _Allocator(ctypes.Structure):
    _fields_ = [("ctx", ctypes.c_void_p), ("malloc", _MALLOC), ("calloc", _CALLOC),
                ("realloc", _REALLOC), ("free", _FREE)]


class _Handler(ctypes.Structure):
    _fields_ = [("name", ctypes.c_char * 127), ("version", ctypes.c_uint8),
                ("allocator", _Allocator)]


class _State:
    def __init__(self) -> None:
        libc = ctypes.CDLL(None)
        self.malloc = libc.malloc
        self.malloc.restype, self.malloc.argtypes = ctypes.c_void_p, [ctypes.c_size_t]
        self.calloc = libc.calloc
        self.calloc.restype = ctypes.c_void_p
        self.calloc.argtypes = [ctypes.c_size_t, ctypes.c_size_t]
        self.realloc = libc.realloc
        self.realloc.restype = ctypes.c_void_p
        self.realloc.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
        self.free = libc.free
        self.free.argtypes = [ctypes.c_void_p]
        self.count = 0
        self.bytes = 0
        self.callbacks = (_MALLOC(self._m), _CALLOC(self._c), _REALLOC(self._r), _FREE(self._f))
        self.handler = _Handler(b"cosyvoiced_counting", 1, _Allocator(None, *self.callbacks))
        api = np._core._multiarray_umath._ARRAY_API
        get_ptr = ctypes.pythonapi.PyCapsule_GetPointer
        get_ptr.restype, get_ptr.argtypes = ctypes.c_void_p, [ctypes.py_object, ctypes.c_char_p]
        table = (ctypes.c_void_p * 310).from_address(get_ptr(api, None))
        self.set_handler = ctypes.PYFUNCTYPE(ctypes.py_object, ctypes.py_object)(table[304])
        new = ctypes.pythonapi.PyCapsule_New
        new.restype = ctypes.py_object
        new.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_void_p]
        self.capsule = new(ctypes.addressof(self.handler), b"mem_handler", None)

    def _m(self, ctx: int, size: int) -> int:
        self.count += 1
        self.bytes += size
        return self.malloc(size)

    def _c(self, ctx: int, n: int, size: int) -> int:
        self.count += 1
        self.bytes += n * size
        return self.calloc(n, size)

    def _r(self, ctx: int, ptr: int, size: int) -> int:
        self.count += 1
        self.bytes += size
        return self.realloc(ptr, size)

    def _f(self, ctx: int, ptr: int, size: int) -> None:
        self.free(ptr)


_STATE: _State | None = None


class Counter:
    def __init__(self) -> None:
        self.calls = 0
        self.bytes = 0


@contextmanager
def counting() -> Iterator[Counter]:
    """`with counting() as c: ...` then `c.calls` numpy data allocations were made."""
    global _STATE
    if _STATE is None:
        _STATE = _State()
    state = _STATE
    result = Counter()
    start_calls, start_bytes = state.count, state.bytes
    previous = state.set_handler(state.capsule)
    try:
        yield result
    finally:
        state.set_handler(previous)
        result.calls = state.count - start_calls
        result.bytes = state.bytes - start_bytes
