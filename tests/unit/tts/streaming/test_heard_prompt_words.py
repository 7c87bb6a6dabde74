"""The prompt cache keeps a sentence's word times with its audio (what a call's say
reports as heard comes from them), by the sentence's own spans."""

from __future__ import annotations

import numpy as np

from cosyvoiced.tts.frontend.segments import SourceSpan
from cosyvoiced.tts.request import WordTime
from cosyvoiced.tts.streaming.prompt_cache import PromptCache, PromptKey, keep_words

SENTENCE = "five dollars today"
"""A sentence as the voice reads it: `$5 today` written."""


def key(text: str = SENTENCE) -> PromptKey:
    return PromptKey("joe:fp32:1:2", text, False, 1.0, 0.667, 0.8, None, "chunked")


def spans(at: int) -> tuple[SourceSpan, ...]:
    """`$5 today` at offset `at` of a request's input."""
    return (SourceSpan(0, 12, at, at + 2), SourceSpan(13, 18, at + 3, at + 8))


def words(at: int, source: str) -> list[WordTime]:
    return [WordTime(source[at:at + 2], at, at + 2, 0.05, 0.6),
            WordTime(source[at + 3:at + 8], at + 3, at + 8, 0.65, 1.0)]


def test_words_kept_with_a_sentence_map_to_another_input():
    cache = PromptCache(1 << 20)
    first = "$5 today"
    cache.put(key(), np.zeros(1000, dtype=np.float32),
              words=keep_words(words(0, first), spans(0)))
    source = "Pay $5 today"
    audio, told = cache.lookup(key(), True, spans(4), source)
    assert audio is not None and cache.hits == 1
    assert told == words(4, source)
    assert [source[w.char_start:w.char_end] for w in told] == ["$5", "today"]


def test_a_sentence_kept_without_words_is_a_miss_when_words_are_asked():
    cache = PromptCache(1 << 20)
    cache.put(key(), np.zeros(1000, dtype=np.float32))  # a request without words
    assert cache.samples(key()) == 1000 and cache.samples(key(), words=True) is None
    assert cache.lookup(key(), True, spans(0), "$5 today") == (None, [])
    assert cache.misses == 1
    got, told = cache.lookup(key(), False, spans(0), "$5 today")
    assert got is not None and told == []


def test_other_spans_new_audio_or_eviction_drop_the_words():
    cache = PromptCache(10_000)
    kept = keep_words(words(0, "$5 today"), spans(0))
    cache.put(key(), np.zeros(1000, dtype=np.float32), words=kept)
    # the same sentence read from other writing ("five dollars today"): spans differ
    plain = (SourceSpan(0, 4, 0, 4), SourceSpan(5, 12, 5, 12), SourceSpan(13, 18, 13, 18))
    assert cache.lookup(key(), True, plain, SENTENCE) == (None, [])
    cache.put(key(), np.ones(1000, dtype=np.float32))  # new audio without words
    assert cache.samples(key(), words=True) is None
    cache.put(key(), np.zeros(1000, dtype=np.float32), words=kept)
    cache.put(key("a"), np.zeros(1000, dtype=np.float32))
    cache.put(key("b"), np.zeros(1000, dtype=np.float32))  # the first one out
    assert cache.samples(key()) is None and not cache._words
    assert keep_words([WordTime("x", 1, 2, 0.0, 0.1)], spans(0)) is None  # no span of its own
