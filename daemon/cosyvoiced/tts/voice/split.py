"""A Piper (VITS) voice split at its latent seam, the flow and decoder run chunk by chunk.

The graph computes z_p from the text (text encoder, duration predictor, expansion to
frames: the *front*), then the latent `z * mask` from z_p (the *flow*), then the
HiFi-GAN decoder turns the latent into audio. The flow and the decoder are convolutional
in time with finite receptive fields, so a window of frames run with enough context on
each side gives the same values as the whole sentence does: the front runs once per
sentence, the flow and the vocoder stream after it, a small first chunk first.

`tts.voice.seam` finds the latent from the graph (the input of `/dec/conv_pre`),
the flow's inputs (what the `/flow/` nodes read from the front),
and extracts the three graphs (two, the flow in the front, where
the flow cannot be split off), `tts.voice.receptive` walks the convs for the context a window
needs, `tts.voice.split_load` makes the sessions and checks them on a probe sentence. This
module runs the parts.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
import structlog

from cosyvoiced.runtime.onnx import run
from cosyvoiced.tts.voice.receptive import ReceptiveField
from cosyvoiced.tts.voice.seam import (
    FlowSeam,
    Seam,
)

log = structlog.get_logger(__name__)

SPLIT_TAG = "split3"
"""Versions the split graphs in cache keys."""

DECODER_CONTEXT = 8
"""Latent frames of context each side of a decoded chunk (the field is 11 on the bundled
voice). Measured there (139-char sentence, 1 s chunks, 1 thread): 8 frames join at 66-73
dB SNR for 1.03-1.07x the whole decode (the full field: exact, 1.13x), 6 frames at 46-51
dB (~1.01x), 4 frames at 36-39 dB. Checked per voice at load (`MIN_JOIN_SNR_DB`)."""

FLOW_CONTEXT = 24
"""Latent frames of context each side of a flow window (the field is 32 on the bundled
voice). Measured there (2 sentences, first chunk 0.2/0.3 s, then 1 s): the flow's join
alone is >= 109 dB at 24 frames (84-106 dB at 20, 55-74 dB at 16, 36 dB at 12), and with
the decoder at `DECODER_CONTEXT` the join is as close as with the full flow field."""

FLOW_TIGHT_RUNS = 2
"""Flow runs that compute only what their chunk needs: the first chunk's (first audio),
the second's (due when the short first chunk has played: running the rest of a 6 s
sentence there would double its time, ~75 -> ~150 ms of the first chunk's 200 ms)."""

FLOW_BLOCK = 512
"""Latent frames (~6 s at 22 kHz) each later flow run covers at least (the rest of the
sentence where less than half a block would be left): the remainder of a sentence up to
~9 s in one run, a longer one in runs short enough (~60 ms) not to hold up a chunk. The
flow then runs over a sentence's frames + 2 x (left + right) context frames (+ 18% on the
bundled voice's 6 s sentence, none of it before the first audio)."""

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


def longest_chunk(size: int) -> int:
    """The most frames a `chunk_bounds` chunk of `size` can hold: a whole chunk and the
    tail (shorter than half a chunk) it took in (the first chunk is never larger)."""
    return max(size, size + size // 2 - 1)


@dataclass
class Sentence:
    """One sentence after the front: what the flow and the decoder read, and the latent
    computed so far (the flow runs lazily, left to right, as chunks need it)."""

    inputs: dict[str, np.ndarray]
    """The front's outputs (the flow's inputs and the decoder's others, or the latent)."""
    frames: int
    latent: np.ndarray | None = None
    """(1, C, frames): frames [0, ready) computed."""
    ready: int = 0
    flow_frames: int = 0
    """Frames the flow has run over for this sentence (its windows with their context)."""
    flow_runs: int = 0
    durations: np.ndarray | None = None
    """Frames of each input id (the front's duration predictor), when the front gives them."""


def _window(inputs: Mapping[str, np.ndarray], frames: int, lo: int, hi: int
            ) -> dict[str, np.ndarray]:
    """`inputs` cut to frames [lo, hi) on the last axis (those broadcast over time kept)."""
    return {k: np.ascontiguousarray(x[..., lo:hi]) if x.ndim and x.shape[-1] == frames else x
            for k, x in inputs.items()}


@dataclass
class SplitVoice:
    """A voice as a front (ids -> z_p, or the latent), the flow (z_p -> latent, chunked;
    None: in the front) and the decoder (latent -> audio, chunked)."""

    front: Any
    decoder: Any
    seam: Seam
    field: ReceptiveField
    flow: Any = None
    flow_seam: FlowSeam | None = None
    flow_field: ReceptiveField | None = None
    """The flow's reach in latent frames (hop 1)."""
    context: tuple[int, int] | None = None
    """Decoder frames (left, right) around a `decode_chunk` chunk (None: the field)."""
    flow_context: tuple[int, int] | None = None
    """Frames (left, right) around a flow window (None: its field)."""
    vocoder: str = "fp32"
    """The decoder's precision: "fp32" (ONNX Runtime) or "bf16" (OpenVINO; `tts.vocoder`)."""
    flow_precision: str = "fp32"
    """The flow's: "fp32" (ONNX Runtime) or "bf16" (OpenVINO, `tts/voice/flow_precision.py`)."""
    fast: dict[int, Any] = dataclasses.field(default_factory=dict)
    """bf16 decoders by the window (frames) each was compiled for, ascending (`vocoder.py`)."""
    durations: str | None = None
    """The front's output of each input id's frames (None: the front has none)."""

    @property
    def combined_field(self) -> ReceptiveField:
        """How far one frame of the front's output reaches into the audio (through the
        flow, then the decoder)."""
        if self.flow_field is None:
            return self.field
        hop = self.field.hop
        return ReceptiveField(hop, self.flow_field.reach_back * hop + self.field.reach_back,
                              self.flow_field.reach_ahead * hop + self.field.reach_ahead)

    def _front_outputs(self) -> list[str]:
        extra = (self.durations,) if self.durations is not None else ()
        if self.flow_seam is None:
            return list(dict.fromkeys((*self.seam.inputs, *extra)))
        return list(dict.fromkeys((*self.flow_seam.inputs, *self.seam.inputs[1:], *extra)))

    def sentence(self, feeds: Mapping[str, np.ndarray]) -> Sentence:
        """Run the front for one sentence (model inputs `feeds`): what `decode_chunk` reads."""
        names = self._front_outputs()
        out = run(self.front, dict(feeds), names)
        inputs = {name: np.asarray(x) for name, x in zip(names, out, strict=True)}
        durations = (inputs.pop(self.durations).reshape(-1) if self.durations is not None
                     else None)
        if self.flow_seam is None:
            z = inputs[self.seam.latent]
            return Sentence(inputs, int(z.shape[-1]), z, int(z.shape[-1]), durations=durations)
        return Sentence(inputs, int(inputs[self.flow_seam.inputs[0]].shape[-1]),
                        durations=durations)

    def _flow_to(self, sentence: Sentence, need: int) -> None:
        """Compute latent frames [0, need) in one flow run where they are not yet: the
        first `FLOW_TIGHT_RUNS` runs only what their chunk needs, later ones at least
        `FLOW_BLOCK` frames (or to the end). Each window reads `flow_context` frames of
        z_p around it."""
        if sentence.ready >= need:
            return
        field = self.flow_field
        left, right = self.flow_context or ((field.left, field.right) if field else (0, 0))
        start, frames = sentence.ready, sentence.frames
        stop = need if sentence.flow_runs < FLOW_TIGHT_RUNS else max(need, start + FLOW_BLOCK)
        if sentence.flow_runs >= FLOW_TIGHT_RUNS and frames - stop < FLOW_BLOCK // 2:
            stop = frames
        stop = min(stop, frames)
        lo, hi = max(0, start - left), min(frames, stop + right)
        z = np.asarray(run(self.flow, _window(sentence.inputs, frames, lo, hi))[0],
                       dtype=np.float32)
        if sentence.latent is None:
            sentence.latent = np.zeros((*z.shape[:-1], frames), np.float32)
        sentence.latent[..., start:stop] = z[..., start - lo:stop - lo]
        sentence.ready, sentence.flow_frames = stop, sentence.flow_frames + hi - lo
        sentence.flow_runs += 1

    def _decoder_inputs(self, sentence: Sentence) -> dict[str, np.ndarray]:
        latent = sentence.latent if sentence.latent is not None else np.zeros((1, 1, 0))
        return {**{k: sentence.inputs[k] for k in self.seam.inputs[1:]},
                self.seam.latent: latent}

    def latent(self, feeds: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        """The decoder's inputs for the model inputs `feeds` (the latent: (1, C, frames)),
        the flow run once over the whole sentence."""
        sentence = self.sentence(feeds)
        if self.flow is not None:
            self._flow_to(sentence, sentence.frames)
        return self._decoder_inputs(sentence)

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
        session = self.decoder
        for size, fast in self.fast.items():  # widened with more real context: still exact
            if hi - lo <= size <= frames:
                lo = max(0, min(lo, frames - size))
                hi, session = lo + size, fast
                break
        feeds = dict(latent)
        feeds[self.seam.latent] = np.ascontiguousarray(latent[self.seam.latent][..., lo:hi])
        audio = np.asarray(run(session, feeds)[0], dtype=np.float32).reshape(-1)
        begin = (start - lo) * self.field.hop
        return audio[begin:begin + (stop - start) * self.field.hop]

    def chunks(self, latent: Mapping[str, np.ndarray], size: int, first: int | None = None,
               context: tuple[int, int] | None = None) -> Iterator[np.ndarray]:
        """The sentence's audio chunk by chunk (see `chunk_bounds`); joined, it is `decode`'s."""
        for start, stop in chunk_bounds(self.frames(latent), size, first):
            yield self.decode(latent, start, stop, context)

    def decode_chunk(self, sentence: Sentence, start: int, stop: int) -> np.ndarray:
        """Samples of `sentence`'s latent frames [start, stop) (chunks in increasing order):
        the flow run first where the chunk's window is not computed yet, then the decoder
        on the window with `context`."""
        context = self.context or (self.field.left, self.field.right)
        if self.flow is not None:
            self._flow_to(sentence, min(sentence.frames, stop + context[1]))
        return self.decode(self._decoder_inputs(sentence), start, stop, context)

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
