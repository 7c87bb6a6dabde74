"""The CPU topology read from recorded sysfs trees (`sysfs/`), and the workers' plan on
each: whole physical cores first, SMT siblings last, a NUMA node per worker; the rings'
node decision; and the plan as `check-config` prints it.

The trees: `smt2-1socket` (4 cores, SMT-2, siblings N and N+4), `smt2-cpuset` (the same
box in a cgroup whose cpuset is 1-2,5-6), `2socket-2numa` (2 x 4 cores x SMT-2, a node
per socket: node 0 is 0-3,8-11), `missing` (4 CPUs, no topology, node or cgroup files),
`coreid-only` (`core_id` without sibling lists) and `kvm-2vcpu` (recorded on a 2-vCPU
KVM guest, cgroup v1)."""

from __future__ import annotations

import os
import tomllib
from pathlib import Path
from typing import Any

import pytest
import structlog

from cosyvoiced.__main__ import cpu_plan_comment
from cosyvoiced.audio.ring import Ring
from cosyvoiced.config import dump_config, load_config
from cosyvoiced.config.schema import WorkersConfig
from cosyvoiced.runtime.numa import move_pages_to, node_mask
from cosyvoiced.workers.errors import CpuConfigError
from cosyvoiced.workers.pool import placement as placement_mod
from cosyvoiced.workers.pool.placement import CpuPlan
from cosyvoiced.workers.pool.topology import Topology, read_topology

TREES = Path(__file__).parent / "sysfs"


def topo(name: str, allowed: Any) -> Topology:
    return read_topology(TREES / name / "sys", allowed, TREES / name / "proc")


def plan(name: str, allowed: Any, count: int, threads: int = 1, cpus: str = "") -> CpuPlan:
    return CpuPlan.for_config(WorkersConfig(count=count, onnx_threads=threads, cpus=cpus),
                              topo(name, allowed))


def shares(p: CpuPlan) -> list[str]:
    return [w.fields()["cpus"] for w in p.workers]


# --- reading the trees -----------------------------------------------------------------


def test_one_socket_smt2_pairs_n_with_n_plus_4():
    t = topo("smt2-1socket", range(8))
    assert [c.cpus for c in t.cores(range(8))] == [(0, 4), (1, 5), (2, 6), (3, 7)]
    assert t.facts() == {"allowed": "0-7", "cgroup_cpuset": "0-7", "packages": 1, "cores": 4,
                         "threads_per_core": 2, "numa_nodes": 1, "missing": []}


def test_two_sockets_keep_equal_core_ids_apart_and_map_nodes():
    t = topo("2socket-2numa", range(16))
    assert t.cpus[1].core != t.cpus[5].core  # both are core_id 1, of different packages
    assert [(c.node, c.cpus) for c in t.cores(range(16))][3:5] == [(0, (3, 11)), (1, (4, 12))]
    assert t.nodes == (0, 1) and t.packages == (0, 1) and t.threads_per_core == 2


def test_cpuset_subset_is_what_we_may_use_and_the_cgroup_is_reported():
    t = topo("smt2-cpuset", {1, 2, 5, 6})
    assert sorted(t.cpus) == [1, 2, 5, 6]
    assert t.cgroup_cpuset == "1-2,5-6"
    assert [c.cpus for c in t.cores(t.cpus)] == [(1, 5), (2, 6)]


def test_missing_files_degrade_to_one_core_per_cpu_and_one_node():
    t = topo("missing", range(4))
    assert [c.cpus for c in t.cores(range(4))] == [(0,), (1,), (2,), (3,)]
    assert t.nodes == (0,) and t.packages == (0,) and t.cgroup_cpuset is None
    assert t.missing == ("cores: each CPU its own core", "numa nodes: one node assumed",
                         "packages: one package assumed")
    assert "not in sysfs: cores" in "\n".join(plan("missing", range(4), 2).lines())


def test_core_id_alone_still_finds_the_smt_pairs():
    t = topo("coreid-only", range(8))
    assert [c.cpus for c in t.cores(range(8))] == [(0, 4), (1, 5), (2, 6), (3, 7)]


def test_recorded_kvm_guest_and_its_cgroup_v1_cpuset():
    t = topo("kvm-2vcpu", {0, 1})
    assert [c.cpus for c in t.cores(t.cpus)] == [(0,), (1,)]
    assert t.cgroup_cpuset == "0-1" and t.threads_per_core == 1 and t.missing == ()


def test_a_tree_that_does_not_exist_reads_as_flat(tmp_path):
    t = read_topology(tmp_path / "sys", {0, 1}, tmp_path / "proc")
    assert [c.cpus for c in t.cores(t.cpus)] == [(0,), (1,)] and t.nodes == (0,)


# --- plans -----------------------------------------------------------------------------


@pytest.mark.parametrize(("tree", "allowed", "count", "threads", "expected"), [
    # whole physical cores per worker, both SMT threads of each
    ("smt2-1socket", range(8), 1, 1, ["0-7"]),
    ("smt2-1socket", range(8), 2, 1, ["0-1,4-5", "2-3,6-7"]),
    ("smt2-1socket", range(8), 4, 1, ["0,4", "1,5", "2,6", "3,7"]),
    ("smt2-1socket", range(8), 2, 2, ["0-1,4-5", "2-3,6-7"]),
    # more workers than cores: every core's first thread before any sibling; a CPU left
    # over goes to the worker already on its core
    ("smt2-1socket", range(8), 6, 1, ["0", "1", "2,6", "3,7", "4", "5"]),
    ("smt2-1socket", range(8), 8, 1, ["0", "1", "2", "3", "4", "5", "6", "7"]),
    # two sockets: spread over the nodes, a worker's CPUs on one node
    ("2socket-2numa", range(16), 2, 1, ["0-3,8-11", "4-7,12-15"]),
    ("2socket-2numa", range(16), 3, 1, ["0-1,8-9", "2-3,10-11", "4-7,12-15"]),
    ("2socket-2numa", range(16), 4, 2, ["0-1,8-9", "2-3,10-11", "4-5,12-13", "6-7,14-15"]),
    ("2socket-2numa", range(16), 8, 1, ["0,8", "1,9", "2,10", "3,11", "4,12", "5,13",
                                         "6,14", "7,15"]),
    ("2socket-2numa", range(16), 12, 1, ["0", "1", "2", "3", "4,12", "5,13", "6,14",
                                          "7,15", "8", "9", "10", "11"]),
    # a cpuset subset: the plan is made within it
    ("smt2-cpuset", {1, 2, 5, 6}, 2, 1, ["1,5", "2,6"]),
    ("smt2-cpuset", {1, 2, 5, 6}, 4, 1, ["1", "2", "5", "6"]),
    ("missing", range(4), 2, 1, ["0-1", "2-3"]),
    ("kvm-2vcpu", {0, 1}, 2, 1, ["0", "1"]),
])
def test_plans_match_the_expected_cpu_lists(tree, allowed, count, threads, expected):
    p = plan(tree, allowed, count, threads)
    assert shares(p) == expected
    assert sorted(c for w in p.workers for c in w.cpus) == sorted(allowed)  # all used


def test_no_two_workers_share_a_core_until_every_core_has_one():
    p = plan("2socket-2numa", range(16), 8)
    assert [w.cores for w in p.workers] == [1] * 8 and not any(w.shares_core for w in p.workers)
    p = plan("2socket-2numa", range(16), 12)
    assert [w.index for w in p.workers if w.shares_core] == [0, 1, 2, 3, 8, 9, 10, 11]


def test_workers_stay_on_one_node():
    p = plan("2socket-2numa", range(16), 4)
    assert [w.nodes for w in p.workers] == [(0,), (0,), (1,), (1,)]


def test_one_worker_per_node_leaves_the_other_node_to_asr():
    p = plan("2socket-2numa", range(16), 1)
    assert shares(p) == ["0-3,8-11"] and p.cpus == tuple(range(16))


def test_uneven_nodes_give_up_the_node_before_the_thread_budget():
    # node 0 has 3 cores of workers.cpus, node 1 one: 2 workers x 2 threads only fit
    # when the cores are split regardless of nodes
    p = plan("2socket-2numa", range(16), 2, 2, cpus="0-2,4")
    assert shares(p) == ["0-1", "2,4"]


def test_explicit_cpus_are_honoured_and_the_config_errors_stay():
    p = plan("smt2-1socket", range(8), 2, cpus="2-3,6-7")
    assert shares(p) == ["2,6", "3,7"] and p.cpus == (2, 3, 6, 7)
    with pytest.raises(CpuConfigError, match="may not use: 3,7"):
        plan("smt2-cpuset", {1, 2, 5, 6}, 1, cpus="1-3,5-7")
    with pytest.raises(CpuConfigError, match=r"workers.count x workers.onnx_threads = 3 x 2"):
        plan("smt2-cpuset", {1, 2, 5, 6}, 3, 2)


# --- memory on the worker's node -------------------------------------------------------


def test_rings_go_to_the_workers_node_only_on_a_numa_box():
    assert plan("smt2-1socket", range(8), 4).memory_node(0) is None
    p = plan("2socket-2numa", range(16), 4)
    assert [p.memory_node(i) for i in range(4)] == [0, 0, 1, 1]
    assert plan("2socket-2numa", range(16), 1, 2, cpus="3-4").memory_node(0) is None  # spans


class _Ring:
    def __init__(self, refuse: bool = False) -> None:
        self.refuse = refuse
        self.nodes: list[int] = []

    def prefer_node(self, node: int) -> None:
        if self.refuse:
            raise OSError(1, "mbind: Operation not permitted")
        self.nodes.append(node)


def test_place_ring_asks_for_the_node_and_a_refusal_is_logged_once(monkeypatch):
    monkeypatch.setattr(placement_mod, "_REFUSED", set())
    one = _Ring()
    plan("smt2-1socket", range(8), 2).place_ring(one, 1)
    assert one.nodes == []  # one node: nothing asked
    p = plan("2socket-2numa", range(16), 2)
    ring = _Ring()
    p.place_ring(ring, 1)
    assert ring.nodes == [1]
    with structlog.testing.capture_logs() as logs:
        for _ in range(3):
            p.place_ring(_Ring(refuse=True), 0)
    assert [e["event"] for e in logs] == ["ring_numa_refused"]


def test_an_adopting_spare_has_its_pages_moved_to_the_slots_node(monkeypatch):
    moved: list[tuple[int, tuple[int, ...], int]] = []
    monkeypatch.setattr(placement_mod, "move_pages_to", lambda *a: moved.append(a) or 0)
    plan("smt2-1socket", range(8), 2).move_memory(1234, 1)
    assert moved == []  # one node: nothing to move
    plan("2socket-2numa", range(16), 2).move_memory(1234, 1)
    assert moved == [(1234, (0,), 1)]


def test_node_masks_for_the_syscalls():
    mask, maxnode = node_mask(0)
    assert list(mask) == [1] and maxnode == 65
    mask, maxnode = node_mask(70)
    assert list(mask) == [0, 1 << 6] and maxnode == 129
    mask, maxnode = node_mask(0, 2, span=64)  # as wide as the other mask of the call
    assert list(mask) == [5, 0] and maxnode == 129


def test_moving_our_own_pages_to_node_0():
    try:
        assert move_pages_to(os.getpid(), (0,), 0) == 0
    except OSError as exc:  # a kernel without NUMA support
        pytest.skip(f"migrate_pages unavailable here: {exc}")


def test_a_real_ring_takes_node_0():
    ring = Ring.create(1 << 16)
    try:
        try:
            ring.prefer_node(0)
        except OSError as exc:  # a kernel without NUMA support
            pytest.skip(f"mbind unavailable here: {exc}")
        with pytest.raises(OSError):
            ring.prefer_node(4095)  # no such node
    finally:
        ring.close()
        ring.unlink()


# --- shown to people -------------------------------------------------------------------


def test_plan_fields_for_the_startup_log():
    f = plan("2socket-2numa", range(16), 2).fields()
    assert f["smt"] is True and f["numa_nodes"] == 2 and f["rings_on_worker_node"] is True
    assert f["workers"][1] == {"worker": 1, "cpus": "4-7,12-15", "cores": 4, "node": 1,
                               "shares_core": False}


def test_check_config_prints_the_plan_as_toml_comments():
    config = load_config(None, ["workers.count=1"])
    text = cpu_plan_comment(config.workers)
    assert "# CPU plan on this machine:" in text and "#   worker 0: cpus " in text
    assert tomllib.loads(dump_config(config) + text)["workers"]["count"] == 1
    bad = load_config(None, ['workers.cpus="4095"'])
    assert "none: workers.cpus '4095' names CPUs this process may not use" in (
        cpu_plan_comment(bad.workers))
