"""The 20 ms call clock: one thread for all calls, sending on absolute deadlines.

It runs apart from the event loop (and asks SCHED_FIFO for itself only), so a busy loop
or inference processes on the same cores do not delay the frames Asterisk plays. Each
tick it asks every call for one frame; a call sends it straight to its socket. The event
loop only swaps the tuple of calls (no lock: a reference swap is atomic under the GIL).
"""

from __future__ import annotations

import asyncio
import socket
import threading
import time
from typing import Protocol

import structlog

from cosyvoiced.runtime.metrics import Metrics
from cosyvoiced.runtime.rtprio import ask_fifo

log = structlog.get_logger(__name__)

TICK_S = 0.02
"""The call clock's period: one frame per call per tick, whatever its rate."""


class Ticking(Protocol):
    def tick(self) -> None:
        """Send this tick's frame, if any; on the clock thread; must not block."""


class CallClock:
    def __init__(self, tick_s: float, metrics: Metrics, rt_priority: int) -> None:
        self.tick_s = tick_s
        self.metrics = metrics
        self.rt_priority = rt_priority
        self.calls: tuple[Ticking, ...] = ()
        self.ticks = 0
        self.late_ticks = 0
        """Ticks that came more than a whole tick late (the clock then resyncs)."""
        self.last_tick_s = time.monotonic()
        """Progress stamp (a health probe)."""
        self.realtime = False
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="audiosocket-clock",
                                        daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(5.0)

    def add(self, call: Ticking) -> None:
        self.calls = (*self.calls, call)

    def remove(self, call: Ticking) -> None:
        self.calls = tuple(c for c in self.calls if c is not call)

    def _run(self) -> None:
        self.realtime = ask_fifo(self.rt_priority, "audiosocket-clock")
        late = self.metrics.tick_late
        next_t = time.monotonic()
        while not self._stop.is_set():
            next_t += self.tick_s
            delay = next_t - time.monotonic()
            if delay > 0:
                time.sleep(delay)
            elif delay < -self.tick_s:  # stalled: resync rather than burst
                self.late_ticks += 1
                next_t = time.monotonic()
            now = time.monotonic()
            late.observe(max(0.0, now - next_t))
            self.last_tick_s = now
            for call in self.calls:
                try:
                    call.tick()
                except Exception:  # a broken call must not stop the others' clock
                    log.exception("call_tick_failed")
            self.ticks += 1


def clock_socket(writer: asyncio.StreamWriter, sndbuf_bytes: int) -> socket.socket | None:
    """The clock's own handle on a call's socket: a dup, so the event loop closing its end
    never leaves the clock writing to a reused descriptor. The kernel's send buffer is the
    slow-peer limit (Linux doubles the value asked for). None: the connection is already
    gone (the reader sees that and ends the call)."""
    transport_sock = writer.get_extra_info("socket")
    if transport_sock is None or transport_sock.fileno() < 0:
        return None
    try:
        sock = socket.socket(fileno=socket.dup(transport_sock.fileno()))
    except OSError:
        return None
    sock.setblocking(False)
    set_send_buffer(sock, sndbuf_bytes)
    return sock


def set_send_buffer(sock: socket.socket, sndbuf_bytes: int) -> None:
    """The kernel's send buffer of a call's socket: `sndbuf_bytes` (Linux doubles the value
    asked for)."""
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, max(1, sndbuf_bytes // 2))
