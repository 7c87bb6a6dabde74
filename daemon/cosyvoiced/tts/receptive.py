"""The receptive field of a convolutional decoder graph, read from its conv attributes.

How far one latent frame reaches into the decoder's output (in samples, both ways) is
what a chunk of latent frames needs around it to decode to the same samples as the whole
sentence (tts.split). Only ops whose reach is known are walked: 1-D Conv and
ConvTranspose with explicit pads, pointwise ops, Unsqueeze/Squeeze that keep time last.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

_CONVS = ("Conv", "ConvTranspose")
_POINTWISE = ("Add", "Sub", "Mul", "Div", "LeakyRelu", "Relu", "Tanh", "Sigmoid", "Identity",
              "Cast")


@dataclass(frozen=True)
class ReceptiveField:
    """Latent frame j changes output samples [j*hop - reach_back, j*hop + reach_ahead]."""

    hop: int
    """Output samples per latent frame (the product of the upsampling strides)."""
    reach_back: int
    reach_ahead: int

    @property
    def left(self) -> int:
        """Latent frames before a chunk that still reach into it."""
        return self.reach_ahead // self.hop

    @property
    def right(self) -> int:
        """Latent frames after a chunk that still reach back into it."""
        return -(-self.reach_back // self.hop)


def _ints(node: Any, name: str, default: list[int]) -> list[int]:
    attr = next((a for a in node.attribute if a.name == name), None)
    return list(attr.ints) if attr is not None else default


def _axes(node: Any, consts: Mapping[str, np.ndarray]) -> list[int]:
    if len(node.input) > 1:
        if node.input[1] not in consts:
            raise ValueError(f"{node.name}: axes are not constant")
        return [int(a) for a in consts[node.input[1]].reshape(-1)]
    return _ints(node, "axes", [])


def receptive_field(decoder: Any, latent: str) -> ReceptiveField:  # onnx.ModelProto
    """Walk a decoder graph (1-D convs, time on the last axis) from `latent` to its output.

    Each dynamic tensor is tracked as (steps per latent frame, rank, reach back, reach
    ahead): a conv of kernel k, dilation d, begin pad p adds (k-1)d - p back and p ahead; a
    transposed conv of stride s multiplies what it reads by s, then adds p back and
    (k-1)d - p ahead; pointwise ops take the widest of their inputs. ValueError on an op
    whose reach is not known (the caller keeps the whole graph)."""
    from onnx import numpy_helper

    graph = decoder.graph
    consts = {i.name: numpy_helper.to_array(i) for i in graph.initializer}
    for n in graph.node:
        if n.op_type == "Constant" and n.attribute and n.attribute[0].name == "value":
            consts[n.output[0]] = numpy_helper.to_array(n.attribute[0].t)
    state: dict[str, tuple[int, int, int, int]] = {latent: (1, 3, 0, 0)}
    for n in graph.node:
        ins = [state[x] for x in n.input if x in state]
        if not ins:
            continue
        if n.op_type in _CONVS:
            if n.input[0] not in state or any(x in state for x in n.input[1:]):
                raise ValueError(f"{n.name}: not a conv of the signal by constant weights")
            r, rank, back, ahead = state[n.input[0]]
            kernel = _ints(n, "kernel_shape", list(consts[n.input[1]].shape[2:]))
            auto = next((a.s for a in n.attribute if a.name == "auto_pad"), b"NOTSET")
            if rank != 3 or len(kernel) != 1 or auto not in (b"NOTSET", b""):
                raise ValueError(f"{n.name}: not an explicitly padded 1-D conv")
            span = (kernel[0] - 1) * _ints(n, "dilations", [1])[0]
            stride, pad = _ints(n, "strides", [1])[0], _ints(n, "pads", [0, 0])[0]
            if n.op_type == "Conv":
                if stride != 1:
                    raise ValueError(f"{n.name}: strided conv")
                out = (r, rank, back + span - pad, ahead + pad)
            else:
                out = (r * stride, rank, back * stride + pad, ahead * stride + span - pad)
        elif n.op_type in _POINTWISE:
            if len({(s[0], s[1]) for s in ins}) != 1:
                raise ValueError(f"{n.name}: inputs at different rates")
            out = (ins[0][0], ins[0][1], max(s[2] for s in ins), max(s[3] for s in ins))
        elif n.op_type in ("Unsqueeze", "Squeeze") and n.input[0] in state:
            r, rank, back, ahead = state[n.input[0]]
            axes = _axes(n, consts)
            grown = rank + len(axes) if n.op_type == "Unsqueeze" else rank - len(axes)
            time = grown - 1 if n.op_type == "Unsqueeze" else rank - 1  # where time must not be
            if not axes or time in {a % max(grown, rank) for a in axes}:
                raise ValueError(f"{n.name}: moves or drops the time axis")
            out = (r, grown, back, ahead)
        else:
            raise ValueError(f"{n.name}: {n.op_type} has no known receptive field")
        for o in n.output:
            state[o] = out
    hop, _, back, ahead = state[graph.output[0].name]
    return ReceptiveField(hop, back, ahead)
