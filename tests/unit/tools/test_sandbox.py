"""tools.sandbox applies what a unit file asks of a process (no systemd as PID 1 here)."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

from tools.sandbox import allowed_syscalls, outer_command, unit_settings

PROBE = textwrap.dedent("""
    import errno, json, mmap, os
    out = {"pid": os.getpid(), "procs": sorted(p for p in os.listdir("/proc") if p.isdigit())}
    with open("/proc/self/status") as f:
        st = dict(line.split(":", 1) for line in f)
    out["cap_bnd"] = st["CapBnd"].strip()
    out["cap_eff"] = st["CapEff"].strip()
    out["nnp"] = st["NoNewPrivs"].strip()
    out["filters"] = st["Seccomp_filters"].strip()
    try:
        os.chroot("/")  # @privileged: not in @system-service
        out["chroot"] = "ok"
    except OSError as e:
        out["chroot"] = errno.errorcode[e.errno]
    try:
        mmap.mmap(-1, 4096, prot=mmap.PROT_READ | mmap.PROT_WRITE | mmap.PROT_EXEC)
        out["wx"] = "ok"
    except OSError as e:
        out["wx"] = errno.errorcode[e.errno]
    print(json.dumps(out))
""")


def _probe(unit: Path) -> dict:
    res = subprocess.run(outer_command(unit, [sys.executable, "-c", PROBE]),
                         capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, res.stderr
    return json.loads(res.stdout.splitlines()[-1])


def test_the_shipped_unit_confines_a_process(repo_root):
    got = _probe(repo_root / "systemd" / "cosyvoiced.service")
    assert got["cap_bnd"] == got["cap_eff"] == "0000000000000000"  # CapabilityBoundingSet=
    assert got["nnp"] == "1"
    assert int(got["filters"]) >= 1
    assert got["chroot"] == "EPERM"  # SystemCallFilter=@system-service + ErrorNumber=EPERM
    assert got["wx"] == "ok"  # no MemoryDenyWriteExecute: the JITs need it
    # its own PID namespace: only its own processes (the probe and its launcher) are seen
    assert got["pid"] in (1, 2) and len(got["procs"]) <= 3, got["procs"]


def test_memory_deny_write_execute_refuses_wx_and_a_jit(repo_root, tmp_path):
    unit = tmp_path / "wx.service"
    unit.write_text((repo_root / "systemd" / "cosyvoiced.service").read_text()
                    + "\n[Service]\nMemoryDenyWriteExecute=yes\n")
    assert _probe(unit)["wx"] == "EPERM"
    # what keeps MemoryDenyWriteExecute out of the unit: llvmlite (numba, under librosa)
    # cannot run code it generates
    jit = subprocess.run(outer_command(unit, [sys.executable, "-c",
                         "from llvmlite.binding import check_jit_execution as c; c()"]),
                         capture_output=True, text=True, timeout=120)
    assert jit.returncode != 0 and "executable memory" in jit.stderr, jit.stderr[-500:]


def test_filter_expands_groups_and_keeps_what_systemd_never_filters(repo_root):
    allowed = allowed_syscalls(unit_settings(repo_root / "systemd" / "cosyvoiced.service"))
    assert allowed is not None
    # calls the daemon was traced making (strace -f, a call, TTS, Whisper, reload, stop)
    for name in ("sched_setaffinity", "sched_setscheduler", "setpriority", "mmap", "futex",
                 "epoll_wait", "accept4", "clone3", "execve", "exit_group", "prlimit64"):
        assert name in allowed, name
    for name in ("chroot", "mount", "reboot", "swapon", "init_module"):
        assert name not in allowed, name


def test_unit_settings_reads_the_service_section_only(tmp_path):
    unit = tmp_path / "x.service"
    unit.write_text("[Unit]\nDescription=a=b\n[Service]\n# c=d\nSystemCallFilter=@basic-io\n"
                    "SystemCallFilter=~read\nCapabilityBoundingSet=\n")
    s = unit_settings(unit)
    assert s == {"SystemCallFilter": ["@basic-io", "~read"], "CapabilityBoundingSet": []}
    allowed = allowed_syscalls(s)
    assert allowed is not None and "read" not in allowed and "write" in allowed
