"""The models checked before any worker starts: Whisper's languages and `asr.language`."""

from __future__ import annotations

import json
import shutil
from dataclasses import replace
from pathlib import Path

from cosyvoiced.config.schema import AsrConfig, Config
from cosyvoiced.listen.models import BASE_WHEELS, recorded_file
from cosyvoiced.workers.preflight import model_problems


def asr(**kw) -> Config:
    return replace(Config(), asr=AsrConfig(**kw))


def test_asr_language_must_be_one_the_model_transcribes(tmp_path: Path):
    assert model_problems(asr()) == []
    assert model_problems(asr(language="en")) == []
    assert model_problems(asr(language="de")) == [
        ("asr.language", "the ASR model does not transcribe 'de'; it transcribes en")]
    # Whisper base's files (the weights are not read here)
    src = Path(recorded_file(BASE_WHEELS[0], "config.json").path).parent
    for name in ("config.json", "tokenizer.json", "vocabulary.txt"):
        shutil.copy(src / name, tmp_path / name)
    (tmp_path / "model.bin").write_bytes(b"\0")
    assert model_problems(asr(model_dir=str(tmp_path), language="german")) == []
    broken = shutil.copytree(tmp_path, tmp_path / "broken")
    config = json.loads((broken / "config.json").read_text())
    (broken / "config.json").write_text(json.dumps({**config, "lang_ids": []}))
    problems = model_problems(asr(model_dir=str(broken)))
    assert [k for k, _ in problems] == ["asr.model_dir"] and "names no languages" in problems[0][1]
