"""Where NeMo's English grammars are kept, and building them when they are missing.

A build lives in a directory named by its key: the NeMo version it is built from and a
hash of the build's settings (a new version or new settings build anew, beside the old).
Installing builds it into the environment, `<sys.prefix>/share/cosyvoiced/tn/<key>/`
(`make install` runs `python -m cosyvoiced.tts.frontend.normalize.grammars`), like any
compiled part of the install; the daemon looks there and in `<service.cache_dir>/tn/<key>/`,
and where neither holds a build and the build tools (`nemo_text_processing`, `pynini`)
are installed, its start builds one into the cache dir, in a child process, before any
worker starts: never on a request's path. Without them the daemon still starts and says
so (`tn_grammars_missing`): English is then read by the hand-written rules.
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import structlog

from cosyvoiced.tts.frontend.normalize.grammar_build import DONE, FILES

log = structlog.get_logger(__name__)

NEMO_VERSION = "1.2.0"
"""The nemo_text_processing release the grammars are built from (pinned in the Makefile)."""
SETTINGS = {"lang": "en", "input_case": "cased", "deterministic": True, "whitelist": None,
            "files": FILES}
"""What the build is asked for; a change here is a new key."""
BUILD_TIMEOUT_S = 600.0


def grammar_key() -> str:
    """The build's name: the NeMo version, and a hash of the settings and of the build
    step's own source (a changed build step is a new build, never a stale copy)."""
    build_step = Path(__file__).with_name("grammar_build.py").read_bytes()
    digest = hashlib.sha256(json.dumps(SETTINGS, sort_keys=True).encode() + build_step)
    return f"en-nemo{NEMO_VERSION}-{digest.hexdigest()[:10]}"


INSTALLED = Path(sys.prefix) / "share" / "cosyvoiced" / "tn"
"""Where the install builds the grammars (one directory per key)."""


def grammar_dir(cache_dir: str | Path | None) -> Path:
    """Where a build for `cache_dir` goes (None: the install's place)."""
    return (Path(cache_dir) / "tn" if cache_dir is not None else INSTALLED) / grammar_key()


def find(cache_dir: str | Path | None = None) -> Path | None:
    """The built grammars: under `cache_dir` first, else the install's; None if neither."""
    for directory in (grammar_dir(cache_dir), grammar_dir(None)):
        if built(directory):
            return directory
    return None


def built(directory: Path) -> bool:
    return (directory / DONE).is_file() and all((directory / f).is_file() for f in FILES)


def can_build() -> bool:
    """Whether the build tools are installed (looked up, not imported)."""
    return all(importlib.util.find_spec(m) is not None
               for m in ("nemo_text_processing", "pynini"))


def ensure(cache_dir: str | Path | None = None) -> Path | None:
    """The built grammars (`find`), built first into `grammar_dir(cache_dir)` where
    missing and buildable; None (logged) where missing and not buildable, or the build
    failed."""
    found = find(cache_dir)
    if found is not None:
        return found
    directory = grammar_dir(cache_dir)
    if not can_build():
        log.warning("tn_grammars_missing", path=str(directory),
                    hint="English is read by the hand-written rules; `make install` "
                         "installs nemo_text_processing and pynini and builds them")
        return None
    log.info("tn_grammars_building", path=str(directory),
             hint="once per NeMo version, ~40 s")
    t0 = time.monotonic()
    try:
        done = subprocess.run(
            [sys.executable, "-m", "cosyvoiced.tts.frontend.normalize.grammar_build",
             str(directory)], capture_output=True, text=True, timeout=BUILD_TIMEOUT_S,
            check=False)
    except subprocess.TimeoutExpired:
        log.error("tn_grammars_build_failed", path=str(directory),
                  error=f"no result in {BUILD_TIMEOUT_S:.0f} s")
        return None
    if done.returncode != 0 or not built(directory):
        log.error("tn_grammars_build_failed", path=str(directory), status=done.returncode,
                  error=done.stderr.strip().splitlines()[-1:] or "")
        return None
    log.info("tn_grammars_built", path=str(directory),
             seconds=round(time.monotonic() - t0, 1))
    return directory


def reuse(directory: Path, shelf: Path) -> bool:
    """Copy the build kept on `shelf` (a per-user cache, e.g. ~/.cache/cosyvoiced/tn) to
    `directory` where `directory` has none; True if `directory` is built after."""
    kept = shelf / directory.name
    if built(directory) or not built(kept):
        return built(directory)
    tmp = directory.with_name(f".{directory.name}-{os.getpid()}")
    shutil.rmtree(tmp, ignore_errors=True)
    shutil.copytree(kept, tmp)
    directory.parent.mkdir(parents=True, exist_ok=True)
    os.replace(tmp, directory)
    return True


def shelve(directory: Path, shelf: Path) -> None:
    """Keep a copy of the build on `shelf` for the next install (best effort)."""
    kept = shelf / directory.name
    if built(kept):
        return
    tmp = kept.with_name(f".{kept.name}-{os.getpid()}")
    try:
        shutil.rmtree(tmp, ignore_errors=True)
        shutil.copytree(directory, tmp)
        os.replace(tmp, kept)
    except OSError as exc:
        shutil.rmtree(tmp, ignore_errors=True)
        print(f"English text-normalization grammars: not kept in {shelf}: {exc}",
              file=sys.stderr)


def main(argv: list[str]) -> int:
    """`grammars [--shelf DIR] [CACHE_DIR]`: build where missing (default: into the
    install); with `--shelf`, a build kept there is copied instead of built again (a new
    checkout of the same version installs in a second, not ~40 s), and a new build is
    kept there."""
    shelf: Path | None = None
    if argv[:1] == ["--shelf"] and len(argv) >= 2:
        shelf, argv = Path(argv[1]), argv[2:]
    if len(argv) > 1 or (argv and argv[0].startswith("-")):
        print("usage: python -m cosyvoiced.tts.frontend.normalize.grammars "
              "[--shelf DIR] [CACHE_DIR]", file=sys.stderr)
        return 2
    t0 = time.monotonic()
    target = grammar_dir(argv[0] if argv else None)
    if shelf is not None and reuse(target, shelf):
        shelve(target, shelf)  # one built here before the shelf was used
        print(f"English text-normalization grammars: {target} (from {shelf}, "
              f"{time.monotonic() - t0:.1f} s)")
        return 0
    directory = ensure(argv[0] if argv else None)
    if directory is None:
        print("English text-normalization grammars: not built (see the log above)",
              file=sys.stderr)
        return 1
    if shelf is not None and directory == target:
        shelve(directory, shelf)
    print(f"English text-normalization grammars: {directory} "
          f"({time.monotonic() - t0:.1f} s)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
