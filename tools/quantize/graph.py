"""Exact graph rewrites that make a voice's decoder faster before quantizing it.

HiFi-GAN upsamples with ConvTranspose1d(kernel 2s, stride s, padding s/2). ONNX Runtime
runs ConvTranspose through a slow path (in FP32 and in QDQ alike): after the decoder's
convs go INT8 it is the largest cost left. The same arithmetic as a plain Conv: each
output phase r in [0, s) reads two neighbouring input frames,

    y[q*s + r - p] = W[:, :, r]^T x[q] + W[:, :, r + s]^T x[q - 1]

so one Conv(kernel 2, padding 1) with s*C_out output channels, then depth-to-time
(Reshape, Transpose, Reshape) and a Slice of the padding, gives y up to float rounding.
A Conv runs on MLAS's GEMM (and quantizes to QLinearConv like the other decoder convs).
"""

from __future__ import annotations

import numpy as np

POLY = "/poly"


def polyphase_weight(weight: np.ndarray, stride: int) -> np.ndarray:
    """ConvTranspose weight (C_in, C_out, 2s) -> Conv weight (C_out*s, C_in, 2); output
    channel co*s + r, tap 0 on x[q-1] (W[:, co, r+s]), tap 1 on x[q] (W[:, co, r])."""
    c_in, c_out, k = weight.shape
    if k != 2 * stride:
        raise ValueError(f"kernel {k} is not twice the stride {stride}")
    out = np.empty((c_out, stride, c_in, 2), dtype=weight.dtype)
    out[..., 0] = weight[:, :, stride:].transpose(1, 2, 0)
    out[..., 1] = weight[:, :, :stride].transpose(1, 2, 0)
    return out.reshape(c_out * stride, c_in, 2)


def _rewritable(attrs: dict, k: int) -> bool:
    stride = attrs.get("strides", [1])[0]
    pads = attrs.get("pads", [0, 0])
    return (len(attrs.get("strides", [1])) == 1 and k == 2 * stride and pads[0] == pads[1]
            and 2 * pads[0] < k and attrs.get("group", 1) == 1
            and all(d == 1 for d in attrs.get("dilations", [1]))
            and not any(attrs.get("output_padding", [0])) and "output_shape" not in attrs)


def rewrite_conv_transpose(model, prefix: str = "/dec/") -> int:  # onnx.ModelProto
    """Replace each rewritable 1-D ConvTranspose whose name starts with `prefix`, in place;
    returns how many. New nodes are named `<block>/poly/...` (same sweep group)."""
    from onnx import helper, numpy_helper

    graph = model.graph
    inits = {i.name: i for i in graph.initializer}
    nodes, count = [], 0
    for node in graph.node:
        attrs = {a.name: helper.get_attribute_value(a) for a in node.attribute}
        weight = inits.get(node.input[1]) if len(node.input) > 1 else None
        if (node.op_type != "ConvTranspose" or not node.name.startswith(prefix) or weight is None
                or len(weight.dims) != 3 or not _rewritable(attrs, weight.dims[2])):
            nodes.append(node)
            continue
        w = numpy_helper.to_array(weight)
        stride, pad, c_out = attrs["strides"][0], attrs.get("pads", [0, 0])[0], w.shape[1]
        base = node.name.rsplit("/", 1)[0] + POLY

        def const(name: str, value: np.ndarray, base: str = base) -> str:
            graph.initializer.append(numpy_helper.from_array(value, f"{base}/{name}"))
            return f"{base}/{name}"

        conv_in = [node.input[0], const("W", polyphase_weight(w, stride))]
        if len(node.input) > 2 and node.input[2]:
            bias = numpy_helper.to_array(inits[node.input[2]])
            conv_in.append(const("B", np.repeat(bias, stride)))
        end = np.array([-pad if pad else np.iinfo(np.int64).max], np.int64)
        nodes += [
            helper.make_node("Conv", conv_in, [f"{base}/phases"], name=f"{base}/Conv",
                             kernel_shape=[2], pads=[1, 1], strides=[1], dilations=[1]),
            helper.make_node("Reshape", [f"{base}/phases", const("split", np.array(
                [0, c_out, stride, -1], np.int64))], [f"{base}/split_out"], name=f"{base}/Reshape"),
            helper.make_node("Transpose", [f"{base}/split_out"], [f"{base}/interleaved"],
                             name=f"{base}/Transpose", perm=[0, 1, 3, 2]),
            helper.make_node("Reshape", [f"{base}/interleaved", const("merge", np.array(
                [0, c_out, -1], np.int64))], [f"{base}/padded"], name=f"{base}/Reshape_1"),
            helper.make_node("Slice", [f"{base}/padded", const("start", np.array([pad], np.int64)),
                                       const("end", end), const("axes", np.array([2], np.int64))],
                             [node.output[0]], name=f"{base}/Slice"),
        ]
        count += 1
    used = {i for n in nodes for i in n.input}
    kept = [i for i in graph.initializer if i.name in used]
    del graph.node[:]
    graph.node.extend(nodes)
    del graph.initializer[:]
    graph.initializer.extend(kept)
    return count
