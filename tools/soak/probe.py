"""What the soak reads of the daemon between and during its windows: the process tree's
memory and open files (/proc), its shared-memory rings (/dev/shm), the stream slots and
worker restarts (/v1/status), the call counters (/metrics), the log it writes (JSON
lines) and the systemd watchdog pings it sends (the soak plays systemd's part)."""

from __future__ import annotations

import json
import os
import socket
import threading
import time
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from cosyvoiced.audio import shm
from tools.bench.calls import Daemon
from tools.loadgen.stats import process_tree, pss_mb

WATCHDOG_USEC = 20_000_000
"""As the shipped unit's WatchdogSec=20s: the daemon pings every 10 s while healthy."""


def rss_mb(pids: list[int]) -> float:
    """Summed VmRSS of the processes, in MB (processes gone meanwhile count 0)."""
    total_kb = 0
    for pid in pids:
        try:
            for line in Path(f"/proc/{pid}/status").read_text().splitlines():
                if line.startswith("VmRSS:"):
                    total_kb += int(line.split()[1])
        except OSError:
            continue
    return total_kb / 1024.0


MODEL_CACHE = Path(__file__).resolve().parents[2] / "var" / "cache"
"""The daemon's `cache_dir` here. Its files are not counted as open descriptors: where
OpenVINO's own cache serves a graph (one without a key), it keeps each compiled model's
blob open (one per model per worker), so a worker that imported the blobs holds more than
one that compiled them on a cold cache. Bounded by the models, not by the load: not what
the fd target looks for."""


def open_fds(pids: list[int], skip: Path = MODEL_CACHE) -> int:
    """Open descriptors of `pids`, files under `skip` left out."""
    total = 0
    for pid in pids:
        try:
            names = os.listdir(f"/proc/{pid}/fd")
        except OSError:
            continue
        for fd in names:
            try:
                target = os.readlink(f"/proc/{pid}/fd/{fd}")
            except OSError:
                continue
            total += not target.startswith(f"{skip}/")
    return total


def shm_segments(control_socket: Path) -> int:
    """The daemon instance's ring segments in /dev/shm (`audio/shm.py` names them)."""
    prefix = shm.instance_prefix(shm.instance_tag(os.path.abspath(control_socket)))
    return sum(1 for n in os.listdir(shm.SHM_DIR) if n.startswith(prefix))


def status(http: str) -> dict[str, Any]:
    with urllib.request.urlopen(f"{http}/v1/status", timeout=30) as r:
        doc: dict[str, Any] = json.load(r)
    return doc


@dataclass(frozen=True)
class Snapshot:
    at_s: float
    rss_mb: float
    pss_mb: float
    fds: int
    shm: int
    slots: int
    restarts: int
    main_pid: int
    worker_pids: tuple[int, ...]
    counters: dict[str, float]
    """The daemon's call underruns, dropped frames and refusals so far (`/metrics`)."""


def snapshot(d: Daemon) -> Snapshot:
    st = status(d.http)
    pids = process_tree(d.proc.pid)
    workers = st["workers"] or {}
    return Snapshot(time.monotonic(), rss_mb(pids), pss_mb(pids), open_fds(pids),
                    shm_segments(d.tmp / "control.sock"), int(st["streams"]["active"]),
                    int(workers.get("restarts", 0)), int(st["pid"]),
                    tuple(w["pid"] for w in workers.get("workers", []) if w["pid"]),
                    d.counters())


def settle(http: str, timeout_s: float) -> bool:
    """Until no stream is open, every worker is up and the warm spare is ready (False:
    not within timeout_s)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        st = status(http)
        w = st["workers"] or {}
        if (st["streams"]["active"] == 0 and w.get("spare")
                and all(x["alive"] for x in w.get("workers", []))):
            return True
        time.sleep(0.5)
    return False


class LogTail:
    """The daemon's JSON log lines written since the last `read()`."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._offset = 0

    def read(self) -> list[dict[str, Any]]:
        with open(self.path, "rb") as f:
            f.seek(self._offset)
            data = f.read()
        end = data.rfind(b"\n") + 1  # a line being written stays for the next read
        self._offset += end
        out = []
        for line in data[:end].splitlines():
            try:
                out.append(json.loads(line))
            except ValueError:
                out.append({"event": "<raw>", "line": line.decode(errors="replace")})
        return out


@dataclass
class WatchdogPings:
    """The WATCHDOG=1 pings on the daemon's notify socket, as systemd would see them."""

    started_s: float = field(default_factory=time.monotonic)
    last_s: float = field(default_factory=time.monotonic)
    pings: int = 0
    max_gap_s: float = 0.0
    other: list[str] = field(default_factory=list)

    def gap_now_s(self) -> float:
        """The longest time without a ping so far, the current stretch included."""
        return max(self.max_gap_s, time.monotonic() - self.last_s)


class NotifyListener(threading.Thread):
    """Reads the notify socket the daemon was started with (after its READY=1)."""

    def __init__(self, sock: socket.socket) -> None:
        super().__init__(name="soak-notify", daemon=True)
        self.sock = sock
        self.pings = WatchdogPings()
        self._stop_event = threading.Event()

    def run(self) -> None:
        self.sock.settimeout(0.5)
        while not self._stop_event.is_set():
            try:
                data = self.sock.recv(4096).decode(errors="replace")
            except TimeoutError:
                continue
            except OSError:
                return
            now = time.monotonic()
            for line in data.splitlines():
                if line == "WATCHDOG=1":
                    p = self.pings
                    p.max_gap_s = max(p.max_gap_s, now - p.last_s)
                    p.last_s = now
                    p.pings += 1
                elif not line.startswith("STATUS="):
                    self.pings.other.append(line)

    def stop(self) -> None:
        self._stop_event.set()
        self.join(5)
