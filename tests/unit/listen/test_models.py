"""Whisper base joined from its two wheels, every byte checked against their RECORDs."""

from __future__ import annotations

import base64
import hashlib
import json
from pathlib import Path

import pytest

from cosyvoiced.listen.models import (
    BASE_WHEELS,
    STAMP,
    ModelFileError,
    RecordedFile,
    assemble,
    recorded_file,
)


def recorded(path: Path) -> RecordedFile:
    data = path.read_bytes()
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
    return RecordedFile(str(path), len(data), digest)


@pytest.fixture
def parts(tmp_path: Path) -> tuple[list[RecordedFile], dict[str, RecordedFile]]:
    (tmp_path / "src").mkdir()
    one, two, cfg = (tmp_path / "src" / n for n in ("p1", "p2", "config.json"))
    one.write_bytes(b"A" * 3000)
    two.write_bytes(b"B" * 1234)
    cfg.write_text("{}")
    return [recorded(one), recorded(two)], {"config.json": recorded(cfg)}


def test_model_bin_is_part_one_then_part_two_and_a_second_run_keeps_it(tmp_path, parts):
    dest = tmp_path / "model"
    assert assemble(*parts, dest) is True
    assert (dest / "model.bin").read_bytes() == b"A" * 3000 + b"B" * 1234
    assert (dest / "config.json").read_text() == "{}"
    assert json.loads((dest / STAMP).read_text())["model.bin"][1]["size"] == 1234
    assert assemble(*parts, dest) is False  # already there
    (dest / "model.bin").write_bytes(b"short")
    assert assemble(*parts, dest) is True  # not what the stamp says: written again
    assert (dest / "model.bin").stat().st_size == 4234
    assert sorted(p.name for p in dest.iterdir()) == [STAMP, "config.json", "model.bin"]


def test_a_part_that_is_not_its_recorded_bytes_writes_nothing(tmp_path, parts):
    bins, files = parts
    Path(bins[1].path).write_bytes(b"B" * 1233 + b"C")  # same size, other bytes
    dest = tmp_path / "model"
    with pytest.raises(ModelFileError) as err:
        assemble(bins, files, dest)
    assert err.value.code == "asr_model_files" and "sha256" in str(err.value)
    assert list(dest.iterdir()) == []  # no model.bin, no partial file left


def test_the_installed_wheels_are_found_with_their_records():
    part1 = recorded_file(BASE_WHEELS[0], "model.bin.part1")
    part2 = recorded_file(BASE_WHEELS[1], "model.bin.part2")
    assert Path(part1.path).stat().st_size == part1.size > 50_000_000
    assert part1.size == part2.size == 72_608_766  # two halves of a 145 MB model.bin
    with pytest.raises(ModelFileError) as err:
        recorded_file("no-such-wheel-here", "model.bin.part1")
    assert err.value.code == "asr_model_missing"
