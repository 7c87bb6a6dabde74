"""Single-producer/single-consumer ring of audio frames in POSIX shared memory.

One ring per stream and direction. Any process can attach to it by name; exactly one
thread/process writes (the producer) and exactly one reads (the consumer).

Layout (all little-endian uint64 header words, 64-byte cache lines):

* line 0, immutable: magic, layout version, capacity (frames), channels, dtype code,
  policy, data offset.
* line 1, written by the producer only: write counter, overruns, dropped frames,
  `playing` flag, flush point (the write counter at the last flush request).
* line 2, written by the consumer only: read counter, underruns, underrun frames,
  flushes honoured.
* data from byte 256: `capacity` frames of `channels` samples (float32 or int16).

The write and read counters only grow (64 bits: centuries at any audio rate). Fill is
`write - read`; the slot of frame `i` is `i & (capacity - 1)` (capacity is a power of
two), so a copy is at most two slices and allocates no data buffer.

Overflow policy, per direction:
* ``"drop"`` (capture): a period that does not fit entirely is dropped and counted as
  an overrun; the producer never touches the read counter.
* ``"refuse"`` (playback): `write` copies only what fits and returns that count; the
  producer keeps the rest and retries (`room()` tells how much fits). Nothing is lost.

An underrun is a `read_into` that comes up short while the producer has set
`playing` (a stream is expected to play); an idle ring reading empty is not one.

Memory ordering. The producer copies samples, then stores the write counter; the
consumer loads the write counter, then copies samples out, then stores the read counter.
This is correct on x86-64 as written: TSO keeps stores in program order and loads in
program order, never moves a load after a later store, and aligned 8-byte stores are
atomic (no torn counters). The copies and counter stores are separate calls into C,
which the compiler cannot reorder. On weakly ordered CPUs (ARM64, POWER, RISC-V) the
counter store must be a store-release (e.g. `stlr`, C11 `atomic_store_explicit(...,
memory_order_release)`) and the counter load a load-acquire (`ldar`,
`memory_order_acquire`) — or full fences (`dmb ish`) around them — which pure Python
cannot express: a port needs a tiny C helper for the two counter accesses.
"""

from __future__ import annotations

import ctypes
import mmap
import os
import weakref
from dataclasses import dataclass
from multiprocessing import resource_tracker
from typing import Literal

import numpy as np
import numpy.typing as npt

from cosyvoiced.audio.shm import new_segment_name
from cosyvoiced.errors import CosyvoicedError
from cosyvoiced.runtime.numa import prefer_node

__all__ = ["Ring", "RingError", "RingStats", "Policy"]

Policy = Literal["drop", "refuse"]

_MAGIC = 0x636F737972696E67  # "cosyring"
_VERSION = 1
_LINE_WORDS = 8  # 64-byte cache line / 8-byte words
_DATA_OFFSET = 256
_DTYPES: dict[int, np.dtype] = {1: np.dtype(np.float32), 2: np.dtype(np.int16)}
_DTYPE_CODES = {v: k for k, v in _DTYPES.items()}
_POLICIES: dict[int, Policy] = {0: "drop", 1: "refuse"}
_POLICY_CODES = {v: k for k, v in _POLICIES.items()}

# Header word indices.
_H_MAGIC, _H_VERSION, _H_CAPACITY, _H_CHANNELS, _H_DTYPE, _H_POLICY, _H_DATA = range(7)
_P = _LINE_WORDS  # producer line
_W, _OVERRUNS, _DROPPED, _PLAYING, _FLUSH_AT = _P, _P + 1, _P + 2, _P + 3, _P + 4
_C = 2 * _LINE_WORDS  # consumer line
_R, _UNDERRUNS, _UNDER_FRAMES, _FLUSH_DONE = _C, _C + 1, _C + 2, _C + 3


class RingError(CosyvoicedError, ValueError):
    """Misuse of a ring: bad shape/dtype, bad name, wrong layout."""

    code = "ring_error"


@dataclass(frozen=True)
class RingStats:
    """A snapshot of a ring's counters (readable from either side)."""

    written_frames: int
    read_frames: int
    fill_frames: int
    capacity_frames: int
    overruns: int
    """Capture periods dropped because the ring was full."""
    dropped_frames: int
    underruns: int
    """Short reads while a stream was expected to play."""
    underrun_frames: int


def _pow2_at_least(n: int) -> int:
    return 1 << max(0, (n - 1).bit_length())


# Python's mmap.mmap keeps a dup of the file descriptor for the life of the mapping
# (`trackfd=False` only arrives in 3.13), and SharedMemory keeps its own fd too: 3 fds
# per created ring, 1 per attached one. A mapping needs no fd, so map with libc directly
# and close the fd at once. The segment is named in /dev/shm, so unlinking and attaching
# by name need no fd either.
_libc = ctypes.CDLL(None, use_errno=True)
_libc.mmap.restype = ctypes.c_void_p
_libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int,
                       ctypes.c_int, ctypes.c_long]
_libc.munmap.restype = ctypes.c_int
_libc.munmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
_MAP_FAILED = ctypes.c_void_p(-1).value


def _shm_path(name: str) -> str:
    return f"/dev/shm/{name.lstrip('/')}"


def _map_fd(fd: int, size: int) -> ctypes.Array[ctypes.c_ubyte]:
    """Map `size` bytes of `fd` shared; the caller may close `fd` right after.

    The mapping is unmapped when the returned array is garbage collected, i.e. once no
    memoryview or numpy view of it is left (so no live view can outlast the mapping)."""
    addr = _libc.mmap(None, size, mmap.PROT_READ | mmap.PROT_WRITE, mmap.MAP_SHARED, fd, 0)
    if addr is None or addr == _MAP_FAILED:
        err = ctypes.get_errno()
        raise OSError(err, f"mmap: {os.strerror(err)}")
    arr = (ctypes.c_ubyte * size).from_address(addr)
    weakref.finalize(arr, _libc.munmap, addr, size)
    return arr


class Ring:
    """SPSC ring; build with `Ring.create(...)` or `Ring.attach(name)`."""

    def __init__(self, mapping: ctypes.Array[ctypes.c_ubyte], name: str, created: bool) -> None:
        self._mapping: ctypes.Array[ctypes.c_ubyte] | None = mapping
        self._buf = memoryview(mapping).cast("B")
        self._created = created
        self.name = name
        self._h = self._buf[:_DATA_OFFSET].cast("Q")
        if self._h[_H_MAGIC] != _MAGIC or self._h[_H_VERSION] != _VERSION:
            self._release()
            raise RingError(f"shared memory {name!r} is not a cosyvoiced ring")
        self.capacity_frames: int = self._h[_H_CAPACITY]
        self.channels: int = self._h[_H_CHANNELS]
        self.dtype: np.dtype = _DTYPES[self._h[_H_DTYPE]]
        self.policy: Policy = _POLICIES[self._h[_H_POLICY]]
        self._mask = self.capacity_frames - 1
        shape = (self.capacity_frames,) if self.channels == 1 else (
            self.capacity_frames, self.channels)
        nbytes = self.capacity_frames * self.channels * self.dtype.itemsize
        self._data: np.ndarray = np.frombuffer(
            self._buf, dtype=self.dtype, count=nbytes // self.dtype.itemsize,
            offset=_DATA_OFFSET).reshape(shape)
        self._ndim = len(shape)
        self._drop = self.policy == "drop"

    # -- construction --------------------------------------------------------------------

    @classmethod
    def create(cls, capacity_frames: int, *, channels: int = 1,
               dtype: npt.DTypeLike = np.float32, policy: Policy = "drop",
               name: str | None = None) -> Ring:
        """New ring of at least `capacity_frames` frames (rounded up to a power of two).

        The creator owns the segment: call `unlink()` when the stream ends (the
        multiprocessing resource tracker removes it if the creator dies first).
        """
        dt = np.dtype(dtype)
        if dt not in _DTYPE_CODES:
            raise RingError(f"ring dtype must be float32 or int16, got {dt}")
        if policy not in _POLICY_CODES:
            raise RingError(f"ring policy must be 'drop' or 'refuse', got {policy!r}")
        if capacity_frames < 1 or channels < 1:
            raise RingError("ring capacity and channels must be >= 1")
        cap = _pow2_at_least(capacity_frames)
        size = _DATA_OFFSET + cap * channels * dt.itemsize
        while True:
            seg = name.lstrip("/") if name else new_segment_name()
            try:
                fd = os.open(_shm_path(seg), os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o600)
            except FileExistsError:
                if name:
                    raise
                continue
            break
        try:
            os.ftruncate(fd, size)
            mapping = _map_fd(fd, size)
        except BaseException:
            os.unlink(_shm_path(seg))
            raise
        finally:
            os.close(fd)
        # The same tracker entry SharedMemory makes: the segment goes if the creator dies.
        resource_tracker.register(f"/{seg}", "shared_memory")
        h = memoryview(mapping).cast("B")[:_DATA_OFFSET].cast("Q")
        h[_H_CAPACITY], h[_H_CHANNELS] = cap, channels
        h[_H_DTYPE], h[_H_POLICY] = _DTYPE_CODES[dt], _POLICY_CODES[policy]
        h[_H_DATA], h[_H_VERSION] = _DATA_OFFSET, _VERSION
        h[_H_MAGIC] = _MAGIC  # last: a reader seeing the magic sees the rest
        h.release()
        return cls(mapping, seg, True)

    @classmethod
    def attach(cls, name: str) -> Ring:
        """Map an existing ring by name (from any process; Linux /dev/shm).

        Attaching does not register with the resource tracker, which would unlink the
        creator's segment when this process exits. No fd stays open once mapped.
        """
        try:
            fd = os.open(_shm_path(name), os.O_RDWR)
        except FileNotFoundError:
            raise RingError(f"no ring named {name!r}") from None
        try:
            size = os.fstat(fd).st_size
            if size < _DATA_OFFSET:
                raise RingError(f"shared memory {name!r} is not a cosyvoiced ring")
            mapping = _map_fd(fd, size)
        finally:
            os.close(fd)
        return cls(mapping, name.lstrip("/"), False)

    # -- producer side -------------------------------------------------------------------

    def room(self) -> int:
        """Frames the producer can write now."""
        h = self._h
        return self.capacity_frames - (h[_W] - h[_R])

    def write(self, samples: np.ndarray) -> int:
        """Copy `samples` (shape (n,) mono or (n, channels)) in; returns frames accepted.

        "drop" policy: n, or 0 if the whole period does not fit (an overrun is counted).
        "refuse" policy: min(n, room()); the producer keeps the rest.
        """
        if samples.dtype != self.dtype or samples.ndim != self._ndim:
            raise RingError(f"ring {self.name} takes {self.dtype} frames of {self.channels} "
                            f"channel(s), got {samples.dtype} {samples.shape}")
        h = self._h
        w = h[_W]
        n = samples.shape[0]
        room = self.capacity_frames - (w - h[_R])
        if n > room:
            if self._drop:
                h[_OVERRUNS] += 1
                h[_DROPPED] += n
                return 0
            n = room
        if n == 0:
            return 0
        i = w & self._mask
        first = self.capacity_frames - i
        data = self._data
        if n <= first:
            data[i:i + n] = samples[:n]
        else:
            data[i:] = samples[:first]
            data[:n - first] = samples[first:n]
        h[_W] = w + n  # publish after the copy (store order: see module doc)
        return n

    def set_playing(self, playing: bool) -> None:
        """Producer: a stream is (not) expected to play; short reads count only while set."""
        self._h[_PLAYING] = 1 if playing else 0

    def request_flush(self) -> None:
        """Producer: ask the consumer to discard everything written so far (barge-in).

        Only what was written before the request is discarded: the flush point is the
        write counter now, so audio written after it (the next utterance) survives."""
        self._h[_FLUSH_AT] = self._h[_W]

    # -- consumer side -------------------------------------------------------------------

    def available(self) -> int:
        """Frames the consumer can read now (the fill level)."""
        h = self._h
        return h[_W] - h[_R]

    def read_into(self, out: np.ndarray) -> int:
        """Copy up to len(out) frames into `out`; returns frames copied.

        The rest of `out` is left untouched (a playback thread fills it with silence).
        """
        h = self._h
        r = h[_R]
        flush_at = h[_FLUSH_AT]
        if flush_at > r:
            h[_FLUSH_DONE] += 1
            r = flush_at
            h[_R] = r
        want = out.shape[0]
        n = h[_W] - r
        if n < want:
            if h[_PLAYING]:
                h[_UNDERRUNS] += 1
                h[_UNDER_FRAMES] += want - n
            if n == 0:
                return 0
        else:
            n = want
        i = r & self._mask
        first = self.capacity_frames - i
        data = self._data
        if n <= first:
            out[:n] = data[i:i + n]
        else:
            out[:first] = data[i:]
            out[first:n] = data[:n - first]
        h[_R] = r + n  # release the slots after the copy
        return n

    # -- either side ---------------------------------------------------------------------

    def stats(self) -> RingStats:
        h = self._h
        w, r = h[_W], h[_R]
        return RingStats(written_frames=w, read_frames=r, fill_frames=w - r,
                         capacity_frames=self.capacity_frames, overruns=h[_OVERRUNS],
                         dropped_frames=h[_DROPPED], underruns=h[_UNDERRUNS],
                         underrun_frames=h[_UNDER_FRAMES])

    @property
    def playing(self) -> bool:
        return bool(self._h[_PLAYING])

    def prefer_node(self, node: int) -> None:
        """Have this ring's pages not yet touched come from NUMA node `node` (its
        worker's): call before samples flow (OSError where the kernel refuses)."""
        if self._mapping is None:
            raise RingError(f"ring {self.name} is closed")
        prefer_node(ctypes.addressof(self._mapping), ctypes.sizeof(self._mapping), node)

    def _release(self) -> None:
        self._h.release()
        self._buf.release()

    def close(self) -> None:
        """Unmap this process's view (the segment lives on until unlinked)."""
        if self._mapping is None:
            return
        self._data = np.empty(0, dtype=self.dtype)
        self._release()  # BufferError if a view of the data is still exported
        self._mapping = None  # last reference: the finalizer unmaps now

    def unlink(self) -> None:
        """Creator: remove the segment name (mapped views stay valid until closed)."""
        if not self._created:
            raise RingError(f"ring {self.name} was attached, not created: only its creator "
                            "unlinks it")
        os.unlink(_shm_path(self.name))
        resource_tracker.unregister(f"/{self.name}", "shared_memory")

    def __enter__(self) -> Ring:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
