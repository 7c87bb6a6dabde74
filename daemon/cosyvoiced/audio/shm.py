"""Names of the rings' shared-memory segments, and the sweep of those a dead daemon left.

A segment is named `cvr_<instance>_<pid>.<start>_<random>`: `instance` tells one daemon
on this box from another (a hash of its control socket path: stable across restarts,
distinct between instances), `pid` and `start` (its start time in clock ticks since boot,
/proc/PID/stat field 22) the process that created it: a pid reused by another process,
or a daemon that is PID 1 of its container again, is not mistaken for the creator. The creator unlinks it when
its stream ends, and multiprocessing's resource tracker does if the creator dies alone;
a kill of the whole cgroup (systemd's SIGKILL after a stop timeout, the OOM killer) takes
the tracker too and leaves the segments in /dev/shm. At start the daemon removes the
segments of its own instance whose creator is no longer running (`sweep_dead`).
"""

from __future__ import annotations

import hashlib
import os
import secrets

SHM_DIR = "/dev/shm"
BASE = "cvr"

_instance = "0"


def instance_tag(key: str) -> str:
    """A short tag for one daemon instance (e.g. from its control socket path)."""
    return hashlib.sha256(key.encode()).hexdigest()[:8]


def set_instance(tag: str) -> None:
    """Name this process's new segments after instance `tag` (once, at start)."""
    global _instance
    if not tag.isalnum():
        raise ValueError(f"instance tag must be alphanumeric, got {tag!r}")
    _instance = tag


def instance_prefix(tag: str | None = None) -> str:
    return f"{BASE}_{_instance if tag is None else tag}_"


def _start_ticks(pid: int | str) -> int | None:
    """Process `pid`'s start time (clock ticks since boot); None if it is not running."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            stat = f.read()
    except OSError:
        return None
    # the command name (field 2) may hold spaces and parentheses: count after the last ")"
    return int(stat[stat.rindex(b")") + 2:].split()[19])


_own: str | None = None


def new_segment_name() -> str:
    """A fresh segment name owned by this process."""
    global _own
    pid = os.getpid()
    if _own is None or not _own.startswith(f"{pid}."):  # once per process (a fork: again)
        _own = f"{pid}.{_start_ticks('self') or 0}"
    return f"{instance_prefix()}{_own}_{secrets.token_hex(6)}"


def owner(name: str) -> tuple[int, int] | None:
    """(pid, start ticks) of a segment's creator; None for a name `new_segment_name` did
    not make."""
    parts = name.split("_")
    if len(parts) != 4 or parts[0] != BASE:
        return None
    pid, _, start = parts[2].partition(".")
    if not (pid.isdigit() and start.isdigit()):
        return None
    return int(pid), int(start)


def _alive(pid: int, start: int) -> bool:
    return _start_ticks(pid) == start


def sweep_dead(tag: str | None = None, shm_dir: str = SHM_DIR) -> list[str]:
    """Unlink this instance's segments whose creating process is gone; their names."""
    prefix = instance_prefix(tag)
    swept = []
    try:
        names = os.listdir(shm_dir)
    except FileNotFoundError:
        return []
    for name in names:
        creator = owner(name) if name.startswith(prefix) else None
        if creator is None or _alive(*creator):
            continue
        try:
            os.unlink(os.path.join(shm_dir, name))
        except FileNotFoundError:
            continue  # gone meanwhile
        swept.append(name)
    return swept
