"""Shared fixtures. Fixture modules live in tests/fixtures/ and are listed here."""

from __future__ import annotations

from pathlib import Path

import pytest

pytest_plugins: list[str] = ["tests.fixtures.daemon", "tests.fixtures.workers", "tests.fixtures.pulse",
                             "tests.fixtures.journal", "tests.fixtures.rings"]

REPO = Path(__file__).resolve().parent.parent
E2E = REPO / "tests" / "e2e"
SIDE_BY_SIDE = frozenset({
    "test_asr.py", "test_asr_process.py", "test_cache_unwritable.py", "test_connection_caps.py",
    "test_contrib.py", "test_hostile_http.py", "test_int8_voice.py", "test_judge.py",
    "test_language.py", "test_listen.py", "test_listen_input.py", "test_logging.py",
    "test_openai.py", "test_pronunciation.py", "test_reload.py", "test_sandbox.py",
    "test_shm_sweep.py", "test_tts.py", "test_tts_flow.py", "test_tts_words.py", "test_vad.py",
    "test_worker_template.py", "test_wyoming.py"})
"""e2e modules that hold with another test running beside them: what they assert does not
hang on the box's pace (no paced device, call, load ramp or real-time figure). They are
`side_by_side`: `make test` runs them two at a time with the unit tests, the rest alone. A
test in another module may be marked `side_by_side` on its own."""


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
            if item.path.name in SIDE_BY_SIDE:
                item.add_marker(pytest.mark.side_by_side)


@pytest.fixture(scope="session")
def repo_root() -> Path:
    return REPO
