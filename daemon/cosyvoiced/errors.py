"""The root of every error the daemon raises on purpose.

Each stage keeps its own error classes (TtsError, WorkerError, AlsaError...); they all
derive from `CosyvoicedError`, so one `except` catches the daemon's own failures and one
table (serve/errors.py) turns their stable `code` into an HTTP status. This module sits
below every stage and imports nothing from the package.
"""

from __future__ import annotations

__all__ = ["CosyvoicedError"]


class CosyvoicedError(Exception):
    """An error with a stable `code` clients and logs can match on.

    Subclasses set `code` as a class attribute; an instance may override it with
    `code=` (the worker pool reports the code a worker sent).
    """

    code: str = "cosyvoiced_error"

    def __init__(self, *args: object, code: str | None = None) -> None:
        super().__init__(*args)
        if code is not None:
            self.code = code
