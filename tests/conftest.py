"""Shared fixtures. Fixture modules live in tests/fixtures/ and are listed here."""

from __future__ import annotations

from pathlib import Path

import pytest

pytest_plugins: list[str] = ["tests.fixtures.daemon", "tests.fixtures.workers", "tests.fixtures.pulse"]

REPO = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="session")
def repo_root() -> Path:
    return REPO
