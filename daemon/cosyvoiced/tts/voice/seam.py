"""Where a Piper (VITS) voice graph is cut for chunked decoding, and the cut itself.

The graph computes the latent `z * mask` (text encoder, duration predictor, flow), then
the HiFi-GAN decoder turns it into audio. `find_seam` finds the latent (the input of
`/dec/conv_pre`), `find_flow_seam` the flow's input behind it; `split_model` and
`split_flow` extract the graphs on either side (`tts.voice.split` runs them).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from cosyvoiced.tts.voice.rewrites import DECODER

FLOW = "/flow/"
"""Names the flow's nodes (z_p -> latent), run behind the front where it can be."""


@dataclass(frozen=True)
class Seam:
    """Where the front ends and the decoder begins."""

    latent: str
    """The latent frames (N, C, T): the one decoder input with a time axis."""
    inputs: tuple[str, ...]
    """Every decoder input, the latent first (then e.g. a speaker embedding)."""
    outputs: tuple[str, ...]
    """The model's outputs (audio), all computed by the decoder."""


def find_seam(model: Any, prefix: str = DECODER) -> Seam | None:  # onnx.ModelProto
    """The seam of a voice graph, or None where there is none (no `conv_pre` under
    `prefix`, its input not computed by the rest of the graph, or outputs it does not feed)."""
    graph = model.graph
    pre = next((n for n in graph.node if n.name.startswith(f"{prefix}conv_pre")
                and n.op_type == "Conv"), None)
    if pre is None:
        return None
    latent = pre.input[0]
    producer = next((n for n in graph.node if latent in n.output), None)
    if producer is None or producer.name.startswith(prefix):
        return None
    inits = {i.name for i in graph.initializer}
    dynamic = {i.name for i in graph.input if i.name not in inits}  # depends on model inputs
    downstream, decoder = {latent}, []
    for n in graph.node:  # nodes are topologically sorted
        if any(x in dynamic for x in n.input):
            dynamic.update(n.output)
        if any(x in downstream for x in n.input):
            downstream.update(n.output)
            decoder.append(n)
    outputs = tuple(o.name for o in graph.output)
    if not outputs or any(o not in downstream for o in outputs):
        return None
    produced = {o for n in decoder for o in n.output}
    extra = sorted({x for n in decoder for x in n.input
                    if x and x != latent and x not in produced and x in dynamic})
    return Seam(latent, (latent, *extra), outputs)


def split_model(model: Any, seam: Seam) -> tuple[Any, Any]:
    """(front, decoder) models: model inputs -> seam inputs, seam inputs -> outputs."""
    from onnx import TensorProto, helper
    from onnx.utils import Extractor

    graph = model.graph
    inits = {i.name for i in graph.initializer}
    extractor = Extractor(model)
    for name in seam.inputs:  # the seam may have no value_info: a float tensor of any shape
        extractor.value_infos.setdefault(
            name, helper.make_tensor_value_info(name, TensorProto.FLOAT, None))
    inputs = [i.name for i in graph.input if i.name not in inits]
    front = extractor.extract_model(inputs, list(seam.inputs))
    decoder = extractor.extract_model(list(seam.inputs), list(seam.outputs))
    return front, decoder


@dataclass(frozen=True)
class FlowSeam:
    """Where the front ends when the flow runs behind it, chunked with the decoder."""

    inputs: tuple[str, ...]
    """Every flow input (front outputs: z_p first, then e.g. the frame mask, a speaker
    embedding), each with time last or broadcast over it."""
    latent: str
    """What the flow computes: the decoder's latent."""


def _downstream(nodes: list[Any], names: set[str]) -> set[int]:
    """Which of `nodes` (topologically sorted) depend on any of `names`, by index."""
    reach, found = set(names), set()
    for i, n in enumerate(nodes):
        if any(x in reach for x in n.input):
            reach.update(n.output)
            found.add(i)
    return found


def find_flow_seam(model: Any, seam: Seam, prefix: str = FLOW) -> FlowSeam | None:
    """The flow's seam in a voice graph split at `seam`, or None where the flow cannot run
    behind the front: no nodes under `prefix`, the latent not computed from them, the
    decoder's other inputs computed from them, or the flow reading a model input.

    The flow is the nodes under `prefix` and every node that depends on them, up to the
    decoder (the fused WaveNet gates are exported without a name)."""
    graph = model.graph
    nodes = list(graph.node)
    inits = {i.name for i in graph.initializer}
    model_inputs = {i.name for i in graph.input if i.name not in inits}
    dynamic = set(model_inputs)
    for n in nodes:
        if any(x in dynamic for x in n.input):
            dynamic.update(n.output)
    decoder = _downstream(nodes, {seam.latent})
    mid, reach = [], set()  # the flow: its nodes and what depends on them, up to the seam
    for i, n in enumerate(nodes):
        if i not in decoder and (n.name.startswith(prefix) or any(x in reach for x in n.input)):
            mid.append(n)
            reach.update(n.output)
    if seam.latent not in reach or any(x in reach for x in seam.inputs[1:]):
        return None
    inputs = list(dict.fromkeys(x for n in mid for x in n.input
                                if x and x not in reach and x in dynamic))
    if not inputs or any(x in model_inputs for x in inputs):
        return None
    return FlowSeam(tuple(inputs), seam.latent)


def split_flow(model: Any, seam: Seam, flow: FlowSeam) -> tuple[Any, Any, Any]:
    """(front, flow, decoder) models: model inputs -> flow inputs (+ the decoder's other
    inputs), flow inputs -> latent, seam inputs -> outputs."""
    from onnx import TensorProto, helper
    from onnx.utils import Extractor

    graph = model.graph
    inits = {i.name for i in graph.initializer}
    extractor = Extractor(model)
    for name in (*flow.inputs, *seam.inputs):
        extractor.value_infos.setdefault(
            name, helper.make_tensor_value_info(name, TensorProto.FLOAT, None))
    inputs = [i.name for i in graph.input if i.name not in inits]
    front = extractor.extract_model(inputs, list(dict.fromkeys((*flow.inputs,
                                                                *seam.inputs[1:]))))
    mid = extractor.extract_model(list(flow.inputs), [flow.latent])
    decoder = extractor.extract_model(list(seam.inputs), list(seam.outputs))
    return front, mid, decoder


def decoder_seam(decoder: Any, outputs: tuple[str, ...], prefix: str) -> Seam | None:
    """The seam of an already split decoder graph (its inputs, conv_pre's first)."""
    pre = next((n for n in decoder.graph.node if n.name.startswith(f"{prefix}conv_pre")), None)
    names = [i.name for i in decoder.graph.input]
    if pre is None or pre.input[0] not in names:
        return None
    return Seam(pre.input[0], (pre.input[0], *[x for x in names if x != pre.input[0]]), outputs)


def expose_durations(front: Any) -> str | None:
    """Make the front graph also output each input id's duration in latent frames (the
    duration predictor's `Ceil`, whose cumulative sum places the ids on the frames), and
    return its name; None where the graph has no such node. Nothing it computes changes."""
    from onnx import TensorProto, helper

    graph = front.graph
    summed = {n.input[0] for n in graph.node if n.op_type == "CumSum"}
    ceil = next((n for n in graph.node if n.op_type == "Ceil" and n.output[0] in summed), None)
    if ceil is None:
        return None
    name = str(ceil.output[0])
    if name not in {o.name for o in graph.output}:
        graph.output.append(helper.make_tensor_value_info(name, TensorProto.FLOAT, None))
    return name
