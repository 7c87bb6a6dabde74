"""The prompt cache on its own: keys, the byte bound, the directory shared by workers."""

from __future__ import annotations

import os

import numpy as np

from cosyvoiced.tts.streaming.prompt_cache import MAX_PROMPTS, PromptCache, PromptKey, read_prompts


def key(text: str = "Thank you for calling.", **kw) -> PromptKey:
    fields = {"voice": "joe:fp32:1:2", "text": text, "phonemes": False, "length_scale": 1.0,
              "noise_scale": 0.667, "noise_w": 0.8, "speaker": None, "decode": "chunked"}
    return PromptKey(**{**fields, **kw})


def audio(seconds: float, value: float = 0.1) -> np.ndarray:
    return np.full(int(seconds * 1000), value, dtype=np.float32)  # 1 kHz: 4 kB a second


def test_every_setting_that_shapes_the_audio_is_in_the_key():
    base = key().digest()
    others = [key(text="Thank you for calling!"), key(phonemes=True), key(length_scale=1.1),
              key(noise_scale=0.0), key(noise_w=0.0), key(speaker=1), key(decode="whole"),
              key(voice="joe:fp32:1:3")]
    assert len({base, *(k.digest() for k in others)}) == len(others) + 1
    assert key().digest() == base


def test_a_hit_returns_what_was_put_read_only_and_counts():
    cache = PromptCache(1 << 20)
    assert cache.get(key()) is None
    cache.put(key(), audio(1.0))
    got = cache.get(key())
    assert got is not None and np.array_equal(got, audio(1.0)) and not got.flags.writeable
    assert (cache.hits, cache.misses, cache.samples(key())) == (1, 1, 1000)
    assert cache.samples(key("Goodbye.")) is None and cache.misses == 1  # a peek counts nothing


def test_the_byte_bound_drops_the_least_recently_used():
    cache = PromptCache(10_000)  # room for two seconds of 4 kB
    cache.put(key("a"), audio(1.0))
    cache.put(key("b"), audio(1.0))
    assert cache.get(key("a")) is not None  # a is now the most recent
    cache.put(key("c"), audio(1.0))
    assert cache.samples(key("b")) is None and cache.samples(key("a")) == 1000
    assert cache.bytes <= 10_000 and len(cache) == 2
    cache.put(key("huge"), audio(3.0))  # larger than the whole bound: not kept
    assert cache.samples(key("huge")) is None and len(cache) == 2


def test_off_keeps_nothing():
    cache = PromptCache(0, "/nonexistent")
    cache.put(key(), audio(1.0))
    assert cache.get(key()) is None and cache.directory is None and cache.bytes == 0


def test_a_sentence_heard_twice_is_shared_through_the_directory(tmp_path):
    first = PromptCache(1 << 20, tmp_path)
    first.put(key(), audio(1.0))
    assert list(tmp_path.iterdir()) == []  # said once: memory only
    first.get(key())
    assert len(list(tmp_path.iterdir())) == 1
    other = PromptCache(1 << 20, tmp_path)  # another worker, or the next start
    got = other.get(key())
    assert got is not None and np.array_equal(got, audio(1.0)) and other.hits == 1
    warmed = PromptCache(1 << 20, tmp_path)
    warmed.put(key("Please hold."), audio(0.5), persist=True)  # warmed prompts: at once
    assert len(list(tmp_path.iterdir())) == 2


def test_the_directory_is_held_to_the_bound_oldest_out(tmp_path):
    cache = PromptCache(10_000, tmp_path)
    for n, text in enumerate("abc"):
        cache.put(key(text), audio(1.0), persist=True)
        path = tmp_path / f"{key(text).digest()}.f32"
        os.utime(path, (1000 + n, 1000 + n))
    files = {p.name for p in tmp_path.iterdir()}
    assert f"{key('a').digest()}.f32" not in files and len(files) == 2


def test_a_bad_file_is_a_miss_not_an_error(tmp_path):
    (tmp_path / f"{key().digest()}.f32").write_bytes(np.full(4, np.nan, "<f4").tobytes())
    cache = PromptCache(1 << 20, tmp_path)
    assert cache.get(key()) is None and cache.misses == 1


def test_an_unwritable_directory_leaves_the_memory_cache_working(tmp_path):
    blocked = tmp_path / "file"
    blocked.write_text("not a directory")
    cache = PromptCache(1 << 20, blocked / "prompts")
    cache.put(key(), audio(1.0), persist=True)
    assert cache.get(key()) is not None


def test_prompts_file_skips_comments_and_is_bounded(tmp_path):
    path = tmp_path / "prompts.txt"
    path.write_text("# greetings\nThank you for calling.\n\n  Please hold.  \n")
    assert read_prompts(path) == ["Thank you for calling.", "Please hold."]
    path.write_text("\n".join(f"Prompt {n}." for n in range(MAX_PROMPTS + 5)))
    assert len(read_prompts(path)) == MAX_PROMPTS
