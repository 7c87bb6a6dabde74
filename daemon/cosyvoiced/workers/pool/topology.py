"""The CPU topology this process may use, read from sysfs: per CPU its package, physical
core and NUMA node, and the cgroup's cpuset.

Only the standard library and files, so it runs anywhere and is tested on recorded trees
(`root` is the sysfs mount, `proc` the procfs one). The CPUs are those this process may
run on (`os.sched_getaffinity`: systemd's `CPUAffinity=` and the cgroup cpuset are both
in it); the cgroup's `cpuset.cpus.effective` is read only to be reported. A file that is
missing or unreadable (containers, odd kernels) degrades to what is known: a CPU without
topology files is its own core in package 0, a box without `devices/system/node` is one
node. Nothing here raises for a missing file.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

from cosyvoiced.config.cpus import CpuListError, format_cpu_list, parse_cpu_list

SYSFS = "/sys"
PROCFS = "/proc"


@dataclass(frozen=True)
class CpuInfo:
    """One logical CPU."""

    cpu: int
    package: int
    """`physical_package_id` (0 where unknown)."""
    core: int
    """The physical core: the lowest CPU of its SMT siblings (unique on the box), or
    `core_id` where no sibling list is given, or the CPU itself where nothing is."""
    node: int
    """NUMA node (0 where the box shows none)."""
    siblings: tuple[int, ...]
    """Every hardware thread of its core, itself included (allowed to us or not)."""


@dataclass(frozen=True)
class Core:
    """A physical core as the plan sees it: the CPUs of it we were given."""

    package: int
    core: int
    node: int
    cpus: tuple[int, ...]


@dataclass(frozen=True)
class Topology:
    cpus: dict[int, CpuInfo]
    """The CPUs this process may use."""
    cgroup_cpuset: str | None = None
    """Our cgroup's effective cpuset, as the kernel writes it (None: not found)."""
    missing: tuple[str, ...] = field(default=())
    """What sysfs did not say (the facts then assumed), for the log."""

    @property
    def nodes(self) -> tuple[int, ...]:
        return tuple(sorted({c.node for c in self.cpus.values()}))

    @property
    def packages(self) -> tuple[int, ...]:
        return tuple(sorted({c.package for c in self.cpus.values()}))

    @property
    def threads_per_core(self) -> int:
        """SMT width of the hardware (1: no SMT, or it is off)."""
        return max((len(c.siblings) for c in self.cpus.values()), default=1)

    def cores(self, cpus: Iterable[int]) -> list[Core]:
        """The physical cores `cpus` fall on, by node, package and core; each with the
        CPUs of `cpus` on it, lowest first."""
        groups: dict[tuple[int, int, int], list[int]] = {}
        for cpu in sorted(set(cpus)):
            info = self.cpus.get(cpu) or CpuInfo(cpu, 0, cpu, 0, (cpu,))
            groups.setdefault((info.node, info.package, info.core), []).append(cpu)
        return [Core(package, core, node, tuple(group))
                for (node, package, core), group in sorted(groups.items())]

    def facts(self) -> dict[str, object]:
        """For the log and `check-config`."""
        return {"allowed": format_cpu_list(list(self.cpus)),
                "cgroup_cpuset": self.cgroup_cpuset, "packages": len(self.packages),
                "cores": len(self.cores(self.cpus)), "threads_per_core": self.threads_per_core,
                "numa_nodes": len(self.nodes), "missing": list(self.missing)}


def _read(path: Path) -> str | None:
    try:
        return path.read_text().strip()
    except (OSError, UnicodeDecodeError):
        return None


def _read_int(path: Path) -> int | None:
    text = _read(path)
    try:
        return int(text) if text is not None else None
    except ValueError:
        return None


def _read_list(path: Path) -> tuple[int, ...] | None:
    text = _read(path)
    if text is None:
        return None
    try:
        return parse_cpu_list(text)
    except CpuListError:
        return None


def _nodes(root: Path) -> dict[int, int]:
    """CPU → NUMA node, from `devices/system/node/nodeN/cpulist`."""
    out: dict[int, int] = {}
    base = root / "devices" / "system" / "node"
    try:
        names = sorted(os.listdir(base))
    except OSError:
        return out
    for name in names:
        if not (name.startswith("node") and name[4:].isdigit()):
            continue
        for cpu in _read_list(base / name / "cpulist") or ():
            out[cpu] = int(name[4:])
    return out


def cgroup_cpuset(root: str | Path = SYSFS, proc: str | Path = PROCFS) -> str | None:
    """This process's cgroup `cpuset.cpus.effective` (v2; v1's `cpuset.effective_cpus`
    where only that is mounted), None where there is none."""
    text = _read(Path(proc) / "self" / "cgroup") or ""
    cgroups = Path(root) / "fs" / "cgroup"
    for line in text.splitlines():
        _, controllers, rel = line.split(":", 2) if line.count(":") >= 2 else ("", "-", "")
        rel = rel.strip().lstrip("/")
        if controllers == "":
            found = _read(cgroups / rel / "cpuset.cpus.effective")
        elif "cpuset" in controllers.split(","):
            found = _read(cgroups / "cpuset" / rel / "cpuset.effective_cpus")
        else:
            continue
        if found is not None:
            return found
    return None


def read_topology(root: str | Path = SYSFS, allowed: Iterable[int] | None = None,
                  proc: str | Path = PROCFS) -> Topology:
    """The topology of `allowed` (default: the CPUs this process may run on)."""
    root = Path(root)
    cpus = sorted(set(os.sched_getaffinity(0) if allowed is None else allowed))
    node_of = _nodes(root)
    missing: set[str] = set()
    if not node_of:
        missing.add("numa nodes: one node assumed")
    raw: dict[int, tuple[int, tuple[int, ...] | None, int | None]] = {}
    for cpu in cpus:
        topo = root / "devices" / "system" / "cpu" / f"cpu{cpu}" / "topology"
        package = _read_int(topo / "physical_package_id")
        if package is None or package < 0:
            missing.add("packages: one package assumed")
            package = 0
        siblings = _read_list(topo / "core_cpus_list") or _read_list(topo / "thread_siblings_list")
        raw[cpu] = (package, siblings if siblings and cpu in siblings else None,
                    _read_int(topo / "core_id"))
        if cpu not in node_of and node_of:
            missing.add(f"cpu{cpu}'s node: node 0 assumed")
    # Where only core_id is known, the siblings are the CPUs of the same package and core_id.
    by_id: dict[tuple[int, int], list[int]] = {}
    for cpu, (package, siblings, core_id) in raw.items():
        if siblings is None and core_id is not None:
            by_id.setdefault((package, core_id), []).append(cpu)
    out: dict[int, CpuInfo] = {}
    for cpu, (package, siblings, core_id) in raw.items():
        if siblings is None:
            if core_id is None:
                missing.add("cores: each CPU its own core")
                siblings = (cpu,)
            else:
                siblings = tuple(by_id[(package, core_id)])
        out[cpu] = CpuInfo(cpu, package, min(siblings), node_of.get(cpu, 0), siblings)
    return Topology(out, cgroup_cpuset(root, proc), tuple(sorted(missing)))
