"""The mel filterbank, designed once with `librosa.filters.mel` and cached on disk.

Its inputs are plain numbers (sample rate, n_fft, n_mels, fmin, fmax; Slaney scale and
norm, librosa's defaults, always), and so is its cache key: a new field of `MelSpec`
cannot split the cache, and this module needs nothing from `features.spec`.
librosa's import pulls numba and scipy (seconds and a large RSS per process), so the design is
saved in the cache dir, keyed by its parameters and librosa's version, and loaded from
there next time: librosa is imported at most once per machine.
"""

from __future__ import annotations

import functools
import os
import tempfile
from importlib import metadata
from pathlib import Path

import numpy as np

__all__ = ["filterbank_cache_path", "mel_filterbank"]


def _librosa_version() -> str:
    try:
        return metadata.version("librosa")
    except metadata.PackageNotFoundError:
        return "none"


def filterbank_cache_path(rate_hz: int, n_fft: int, n_mels: int, fmin_hz: float,
                          fmax_hz: float | None, cache_dir: str | os.PathLike[str]) -> Path:
    """Where this filterbank is cached (its parameters and librosa's version)."""
    fmax = "nyq" if fmax_hz is None else f"{fmax_hz:g}"
    name = (f"melfb-sr{rate_hz}-fft{n_fft}-m{n_mels}-f{fmin_hz:g}-{fmax}"
            f"-librosa{_librosa_version()}.npy")
    return Path(cache_dir) / "mel" / name


def _design(rate_hz: int, n_fft: int, n_mels: int, fmin_hz: float,
            fmax_hz: float | None) -> np.ndarray:
    import librosa.filters  # imported here: heavy (numba, scipy); only needed once

    return np.asarray(librosa.filters.mel(sr=rate_hz, n_fft=n_fft, n_mels=n_mels,
                                          fmin=fmin_hz, fmax=fmax_hz, dtype=np.float64),
                      dtype=np.float64)


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
def _filterbank(rate_hz: int, n_fft: int, n_mels: int, fmin_hz: float, fmax_hz: float | None,
                cache_dir: str | None) -> np.ndarray:
    shape = (n_mels, n_fft // 2 + 1)
    path = (filterbank_cache_path(rate_hz, n_fft, n_mels, fmin_hz, fmax_hz, cache_dir)
            if cache_dir else None)
    fb = _load_cached(path, shape) if path is not None and path.is_file() else None
    if fb is None:
        fb = _design(rate_hz, n_fft, n_mels, fmin_hz, fmax_hz)
        if path is not None:
            _save_cached(path, fb)
    fb.setflags(write=False)
    return fb


def mel_filterbank(rate_hz: int, n_fft: int, n_mels: int, fmin_hz: float = 0.0,
                   fmax_hz: float | None = None, *,
                   cache_dir: str | os.PathLike[str] | None = None) -> np.ndarray:
    """`[n_mels, n_fft // 2 + 1]` Slaney mel filterbank from librosa (float64, read-only),
    made once per process and, with `cache_dir`, once per machine; `fmax_hz` None is
    `rate_hz / 2`."""
    return _filterbank(int(rate_hz), int(n_fft), int(n_mels), float(fmin_hz),
                       None if fmax_hz is None else float(fmax_hz),
                       str(cache_dir) if cache_dir is not None else None)
