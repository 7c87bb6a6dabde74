"""Ring segment names carry their daemon instance and creator; a restart sweeps the dead."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from cosyvoiced.audio import shm
from cosyvoiced.audio.ring import Ring


@pytest.fixture
def instance():
    tag = shm.instance_tag(f"test-{os.getpid()}")
    shm.set_instance(tag)
    yield tag
    shm.set_instance("0")
    for name in os.listdir(shm.SHM_DIR):
        if name.startswith(shm.instance_prefix(tag)):
            os.unlink(os.path.join(shm.SHM_DIR, name))


def test_a_ring_is_named_after_its_instance_and_creator(instance):
    ring = Ring.create(64)
    try:
        assert ring.name.startswith(shm.instance_prefix(instance))
        pid, start = shm.owner(ring.name)
        assert pid == os.getpid() and start > 0
    finally:
        ring.close()
        ring.unlink()


def test_sweep_removes_segments_of_dead_creators_of_this_instance_only(instance, tmp_path):
    # a child creates two rings and dies by SIGKILL: nothing of it removes them
    code = ("import os, signal, sys; from cosyvoiced.audio import shm; "
            "from cosyvoiced.audio.ring import Ring; from multiprocessing import resource_tracker;"
            f"shm.set_instance({instance!r}); rs = [Ring.create(64) for _ in range(2)];"
            "[resource_tracker.unregister('/' + r.name, 'shared_memory') for r in rs];"
            "print(' '.join(r.name for r in rs), flush=True); os.kill(os.getpid(), signal.SIGKILL)")
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    dead = res.stdout.split()
    assert len(dead) == 2 and all(os.path.exists(f"/dev/shm/{n}") for n in dead)
    mine = Ring.create(64)  # a live creator (this process): kept
    other = shm.instance_tag("another daemon")
    foreign = f"{shm.instance_prefix(other)}999999.1_abc"  # another instance's: not ours
    Path(f"/dev/shm/{foreign}").touch()
    try:
        swept = shm.sweep_dead()
        assert sorted(swept) == sorted(dead)
        assert not any(os.path.exists(f"/dev/shm/{n}") for n in dead)
        assert os.path.exists(f"/dev/shm/{mine.name}") and os.path.exists(f"/dev/shm/{foreign}")
        mine.write(np.zeros(8, np.float32))  # still usable
    finally:
        os.unlink(f"/dev/shm/{foreign}")
        mine.close()
        mine.unlink()


def test_owner_reads_only_names_it_made():
    assert shm.owner("cvr_0123abcd_42.977_00ff00ff00ff") == (42, 977)
    for name in ("cvr_abc", "psm_123", "cvr_x_y_z", "cvr_a_1_2_3", "cvr_a_12_ff"):
        assert shm.owner(name) is None, name
    with pytest.raises(ValueError):
        shm.set_instance("../x")


def test_a_reused_pid_is_not_taken_for_the_creator(instance):
    """A segment whose creator's pid now belongs to another process (here: this one, with
    another start time) is swept; this process's own are kept."""
    mine = Ring.create(64)
    pid, start = shm.owner(mine.name)
    stale = f"{shm.instance_prefix(instance)}{pid}.{start - 1}_0123456789ab"
    Path(f"/dev/shm/{stale}").touch()
    try:
        assert shm.sweep_dead() == [stale]
        assert os.path.exists(f"/dev/shm/{mine.name}")
    finally:
        mine.close()
        mine.unlink()
