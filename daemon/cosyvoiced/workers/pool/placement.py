"""Which CPUs each worker is pinned to: the plan, made from the CPU topology.

One ONNX thread per *physical* core is what keeps a worker's step time steady, so:

* While there are at least as many physical cores as workers, each worker gets whole
  cores (every SMT thread of them that `workers.cpus` gives) and no two workers share a
  core. Workers are spread over the (NUMA node, package) groups in proportion to their
  cores, and a worker's cores all come from one group, so its CPUs and its memory (which
  it touches first after pinning) stay on one node. Where that leaves a worker fewer
  CPUs than `workers.onnx_threads` (uneven nodes), the cores are split without regard to
  nodes.
* With more workers than physical cores, each worker first takes `onnx_threads` CPUs
  from the first SMT thread of every core (node by node), and only then from the
  second; a CPU left over goes to a worker already on its core.

A group with no worker (fewer workers than groups) keeps its cores for the ASR process
and the worker template, which run on every inference CPU as before. On a box with more
than one node the plan also keeps memory on the worker's node: a stream's ring is bound
there before samples flow (`place_ring`), and a warm spare that adopts a slot has its
pages moved there (`move_memory`); a worker's own buffers get there by first touch. The thread budget
(`check_threads`) and the checks of `workers.cpus` (`inference_cpus`) are unchanged.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import structlog

from cosyvoiced.config.cpus import format_cpu_list
from cosyvoiced.runtime.numa import move_pages_to
from cosyvoiced.workers.pool.cpus import check_threads, inference_cpus
from cosyvoiced.workers.pool.topology import Core, Topology, read_topology

log = structlog.get_logger(__name__)

_REFUSED: set[tuple[str, int]] = set()
"""Refusals already logged (event, errno): one warning each."""


def _refused(event: str, exc: OSError, **kw: Any) -> None:
    if (event, exc.errno) not in _REFUSED:
        _REFUSED.add((event, exc.errno))
        log.warning(event, error=str(exc), **kw)


@dataclass(frozen=True)
class Placement:
    """One worker slot's CPUs."""

    index: int
    cpus: tuple[int, ...]
    cores: int
    """Physical cores its CPUs are on."""
    nodes: tuple[int, ...]
    """NUMA nodes its CPUs are on (one, where possible)."""
    shares_core: bool
    """Some core of it also runs another worker (only with more workers than cores)."""

    def fields(self) -> dict[str, Any]:
        return {"worker": self.index, "cpus": format_cpu_list(self.cpus), "cores": self.cores,
                "node": self.nodes[0] if len(self.nodes) == 1 else list(self.nodes),
                "shares_core": self.shares_core}


@dataclass(frozen=True)
class CpuPlan:
    """Every worker's placement on the inference CPUs, and the topology it was made on."""

    workers: tuple[Placement, ...]
    cpus: tuple[int, ...]
    """Every inference CPU (what the ASR process and the worker template run on)."""
    topology: Topology

    @classmethod
    def for_config(cls, workers: Any, topology: Topology | None = None) -> CpuPlan:
        """The plan for a `[workers]` section on this machine (CpuConfigError if its CPUs
        are not ours or too few for its threads)."""
        topo = topology or read_topology()
        cpus = inference_cpus(workers.cpus, set(topo.cpus))
        return plan_workers(topo, cpus, workers.count, workers.onnx_threads)

    @property
    def shares(self) -> list[tuple[int, ...]]:
        return [w.cpus for w in self.workers]

    def memory_node(self, index: int) -> int | None:
        """The node a worker's shared buffers (its rings) should live on: None on a
        one-node box, or where the worker spans nodes (the kernel's default is then as
        good as any)."""
        if len(self.topology.nodes) < 2:
            return None
        nodes = self.workers[index].nodes
        return nodes[0] if len(nodes) == 1 else None

    def place_ring(self, ring: Any, index: int) -> None:
        """Put a new ring of worker `index` on that worker's node (`Ring.prefer_node`),
        where the box has more than one; a kernel that refuses is logged once."""
        node = self.memory_node(index)
        if node is None:
            return
        try:
            ring.prefer_node(node)
        except OSError as exc:
            _refused("ring_numa_refused", exc, node=node,
                     note="rings stay where their pages are first touched")

    def move_memory(self, pid: int, index: int) -> None:
        """A spare (warmed up on every inference CPU) adopted slot `index`: move its own
        pages to the slot's node, where the box has more than one."""
        node = self.memory_node(index)
        if node is None:
            return
        try:
            left = move_pages_to(pid, tuple(n for n in self.topology.nodes if n != node), node)
        except OSError as exc:
            _refused("worker_numa_move_refused", exc, node=node, pid=pid,
                     note="its pages stay where it warmed up")
            return
        log.info("worker_memory_moved", index=index, node=node, pages_left=left)

    def fields(self) -> dict[str, Any]:
        """The plan as one structured log event's fields."""
        topo = self.topology
        return {"inference_cpus": format_cpu_list(self.cpus), **topo.facts(),
                "smt": topo.threads_per_core > 1,
                "rings_on_worker_node": len(topo.nodes) > 1,
                "workers": [w.fields() for w in self.workers]}

    def lines(self) -> list[str]:
        """The plan for people (`cosyvoiced check-config`)."""
        topo = self.topology
        facts = topo.facts()
        out = [f"inference CPUs {format_cpu_list(self.cpus)} of allowed {facts['allowed']}"
               f" (cgroup cpuset: {topo.cgroup_cpuset or 'not found'})",
               f"{facts['packages']} package(s), {facts['cores']} physical core(s), "
               f"{topo.threads_per_core} thread(s) per core (SMT "
               f"{'on' if topo.threads_per_core > 1 else 'off'}), {len(topo.nodes)} NUMA "
               f"node(s){': rings on each worker node' if len(topo.nodes) > 1 else ''}"]
        if topo.missing:
            out.append("not in sysfs: " + "; ".join(topo.missing))
        for w in self.workers:
            node = ",".join(map(str, w.nodes))
            out.append(f"worker {w.index}: cpus {format_cpu_list(w.cpus)}, {w.cores} "
                       f"core(s), node {node}{', shares a core' if w.shares_core else ''}")
        return out


def _split(items: list[Core], n: int) -> list[list[Core]]:
    """`items` in `n` contiguous runs, the first ones one longer for any remainder."""
    base, extra = divmod(len(items), n)
    out, start = [], 0
    for i in range(n):
        size = base + (1 if i < extra else 0)
        out.append(items[start:start + size])
        start += size
    return out


def _quotas(sizes: list[int], count: int) -> list[int]:
    """`count` workers over groups of `sizes` cores, in proportion (largest remainder;
    ties to the bigger, then the earlier group), never more than a group's cores."""
    total = sum(sizes)
    exact = [count * s / total for s in sizes]
    quotas = [int(e) for e in exact]
    order = sorted(range(len(sizes)), key=lambda i: (-(exact[i] - quotas[i]), -sizes[i], i))
    for i in order[:count - sum(quotas)]:
        quotas[i] += 1
    return [min(q, s) for q, s in zip(quotas, sizes, strict=True)]


def _whole_cores(cores: list[Core], count: int) -> list[list[Core]]:
    groups: dict[tuple[int, int], list[Core]] = {}
    for core in cores:
        groups.setdefault((core.node, core.package), []).append(core)
    members = list(groups.values())
    out: list[list[Core]] = []
    for group, quota in zip(members, _quotas([len(g) for g in members], count), strict=True):
        if quota:
            out += _split(group, quota)
    return out


def _by_thread(cores: list[Core], count: int, threads: int) -> list[list[int]]:
    width = max(len(c.cpus) for c in cores)
    order = [c.cpus[rank] for rank in range(width) for c in cores if rank < len(c.cpus)]
    shares = [order[i * threads:(i + 1) * threads] for i in range(count)]
    core_of = {cpu: i for i, c in enumerate(cores) for cpu in c.cpus}
    for cpu in order[count * threads:]:
        mates = [i for i, s in enumerate(shares) if any(core_of[c] == core_of[cpu] for c in s)]
        best = min(mates or range(count), key=lambda i: (len(shares[i]), i))
        shares[best].append(cpu)
    return [sorted(s) for s in shares]


def plan_workers(topology: Topology, cpus: tuple[int, ...], count: int,
                 onnx_threads: int) -> CpuPlan:
    """Place `count` workers of `onnx_threads` ONNX threads on `cpus` (see the module doc)."""
    check_threads(count, onnx_threads, len(cpus))
    cores = topology.cores(cpus)
    shares: list[list[int]] = []
    if count <= len(cores):
        for runs in (_whole_cores(cores, count), _split(cores, count)):
            shares = [[c for core in run for c in core.cpus] for run in runs]
            if len(shares) == count and all(len(s) >= onnx_threads for s in shares):
                break
            shares = []
    if not shares:
        shares = _by_thread(cores, count, onnx_threads)
    core_of = {cpu: (c.node, c.package, c.core) for c in cores for cpu in c.cpus}
    node_of = {cpu: c.node for c in cores for cpu in c.cpus}
    owners: dict[tuple[int, int, int], int] = {}
    for share in shares:
        for key in {core_of[c] for c in share}:
            owners[key] = owners.get(key, 0) + 1
    placements = tuple(
        Placement(i, tuple(sorted(s)), len({core_of[c] for c in s}),
                  tuple(sorted({node_of[c] for c in s})),
                  any(owners[core_of[c]] > 1 for c in s))
        for i, s in enumerate(shares))
    return CpuPlan(placements, tuple(sorted(cpus)), topology)
