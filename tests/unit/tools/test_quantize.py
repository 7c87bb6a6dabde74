"""INT8 recipes: node groups, node selection, the gate decision and the sweep's distance."""

from __future__ import annotations

import numpy as np
import pytest


@pytest.fixture(scope="module")
def tools(repo_root):
    from tools.quantize import cli as quantize
    from tools.quantize import recipes as quantize_recipes
    from tools.quantize import sweep as quantize_sweep

    return quantize, quantize_recipes, quantize_sweep


NODES = ["/enc_p/emb/Gather", "/enc_p/encoder/attn_layers.0/MatMul", "/dp/flows.7/convs/Conv",
         "/flow/flows.0/enc/in_layers.0/Conv", "/dec/conv_pre/Conv", "/dec/LeakyRelu",
         "/dec/ups.0/ConvTranspose", "/dec/resblocks.0/convs.0/Conv", "/dec/resblocks.8/Add_1",
         "/dec/Add_5", "/dec/LeakyRelu_3", "/dec/conv_post/Conv", "/dec/Tanh", "Add_5591"]


def test_node_groups(tools):
    _, rec, _ = tools
    assert [rec.node_group(n) for n in NODES] == [
        "enc_p", "enc_p", "dp", "flow", "dec/conv_pre", "dec/top", "dec/ups.0",
        "dec/resblocks.0", "dec/resblocks.8", "dec/top", "dec/top", "dec/conv_post", "dec/top",
        "other"]


def test_select_nodes_scope_and_fp32_nodes(tools):
    _, rec, _ = tools
    r = rec.RECIPES["static_qdq_dec_add_lrelu_fp32post"]
    include, exclude = rec.select_nodes(NODES, r)
    assert exclude == ["/dec/LeakyRelu_3", "/dec/conv_post/Conv"]
    assert include == [n for n in NODES if n.startswith("/dec/") and n not in exclude]
    # whole graph, a group kept FP32 by name
    whole = rec.with_fp32(rec.RECIPES["static_qdq_per_channel"], ("dec/resblocks.8", "flow"))
    include, exclude = rec.select_nodes(NODES, whole)
    assert include is None
    assert exclude == ["/flow/flows.0/enc/in_layers.0/Conv", "/dec/resblocks.8/Add_1"]
    assert whole.name == "static_qdq_per_channel" and whole.op_types == ("Conv", "MatMul")


def test_every_recipe_is_buildable_by_kind(tools):
    _, rec, _ = tools
    for name, r in rec.RECIPES.items():
        assert r.name == name
        assert r.kind in ("dynamic", "static")
        assert r.calibration in ("MinMax", "Percentile", "Entropy")


def test_mel_distance_floor(tools):
    _, _, sweep = tools
    ref = np.array([[0.0, -2.0], [-9.0, -9.0]])
    assert sweep.mel_distance(ref, ref, 80) == 0.0
    quiet_noise = ref.copy()
    quiet_noise[1] = -5.0  # noise 50 dB under the peak, where the reference is 90 dB under
    assert sweep.mel_distance(quiet_noise, ref, 80) == pytest.approx((0 + 0 + 3 + 3) / 4)
    assert sweep.mel_distance(quiet_noise, ref, 40) == pytest.approx(0.0)
    longer = np.vstack([quiet_noise, [[1.0, 1.0]]])  # only common frames count
    assert sweep.mel_distance(longer, ref, 40) == pytest.approx(0.0)


def test_log_mel_of_a_tone(tools):
    _, _, sweep = tools
    rate_hz = 22050
    t = np.arange(rate_hz) / rate_hz
    mel = sweep.log_mel(np.sin(2 * np.pi * 1000 * t).astype(np.float32), rate_hz)
    assert mel.shape == (rate_hz // sweep.HOP, sweep.N_MELS)
    peak_bins = np.argmax(mel, axis=1)
    assert np.all(peak_bins == peak_bins[len(peak_bins) // 2])  # one steady band
    silent = sweep.log_mel(np.zeros(4096, np.float32), rate_hz)
    assert np.all(silent == -10.0)


@pytest.mark.parametrize("stride", [2, 4, 8])
def test_conv_transpose_rewrite_is_exact(repo_root, stride, tmp_path):
    import onnx
    import onnxruntime as ort
    from onnx import TensorProto, helper, numpy_helper
    from tools.quantize import graph as quantize_graph

    rng = np.random.default_rng(stride)
    c_in, c_out, k = 6, 5, 2 * stride
    w = rng.standard_normal((c_in, c_out, k)).astype(np.float32)
    b = rng.standard_normal(c_out).astype(np.float32)
    node = helper.make_node("ConvTranspose", ["x", "w", "b"], ["y"], name="/dec/ups.0/ConvTranspose",
                            strides=[stride], pads=[stride // 2, stride // 2], kernel_shape=[k])
    other = helper.make_node("ConvTranspose", ["x", "w", "b"], ["z"], name="/flow/ConvTranspose",
                             strides=[stride], pads=[stride // 2, stride // 2], kernel_shape=[k])
    graph = helper.make_graph(
        [node, other], "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, c_in, None])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, c_out, None]),
         helper.make_tensor_value_info("z", TensorProto.FLOAT, [1, c_out, None])],
        [numpy_helper.from_array(w, "w"), numpy_helper.from_array(b, "b")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 15)])
    before, after = tmp_path / "before.onnx", tmp_path / "after.onnx"
    onnx.save(model, str(before))
    assert quantize_graph.rewrite_conv_transpose(model) == 1  # only under /dec/
    onnx.checker.check_model(model)
    onnx.save(model, str(after))
    assert [n.op_type for n in model.graph.node].count("ConvTranspose") == 1
    x = rng.standard_normal((1, c_in, 37)).astype(np.float32)
    y0, z0 = ort.InferenceSession(str(before), providers=["CPUExecutionProvider"]).run(None, {"x": x})
    y1, z1 = ort.InferenceSession(str(after), providers=["CPUExecutionProvider"]).run(None, {"x": x})
    assert y1.shape == y0.shape == (1, c_out, 37 * stride)
    np.testing.assert_allclose(y1, y0, atol=1e-5)
    np.testing.assert_array_equal(z1, z0)


def test_polyphase_weight_rejects_other_kernels(repo_root):
    from tools.quantize import graph as quantize_graph

    with pytest.raises(ValueError):
        quantize_graph.polyphase_weight(np.zeros((2, 2, 6), np.float32), 4)


def test_describe_names_what_is_kept_fp32(tools):
    quantize, rec, _ = tools
    line = quantize.describe(rec.RECIPES["static_qdq_dec_poly_p9999_conv"])
    assert "Conv in /dec/" in line and "Percentile 99.99" in line
    assert "/dec/conv_post/Conv" in line and "depth-to-time" in line
    assert quantize.describe(rec.RECIPES["dyn_qint8_default"]).endswith("default ops")


def test_default_variants_are_recipes_that_keep_the_last_stage_fp32(tools):
    quantize, rec, _ = tools
    assert quantize.VARIANTS and set(quantize.VARIANTS) <= set(rec.RECIPES)
    for name in quantize.VARIANTS:
        kept = rec.RECIPES[name].keep_fp32
        assert set(rec.DECODER_LAST_STAGE_CONVS) <= set(kept) and "/dec/conv_post/Conv" in kept


@pytest.mark.parametrize("stride", [2, 8])
def test_conv_transpose_rewrite_of_the_2d_decoder_is_exact(repo_root, stride, tmp_path):
    """The voices' 2-D decoder form (unit first spatial axis) is rewritten too, in 2-D."""
    import onnx
    import onnxruntime as ort
    from onnx import TensorProto, helper, numpy_helper
    from tools.quantize import graph as quantize_graph

    rng = np.random.default_rng(stride)
    c_in, c_out, k, p = 6, 5, 2 * stride, stride // 2
    w = rng.standard_normal((c_in, c_out, 1, k)).astype(np.float32)
    b = rng.standard_normal(c_out).astype(np.float32)
    node = helper.make_node("ConvTranspose", ["x", "w", "b"], ["y"], name="/dec/ups.1/ConvTranspose",
                            strides=[1, stride], pads=[0, p, 0, p], kernel_shape=[1, k])
    graph = helper.make_graph(
        [node], "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, c_in, 1, None])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, c_out, 1, None])],
        [numpy_helper.from_array(w, "w"), numpy_helper.from_array(b, "b")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 15)])
    before = model.SerializeToString()
    assert quantize_graph.rewrite_conv_transpose(model) == 1
    onnx.checker.check_model(model)
    assert "ConvTranspose" not in [n.op_type for n in model.graph.node]
    x = rng.standard_normal((1, c_in, 1, 29)).astype(np.float32)
    y0 = ort.InferenceSession(before, providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    y1 = ort.InferenceSession(model.SerializeToString(),
                              providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    assert y1.shape == y0.shape == (1, c_out, 1, 29 * stride)
    np.testing.assert_allclose(y1, y0, atol=1e-5)


def test_2d_rewrite_leaves_other_2d_convtranspose(repo_root):
    from tools.quantize import graph as quantize_graph

    assert quantize_graph._as_1d({"strides": [2, 2]}, [3, 3, 2, 4]) is None  # a real 2-D one
    assert quantize_graph._as_1d({"strides": [1, 4], "pads": [0, 2, 0, 2]}, [3, 3, 1, 8]) == (
        {"strides": [4], "pads": [2, 2]}, True)
