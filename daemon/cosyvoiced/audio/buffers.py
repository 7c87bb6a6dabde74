"""Sample buffers of the listening path: a FIFO of samples awaiting VAD, and a history
of the most recent samples.

Both are preallocated float32 arrays; `SampleFifo` compacts in place (and grows only if
its owner stops draining it), `SampleHistory` keeps the last `capacity` samples (a
circular buffer) addressed by absolute sample index. Not to be confused with
`audio.ring.Ring`, the shared-memory ring between processes.
"""

from __future__ import annotations

import numpy as np

__all__ = ["SampleFifo", "SampleHistory"]


class SampleFifo:
    """Sample FIFO with a preallocated buffer (compacted when the end is reached)."""

    def __init__(self, capacity: int) -> None:
        self.buf = np.zeros(capacity, dtype=np.float32)
        self.r = 0
        self.w = 0

    def __len__(self) -> int:
        return self.w - self.r

    def push(self, x: np.ndarray) -> None:
        self.reserve(x.shape[0])[:] = x

    def reserve(self, n: int) -> np.ndarray:
        """Append `n` samples to be written by the caller: the view to write them into."""
        if self.w + n > self.buf.shape[0]:
            keep = self.w - self.r
            if keep + n > self.buf.shape[0]:
                grown = np.zeros(2 * (keep + n), dtype=np.float32)
                grown[:keep] = self.buf[self.r: self.w]
                self.buf = grown
            else:
                self.buf[:keep] = self.buf[self.r: self.w]
            self.r, self.w = 0, keep
        self.w += n
        return self.buf[self.w - n: self.w]


class SampleHistory:
    """The last `capacity` samples at 16 kHz, addressed by absolute sample index."""

    def __init__(self, capacity: int) -> None:
        self.buf = np.zeros(capacity, dtype=np.float32)
        self.count = 0

    def push(self, x: np.ndarray) -> None:
        cap = self.buf.shape[0]
        if x.shape[0] > cap:
            self.count += x.shape[0] - cap
            x = x[-cap:]
        a = self.count % cap
        n = x.shape[0]
        first = min(n, cap - a)
        self.buf[a: a + first] = x[:first]
        self.buf[: n - first] = x[first:]
        self.count += n

    def read(self, start: int) -> np.ndarray:
        """Samples from absolute index `start` (clipped to what is held) to now (a copy)."""
        cap = self.buf.shape[0]
        start = max(start, self.count - cap, 0)
        if start >= self.count:
            return np.zeros(0, dtype=np.float32)
        idx = np.arange(start, self.count) % cap
        return self.buf[idx]
