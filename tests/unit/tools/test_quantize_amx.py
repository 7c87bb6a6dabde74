"""AMX withheld from a process (tools/quantize/noamx.py) and the per-node profile's
summary. The filter cannot be taken back, so each check runs in a child process."""

from __future__ import annotations

import subprocess
import sys

import pytest

CHILD = r"""
import ctypes, sys
from tools.quantize import noamx
noamx.withhold_amx()
assert noamx.amx_request_refused(), "AMX still granted"
assert not noamx.tile_permitted()
# every other arch_prctl still runs: ARCH_GET_FS (0x1003) reads this thread's TLS base
fs = ctypes.c_ulong(0)
assert noamx._arch_prctl(0x1003, ctypes.addressof(fs))[0] == 0 and fs.value
import threading
import numpy as np
import onnxruntime as ort
from onnx import TensorProto, helper, numpy_helper
b = np.arange(-64, 64, dtype=np.int8).reshape(16, 8)
g = helper.make_graph([helper.make_node("MatMulInteger", ["a", "b"], ["y"])], "g",
                      [helper.make_tensor_value_info("a", TensorProto.UINT8, [4, 16])],
                      [helper.make_tensor_value_info("y", TensorProto.INT32, [4, 8])],
                      [numpy_helper.from_array(b, "b")])
m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)])
s = ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"])
a = np.arange(64, dtype=np.uint8).reshape(4, 16)
t = threading.Thread(target=lambda: s.run(None, {"a": a}))
t.start(); t.join()
assert (s.run(None, {"a": a})[0] == a.astype(np.int32) @ b.astype(np.int32)).all()
assert not noamx.tile_permitted(), "ONNX Runtime got AMX tiles"
print("ok")
"""


def run_child(code: str, repo_root) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", code], cwd=repo_root, capture_output=True,
                          text=True, timeout=120)


def test_amx_withheld_in_a_child_and_int8_still_exact(repo_root):
    out = run_child(CHILD, repo_root)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "ok"


def test_withholding_after_onnxruntime_is_refused(repo_root):
    code = ("import onnxruntime\nfrom tools.quantize import noamx\n"
            "try:\n    noamx.withhold_amx()\nexcept noamx.AmxError as e:\n    print('refused', e)\n")
    out = run_child(code, repo_root)
    assert out.returncode == 0, out.stderr
    assert out.stdout.startswith("refused") and "already imported" in out.stdout


def test_profile_summary_counts_kernels_groups_and_conversions(repo_root):
    from tools.quantize.profile import render, summarize

    def node(name: str, op: str, us: int) -> dict:
        return {"cat": "Node", "name": f"{name}_kernel_time", "dur": us, "args": {"op_name": op}}

    events = [node("/dec/resblocks.8/convs.0/Conv", "Conv", 4000),
              node("/dec/resblocks.0/convs.0/Conv_quant", "QLinearConv", 1000),
              node("/dec/resblocks.0/Add_quant", "QLinearAdd", 200),
              node("/dec/conv_pre/Conv_input_QuantizeLinear", "QuantizeLinear", 300),
              node("/flow/flows.0/Conv", "Conv", 2000),
              {"cat": "Node", "name": "/flow/flows.0/Conv_fence_before", "dur": 9},
              {"cat": "Session", "name": "model_run", "dur": 99999}]
    p = summarize(events, runs=2)
    assert p["total_ms"] == pytest.approx(3.75)
    assert p["by_op"]["Conv"] == pytest.approx(3.0) and p["nodes"]["Conv"] == 2
    assert p["by_group"]["dec/resblocks.8"] == pytest.approx(2.0)
    assert p["by_group"]["flow"] == pytest.approx(1.0)
    assert p["conversion_ms"] == pytest.approx(0.15)
    assert p["int8_ms"] == pytest.approx(0.6)
    assert p["float_dec_nodes"] == ["/dec/resblocks.8/convs.0/Conv"]
    text = render({"fp32": p}, {"fp32": 1.0}, 2, 1, "withheld")
    assert "AMX withheld" in text and "| Conv | 3.0 (2) |" in text


BENCH_CHILD = r"""
import sys, types
from tools.bench import cli
from tools.bench.report import Report, cpu_flags
from tools.quantize import noamx

def run(quick):
    r = Report("probe", ["measure"])
    r.notes.append(cpu_flags())
    r.target("AMX refused", 1.0, "== 1", noamx.amx_request_refused())
    return r

probe = types.ModuleType("tools.bench.probe")
probe.run = run
sys.modules["tools.bench.probe"] = probe
cli.SUITES = (*cli.SUITES, "probe")
sys.exit(cli.main(sys.argv[1:]))
"""


@pytest.mark.parametrize("flag", ["--no-amx", None])
def test_a_bench_suite_runs_with_amx_withheld_and_says_so(repo_root, flag):
    args = ["probe", *([flag] if flag else [])]
    out = subprocess.run([sys.executable, "-c", BENCH_CHILD, *args], cwd=repo_root,
                         capture_output=True, text=True, timeout=120)
    assert ("AMX withheld" in out.stdout) == bool(flag), out.stdout + out.stderr
    # EPERM only from the filter (a kernel or CPU without AMX answers with another errno)
    assert out.returncode == (0 if flag else 1), out.stdout + out.stderr
