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


def _as_1d(attrs: dict, dims: list[int]) -> tuple[dict, bool] | None:
    """The attributes of a ConvTranspose as 1-D ones, and whether it was 2-D with a unit
    first spatial axis (the voices' 2-D decoder, cosyvoiced.tts.voice.rewrites); None if
    it is neither."""
    if len(dims) == 3:
        return attrs, False
    if len(dims) != 4 or dims[2] != 1:
        return None
    one = {k: v for k, v in attrs.items() if k not in ("strides", "pads", "kernel_shape",
                                                        "dilations", "output_padding")}
    for k in ("strides", "kernel_shape", "dilations", "output_padding"):
        if k in attrs:
            if len(attrs[k]) != 2 or attrs[k][0] != (0 if k == "output_padding" else 1):
                return None
            one[k] = attrs[k][1:]
    if "pads" in attrs:
        pads = attrs["pads"]
        if len(pads) != 4 or pads[0] or pads[2]:
            return None
        one["pads"] = [pads[1], pads[3]]
    return one, True


def rewrite_conv_transpose(model, prefix: str = "/dec/") -> int:  # onnx.ModelProto
    """Replace each rewritable 1-D ConvTranspose whose name starts with `prefix`, in place
    (or 2-D with a unit first axis: then the Conv and depth-to-time are 2-D too); returns
    how many. New nodes are named `<block>/poly/...` (same sweep group)."""
    from onnx import helper, numpy_helper

    graph = model.graph
    inits = {i.name: i for i in graph.initializer}
    nodes, count = [], 0
    for node in graph.node:
        attrs = {a.name: helper.get_attribute_value(a) for a in node.attribute}
        weight = inits.get(node.input[1]) if len(node.input) > 1 else None
        flat = _as_1d(attrs, list(weight.dims)) if weight is not None else None
        if (node.op_type != "ConvTranspose" or not node.name.startswith(prefix) or flat is None
                or not _rewritable(flat[0], weight.dims[-1])):
            nodes.append(node)
            continue
        attrs, two_d = flat
        w = numpy_helper.to_array(weight)
        w = w[:, :, 0, :] if two_d else w
        stride, pad, c_out = attrs["strides"][0], attrs.get("pads", [0, 0])[0], w.shape[1]
        base = node.name.rsplit("/", 1)[0] + POLY
        unit = [1] if two_d else []

        def const(name: str, value: np.ndarray, base: str = base) -> str:
            graph.initializer.append(numpy_helper.from_array(value, f"{base}/{name}"))
            return f"{base}/{name}"

        poly = polyphase_weight(w, stride)
        conv_in = [node.input[0], const("W", poly[:, :, None, :] if two_d else poly)]
        if len(node.input) > 2 and node.input[2]:
            bias = numpy_helper.to_array(inits[node.input[2]])
            conv_in.append(const("B", np.repeat(bias, stride)))
        end = np.array([-pad if pad else np.iinfo(np.int64).max], np.int64)
        time_axis = 3 if two_d else 2
        nodes += [
            helper.make_node("Conv", conv_in, [f"{base}/phases"], name=f"{base}/Conv",
                             kernel_shape=unit + [2], pads=[0, 1, 0, 1] if two_d else [1, 1],
                             strides=unit + [1], dilations=unit + [1]),
            helper.make_node("Reshape", [f"{base}/phases", const("split", np.array(
                [0, c_out, stride, -1], np.int64))], [f"{base}/split_out"], name=f"{base}/Reshape"),
            helper.make_node("Transpose", [f"{base}/split_out"], [f"{base}/interleaved"],
                             name=f"{base}/Transpose", perm=[0, 1, 3, 2]),
            helper.make_node("Reshape", [f"{base}/interleaved", const("merge", np.array(
                [0, c_out] + unit + [-1], np.int64))], [f"{base}/padded"],
                name=f"{base}/Reshape_1"),
            helper.make_node("Slice", [f"{base}/padded", const("start", np.array([pad], np.int64)),
                                       const("end", end),
                                       const("axes", np.array([time_axis], np.int64))],
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
