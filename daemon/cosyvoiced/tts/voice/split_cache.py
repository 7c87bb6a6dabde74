"""Where a split voice's graphs are cached, and their layout (seams and receptive fields,
a small JSON file: a load from the cache then reads no graph into this process)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, NamedTuple

from cosyvoiced.runtime.onnx import file_sha256, write_cache_file
from cosyvoiced.tts.voice.receptive import ReceptiveField
from cosyvoiced.tts.voice.seam import FlowSeam, Seam
from cosyvoiced.tts.voice.split import DECODER_CONTEXT, FLOW_CONTEXT, SPLIT_TAG


def save_graph(model: Any, path: Path) -> bool:
    """Write `model` to `path` atomically; False (logged) if the cache is unwritable."""
    import onnx

    return write_cache_file(path, lambda tmp: onnx.save_model(model, tmp), what="tts_split")


class SplitPaths(NamedTuple):
    """Where the split graphs of a voice are cached (`flow` only where the flow is split
    off: written before the front, so a cached front means its flow is there too)."""

    front: Path
    flow: Path
    decoder: Path
    contexts: Path
    """The load-time check's verdict on the trimmed contexts (`_trim_contexts`)."""
    layout: Path
    """The seams and receptive fields of the cached graphs (`Layout`)."""


def split_paths(model_path: str | os.PathLike[str], cache_dir: str | os.PathLike[str],
                contexts: tuple[int, int] = (DECODER_CONTEXT, FLOW_CONTEXT)) -> SplitPaths:
    """Where the (front, flow, decoder) graphs of `model_path` are cached, and the verdict
    on trimming to `contexts` (decoder, flow frames)."""
    stem = f"{Path(model_path).stem}-{file_sha256(model_path)[:32]}-{SPLIT_TAG}"
    base = Path(cache_dir) / "onnx"
    return SplitPaths(*(base / f"{stem}-{part}.onnx" for part in ("front", "flow", "decoder")),
                      base / f"{stem}-contexts-d{contexts[0]}-f{contexts[1]}.json",
                      base / f"{stem}-layout.json")


class Layout(NamedTuple):
    """What a load needs to know of the split graphs besides their sessions."""

    seam: Seam
    field: ReceptiveField
    flow_seam: FlowSeam | None
    flow_field: ReceptiveField | None
    durations: str | None = None
    """The front's output of each id's duration in frames (None: it has none)."""


def write_layout(path: Path, layout: Layout) -> bool:
    import json

    def field(f: ReceptiveField | None) -> list[int] | None:
        return None if f is None else [f.hop, f.reach_back, f.reach_ahead]

    seam, flow = layout.seam, layout.flow_seam
    text = json.dumps({
        "seam": [seam.latent, list(seam.inputs), list(seam.outputs)], "field": field(layout.field),
        "flow_seam": None if flow is None else [list(flow.inputs), flow.latent],
        "flow_field": field(layout.flow_field), "durations": layout.durations})
    return write_cache_file(path, lambda tmp: Path(tmp).write_text(text, encoding="utf-8"),
                            what="tts_split")


def read_layout(paths: SplitPaths) -> Layout | None:
    """The cached layout, or None where it is missing, unreadable or does not fit the
    cached graphs (a flow graph on disk iff the layout has a flow)."""
    import json

    try:
        raw = json.loads(paths.layout.read_text(encoding="utf-8"))
        latent, inputs, outputs = raw["seam"]
        seam = Seam(str(latent), tuple(map(str, inputs)), tuple(map(str, outputs)))
        field = ReceptiveField(*map(int, raw["field"]))
        flow_seam = flow_field = None
        if raw["flow_seam"] is not None:
            flow_inputs, flow_latent = raw["flow_seam"]
            flow_seam = FlowSeam(tuple(map(str, flow_inputs)), str(flow_latent))
            flow_field = ReceptiveField(*map(int, raw["flow_field"]))
        durations = raw.get("durations")
        durations = None if durations is None else str(durations)
    except (OSError, ValueError, KeyError, TypeError):
        return None
    if (flow_seam is not None) != paths.flow.is_file():
        return None
    return Layout(seam, field, flow_seam, flow_field, durations)
