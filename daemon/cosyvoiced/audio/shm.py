"""Names of the rings' shared-memory segments, and the sweep of those a dead daemon left.

A segment is named `cvr_<instance>_<pid>_<random>`: `instance` tells one daemon on this
box from another (a hash of its control socket path: stable across restarts, distinct
between instances), `pid` is the process that created it. The creator unlinks it when
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


def new_segment_name() -> str:
    """A fresh segment name owned by this process."""
    return f"{instance_prefix()}{os.getpid()}_{secrets.token_hex(6)}"


def owner_pid(name: str) -> int | None:
    """The creating pid in a segment name, None for a name not made by `new_segment_name`."""
    parts = name.split("_")
    if len(parts) != 4 or parts[0] != BASE or not parts[2].isdigit():
        return None
    return int(parts[2])


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # someone else's process: alive
    return True


def sweep_dead(tag: str | None = None, shm_dir: str = SHM_DIR) -> list[str]:
    """Unlink this instance's segments whose creating process is gone; their names."""
    prefix = instance_prefix(tag)
    swept = []
    try:
        names = os.listdir(shm_dir)
    except FileNotFoundError:
        return []
    for name in names:
        pid = owner_pid(name) if name.startswith(prefix) else None
        if pid is None or pid == os.getpid() or _alive(pid):
            continue
        try:
            os.unlink(os.path.join(shm_dir, name))
        except FileNotFoundError:
            continue  # gone meanwhile
        swept.append(name)
    return swept
