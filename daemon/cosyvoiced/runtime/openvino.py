"""OpenVINO's CPU plugin behind the session interface the voices use (`run`, names).

Where the CPU computes in bfloat16 natively (AMX tiles, `amx_bf16` in /proc/cpuinfo, or
AVX512-BF16, `avx512_bf16`), OpenVINO runs a convolutional vocoder in bf16 at one thread
in ~0.3-0.7x the time of ONNX Runtime in FP32 (figures: docs/performance.md); ONNX Runtime's CPU provider has no bf16 kernels for
it. Only graphs whose inputs have a known rank load here (`shapes` names the dynamic
ones), and only the parts after the durations (the flow, the decoder): a voice's text
front stays FP32 in ONNX Runtime, since bf16 moves frame counts.
"""

from __future__ import annotations

import hashlib
import io
import os
import weakref
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import structlog

from cosyvoiced.runtime.onnx import OnnxError, cpu_fingerprint

log = structlog.get_logger(__name__)

BF16_FLAGS = ("amx_bf16", "avx512_bf16")
"""CPU flags that make bf16 pay, the better first: AMX tiles (0.28x FP32's decoder CPU
time on a Xeon), AVX512-BF16 (0.68x on an AMD EPYC; docs/performance.md)."""


def bf16_flag(flags: frozenset[str]) -> str | None:
    """The first of `BF16_FLAGS` this CPU has, or None."""
    return next((f for f in BF16_FLAGS if f in flags), None)


@dataclass(frozen=True)
class _Name:
    name: str


_LIVE: weakref.WeakSet[OvSession] = weakref.WeakSet()


def release_memory() -> int:
    """Hand back the intermediate buffers of every compiled model of this process (the
    plugin keeps a model's activation buffers between runs; the next run makes them
    again). A worker does it when it trims its heap: ~30 MB of a bf16 worker's after its
    requests, for no measurable time on its next synthesis (docs/performance.md).
    Returns the models released."""
    done = 0
    for session in list(_LIVE):
        try:
            session.compiled.release_memory()
            done += 1
        except RuntimeError as exc:  # a plugin without it: nothing to hand back
            log.debug("openvino_release_failed", error=str(exc))
    return done


class OvSession:
    """One compiled model and its one infer request (a worker runs one step at a time)."""

    def __init__(self, compiled: Any, precision: str) -> None:
        _LIVE.add(self)
        self.compiled = compiled
        self.precision = precision
        self._request = compiled.create_infer_request()
        self._inputs = [_Name(p.get_any_name()) for p in compiled.inputs]
        self._outputs = [_Name(p.get_any_name()) for p in compiled.outputs]

    def get_inputs(self) -> list[_Name]:
        return list(self._inputs)

    def get_outputs(self) -> list[_Name]:
        return list(self._outputs)

    def run(self, outputs: Sequence[str] | None, feeds: Mapping[str, np.ndarray]
            ) -> list[np.ndarray]:
        """ONNX Runtime's `run`: outputs by name (all when None), each a copy (the
        request's tensors are reused by the next run)."""
        result = self._request.infer(dict(feeds))
        names = [o.name for o in self._outputs] if outputs is None else list(outputs)
        by_name = {p.get_any_name(): result[p] for p in self.compiled.outputs}
        return [np.array(by_name[n], copy=True) for n in names]


def _ir_path(cache_dir: str | os.PathLike[str], key: str,
             dims: Mapping[str, Sequence[int]]) -> Path:
    """Where the graph named `key`, converted for input `dims`, is kept as OpenVINO IR."""
    import openvino as ov

    tag = hashlib.sha256(repr(sorted((k, list(v)) for k, v in dims.items())).encode())
    return (Path(cache_dir) / "openvino" /
            f"{key}-{tag.hexdigest()[:12]}-ov{ov.get_version().split('-')[0]}.xml")


def _save_ir(model: Any, path: Path) -> None:
    """Keep a converted graph as IR (its .bin first, the .xml last: an .xml means both are
    whole); a cache that cannot be written only costs the next start the conversion."""
    import openvino as ov

    tmp = path.with_name(f".{path.stem}-{os.getpid()}.xml")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        ov.save_model(model, str(tmp), compress_to_fp16=False)
        os.replace(tmp.with_suffix(".bin"), path.with_suffix(".bin"))
        os.replace(tmp, path)
    except (OSError, RuntimeError) as exc:
        log.warning("openvino_ir_unwritable", path=str(path), error=str(exc))
        for leftover in (tmp, tmp.with_suffix(".bin")):
            leftover.unlink(missing_ok=True)


def _blob_path(cache_dir: str | os.PathLike[str], key: str,
               dims: Mapping[str, Sequence[int]], config: Mapping[str, Any]) -> Path:
    """Where the graph named `key`, compiled for input `dims` with `config` on this CPU by
    this OpenVINO, is kept (exported by us: OpenVINO's own cache hashes the whole graph
    at every compile, ~0.45 s a decoder window, while importing a kept one takes 0.06 s)."""
    import openvino as ov

    what = repr((sorted((k, list(v)) for k, v in dims.items()), sorted(config.items())))
    tag = hashlib.sha256(what.encode()).hexdigest()[:12]
    return (Path(cache_dir) / "openvino" / f"{key}-{tag}-cpu{cpu_fingerprint()}"
            f"-ov{ov.get_version().split('-')[0]}.blob")


def _import(core: Any, blob: Path | None, config: Mapping[str, Any]) -> Any:
    """The compiled graph kept at `blob`, or None: none kept, or one this OpenVINO cannot
    read (logged, compiled again and replaced)."""
    if blob is None or not blob.is_file():
        return None
    try:
        return core.import_model(blob.read_bytes(), "CPU", dict(config))
    except (OSError, RuntimeError) as exc:
        log.warning("openvino_blob_unreadable", path=str(blob), error=str(exc))
        return None


def _export(compiled: Any, blob: Path) -> None:
    """Keep a compiled graph at `blob` (whole or not at all); a cache that cannot be
    written only costs the next start the compile."""
    tmp = blob.with_name(f".{blob.name}-{os.getpid()}")
    try:
        blob.parent.mkdir(parents=True, exist_ok=True)
        tmp.write_bytes(compiled.export_model().getbuffer())
        os.replace(tmp, blob)
    except (OSError, RuntimeError) as exc:
        log.warning("openvino_blob_unwritable", path=str(blob), error=str(exc))
        tmp.unlink(missing_ok=True)


def _read(model: str | os.PathLike[str] | io.BytesIO | Callable[[], bytes],
          dims: Mapping[str, Sequence[int]], cache_dir: str | os.PathLike[str] | None,
          key: str | None) -> Any:
    """The graph as an OpenVINO model with the ranks of `dims`: its IR kept under
    `cache_dir` where there is one for `key`, else converted from ONNX (~1.2 s for the
    bundled voice's flow or decoder) and kept there."""
    import openvino as ov

    ir = _ir_path(cache_dir, key, dims) if cache_dir is not None and key else None
    if ir is not None and ir.is_file():
        try:
            return ov.Core().read_model(str(ir))
        except RuntimeError as exc:
            log.warning("openvino_ir_unreadable", path=str(ir), error=str(exc))
    source = model() if callable(model) else model
    read = ov.convert_model(io.BytesIO(source) if isinstance(source, bytes) else
                            source if isinstance(source, io.BytesIO) else str(source),
                            input=[(name, ov.PartialShape(list(d))) for name, d in dims.items()])
    if ir is not None:
        _save_ir(read, ir)
    return read


def create_ov_sessions(model: str | os.PathLike[str] | io.BytesIO | Callable[[], bytes], *,
                       shapes: Sequence[Mapping[str, Sequence[int]]], threads: int = 1,
                       precision: str = "bf16",
                       cache_dir: str | os.PathLike[str] | None = None,
                       key: str | None = None) -> list[OvSession]:
    """`model` (an ONNX file, its bytes, or what makes them) read once and compiled for
    OpenVINO's CPU plugin at `precision` (bf16 | f32) for each set of input `shapes`
    (static: the plugin builds kernels per shape; -1: a dynamic axis); errors through the
    ONNX error gate. With `cache_dir` and a `key` naming the graph (its source and any
    rewrite), the converted graph and each shape's compiled graph are kept there: a later
    start imports them, neither making, converting nor compiling anything (without a
    `key`, OpenVINO's own cache keeps the compiled graphs)."""
    try:
        import openvino as ov
    except ImportError as exc:
        raise OnnxError(f"openvino is not installed: {exc}", code="openvino_missing") from exc
    config: dict[str, Any] = {
        "INFERENCE_NUM_THREADS": threads, "NUM_STREAMS": 1, "PERFORMANCE_HINT": "LATENCY",
        "INFERENCE_PRECISION_HINT": precision,
        "ENABLE_CPU_PINNING": False,  # the worker is pinned already: no second opinion
        # kernels kept per input shape of a dynamic model: a bf16 flow met 24 window
        # lengths for +39 MB and ran no faster for it (docs/performance.md)
        "CPU_RUNTIME_CACHE_CAPACITY": 0,
    }
    core = ov.Core()
    blobs = [_blob_path(cache_dir, key, shape, config) if cache_dir is not None and key
             else None for shape in shapes]
    if cache_dir is not None and not key:  # OpenVINO's own cache (it hashes the graph)
        try:
            core.set_property({"CACHE_DIR": str(Path(cache_dir) / "openvino")})
        except RuntimeError as exc:  # read-only or full: compile every start instead
            log.warning("openvino_cache_unwritable", path=str(cache_dir), error=str(exc))
    try:
        read = None
        sessions = []
        # imported side by side: each builds its own kernels (~0.15-0.45 s a decoder
        # window, one at a time; 3 windows 1.1 s alone, 0.6 s on 2 CPUs)
        workers = max(1, min(len(shapes), len(os.sched_getaffinity(0))))
        with ThreadPoolExecutor(workers) as pool:
            imported = list(pool.map(lambda blob: _import(core, blob, config), blobs))
        for shape, blob, compiled in zip(shapes, blobs, imported, strict=True):
            if compiled is None:
                read = read if read is not None else _read(model, shapes[0], cache_dir, key)
                one = read.clone()
                one.reshape({name: ov.PartialShape(list(dims)) for name, dims in shape.items()})
                compiled = core.compile_model(one, "CPU", config)
                if blob is not None:
                    _export(compiled, blob)
            sessions.append(OvSession(compiled, precision))
    except Exception as exc:  # the plugin's errors are RuntimeErrors of every kind
        what = str(model) if isinstance(model, (str, os.PathLike)) else "the graph"
        raise OnnxError(f"OpenVINO could not compile {what}: {exc}",
                        code="openvino_compile") from exc
    return sessions
