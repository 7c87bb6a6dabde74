"""A Piper (VITS) voice split at its latent seam, and the decoder run chunk by chunk.

The graph computes the latent `z * mask` (text encoder, duration predictor, flow: the
*front*), then the HiFi-GAN decoder turns it into audio. The decoder is convolutional
with a finite receptive field, so a window of latent frames decoded with enough context
on each side gives the same samples as the whole sentence does: the front can run once
per sentence and the vocoder stream after it, a small first chunk first.

`find_seam` finds the latent from the graph (the input of `/dec/conv_pre`), `split_model`
extracts the two graphs, `tts.receptive` walks the decoder's convs for the context a chunk
needs, `load_split` makes both sessions through the one factory (the split graphs
cached beside the optimized ones, the decoder with the voice's 2-D rewrite).
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import structlog

from cosyvoiced.runtime.onnx import create_session, file_sha256, run, write_cache_file
from cosyvoiced.tts.graph import DECODER, decoder_rewrite
from cosyvoiced.tts.receptive import ReceptiveField, receptive_field

log = structlog.get_logger(__name__)

SPLIT_TAG = "split1"
"""Versions the split graphs in cache keys."""


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


def chunk_bounds(frames: int, size: int, first: int | None = None) -> list[tuple[int, int]]:
    """[start, stop) latent frames: `first` frames, then `size` each; a tail shorter than
    half a chunk joins the chunk before it (one run less, its context saved), never the
    first chunk (it stays small: the first audio out)."""
    if size < 1 or (first is not None and first < 1):
        raise ValueError("chunk sizes must be >= 1 frame")
    bounds, start = [], 0
    while start < frames:
        stop = min(frames, start + (first if first is not None and not bounds else size))
        if bounds and frames - stop < size // 2:
            stop = frames
        bounds.append((start, stop))
        start = stop
    return bounds


@dataclass
class Sentence:
    """One sentence after the front: its latent (decoder inputs) and their frame count."""

    latent: dict[str, np.ndarray]
    frames: int


@dataclass
class SplitVoice:
    """A voice as two sessions: the front (ids -> latent) and the decoder (latent -> audio)."""

    front: Any
    decoder: Any
    seam: Seam
    field: ReceptiveField

    def latent(self, feeds: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        """The decoder's inputs for the model inputs `feeds` (the latent: (1, C, frames))."""
        out = run(self.front, dict(feeds), list(self.seam.inputs))
        return {name: np.asarray(x) for name, x in zip(self.seam.inputs, out, strict=True)}

    def frames(self, latent: Mapping[str, np.ndarray]) -> int:
        return int(latent[self.seam.latent].shape[-1])

    def decode(self, latent: Mapping[str, np.ndarray], start: int = 0, stop: int | None = None,
               context: tuple[int, int] | None = None) -> np.ndarray:
        """Samples of latent frames [start, stop), decoded with `context` (left, right)
        frames around them (default: the receptive field, exact)."""
        frames = self.frames(latent)
        stop = frames if stop is None else stop
        left, right = context or (self.field.left, self.field.right)
        lo, hi = max(0, start - left), min(frames, stop + right)
        feeds = dict(latent)
        feeds[self.seam.latent] = np.ascontiguousarray(latent[self.seam.latent][..., lo:hi])
        audio = np.asarray(run(self.decoder, feeds)[0], dtype=np.float32).reshape(-1)
        begin = (start - lo) * self.field.hop
        return audio[begin:begin + (stop - start) * self.field.hop]

    def chunks(self, latent: Mapping[str, np.ndarray], size: int, first: int | None = None,
               context: tuple[int, int] | None = None) -> Iterator[np.ndarray]:
        """The sentence's audio chunk by chunk (see `chunk_bounds`); joined, it is `decode`'s."""
        for start, stop in chunk_bounds(self.frames(latent), size, first):
            yield self.decode(latent, start, stop, context)

    def sentence(self, feeds: Mapping[str, np.ndarray]) -> Sentence:
        """Run the front for one sentence (model inputs `feeds`): what `decode_chunk` reads."""
        latent = self.latent(feeds)
        return Sentence(latent, self.frames(latent))

    def decode_chunk(self, sentence: Sentence, start: int, stop: int) -> np.ndarray:
        """Samples of `sentence`'s latent frames [start, stop), joined exact to the whole."""
        return self.decode(sentence.latent, start, stop)

    def frames_for(self, seconds: float, sample_rate: int) -> int:
        """Latent frames in `seconds` of audio (at least one)."""
        return max(1, round(seconds * sample_rate / self.field.hop))


def probe_footprint(voice: SplitVoice, latent: Mapping[str, np.ndarray], frame: int,
                    delta: float = 1.0) -> tuple[int, int]:
    """(reach back, reach ahead) in samples of latent `frame`, measured: the output samples
    that change when `delta` is added to it (compare with `field`)."""
    base = voice.decode(latent)
    z = latent[voice.seam.latent].copy()
    z[..., frame] += delta
    bumped = {**latent, voice.seam.latent: z}
    changed = np.flatnonzero(voice.decode(bumped) != base)
    if changed.size == 0:
        return (0, 0)
    at = frame * voice.field.hop
    return (at - int(changed[0]), int(changed[-1]) - at)


def _save(model: Any, path: Path) -> bool:
    """Write `model` to `path` atomically; False (logged) if the cache is unwritable."""
    import onnx

    return write_cache_file(path, lambda tmp: onnx.save_model(model, tmp), what="tts_split")


def split_paths(model_path: str | os.PathLike[str], cache_dir: str | os.PathLike[str]
                ) -> tuple[Path, Path]:
    """Where the (front, decoder) graphs of `model_path` are cached."""
    stem = f"{Path(model_path).stem}-{file_sha256(model_path)[:32]}-{SPLIT_TAG}"
    base = Path(cache_dir) / "onnx"
    return base / f"{stem}-front.onnx", base / f"{stem}-decoder.onnx"


def _decoder_seam(decoder: Any, outputs: tuple[str, ...], prefix: str) -> Seam | None:
    """The seam of an already split decoder graph (its inputs, conv_pre's first)."""
    pre = next((n for n in decoder.graph.node if n.name.startswith(f"{prefix}conv_pre")), None)
    names = [i.name for i in decoder.graph.input]
    if pre is None or pre.input[0] not in names:
        return None
    return Seam(pre.input[0], (pre.input[0], *[x for x in names if x != pre.input[0]]), outputs)


def load_split(model_path: str | os.PathLike[str], *, threads: int = 1,
               cache_dir: str | os.PathLike[str] | None = None,
               prefix: str = DECODER) -> SplitVoice | None:
    """The voice at `model_path` as front + decoder sessions, or None (logged: the caller
    keeps the whole graph) where it has no seam or its decoder's reach is not known."""
    import onnx

    model_path = str(model_path)
    paths = split_paths(model_path, cache_dir) if cache_dir is not None else None
    if paths is not None and paths[0].is_file() and paths[1].is_file():
        decoder = onnx.load(str(paths[1]))
        seam = _decoder_seam(decoder, tuple(o.name for o in decoder.graph.output), prefix)
        front: Any = None
    else:
        model = onnx.load(model_path)
        seam = find_seam(model, prefix)
        front, decoder = split_model(model, seam) if seam is not None else (None, None)
    if seam is None:
        log.info("tts_decode_path", model=model_path, path="whole", reason="no latent seam")
        return None
    try:
        field = receptive_field(decoder, seam.latent)
    except ValueError as exc:
        log.info("tts_decode_path", model=model_path, path="whole", reason=str(exc))
        return None
    rewrite = decoder_rewrite(threads)
    if front is not None and paths is not None and not (_save(front, paths[0])
                                                        and _save(decoder, paths[1])):
        paths = None
    if paths is not None:
        sessions = [create_session(paths[0], threads=threads, cache_dir=cache_dir,
                                   shared_weights=True),
                    create_session(paths[1], threads=threads, cache_dir=cache_dir,
                                   rewrite=rewrite, shared_weights=True)]
    else:  # in memory (no cache, or it is unwritable): the rewrite applied here
        if rewrite is not None:
            try:
                rewrite.apply(decoder)
            except ValueError as exc:
                log.info("graph_rewrite_skipped", model=model_path, rewrite=rewrite.tag,
                         reason=str(exc))
        sessions = [create_session(m.SerializeToString(), threads=threads)
                    for m in (front, decoder)]
    voice = SplitVoice(sessions[0], sessions[1], seam, field)
    log.info("tts_decode_path", model=model_path, path="split", latent=seam.latent,
             hop=field.hop, context=(field.left, field.right))
    return voice

