"""The mel filterbank, designed once with `librosa.filters.mel` and cached on disk.

librosa's import pulls numba and scipy (~1.8 s, ~200 MB per process), so the design is
saved in the cache dir, keyed by its parameters and librosa's version, and loaded from
there next time: librosa is imported at most once per machine.
"""

from __future__ import annotations

import functools
import os
import tempfile
from dataclasses import replace
from importlib import metadata
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    from cosyvoiced.listen.features.stream import MelSpec


def _librosa_version() -> str:
    try:
        return metadata.version("librosa")
    except metadata.PackageNotFoundError:
        return "none"


def filterbank_cache_path(spec: MelSpec, cache_dir: str | os.PathLike[str]) -> Path:
    """Where the filterbank of `spec` is cached (parameters and librosa's version)."""
    fmax = "nyq" if spec.fmax_hz is None else f"{spec.fmax_hz:g}"
    name = (f"melfb-sr{spec.rate_hz}-fft{spec.n_fft}-m{spec.n_mels}-f{spec.fmin_hz:g}-{fmax}"
            f"-librosa{_librosa_version()}.npy")
    return Path(cache_dir) / "mel" / name


def _design(spec: MelSpec) -> np.ndarray:
    import librosa.filters  # imported here: heavy (numba, scipy); only needed once

    return np.asarray(librosa.filters.mel(sr=spec.rate_hz, n_fft=spec.n_fft, n_mels=spec.n_mels,
                                          fmin=spec.fmin_hz, fmax=spec.fmax_hz,
                                          dtype=np.float64), dtype=np.float64)


def _load_cached(path: Path, shape: tuple[int, int]) -> np.ndarray | None:
    try:
        fb = np.load(path, allow_pickle=False)
    except (OSError, ValueError):
        return None
    if fb.shape != shape or fb.dtype != np.float64 or not np.isfinite(fb).all():
        return None  # a damaged or foreign file: design it again
    return fb


def _save_cached(path: Path, fb: np.ndarray) -> None:
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=path.parent, suffix=".tmp")
        with os.fdopen(fd, "wb") as f:
            np.save(f, fb, allow_pickle=False)
        os.replace(tmp, path)  # atomic: a concurrent reader sees the old or the whole file
    except OSError:
        pass  # a read-only cache only costs the librosa import next time


@functools.lru_cache(maxsize=16)
def _filterbank(spec: MelSpec, cache_dir: str | None) -> np.ndarray:
    shape = (spec.n_mels, spec.n_fft // 2 + 1)
    path = filterbank_cache_path(spec, cache_dir) if cache_dir else None
    fb = _load_cached(path, shape) if path is not None and path.is_file() else None
    if fb is None:
        fb = _design(spec)
        if path is not None:
            _save_cached(path, fb)
    fb.setflags(write=False)
    return fb


def mel_filterbank(spec: MelSpec, cache_dir: str | os.PathLike[str] | None = None) -> np.ndarray:
    """`[n_mels, n_fft // 2 + 1]` Slaney mel filterbank from librosa (float64, read-only),
    made once per process and, with `cache_dir`, once per machine."""
    return _filterbank(replace(spec, log="power", n_mfcc=0, whisper_tail=False,
                               pad_mode="constant", hop=1),
                       str(cache_dir) if cache_dir is not None else None)
