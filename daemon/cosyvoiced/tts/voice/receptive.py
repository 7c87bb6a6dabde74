"""The receptive field of a convolutional graph over frames, read from its conv attributes.

How far one latent frame reaches into the decoder's output (in samples, both ways) is
what a chunk of latent frames needs around it to decode to the same samples as the whole
sentence (tts.split); the same walk gives the flow's reach in latent frames. Only ops
whose reach is known are walked: 1-D Conv and ConvTranspose with explicit pads, pointwise
ops, Unsqueeze/Squeeze that keep time last, the flow's channel ops (Split, Slice,
Concat, Gather off the time axis; the zeros of ConstantOfShape(Shape(x))), the
Quantize/DequantizeLinear pairs of an INT8 variant, and the depth-to-time that
tools/quantize/graph.py makes of a ConvTranspose (Reshape, Transpose, Reshape, then a
Slice of the padding off the front).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

_CONVS = ("Conv", "ConvTranspose")
_POINTWISE = ("Add", "Sub", "Mul", "Div", "LeakyRelu", "Relu", "Tanh", "Sigmoid", "Identity",
              "Cast", "Neg", "Exp", "QuantizeLinear", "DequantizeLinear")
_CHANNEL = ("Split", "Slice", "Concat", "Gather")
"""Ops that pick, reorder or join channels: time passes through them unchanged."""
Signal = tuple[int, int, int, int]
"""(steps per latent frame, rank, reach back, reach ahead) of a tensor."""


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


def _whole_shape(node: Any) -> bool:
    """A Shape of every axis (ORT's pre-processing writes the default `start` 0 out)."""
    return all(a.name == "start" and a.i == 0 for a in node.attribute)


def _axes(node: Any, consts: Mapping[str, np.ndarray]) -> list[int]:
    if len(node.input) > 1:
        if node.input[1] not in consts:
            raise ValueError(f"{node.name}: axes are not constant")
        return [int(a) for a in consts[node.input[1]].reshape(-1)]
    return _ints(node, "axes", [])


def _channel_axes(node: Any, consts: Mapping[str, np.ndarray], rank: int) -> list[int]:
    """The axes a Split/Slice/Concat/Gather works on (normalized to `rank`)."""
    if node.op_type == "Slice":
        if len(node.input) > 3 and node.input[3]:
            if node.input[3] not in consts:
                raise ValueError(f"{node.name}: axes are not constant")
            axes = [int(a) for a in consts[node.input[3]].reshape(-1)]
        elif node.input[1] in consts:
            axes = list(range(consts[node.input[1]].size))
        else:
            raise ValueError(f"{node.name}: sliced axes are not known")
    else:  # Concat has no default axis: a missing one is not a channel op
        axis = next((a for a in node.attribute if a.name == "axis"), None)
        if axis is None and node.op_type == "Concat":
            raise ValueError(f"{node.name}: Concat without an axis")
        axes = [int(axis.i) if axis is not None else 0]
    return [a % rank for a in axes]


def _channel_op(node: Any, state: Mapping[str, Signal],
                consts: Mapping[str, np.ndarray]) -> Signal:
    """What a channel op makes of its signal inputs: the widest of them, time untouched.
    ValueError where it touches the time axis or indexes by a signal."""
    data = list(node.input) if node.op_type == "Concat" else [node.input[0]]
    if any(x not in state for x in data) or any(x in state for x in node.input
                                                   if x not in data):
        raise ValueError(f"{node.name}: {node.op_type} mixes a signal with other data")
    ins = [state[x] for x in data]
    if len({(s[0], s[1]) for s in ins}) != 1:
        raise ValueError(f"{node.name}: inputs at different rates")
    rank = ins[0][1]
    if node.op_type == "Gather":
        index = consts.get(node.input[1])
        if index is None or index.ndim != 1:
            raise ValueError(f"{node.name}: indices are not a constant list")
    if rank - 1 in _channel_axes(node, consts, rank):
        raise ValueError(f"{node.name}: {node.op_type} on the time axis")
    return (ins[0][0], rank, max(s[2] for s in ins), max(s[3] for s in ins))


def _depth_to_time(n: Any, phased: Mapping[str, tuple[int, Signal, bool]],
                   consts: Mapping[str, np.ndarray]) -> tuple[int, Signal, bool] | Signal:
    """A step of depth-to-time on a phased tensor (stride, the signal before, transposed):
    (N, C, s, T) transposed to (N, C, T, s), then merged to (N, C, T*s), where frame q's
    phase r becomes step q*s + r."""
    stride, signal, transposed = phased[n.input[0]]
    perm = _ints(n, "perm", [])
    if n.op_type == "Transpose" and not transposed and perm == [0, 1, 3, 2]:
        return stride, signal, True
    shape = consts.get(n.input[1]) if n.op_type == "Reshape" else None
    if transposed and shape is not None and shape.size == 3 and int(shape[-1]) == -1:
        r, _, back, ahead = signal
        return r * stride, 3, back * stride, ahead * stride + stride - 1
    raise ValueError(f"{n.name}: {n.op_type} of phases is not a depth-to-time")


def _phases(n: Any, signal: Signal, consts: Mapping[str, np.ndarray]) -> int | None:
    """The stride s of a Reshape (N, C*s, T) -> (N, C, s, T) (-1 for T), else None."""
    shape = consts.get(n.input[1]) if n.op_type == "Reshape" else None
    if shape is None or signal[1] != 3 or shape.size != 4 or int(shape[-1]) != -1:
        return None
    return int(shape[2]) if int(shape[2]) > 0 else None


def _trim_front(n: Any, signal: Signal, consts: Mapping[str, np.ndarray]) -> Signal:
    """A Slice of a depth-to-time's output that drops `start` steps off the front (the
    padding): each step now reads `start` steps later."""
    axes = _channel_axes(n, consts, signal[1])
    start = consts.get(n.input[1])
    steps = consts.get(n.input[4]) if len(n.input) > 4 and n.input[4] else None
    if (axes != [signal[1] - 1] or start is None or start.size != 1 or int(start[0]) < 0
            or (steps is not None and int(steps.reshape(-1)[0]) != 1)):
        raise ValueError(f"{n.name}: Slice on the time axis")
    r, rank, back, ahead = signal
    return r, rank, back + int(start[0]), ahead - int(start[0])


def receptive_field(model: Any, latent: str | Sequence[str]) -> ReceptiveField:
    """Walk a graph (1-D convs, time on the last axis) from `latent` to its first output.

    `latent`: the input at one step per frame, or several (e.g. the flow's z_p and frame
    mask), each (N, C, T). Each dynamic tensor is tracked as (steps per latent frame, rank,
    reach back, reach ahead): a conv of kernel k, dilation d, begin pad p adds (k-1)d - p
    back and p ahead; a transposed conv of stride s multiplies what it reads by s, then adds
    p back and (k-1)d - p ahead; pointwise and channel ops take the widest of their inputs.
    ValueError on an op whose reach is not known (the caller keeps the graph whole)."""
    from onnx import numpy_helper

    graph = model.graph
    consts = {i.name: numpy_helper.to_array(i) for i in graph.initializer}
    for n in graph.node:
        if n.op_type == "Constant" and n.attribute and n.attribute[0].name == "value":
            consts[n.output[0]] = numpy_helper.to_array(n.attribute[0].t)
        elif n.op_type == "DequantizeLinear" and n.input[0] in consts:  # an INT8 weight
            consts[n.output[0]] = consts[n.input[0]]
    starts = [latent] if isinstance(latent, str) else list(latent)
    state: dict[str, Signal] = {x: (1, 3, 0, 0) for x in starts}
    shapes: dict[str, tuple[int, int]] = {}  # Shape(signal): (steps per frame, rank)
    phased: dict[str, tuple[int, Signal, bool]] = {}  # midway through a depth-to-time
    stretched: set[str] = set()  # the outputs of a depth-to-time
    for n in graph.node:
        if n.input and n.input[0] in phased:
            step = _depth_to_time(n, phased, consts)
            if len(step) == 3:
                phased[n.output[0]] = step
            else:
                state[n.output[0]] = step
                stretched.add(n.output[0])
            continue
        if n.op_type == "Reshape" and n.input[0] in state:
            stride = _phases(n, state[n.input[0]], consts)
            if stride is None:
                raise ValueError(f"{n.name}: Reshape has no known receptive field")
            phased[n.output[0]] = (stride, state[n.input[0]], False)
            continue
        if any(x in shapes for x in n.input):
            if n.op_type != "ConstantOfShape":
                raise ValueError(f"{n.name}: {n.op_type} of a signal's shape is not known")
            out = (*shapes[n.input[0]], 0, 0)  # a constant: it depends on no frame
            state[n.output[0]] = out
            continue
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
        elif n.op_type == "Slice" and n.input[0] in stretched:
            out = _trim_front(n, state[n.input[0]], consts)
        elif n.op_type in _CHANNEL:
            out = _channel_op(n, state, consts)
        elif n.op_type == "Shape" and _whole_shape(n):
            shapes[n.output[0]] = ins[0][:2]
            continue
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
    if graph.output[0].name not in state:
        raise ValueError(f"{graph.output[0].name} does not depend on {', '.join(starts)}")
    hop, _, back, ahead = state[graph.output[0].name]
    return ReceptiveField(hop, back, ahead)
