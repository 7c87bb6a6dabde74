"""Whisper tiny.en: prompt tokens, the encoder length policy, typed errors (real prompts
and batching: tests/e2e/test_asr.py)."""

from __future__ import annotations

import numpy as np
import pytest

from cosyvoiced.config.schema import AsrConfig
from cosyvoiced.listen.asr import AsrError, Utterance, WhisperAsr


@pytest.fixture(scope="module")
def asr():
    return WhisperAsr(AsrConfig())


def test_english_only_prompt_tokens(asr):
    assert asr.prompt == [50257, 50362]  # <|startoftranscript|><|notimestamps|> for tiny.en
    assert asr.eot == 50256


def test_encoder_length_policy(asr):
    assert asr.encoder_frames(50) == asr.cfg.min_encoder_frames
    assert asr.encoder_frames(2950) == 3000
    assert asr.encoder_frames(10_000) == 3000


def test_empty_and_bad_input(asr):
    assert asr.transcribe([]) == []
    with pytest.raises(AsrError) as e:
        asr.transcribe([Utterance(np.zeros((10, 40), dtype=np.float32), 0, 1, 0.0)])
    assert e.value.code == "asr_input"
    # Zero frames (an utterance cut to nothing) decodes to some text without failing.
    out = asr.transcribe([Utterance(np.zeros((0, 80), dtype=np.float32), 0, 0, 0.0)])
    assert len(out) == 1


def test_missing_model_dir_is_typed(tmp_path):
    with pytest.raises(AsrError) as e:
        WhisperAsr(AsrConfig(model_dir=str(tmp_path)))
    assert e.value.code == "asr_model_missing"


def test_english_only_model_hears_english_whatever_is_asked(asr):
    from cosyvoiced.listen.languages import LanguageError, model_languages

    assert asr.multilingual is False and asr.languages == ("en",)
    assert model_languages(asr.model_dir) == asr.languages  # the main process reads the same
    assert asr.prompt_for("en") == asr.prompt_for("") == asr.prompt
    assert asr.check_language("en-US") == "en"
    with pytest.raises(LanguageError) as e:
        asr.check_language("de")
    assert e.value.code == "unsupported_language"
    out = asr.transcribe([Utterance(np.zeros((50, 80), dtype=np.float32), 0, 500, 0.0)])
    assert out[0].language == "en"


def test_transcripts_are_the_tokenizers_own_text(monkeypatch):
    """The text made from CTranslate2's token strings is what the model's tokenizer.json
    decodes the same ids to: on real telephone speech, and for every token it may emit."""
    from tokenizers import Tokenizer

    from cosyvoiced.listen.asr import byte_level_text
    from cosyvoiced.testing.prompts import load_wav, prompts

    asr = WhisperAsr(AsrConfig())
    tok = Tokenizer.from_file(str(asr.model_dir / "tokenizer.json"))
    results = []
    generate = asr._model.generate

    def keep(*args, **kwargs):
        results.extend(out := generate(*args, **kwargs))
        return out

    monkeypatch.setattr(asr, "_model", type("M", (), {"generate": staticmethod(keep),
                                                      "n_mels": asr.n_mels})())
    for prompt in prompts()[:6]:
        results.clear()
        got = asr.transcribe_audio(load_wav(prompt.path))
        ids = [i for i in results[-1].sequences_ids[0] if i < asr.eot]
        assert got.text and got.text == tok.decode(ids).strip()
    vocab = sorted((i, t) for t, i in tok.get_vocab().items() if i < asr.eot)
    for lo in range(0, len(vocab), 97):  # runs of tokens, split UTF-8 sequences included
        chunk = vocab[lo:lo + 97]
        assert byte_level_text([t for _, t in chunk]) == tok.decode([i for i, _ in chunk])
