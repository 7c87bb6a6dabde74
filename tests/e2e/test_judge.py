"""The Whisper judge's small real round trip: the bundled voice speaks, Whisper scores it."""

from __future__ import annotations

from types import ModuleType

import pytest
import tools.judge_systems as judge_systems
import tools.wer as wer

from cosyvoiced.tts.voice.catalog import bundled_voice


@pytest.fixture(scope="module")
def judge(repo_root) -> ModuleType:
    import tools.judge as module

    return module


def test_whisper_round_trip(judge):
    texts = ["Thank you for calling, how can I help you today?",
             "Your payment of $49.99 was received on March 14, 2024.",
             "Please call us back at 555-867-5309.",
             "Your appointment is on June 2nd at 3:30 PM.",
             "The refund will appear in 5 to 7 business days."]
    voice = bundled_voice()
    whisper = judge.WhisperJudge(threads=2)
    run = judge.judge_model(voice.model_path, voice.config_path, texts, [1], whisper, log=False)
    scores = wer.score(judge_systems.spoken_references(texts), run.hyps_by_seed)
    assert scores.wer < 0.15, run.hyps_by_seed
    assert scores.cer < 0.10
