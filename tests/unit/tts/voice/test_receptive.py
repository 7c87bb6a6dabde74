"""`tts.voice.receptive` on the flow's ops: channel ops pass time through, the zeros of a
signal's shape reach nothing, and anything that touches the time axis (or an op it does
not know) is refused rather than guessed."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from cosyvoiced.tts.voice.receptive import ReceptiveField, receptive_field

CONSTS = {"w": np.full((2, 2, 5), 0.1, np.float32), "w1": np.full((1, 1, 3), 0.1, np.float32),
          "halves": np.array([1, 1]), "order": np.array([1, 0]), "zero": np.array([0]),
          "one": np.array([1]), "two": np.array([2]), "scalar": np.array(1),
          "starts3": np.array([0, 0, 0]), "ends3": np.array([1, 2, 5])}


def graph(*nodes: onnx.NodeProto, inputs: tuple[str, ...] = ("x",),
          consts: dict[str, np.ndarray] | None = None) -> onnx.ModelProto:
    g = helper.make_graph(
        list(nodes), "g", [helper.make_tensor_value_info(x, TensorProto.FLOAT, [1, 2, None])
                           for x in inputs],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
        [numpy_helper.from_array(v, k) for k, v in {**CONSTS, **(consts or {})}.items()])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 15)])


def node(op: str, ins: list[str], outs: list[str], **attrs: object) -> onnx.NodeProto:
    return helper.make_node(op, ins, outs, name=f"/{op}_{outs[0]}", **attrs)


def test_channel_ops_keep_the_widest_reach_and_a_shapes_zeros_reach_nothing():
    model = graph(
        node("Conv", ["x", "w"], ["c"], kernel_shape=[5], pads=[1, 3]),  # 3 back, 1 ahead
        node("Split", ["c", "halves"], ["a", "b"], axis=1),
        node("Conv", ["a", "w1"], ["a1"], kernel_shape=[3], pads=[1, 1]),  # +1 +1
        node("Gather", ["c", "order"], ["g"], axis=1),
        node("Slice", ["g", "zero", "one", "one"], ["s"]),  # channel 0 of 2
        node("Shape", ["s"], ["shape"]),
        node("ConstantOfShape", ["shape"], ["zeros"]),
        node("Exp", ["zeros"], ["ones"]),
        node("Neg", ["b"], ["nb"]),
        node("Mul", ["nb", "m"], ["bm"]),  # by the frame mask, an input too
        node("Concat", ["a1", "bm"], ["cat"], axis=1),
        node("Mul", ["cat", "ones"], ["y"]),
        inputs=("x", "m"))
    assert receptive_field(model, ["x", "m"]) == ReceptiveField(1, 4, 2)
    # The zeros alone depend on no frame.
    zeros_only = graph(node("Shape", ["x"], ["shape"]), node("ConstantOfShape", ["shape"], ["y"]))
    assert receptive_field(zeros_only, "x") == ReceptiveField(1, 0, 0)
    # ORT's quantization pre-processing writes Shape's default start out: the same op.
    explicit = graph(node("Shape", ["x"], ["shape"], start=0),
                     node("ConstantOfShape", ["shape"], ["y"]))
    assert receptive_field(explicit, "x") == ReceptiveField(1, 0, 0)
    with pytest.raises(ValueError, match="Shape has no known receptive field"):
        receptive_field(graph(node("Shape", ["x"], ["shape"], start=1),
                              node("ConstantOfShape", ["shape"], ["y"])), "x")


@pytest.mark.parametrize("nodes, reason", [
    ([node("Split", ["x", "halves"], ["y", "b"], axis=2)], "Split on the time axis"),
    ([node("Split", ["x", "halves"], ["y", "b"], axis=-1)], "Split on the time axis"),
    ([node("Slice", ["x", "zero", "one", "two"], ["y"])], "Slice on the time axis"),
    ([node("Slice", ["x", "starts3", "ends3"], ["y"])], "Slice on the time axis"),  # all axes
    ([node("Gather", ["x", "scalar"], ["y"], axis=1)], "indices are not a constant list"),
    ([node("Concat", ["x", "x"], ["y"], axis=2)], "Concat on the time axis"),
    ([node("Concat", ["x", "w"], ["y"], axis=1)], "Concat mixes a signal with other data"),
    ([node("Shape", ["x"], ["s"]), node("Gather", ["s", "two"], ["y"])],
     "Gather of a signal's shape is not known"),
    ([node("Softmax", ["x"], ["y"], axis=1)], "Softmax has no known receptive field"),
    ([node("Identity", ["w"], ["y"])], "y does not depend on x"),
])
def test_what_touches_time_or_is_unknown_is_refused(nodes, reason):
    with pytest.raises(ValueError, match=reason):
        receptive_field(graph(*nodes), "x")


def upsampler(stride: int) -> onnx.ModelProto:
    """conv_pre, a HiFi-GAN upsampler (ConvTranspose of kernel 2s, stride s, pad s/2), then
    a dilated conv: named like a decoder, so tools/quantize/graph.py rewrites it."""
    return graph(
        node("Conv", ["x", "w"], ["c"], kernel_shape=[5], pads=[2, 2]),
        helper.make_node("ConvTranspose", ["c", "up"], ["u"], name="/dec/ups.0/ConvTranspose",
                         kernel_shape=[2 * stride], strides=[stride], pads=[stride // 2] * 2),
        node("Conv", ["u", "w1"], ["y"], kernel_shape=[3], pads=[3, 3], dilations=[3]),
        consts={"up": np.full((2, 2, 2 * stride), 0.1, np.float32)})


@pytest.mark.parametrize("stride", [2, 4, 8])
def test_a_convtranspose_as_conv_and_depth_to_time_reaches_as_far(stride):
    from tools.quantize.graph import rewrite_conv_transpose

    model = upsampler(stride)
    before = receptive_field(model, "x")
    assert rewrite_conv_transpose(model) == 1
    assert "ConvTranspose" not in {n.op_type for n in model.graph.node}
    assert receptive_field(model, "x") == before
    assert before.hop == stride


def test_int8_weights_and_activations_pass_through():
    int8 = graph(
        node("QuantizeLinear", ["x", "scale", "zp"], ["xq"]),
        node("DequantizeLinear", ["xq", "scale", "zp"], ["xd"]),
        node("DequantizeLinear", ["w8", "wscale"], ["wd"], axis=0),
        node("Conv", ["xd", "wd"], ["y"], kernel_shape=[5], pads=[1, 3]),
        consts={"w8": np.ones((2, 2, 5), np.int8), "wscale": np.full(2, 0.1, np.float32),
                "scale": np.array(0.1, np.float32), "zp": np.array(128, np.uint8)})
    assert receptive_field(int8, "x") == ReceptiveField(1, 3, 1)


@pytest.mark.parametrize("perm, reason", [
    ([0, 2, 1, 3], "Transpose of phases is not a depth-to-time"),
    ([0, 1, 3, 2], None),
])
def test_only_a_depth_to_time_of_phases_is_walked(perm, reason):
    model = graph(node("Reshape", ["x", "split"], ["p"]),
                  node("Transpose", ["p"], ["t"], perm=perm),
                  node("Reshape", ["t", "merge"], ["m"]),
                  node("Slice", ["m", "one", "last", "two"], ["y"]),
                  consts={"split": np.array([0, 1, 2, -1]), "merge": np.array([0, 1, -1]),
                          "last": np.array([-1])})
    if reason:
        with pytest.raises(ValueError, match=reason):
            receptive_field(model, "x")
    else:  # frame j's two phases are steps 2j and 2j+1; the slice drops the first step
        assert receptive_field(model, "x") == ReceptiveField(2, 1, 0)
