"""The one ONNX Runtime session factory of the daemon (TTS, VAD and ASR all use it).

Every session: CPU execution provider, explicit intra/inter-op thread counts, sequential
execution, graph optimization on, and the optimized graph cached on disk.

The cache holds the graph optimized at ORT_ENABLE_EXTENDED only: ORT documents that a
graph saved after layout optimizations (ORT_ENABLE_ALL, the NCHWc transformer) may hold
hardware-specific nodes usable only on the machine that made it, so the portable level is
saved and the layout pass is applied online at load time (it is cheap). The cache key is
the model file's SHA-256, the onnxruntime version and the saved optimization level.

With `shared_weights`, the session is built from a second cache entry: that graph fully
optimized (ORT_ENABLE_ALL, the layout pass included, exactly what the normal path builds
online) and saved in ORT format, keyed by this CPU's feature flags too (it is specific to
the machine). ORT memory-maps that file and its initializers point into the mapping, so
every process loading it shares one copy of the weights through the page cache instead of
holding its own (docs/performance.md, memory). When that entry cannot be built or
loaded, the normal path is used (logged).
"""

from __future__ import annotations

import functools
import hashlib
import os
import platform
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import structlog

from cosyvoiced.errors import CosyvoicedError

if TYPE_CHECKING:
    import onnxruntime as ort

log = structlog.get_logger(__name__)

CACHED_LEVEL = "extended"
"""Optimization level baked into cached graphs (portable across CPUs)."""


@dataclass(frozen=True)
class GraphRewrite:
    """An exact rewrite applied to a model before it is optimized (and cached)."""

    tag: str
    """Names the rewrite and its version in cache keys."""
    apply: Callable[[Any], object]
    """Rewrites an onnx.ModelProto in place; ValueError: does not apply to this model."""


class OnnxError(CosyvoicedError):
    """An ONNX Runtime failure (import, load, or run), with a stable `code`."""

    code = "onnx_error"

    def __init__(self, message: str, *, code: str | None = None) -> None:
        super().__init__(message)
        if code is not None:
            self.code = code


def import_ort() -> Any:
    """Import onnxruntime, or raise OnnxError saying how to install it."""
    try:
        import onnxruntime
    except ImportError as exc:  # pragma: no cover - depends on the environment
        raise OnnxError(
            "onnxruntime is not installed; install it with "
            "`pip install onnxruntime` (CPU build)", code="onnx_missing") from exc
    return onnxruntime


def file_sha256(path: str | os.PathLike[str]) -> str:
    """Hex SHA-256 of a file, read in 1 MiB blocks."""
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        while block := f.read(1 << 20):
            digest.update(block)
    return digest.hexdigest()


def cache_path_for(model_path: str | os.PathLike[str], cache_dir: str | os.PathLike[str],
                   rewrite: GraphRewrite | None = None) -> Path:
    """Where the optimized copy of `model_path` lives in `cache_dir`."""
    ort = import_ort()
    key = f"{file_sha256(model_path)[:32]}-ort{ort.__version__}-{CACHED_LEVEL}"
    if rewrite is not None:
        key += f"-{rewrite.tag}"
    return Path(cache_dir) / "onnx" / f"{Path(model_path).stem}-{key}.onnx"


@functools.cache
def cpu_flags(path: str = "/proc/cpuinfo") -> frozenset[str]:
    """The first CPU's feature flags (every core of a box has the same)."""
    try:
        with open(path, encoding="ascii", errors="replace") as f:
            for line in f:
                if line.startswith(("flags", "Features")):
                    return frozenset(line.split(":", 1)[1].split())
    except OSError:
        pass
    return frozenset()


INT8_DOT_FLAGS = ("avx512_vnni", "avx_vnni", "amx_int8")
"""Flags of an exact u8 x s8 dot product. Without them ONNX Runtime's x86 INT8 kernels
add pairs of products in 16 bits, which saturate where weights pass [-64, 63] (onnxruntime
commit "convert u8s8 matrix multiplication to u8u8 if needed"; oneDNN's "Nuances of int8
computations"): an INT8 variant's audio is then not what its gate heard."""


def int8_dot(flags: frozenset[str]) -> str:
    """"vnni" where this CPU's INT8 dot product is exact, else "saturating"."""
    return "vnni" if any(f in flags for f in INT8_DOT_FLAGS) else "saturating"


@functools.cache
def cpu_fingerprint() -> str:
    """Short hash of this CPU's feature flags (a fully optimized graph depends on them)."""
    flags = " ".join([platform.machine(), *sorted(cpu_flags())])
    return hashlib.sha256(flags.encode()).hexdigest()[:12]


def shared_path_for(model_path: str | os.PathLike[str], cache_dir: str | os.PathLike[str],
                    rewrite: GraphRewrite | None = None, threads: int = 1) -> Path:
    """Where the fully optimized ORT-format copy of `model_path` lives in `cache_dir`."""
    return _shared_beside(cache_path_for(model_path, cache_dir, rewrite), threads)


def _shared_beside(cached: Path, threads: int) -> Path:
    head, _, tail = cached.stem.rpartition(f"-{CACHED_LEVEL}")
    return cached.with_name(f"{head}-all-cpu{cpu_fingerprint()}-t{threads}{tail}.ort")


def _rewritten(model_path: str, rewrite: GraphRewrite | None) -> str | bytes:
    """The model with `rewrite` applied (serialized), or its path if it does not apply."""
    if rewrite is None:
        return model_path
    import onnx

    model = onnx.load(model_path)
    try:
        rewrite.apply(model)
    except ValueError as exc:
        log.info("graph_rewrite_skipped", model=model_path, rewrite=rewrite.tag, reason=str(exc))
        return model_path
    return model.SerializeToString()


def _options(ort: Any, threads: int, inter_threads: int, spin: bool = False,
             arena: bool = True) -> Any:
    opts = ort.SessionOptions()
    opts.enable_cpu_mem_arena = arena
    opts.intra_op_num_threads = threads
    opts.inter_op_num_threads = inter_threads
    opts.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    # Our workers own their cores; ORT's spinning threads would steal them when idle.
    opts.add_session_config_entry("session.intra_op.allow_spinning", "1" if spin else "0")
    opts.log_severity_level = 3
    return opts


def _session(ort: Any, model: str | bytes, opts: Any) -> ort.InferenceSession:
    try:
        return ort.InferenceSession(model, sess_options=opts, providers=["CPUExecutionProvider"])
    except Exception as exc:  # one gate: every ORT load error becomes an OnnxError
        name = "(in memory)" if isinstance(model, bytes) else model
        raise OnnxError(f"cannot load ONNX model {name}: {exc}", code="onnx_load") from exc


def write_cache_file(path: Path, write: Callable[[str], object], *, what: str) -> bool:
    """Have `write(tmp)` write a file beside `path`, then move it into place atomically.

    False (logged as `{what}_cache_unwritable` / `{what}_cache_write_failed`) when the
    cache cannot be written: callers then go on without it."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=path.parent, suffix=f"{path.suffix}.tmp")
        os.close(fd)
    except OSError as exc:
        log.warning(f"{what}_cache_unwritable", path=str(path.parent), error=str(exc))
        return False
    try:
        write(tmp)
        os.chmod(tmp, 0o644)
        os.replace(tmp, path)
        return True
    except (OSError, OnnxError) as exc:
        log.warning(f"{what}_cache_write_failed", path=str(path), error=str(exc))
        return False
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)


def _write_cache(ort: Any, model: str | bytes, cached: Path, threads: int, inter: int) -> bool:
    """Optimize `model` at the portable level and save it atomically to `cached`."""
    def write(tmp: str) -> None:
        opts = _options(ort, threads, inter)
        opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_EXTENDED
        opts.optimized_model_filepath = tmp
        _session(ort, model, opts)

    return write_cache_file(cached, write, what="onnx")


def _write_shared(ort: Any, source: str, target: Path, threads: int, inter: int) -> bool:
    """Optimize `source` (the portable cache entry) as the normal path would at load time
    and save it in ORT format, atomically, to `target`."""
    def write(tmp: str) -> None:
        opts = _options(ort, threads, inter)
        opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
        opts.add_session_config_entry("session.save_model_format", "ORT")
        opts.optimized_model_filepath = tmp
        _session(ort, source, opts)

    return write_cache_file(target, write, what="onnx_shared")


def _shared_session(ort: Any, path: Path, threads: int, inter: int,
                    spin: bool, arena: bool) -> ort.InferenceSession:
    """A session whose initializers point into a memory map of the ORT-format `path`."""
    opts = _options(ort, threads, inter, spin, arena)
    opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    for key in ("session.use_memory_mapped_ort_model", "session.use_ort_model_bytes_directly",
                "session.use_ort_model_bytes_for_initializers"):
        opts.add_session_config_entry(key, "1")
    opts.add_session_config_entry("session.load_model_format", "ORT")
    return _session(ort, str(path), opts)


def create_session(model_path: str | os.PathLike[str] | bytes, *, threads: int = 1,
                   inter_threads: int = 1, cache_dir: str | os.PathLike[str] | None = None,
                   spin: bool = False, rewrite: GraphRewrite | None = None,
                   shared_weights: bool = False, arena: bool = True,
                   profile_prefix: str | None = None) -> ort.InferenceSession:
    """A CPU session for `model_path` with `threads` intra-op threads.

    With `cache_dir`, the optimized graph is saved there on first use and loaded from
    there afterwards (falls back to the original model if the cache is unwritable).
    `spin`: let idle intra-op threads busy-wait (off by default: workers share cores).
    `rewrite`: applied to a file model first, where it applies (cached with it).
    `model_path` may also be a serialized model (bytes, built in memory: never cached).
    `shared_weights` (with `cache_dir`): load the weights from a memory-mapped ORT-format
    cache entry shared by every process on the box (see the module doc); falls back to the
    normal path when that fails.
    `arena`: keep ORT's CPU arena, which holds the largest activations a run ever needed
    for the life of the session; False: each run's buffers are freed after it (to the
    allocator, which the worker trims), for a few percent more CPU per run on the voice
    (docs/performance.md, memory).
    `profile_prefix`: ORT's profiler on, its trace written to `<prefix>_<date>.json` when
    the session's `end_profiling()` is called (tools only).
    """
    ort = import_ort()
    if threads < 1 or inter_threads < 1:
        raise OnnxError(f"thread counts must be >= 1 (got {threads}/{inter_threads})",
                        code="onnx_threads")
    if isinstance(model_path, bytes):
        opts = _options(ort, threads, inter_threads, spin, arena)
        opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
        return _session(ort, model_path, opts)
    model = str(model_path)
    if not os.path.isfile(model):
        raise OnnxError(f"ONNX model not found: {model}", code="onnx_missing_model")
    source: str | bytes = model
    if cache_dir is not None:
        cached = cache_path_for(model, cache_dir, rewrite)
        if cached.is_file() or _write_cache(ort, _rewritten(model, rewrite), cached, threads,
                                            inter_threads):
            source = str(cached)
        log.debug("onnx_session_source", model=model, source=source)
        if shared_weights and source != model:
            shared = _shared_beside(cached, threads)
            if shared.is_file() or _write_shared(ort, source, shared, threads, inter_threads):
                try:
                    session = _shared_session(ort, shared, threads, inter_threads, spin,
                                              arena)
                except OnnxError as exc:
                    log.warning("onnx_shared_load_failed", path=str(shared), error=str(exc))
                    shared.unlink(missing_ok=True)
                else:
                    log.info("onnx_weights_shared", model=model, path=str(shared))
                    return session
            log.info("onnx_weights_private", model=model)
    if source == model:
        source = _rewritten(model, rewrite)
    opts = _options(ort, threads, inter_threads, spin, arena)
    opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    if profile_prefix:
        opts.enable_profiling = True
        opts.profile_file_prefix = profile_prefix
    try:
        return _session(ort, source, opts)
    except OnnxError:
        if not isinstance(source, str) or source == model:
            raise
        # A corrupt cache entry must not take the daemon down: drop it and load the original.
        log.warning("onnx_cache_corrupt", path=source)
        Path(source).unlink(missing_ok=True)
        return _session(ort, model, opts)


def run(session: ort.InferenceSession, feeds: dict[str, Any],
        outputs: list[str] | None = None) -> list[Any]:
    """`session.run` through the one error gate."""
    try:
        return session.run(outputs, feeds)
    except Exception as exc:
        raise OnnxError(f"ONNX run failed: {exc}", code="onnx_run") from exc
