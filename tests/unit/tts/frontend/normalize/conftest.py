"""NeMo's English grammars in use for a module's tests (the rules again after)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from cosyvoiced.tts.frontend.normalize import use_grammars
from cosyvoiced.tts.frontend.normalize.grammars import ensure


@pytest.fixture(scope="module")
def grammars() -> Iterator[Path]:
    directory = ensure()  # built by `make install`; built here (~40 s) where it was not
    assert directory is not None, "NeMo's English grammars are not built and cannot be"
    assert use_grammars(directory)
    yield directory
    use_grammars(None)
