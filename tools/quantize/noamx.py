"""Withhold AMX from this process, so an AMX Xeon runs the kernels of a CPU without it.

Linux lets a process use the AMX tile registers only after it asked for them with
arch_prctl(ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA). ONNX Runtime's MLAS asks once, when
its platform is set up (`MlasInitAMX` in onnxruntime/core/mlas/lib/platform.cpp), and
keeps its AVX512-VNNI INT8 kernels when refused; oneDNN (OpenVINO's CPU plugin) asks the
same way before it takes its AMX kernels. A seccomp filter that answers EPERM to that one
request (every other arch_prctl, ARCH_SET_FS and the like, still runs) therefore makes an
AMX box measure like an AVX512-VNNI/AVX512-BF16 one such as AMD EPYC.

Tools only, never the daemon: `withhold_amx()` must run before onnxruntime or openvino is
imported, and it cannot be undone for the process (or its children).
"""

from __future__ import annotations

import ctypes
import errno
import os

ARCH_GET_XCOMP_PERM = 0x1022
ARCH_REQ_XCOMP_PERM = 0x1023
XFEATURE_XTILEDATA = 18
SYS_ARCH_PRCTL = 158  # x86-64
ENV = "COSYVOICED_TOOLS_NO_AMX"
"""Set to 1 by `withhold_amx`: a child started from here inherits the filter, and knows."""


class AmxError(RuntimeError):
    """The filter could not be installed (no libseccomp, not x86-64 Linux)."""


def _arch_prctl(code: int, arg: int) -> tuple[int, int]:
    """(return value, errno) of arch_prctl(code, arg)."""
    libc = ctypes.CDLL(None, use_errno=True)
    libc.syscall.restype = ctypes.c_long
    rc = libc.syscall(ctypes.c_long(SYS_ARCH_PRCTL), ctypes.c_long(code), ctypes.c_ulong(arg))
    return int(rc), ctypes.get_errno()


def tile_permitted() -> bool:
    """Whether this process may use AMX tile data now (ARCH_GET_XCOMP_PERM's bitmask)."""
    mask = ctypes.c_uint64(0)
    rc, _ = _arch_prctl(ARCH_GET_XCOMP_PERM, ctypes.addressof(mask))
    return rc == 0 and bool(mask.value & (1 << XFEATURE_XTILEDATA))


def amx_request_refused() -> bool:
    """Whether asking for AMX tile data now fails with EPERM (the filter is in place)."""
    rc, err = _arch_prctl(ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA)
    return rc != 0 and err == errno.EPERM


def withhold_amx() -> None:
    """Install the filter in this process (before onnxruntime/openvino are imported).

    AmxError where it cannot be installed, or where AMX was already granted (a library
    loaded earlier asked first: the permission cannot be taken back)."""
    import sys

    if any(m in sys.modules for m in ("onnxruntime", "openvino")):
        raise AmxError("onnxruntime or openvino is already imported: withhold AMX first")
    if tile_permitted():
        raise AmxError("AMX tile data was already granted to this process")
    try:
        import pyseccomp as seccomp
    except ImportError as exc:  # the tools' install (pip install -e '.[test]') brings it
        raise AmxError("pyseccomp is not installed") from exc
    try:
        f = seccomp.SyscallFilter(defaction=seccomp.ALLOW)
        f.add_rule(seccomp.ERRNO(errno.EPERM), "arch_prctl",
                   seccomp.Arg(0, seccomp.EQ, ARCH_REQ_XCOMP_PERM))
        f.load()
    except (OSError, RuntimeError, ValueError) as exc:
        raise AmxError(f"seccomp filter not installed: {exc}") from exc
    os.environ[ENV] = "1"
    # oneDNN (OpenVINO) would ask and be refused as well; say it outright too.
    os.environ.setdefault("ONEDNN_MAX_CPU_ISA", "AVX512_CORE_BF16")
    if not amx_request_refused():
        raise AmxError("the filter is loaded but AMX is still granted")
