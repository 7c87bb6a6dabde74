"""Where NeMo's English grammars are kept, and building them when they are missing.

The grammars live in `<state_dir>/tn/<key>/`, the key naming the NeMo version they are
built from and a hash of the build's settings (a new version or new settings build anew,
beside the old). `make install` builds them (`python -m
cosyvoiced.tts.frontend.normalize.grammars STATE_DIR`); the daemon's start builds them
too where they are missing and the build tools (`nemo_text_processing`, `pynini`) are
installed, in a child process, before any worker starts: never on a request's path.
Without them the daemon still starts and says so (`tn_grammars_missing`): English is then
read by the hand-written rules.
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
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
    digest = hashlib.sha256(json.dumps(SETTINGS, sort_keys=True).encode()).hexdigest()[:10]
    return f"en-nemo{NEMO_VERSION}-{digest}"


def grammar_dir(state_dir: str | Path) -> Path:
    return Path(state_dir) / "tn" / grammar_key()


def built(directory: Path) -> bool:
    return (directory / DONE).is_file() and all((directory / f).is_file() for f in FILES)


def can_build() -> bool:
    """Whether the build tools are installed (looked up, not imported)."""
    return all(importlib.util.find_spec(m) is not None
               for m in ("nemo_text_processing", "pynini"))


def ensure(state_dir: str | Path) -> Path | None:
    """The grammar directory under `state_dir`, built first where missing and buildable;
    None (logged) where it is missing and cannot be built or the build failed."""
    directory = grammar_dir(state_dir)
    if built(directory):
        return directory
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


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print("usage: python -m cosyvoiced.tts.frontend.normalize.grammars STATE_DIR",
              file=sys.stderr)
        return 2
    t0 = time.monotonic()
    directory = ensure(argv[0])
    if directory is None:
        print("English text-normalization grammars: not built (see the log above)",
              file=sys.stderr)
        return 1
    print(f"English text-normalization grammars: {directory} "
          f"({time.monotonic() - t0:.1f} s)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
