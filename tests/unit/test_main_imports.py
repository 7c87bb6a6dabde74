"""The daemon's main process imports no inference runtime: the models run in the workers
and the ASR process, and onnxruntime's module alone held ~8 MB of the main process's own
heap (piper's package imports it)."""

from __future__ import annotations

import subprocess
import sys


def test_the_main_process_imports_no_inference_runtime():
    code = ("import sys, cosyvoiced.service; "
            "print(sorted(m for m in ('onnxruntime', 'openvino', 'ctranslate2', 'piper') "
            "if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True, timeout=120).stdout.strip()
    assert out == "[]"
