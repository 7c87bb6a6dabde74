"""Word times from the real voice's own phoneme durations: on the audio's timeline,
scaled by speed, shifted by breaks, mapped back to what the caller wrote."""

from __future__ import annotations

import numpy as np
import pytest

from cosyvoiced.config.schema import TtsConfig
from cosyvoiced.tts.engine import TtsEngine
from cosyvoiced.tts.frontend.phonemize import text_phonemes, to_ids
from cosyvoiced.tts.request import SynthesisOptions
from cosyvoiced.tts.streaming.synthesis import model_inputs

TEXT = "In the end, it costs $5 on January 5th, 2024. Press one, then the pound key."


@pytest.fixture(scope="module")
def engine(tmp_path_factory: pytest.TempPathFactory) -> TtsEngine:
    return TtsEngine(TtsConfig(precision="fp32", vocoder="fp32", flow="fp32", cache_mb=0),
                     cache_dir=str(tmp_path_factory.mktemp("cache")))


def say(engine: TtsEngine, text: str, **kw: object) -> tuple[list, np.ndarray, int]:
    options = SynthesisOptions(words=True, format="float32", noise_w_scale=0.0, **kw)
    chunks = list(engine.synthesize(text, options))
    return chunks, np.concatenate([c.audio for c in chunks]), chunks[0].rate_hz


def test_words_are_monotone_inside_the_audio_and_told_with_their_chunk(engine) -> None:
    chunks, audio, rate = say(engine, TEXT)
    words = [w for c in chunks for w in c.words]
    assert [w.text for w in words][:6] == ["In", "the", "end,", "it", "costs", "$5"]
    assert words[-1].text == "key."
    for a, b in zip(words, words[1:], strict=False):
        assert a.start_s <= a.end_s <= b.start_s
    assert 0 <= words[0].start_s and words[-1].end_s <= audio.size / rate
    made = 0.0
    for c in chunks:  # each word comes with the chunk its start is in, or one before
        made += c.duration_s
        assert all(w.start_s < made for w in c.words)


def test_durations_sum_to_the_sentence_audio(engine) -> None:
    voice = engine.voice(None, None)
    split = voice.split
    assert split is not None and split.durations is not None
    ids = to_ids(text_phonemes("Press one, then the pound key.", voice.config),
                 voice.config.phoneme_id_map)
    sentence = split.sentence(model_inputs(ids, 1.0, 0.667, 0.0, None))
    assert sentence.durations is not None and sentence.durations.size == len(ids)
    assert abs(float(sentence.durations.sum()) - sentence.frames) < 1  # within one hop


def test_spans_map_back_to_the_input(engine) -> None:
    chunks, _, _ = say(engine, TEXT)
    words = {w.text: w for c in chunks for w in c.words}
    money = words["$5"]
    assert TEXT[money.char_start:money.char_end] == "$5"
    assert "January 5th, 2024." in words


@pytest.mark.parametrize("speed", [0.5, 2.0])
def test_speed_scales_the_times(engine, speed: float) -> None:
    base = [w for c in say(engine, TEXT)[0] for w in c.words]
    scaled = [w for c in say(engine, TEXT, length_scale=1 / speed)[0] for w in c.words]
    assert [w.text for w in scaled] == [w.text for w in base]
    # the first sentence's speech (the pause after it does not scale; each phoneme's
    # frames are rounded up, so a faster reading comes out a little longer)
    ratio = (scaled[4].end_s - scaled[0].start_s) / (base[4].end_s - base[0].start_s)
    assert 0.9 / speed < ratio < 1.25 / speed, ratio


def test_a_break_shifts_the_words_after_it(engine) -> None:
    plain = [w for c in say(engine, "<speak>Hello there. Press one.</speak>", ssml=True)[0]
             for w in c.words]
    doc = '<speak>Hello there. <break time="1500ms"/> Press one.</speak>'
    paused = [w for c in say(engine, doc, ssml=True)[0] for w in c.words]
    assert [w.text for w in paused] == ["Hello", "there.", "Press", "one."]
    assert doc[paused[2].char_start:paused[2].char_end] == "Press"
    assert paused[2].start_s - plain[2].start_s > 1.3


def test_phoneme_and_say_as_words_map_to_their_source(engine) -> None:
    doc = ('<speak>I like <phoneme alphabet="ipa" ph="təˈmɑːtoʊ">tomato</phoneme> soup on '
           '<say-as interpret-as="date" format="mdy">12/25/2024</say-as>.</speak>')
    words = [w for c in say(engine, doc, ssml=True)[0] for w in c.words]
    assert [w.text for w in words] == ["I", "like", "tomato", "soup", "on", "12/25/2024"]
    assert all(doc[w.char_start:w.char_end] == w.text for w in words)
