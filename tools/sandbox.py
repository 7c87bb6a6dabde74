"""Run a command inside the sandbox a systemd unit file describes, without systemd as PID 1.

    python -m tools.sandbox systemd/cosyvoiced.service -- cosyvoiced run --config ...

`systemd-run -p ...` needs a running systemd manager; CI containers (and this tool's
first users) have none. What a process can observe of the unit's sandbox is applied here
the way systemd 252 applies it (src/shared/seccomp-util.c, src/core/execute.c):

* `SystemCallFilter=` / `SystemCallErrorNumber=`: one seccomp allow-list built with
  libseccomp (the library systemd uses), its `@groups` expanded by the installed
  `systemd-analyze syscall-filter`; the calls systemd never filters are always allowed.
* `MemoryDenyWriteExecute=yes`: systemd's second filter: `mmap` with PROT_WRITE|PROT_EXEC,
  `mprotect`/`pkey_mprotect` with PROT_EXEC, `shmat` with SHM_EXEC fail with EPERM.
* `CapabilityBoundingSet=`, `NoNewPrivileges=`: `setpriv` (util-linux).
* `ProtectProc=`, `ProcSubset=`: a /proc of its own (hidepid=, subset=) in a new mount and
  PID namespace; `PrivateIPC=yes`: a new IPC namespace (`unshare`, util-linux).
* `Limit*=`: the resource limits (setrlimit).

Not applied (no manager to do it): cgroup settings (IPAddressDeny=, DeviceAllow=,
OOMScoreAdjust=), file-system views (ProtectSystem=, PrivateTmp=), User=. The command
runs as the caller. libseccomp is reached through ctypes: its Python binding is not on
PyPI under its own name and the five calls used here do not warrant a build dependency.
"""

from __future__ import annotations

import argparse
import ctypes
import ctypes.util
import errno
import os
import resource
import shutil
import subprocess
import sys
from pathlib import Path

NEVER_FILTERED = ("execve", "exit", "exit_group", "getrlimit", "rt_sigreturn", "sigreturn")
"""systemd.exec(5): "the following system calls are never filtered"."""

LIMITS = {"LimitNOFILE": resource.RLIMIT_NOFILE, "LimitRTPRIO": resource.RLIMIT_RTPRIO,
          "LimitMEMLOCK": resource.RLIMIT_MEMLOCK, "LimitNICE": resource.RLIMIT_NICE,
          "LimitRTTIME": resource.RLIMIT_RTTIME}

SCMP_ACT_ALLOW = 0x7FFF0000
SCMP_CMP_MASKED_EQ = 7
PROT_WRITE, PROT_EXEC, SHM_EXEC = 0x2, 0x4, 0o100000


def scmp_act_errno(code: int) -> int:
    return 0x00050000 | (code & 0xFFFF)


class ArgCmp(ctypes.Structure):
    """libseccomp's struct scmp_arg_cmp."""

    _fields_ = [("arg", ctypes.c_uint), ("op", ctypes.c_int),
                ("datum_a", ctypes.c_uint64), ("datum_b", ctypes.c_uint64)]


def unit_settings(unit: Path) -> dict[str, list[str]]:
    """The [Service] section: every value of each key, in file order (an empty value resets)."""
    out: dict[str, list[str]] = {}
    section = ""
    for raw in unit.read_text().splitlines():
        line = raw.strip()
        if not line or line[0] in "#;":
            continue
        if line.startswith("["):
            section = line
            continue
        if section == "[Service]" and "=" in line:
            key, value = line.split("=", 1)
            out[key] = [] if value == "" else [*out.get(key, []), value]
    return out


def syscall_groups() -> dict[str, list[str]]:
    """`systemd-analyze syscall-filter`: every @group and its members (calls and @groups)."""
    text = subprocess.run(["systemd-analyze", "syscall-filter", "--no-pager"], check=True,
                          capture_output=True, text=True, timeout=60).stdout
    groups: dict[str, list[str]] = {}
    current = ""
    for line in text.splitlines():
        if line.startswith("@"):
            current = line.strip()
            groups[current] = []
        elif current and line.strip() and not line.strip().startswith("#"):
            groups[current].append(line.strip())
    return groups


def expand(names: list[str], groups: dict[str, list[str]]) -> set[str]:
    out: set[str] = set()
    for name in names:
        if name.startswith("@"):
            if name not in groups:
                raise SystemExit(f"unknown syscall group {name}")
            out |= expand(groups[name], groups)
        else:
            out.add(name)
    return out


def allowed_syscalls(settings: dict[str, list[str]]) -> set[str] | None:
    """The unit's allow-list (None: no filter). Deny entries (~...) after it are removed."""
    values = settings.get("SystemCallFilter", [])
    if not values:
        return None
    if values[0].startswith("~"):
        raise SystemExit("tools.sandbox handles an allow-list SystemCallFilter= only")
    groups = syscall_groups()
    allowed: set[str] = set()
    for value in values:
        if value.startswith("~"):
            allowed -= expand(value[1:].split(), groups)
        else:
            allowed |= expand(value.split(), groups)
    return allowed | set(NEVER_FILTERED)


def _libseccomp() -> ctypes.CDLL:
    path = ctypes.util.find_library("seccomp")
    if path is None:
        raise SystemExit("libseccomp not found (Debian: libseccomp2)")
    lib = ctypes.CDLL(path, use_errno=True)
    lib.seccomp_init.restype = ctypes.c_void_p
    lib.seccomp_init.argtypes = [ctypes.c_uint32]
    lib.seccomp_syscall_resolve_name.argtypes = [ctypes.c_char_p]
    lib.seccomp_rule_add_array.argtypes = [ctypes.c_void_p, ctypes.c_uint32, ctypes.c_int,
                                           ctypes.c_uint, ctypes.POINTER(ArgCmp)]
    lib.seccomp_load.argtypes = [ctypes.c_void_p]
    lib.seccomp_release.argtypes = [ctypes.c_void_p]
    return lib


def _add(lib: ctypes.CDLL, ctx: int, action: int, name: str, *cmp: ArgCmp) -> None:
    nr = lib.seccomp_syscall_resolve_name(name.encode())
    if nr < 0:  # not a call on this architecture (systemd skips these too)
        return
    arr = (ArgCmp * max(1, len(cmp)))(*cmp)
    rc = lib.seccomp_rule_add_array(ctx, action, nr, len(cmp), arr)
    if rc < 0 and rc != -errno.EEXIST:
        raise OSError(-rc, f"seccomp rule for {name}")


def _load(lib: ctypes.CDLL, ctx: int) -> None:
    rc = lib.seccomp_load(ctx)
    lib.seccomp_release(ctx)
    if rc < 0:
        raise OSError(-rc, "seccomp_load")


def load_filters(settings: dict[str, list[str]]) -> None:
    """Install the unit's seccomp filters on this process (inherited by what it execs)."""
    lib = _libseccomp()
    if settings.get("MemoryDenyWriteExecute", ["no"])[-1] == "yes":
        deny = scmp_act_errno(errno.EPERM)
        wx = PROT_WRITE | PROT_EXEC
        ctx = lib.seccomp_init(SCMP_ACT_ALLOW)
        _add(lib, ctx, deny, "mmap", ArgCmp(2, SCMP_CMP_MASKED_EQ, wx, wx))
        _add(lib, ctx, deny, "mprotect", ArgCmp(2, SCMP_CMP_MASKED_EQ, PROT_EXEC, PROT_EXEC))
        _add(lib, ctx, deny, "pkey_mprotect",
             ArgCmp(2, SCMP_CMP_MASKED_EQ, PROT_EXEC, PROT_EXEC))
        _add(lib, ctx, deny, "shmat", ArgCmp(2, SCMP_CMP_MASKED_EQ, SHM_EXEC, SHM_EXEC))
        _load(lib, ctx)
    # last, as systemd does: the allow-list need not allow seccomp() itself
    allowed = allowed_syscalls(settings)
    if allowed is not None:
        code = settings.get("SystemCallErrorNumber", ["EPERM"])[-1]
        ctx = lib.seccomp_init(scmp_act_errno(getattr(errno, code)))
        for name in sorted(allowed):
            _add(lib, ctx, SCMP_ACT_ALLOW, name)
        _load(lib, ctx)


def set_limits(settings: dict[str, list[str]]) -> None:
    for key, which in LIMITS.items():
        if key not in settings:
            continue
        value = settings[key][-1]
        if key == "LimitNICE" and value[0] in "+-":
            value = str(20 - int(value))  # nice level -> raw RLIMIT_NICE
        soft, _, hard = value.partition(":")
        n_soft = resource.RLIM_INFINITY if soft == "infinity" else _value(soft)
        n_hard = n_soft if not hard else (resource.RLIM_INFINITY if hard == "infinity"
                                          else _value(hard))
        _, cap = resource.getrlimit(which)
        if cap != resource.RLIM_INFINITY and (n_hard == resource.RLIM_INFINITY or n_hard > cap):
            # raising a hard limit needs CAP_SYS_RESOURCE, which a container may not have
            print(f"tools.sandbox: {key}={value} is above this box's hard limit {cap}: "
                  f"kept {cap}", file=sys.stderr)
            n_hard = cap
            n_soft = cap if n_soft == resource.RLIM_INFINITY else min(n_soft, cap)
        resource.setrlimit(which, (n_soft, n_hard))


def _value(text: str) -> int:
    """A Limit*= value: a count, bytes with K/M/G, or (LimitRTTIME=) a time span in us."""
    for suffix, scale in (("us", 1), ("ms", 1000), ("s", 1_000_000), ("K", 1 << 10),
                          ("M", 1 << 20), ("G", 1 << 30)):
        if text.endswith(suffix):
            return int(text.removesuffix(suffix)) * scale
    return int(text)


def outer_command(unit: Path, command: list[str]) -> list[str]:
    """The whole chain: unshare (namespaces) -> stage `proc` (mount, limits) -> setpriv
    (capabilities, no_new_privs) -> stage `seccomp` (filters) -> the command."""
    settings = unit_settings(unit)
    me = [sys.executable, str(Path(__file__).resolve())]
    unit_arg = str(unit.resolve())
    unshare = ["unshare", "--mount", "--pid", "--fork", "--kill-child",
               "--propagation", "private"]
    if settings.get("PrivateIPC", ["no"])[-1] == "yes":
        unshare.append("--ipc")
    setpriv = [shutil.which("setpriv") or "setpriv"]
    if "CapabilityBoundingSet" in settings and not settings["CapabilityBoundingSet"]:
        setpriv += ["--bounding-set=-all", "--inh-caps=-all", "--ambient-caps=-all"]
    if settings.get("NoNewPrivileges", ["no"])[-1] == "yes":
        setpriv.append("--no-new-privs")
    return [*unshare, *me, "--stage", "proc", unit_arg, "--", *setpriv, "--",
            *me, "--stage", "seccomp", unit_arg, "--", *command]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m tools.sandbox", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("unit", type=Path)
    ap.add_argument("--stage", choices=("outer", "proc", "seccomp"), default="outer")
    ap.add_argument("command", nargs=argparse.REMAINDER)
    args = ap.parse_args(argv)
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    if not command:
        ap.error("no command")
    settings = unit_settings(args.unit)
    if args.stage == "outer":
        os.execvp("unshare", outer_command(args.unit, command))
    if args.stage == "proc":
        opts = []
        if settings.get("ProtectProc"):
            opts.append(f"hidepid={settings['ProtectProc'][-1]}")
        if settings.get("ProcSubset"):
            opts.append(f"subset={settings['ProcSubset'][-1]}")
        subprocess.run(["mount", "-t", "proc", "-o", ",".join(opts or ["defaults"]),
                        "proc", "/proc"], check=True)
        set_limits(settings)
    else:
        load_filters(settings)
    os.execvp(command[0], command)
    return 127  # not reached


if __name__ == "__main__":
    sys.exit(main())
