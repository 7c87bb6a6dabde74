"""Exact rewrites of a Piper (VITS) graph that ONNX Runtime runs faster on a CPU.

`decoder_as_2d`: the HiFi-GAN decoder (node names under `/dec/`, where almost all the time
goes) computes on (N, C, T) tensors with 1-D Conv/ConvTranspose. The same convolutions
over (N, C, 1, T) with kernels (1, k) are the same arithmetic, but ORT's CPU provider
runs 2-D convs through its blocked NCHWc kernels, and 1-D ones through im2col + GEMM:
on the bundled voice the whole model is faster at one intra-op thread (FP32, output equal
to 2e-6) but slower at two, so voices use it at one thread only (figures:
docs/performance.md).

The rewrite unsqueezes the decoder's inputs to rank 4, gives each conv a unit first
spatial axis, and squeezes its outputs back; elementwise nodes are rank-blind as long as
their constant operands are scalars, which is checked.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from cosyvoiced.runtime.onnx import GraphRewrite

DECODER = "/dec/"
_CONVS = ("Conv", "ConvTranspose")
_ELEMENTWISE = ("Add", "Sub", "Mul", "Div", "LeakyRelu", "Relu", "Tanh", "Sigmoid")


def decoder_as_2d(model: Any, prefix: str = DECODER) -> int:  # onnx.ModelProto
    """Rewrite the decoder in place; returns how many convs became 2-D. ValueError (the
    model untouched) if the nodes under `prefix` are not a decoder this can rewrite."""
    from onnx import helper, numpy_helper

    graph = model.graph
    inits = {i.name: i for i in graph.initializer}
    nodes = [n for n in graph.node if n.name.startswith(prefix)]
    if not nodes:
        raise ValueError(f"no nodes under {prefix!r}")
    produced = {o for n in nodes for o in n.output}
    for n in nodes:
        if n.op_type in _CONVS:
            w = inits.get(n.input[1]) if len(n.input) > 1 else None
            if w is None or len(w.dims) != 3:
                raise ValueError(f"{n.name}: not a 1-D conv with a constant weight")
        elif n.op_type in _ELEMENTWISE:
            for x in n.input:
                if x not in produced and x in inits and int(np.prod(inits[x].dims)) != 1:
                    raise ValueError(f"{n.name}: non-scalar constant operand {x}")
        else:
            raise ValueError(f"{n.name}: {n.op_type} is not rewritable")
    outer_inputs = sorted({x for n in nodes for x in n.input
                           if x and x not in produced and x not in inits})
    consumed = {x for n in graph.node if not n.name.startswith(prefix) for x in n.input}
    consumed |= {o.name for o in graph.output}
    outer_outputs = [o for n in nodes for o in n.output if o in consumed]

    axes = f"{prefix}as2d/axes"
    graph.initializer.append(numpy_helper.from_array(np.array([2], np.int64), axes))
    to_4d = {x: f"{prefix}as2d/in{i}" for i, x in enumerate(outer_inputs)}
    to_4d |= {x: f"{prefix}as2d/out{i}" for i, x in enumerate(outer_outputs)}
    convs = 0
    for n in nodes:
        n.input[:] = [to_4d.get(x, x) for x in n.input]
        n.output[:] = [to_4d.get(x, x) for x in n.output]
        if n.op_type not in _CONVS:
            continue
        w = inits[n.input[1]]
        w.CopyFrom(numpy_helper.from_array(numpy_helper.to_array(w)[:, :, None, :], w.name))
        for a in n.attribute:
            if a.name == "pads":
                begin, end = list(a.ints)
                a.ints[:] = [0, begin, 0, end]
            elif a.name in ("kernel_shape", "strides", "dilations"):
                a.ints[:] = [1, *a.ints]
            elif a.name == "output_padding":
                a.ints[:] = [0, *a.ints]
        convs += 1
    # Each Unsqueeze right before the input's first reader, each Squeeze right after the
    # output's writer: the order stays topological.
    ordered, pending = [], dict(enumerate(outer_inputs))
    for n in list(graph.node):
        in_dec = n.name.startswith(prefix)
        if in_dec:
            for i, x in list(pending.items()):
                if to_4d[x] in n.input:
                    ordered.append(helper.make_node("Unsqueeze", [x, axes], [to_4d[x]],
                                                    name=f"{prefix}as2d/Unsqueeze_{i}"))
                    del pending[i]
        ordered.append(n)
        if in_dec:
            ordered += [helper.make_node("Squeeze", [to_4d[x], axes], [x],
                                         name=f"{prefix}as2d/Squeeze_{i}")
                        for i, x in enumerate(outer_outputs) if to_4d[x] in n.output]
    del graph.node[:]
    graph.node.extend(ordered)
    stale = produced | set(outer_outputs)
    kept = [v for v in graph.value_info if v.name not in stale]
    del graph.value_info[:]
    graph.value_info.extend(kept)
    return convs


DECODER_2D = GraphRewrite("dec2d1", decoder_as_2d)
"""What voices load with (the tag versions the rewrite in cache keys)."""


def decoder_rewrite(threads: int) -> GraphRewrite | None:
    """The rewrite a voice (or its split decoder) loads with at `threads` intra-op threads:
    the 2-D decoder at one thread only (faster there, slower at two: docs/performance.md)."""
    return DECODER_2D if threads == 1 else None
