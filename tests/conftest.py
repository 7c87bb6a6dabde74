"""Shared fixtures. Fixture modules live in tests/fixtures/ and are listed here."""

from __future__ import annotations

from pathlib import Path

import pytest

pytest_plugins: list[str] = ["tests.fixtures.daemon", "tests.fixtures.workers", "tests.fixtures.pulse",
                             "tests.fixtures.journal", "tests.fixtures.rings"]

REPO = Path(__file__).resolve().parent.parent
E2E = REPO / "tests" / "e2e"


@pytest.hookimpl(tryfirst=True)  # before `-m` deselects by mark
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Every test under tests/e2e/ is `e2e`, and only those: `-m "not e2e"` is the unit loop."""
    misplaced = [item.nodeid for item in items
                 if not item.path.is_relative_to(E2E) and item.get_closest_marker("e2e")]
    if misplaced:
        raise pytest.UsageError("e2e tests belong in tests/e2e/: " + ", ".join(misplaced))
    for item in items:
        if item.path.is_relative_to(E2E):
            item.add_marker(pytest.mark.e2e)


@pytest.fixture(scope="session")
def repo_root() -> Path:
    return REPO
