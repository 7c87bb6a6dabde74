"""`opt`: a config field with the loader's metadata (range, must-exist, live)."""

from __future__ import annotations

from dataclasses import field
from typing import Any


def opt(default: Any, *, min: float | None = None, max: float | None = None,  # noqa: A002
        live: bool = False, must_exist: str | None = None) -> Any:
    """A field with loader metadata; immutable defaults only (tuples, not lists)."""
    meta = {"min": min, "max": max, "live": live, "must_exist": must_exist}
    return field(default=default, metadata=meta)
