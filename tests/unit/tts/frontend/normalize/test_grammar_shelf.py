"""The grammars' per-user shelf: a build kept there is copied into a new install instead of
built again, and a new build is kept there."""

from __future__ import annotations

import pytest

from cosyvoiced.tts.frontend.normalize import grammars
from cosyvoiced.tts.frontend.normalize.grammar_build import DONE, FILES


def _fake_build(directory, tag: str = "x") -> None:
    directory.mkdir(parents=True)
    for name in (*FILES, DONE):
        (directory / name).write_text(f"{tag}:{name}")


def test_a_build_on_the_shelf_is_copied_where_there_is_none(tmp_path, monkeypatch):
    shelf, install = tmp_path / "shelf", tmp_path / "install"
    monkeypatch.setattr(grammars, "INSTALLED", install)
    key = grammars.grammar_key()
    _fake_build(shelf / key, "kept")
    monkeypatch.setattr(grammars, "ensure", lambda _cache: pytest.fail("built again"))
    assert grammars.main(["--shelf", str(shelf)]) == 0
    assert grammars.built(install / key)
    assert (install / key / FILES[0]).read_text() == f"kept:{FILES[0]}"
    assert not [p for p in install.iterdir() if p.name.startswith(".")]  # no leftovers


def test_a_new_build_is_kept_on_the_shelf(tmp_path, monkeypatch):
    shelf, install = tmp_path / "shelf", tmp_path / "install"
    monkeypatch.setattr(grammars, "INSTALLED", install)
    key = grammars.grammar_key()

    def build(cache_dir):
        assert cache_dir is None
        _fake_build(install / key, "new")
        return install / key

    monkeypatch.setattr(grammars, "ensure", build)
    assert grammars.main(["--shelf", str(shelf)]) == 0
    assert grammars.built(shelf / key)
    assert (shelf / key / FILES[0]).read_text() == f"new:{FILES[0]}"


def test_the_key_names_the_build_step_itself(monkeypatch, tmp_path):
    before = grammars.grammar_key()
    step = tmp_path / "grammar_build.py"
    step.write_text("# another build step\n")
    monkeypatch.setattr(grammars, "__file__", str(tmp_path / "grammars.py"))
    assert grammars.grammar_key() != before


def test_bad_arguments_are_a_usage_error(capsys):
    assert grammars.main(["--shelf"]) == 2
    assert grammars.main(["--bogus"]) == 2
    assert "usage" in capsys.readouterr().err
