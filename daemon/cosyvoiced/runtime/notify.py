"""systemd notification (sd_notify) and the watchdog thread."""

from __future__ import annotations

import os
import threading
import time

import sdnotify
import structlog

from cosyvoiced.runtime.health import Health

log = structlog.get_logger(__name__)


def monotonic_usec() -> int:
    """CLOCK_MONOTONIC in microseconds, as systemd wants with RELOADING=1."""
    return time.clock_gettime_ns(time.CLOCK_MONOTONIC) // 1000


class Notifier:
    """Sends READY/STATUS/RELOADING/STOPPING/WATCHDOG; a no-op without NOTIFY_SOCKET.

    The socket is non-blocking: a notify socket nobody reads (a test harness, a stuck
    manager) must never freeze the event loop. A message that does not fit is dropped
    and counted; the first drop is logged."""

    def __init__(self) -> None:
        self.enabled = bool(os.environ.get("NOTIFY_SOCKET"))
        self.dropped = 0
        self._n: sdnotify.SystemdNotifier | None = None
        if self.enabled:
            try:
                self._n = sdnotify.SystemdNotifier(debug=True)
                self._n.socket.setblocking(False)
            except OSError as exc:
                log.error("notify_socket_unusable", error=str(exc),
                          socket=os.environ.get("NOTIFY_SOCKET"))
                self._n = None

    def send(self, *lines: str) -> None:
        if self._n is None:
            return
        try:
            self._n.notify("\n".join(lines))
        except OSError as exc:  # full (EAGAIN) or gone: drop, never block
            self.dropped += 1
            if self.dropped == 1:
                log.warning("notify_dropped", error=str(exc), message=lines[0])

    def ready(self, status: str) -> None:
        self.send("READY=1", f"STATUS={status}")

    def reloading(self) -> None:
        self.send("RELOADING=1", f"MONOTONIC_USEC={monotonic_usec()}")

    def stopping(self) -> None:
        self.send("STOPPING=1", "STATUS=stopping")

    def status(self, text: str) -> None:
        self.send(f"STATUS={text}")


def watchdog_interval_s() -> float | None:
    """Half of systemd's WATCHDOG_USEC, if the watchdog is on for this process."""
    usec = os.environ.get("WATCHDOG_USEC")
    pid = os.environ.get("WATCHDOG_PID")
    if not usec or (pid and pid != str(os.getpid())):
        return None
    try:
        return int(usec) / 2e6
    except ValueError:
        return None


class Watchdog(threading.Thread):
    """Pings WATCHDOG=1 every half interval while every registered part is healthy."""

    def __init__(self, notifier: Notifier, health: Health, interval_s: float) -> None:
        super().__init__(name="watchdog", daemon=True)
        self._notifier = notifier
        self._health = health
        self._interval_s = interval_s
        self._stop_event = threading.Event()
        self.unhealthy_since: float | None = None

    def run(self) -> None:
        while not self._stop_event.wait(self._interval_s):
            verdict = self._health.check()
            if verdict.healthy:
                if self.unhealthy_since is not None:
                    log.info("watchdog_recovered")
                    self.unhealthy_since = None
                self._notifier.send("WATCHDOG=1")
            elif self.unhealthy_since is None:
                self.unhealthy_since = time.monotonic()
                log.error("watchdog_withheld", stalled=list(verdict.stalled))

    def stop(self) -> None:
        self._stop_event.set()
