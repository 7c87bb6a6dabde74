"""A Piper (VITS) voice split at its latent seam, the flow and decoder run chunk by chunk.

The graph computes z_p from the text (text encoder, duration predictor, expansion to
frames: the *front*), then the latent `z * mask` from z_p (the *flow*), then the
HiFi-GAN decoder turns the latent into audio. The flow and the decoder are convolutional
in time with finite receptive fields, so a window of frames run with enough context on
each side gives the same values as the whole sentence does: the front runs once per
sentence, the flow and the vocoder stream after it, a small first chunk first.

`tts.seam` finds the latent from the graph (the input of `/dec/conv_pre`),
the flow's inputs (what the `/flow/` nodes read from the front),
and extracts the three graphs (two, the flow in the front, where
the flow cannot be split off), `tts.receptive` walks the convs for the context a window
needs, `load_split` makes the sessions through the one factory (the split graphs cached
beside the optimized ones, the decoder with the voice's 2-D rewrite) and checks the
trimmed contexts chunks decode with on a probe sentence.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np
import structlog

from cosyvoiced.runtime.onnx import create_session, file_sha256, run, write_cache_file
from cosyvoiced.tts.graph import DECODER, decoder_rewrite
from cosyvoiced.tts.receptive import ReceptiveField, receptive_field
from cosyvoiced.tts.seam import (
    FLOW,
    FlowSeam,
    Seam,
    decoder_seam,
    find_flow_seam,
    find_seam,
    split_flow,
    split_model,
)
from cosyvoiced.tts.vocoder import pick_decoder, verdict_path

log = structlog.get_logger(__name__)

SPLIT_TAG = "split2"
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

MIN_JOIN_SNR_DB = 60.0
"""Chunks with trimmed contexts must join to the whole at least this close (else full)."""

PROBE_PHONEMES = ("jʊɹ pˈeɪmənt wʌz ɹᵻsˈiːvd ðɪs mˈɔːɹnɪŋ, ænd ɐn ˈeɪdʒənt wɪl kˈɔːl "
                  "juː bˈæk.")
"""The load-time check's sentence (IPA, no espeak needed), noise off."""
PROBE_FIRST_S, PROBE_CHUNK_S = 0.2, 0.5
"""Its chunks: more seams than the engine's (0.2 s then 1 s), so the check is stricter."""


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
    fast: dict[int, Any] = dataclasses.field(default_factory=dict)
    """bf16 decoders by the window (frames) each was compiled for, ascending (`vocoder.py`)."""

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
        if self.flow_seam is None:
            return list(self.seam.inputs)
        return list(dict.fromkeys((*self.flow_seam.inputs, *self.seam.inputs[1:])))

    def sentence(self, feeds: Mapping[str, np.ndarray]) -> Sentence:
        """Run the front for one sentence (model inputs `feeds`): what `decode_chunk` reads."""
        names = self._front_outputs()
        out = run(self.front, dict(feeds), names)
        inputs = {name: np.asarray(x) for name, x in zip(names, out, strict=True)}
        if self.flow_seam is None:
            z = inputs[self.seam.latent]
            return Sentence(inputs, int(z.shape[-1]), z, int(z.shape[-1]))
        return Sentence(inputs, int(inputs[self.flow_seam.inputs[0]].shape[-1]))

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


def _save(model: Any, path: Path) -> bool:
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


def split_paths(model_path: str | os.PathLike[str], cache_dir: str | os.PathLike[str]
                ) -> SplitPaths:
    """Where the (front, flow, decoder) graphs of `model_path` are cached."""
    stem = f"{Path(model_path).stem}-{file_sha256(model_path)[:32]}-{SPLIT_TAG}"
    base = Path(cache_dir) / "onnx"
    return SplitPaths(*(base / f"{stem}-{part}.onnx" for part in ("front", "flow", "decoder")),
                      base / f"{stem}-contexts-d{DECODER_CONTEXT}-f{FLOW_CONTEXT}.json")


def _snr_db(ref: np.ndarray, x: np.ndarray) -> float:
    noise = float(np.sum((ref.astype(np.float64) - x) ** 2))
    return float("inf") if noise == 0 else 10 * np.log10(float(np.sum(ref**2.0)) / noise)


def probe_feeds(model_path: str, inputs: list[str], config_path: str | None = None
                ) -> tuple[dict[str, np.ndarray], int] | None:
    """(model inputs, sample rate) of `PROBE_PHONEMES` through the voice's phoneme map
    (`config_path`, default its `.onnx.json`), noise off; None where the voice has no such
    config or inputs."""
    import json

    from cosyvoiced.tts.phonemize import raw_phonemes, to_ids

    try:
        config = json.loads(Path(config_path or f"{model_path}.json").read_text(encoding="utf-8"))
        ids = to_ids(raw_phonemes(PROBE_PHONEMES), config["phoneme_id_map"])
        rate = int(config["audio"]["sample_rate"])
    except (OSError, ValueError, KeyError, TypeError):
        return None
    if len(ids) < 20 or not set(inputs) <= {"input", "input_lengths", "scales", "sid"}:
        return None
    feeds = {"input": np.asarray([ids], dtype=np.int64),
             "input_lengths": np.asarray([len(ids)], dtype=np.int64),
             "scales": np.asarray([0.0, 1.0, 0.0], dtype=np.float32)}
    if "sid" in inputs:
        feeds["sid"] = np.zeros(1, dtype=np.int64)
    return {k: v for k, v in feeds.items() if k in inputs}, rate


def join_snr(voice: SplitVoice, feeds: Mapping[str, np.ndarray], size: int,
             first: int | None = None) -> float:
    """SNR (dB) of `feeds`' sentence through `sentence` + `decode_chunk` with the voice's
    contexts against the same chunks with the full fields (exact: they join to the whole
    sentence at > 120 dB, and no run is longer than a chunk's, so the check leaves ORT's
    arenas the size synthesis makes them)."""
    def joined(v: SplitVoice) -> np.ndarray:
        sentence = v.sentence(feeds)
        parts = [v.decode_chunk(sentence, a, b)
                 for a, b in chunk_bounds(sentence.frames, size, first)]
        return np.concatenate(parts) if parts else np.zeros(0, np.float32)

    return _snr_db(joined(replace(voice, context=None, flow_context=None)), joined(voice))


def _trim_contexts(voice: SplitVoice, model_path: str, verdict: Path | None,
                   config_path: str | None = None) -> None:
    """Set the voice's contexts to `DECODER_CONTEXT` / `FLOW_CONTEXT` frames where the
    probe sentence joins at >= `MIN_JOIN_SNR_DB` with them, else keep the fields (exact).
    The verdict is cached at `verdict` (the probe costs ~0.5 s)."""
    import json

    def trimmed(field: ReceptiveField | None, frames: int) -> tuple[int, int] | None:
        return None if field is None else (min(frames, field.left), min(frames, field.right))

    full = (trimmed(voice.field, 1 << 30), trimmed(voice.flow_field, 1 << 30))
    want = (trimmed(voice.field, DECODER_CONTEXT), trimmed(voice.flow_field, FLOW_CONTEXT))
    if want == full:
        return
    try:
        kept, snr = json.loads(verdict.read_text(encoding="utf-8")) if verdict else (None, 0)
    except (OSError, ValueError):
        kept, snr = None, 0
    if not isinstance(kept, bool) or not isinstance(snr, float):
        probe = probe_feeds(model_path, [i.name for i in voice.front.get_inputs()], config_path)
        if probe is None:
            log.info("tts_split_context", model=model_path, context="full",
                     decoder=full[0], flow=full[1], reason="no probe sentence")
            return
        feeds, rate = probe
        voice.context, voice.flow_context = want
        snr = round(float(join_snr(voice, feeds, voice.frames_for(PROBE_CHUNK_S, rate),
                                   voice.frames_for(PROBE_FIRST_S, rate))), 1)
        kept = bool(snr >= MIN_JOIN_SNR_DB)
        if verdict is not None:
            text = json.dumps([kept, snr])
            write_cache_file(verdict, lambda tmp: Path(tmp).write_text(text, encoding="utf-8"),
                             what="tts_split")
    voice.context, voice.flow_context = want if kept else (None, None)
    log.info("tts_split_context", model=model_path, context="trimmed" if kept else "full",
             decoder=want[0] if kept else full[0], flow=want[1] if kept else full[1],
             trimmed_snr_db=snr)


def _walk_flow(flow: Any, seam: FlowSeam, model_path: str) -> ReceptiveField | None:
    """The flow's field, or None (logged: the flow stays in the front) where not known."""
    try:
        return receptive_field(flow, list(seam.inputs))
    except ValueError as exc:
        log.info("tts_flow_path", model=model_path, path="front", reason=str(exc))
        return None


def load_split(model_path: str | os.PathLike[str], *, threads: int = 1,
               cache_dir: str | os.PathLike[str] | None = None,
               prefix: str = DECODER, flow_prefix: str = FLOW,
               vocoder: str = "fp32", chunks_s: tuple[float, ...] = (0.25, 1.0),
               config_path: str | os.PathLike[str] | None = None) -> SplitVoice | None:
    """The voice at `model_path` as front + flow + decoder sessions (the flow in the front
    where it cannot be split off), or None (logged: the caller keeps the whole graph)
    where it has no seam or its decoder's reach is not known. Chunks decode with trimmed
    contexts where the probe sentence says they join close enough (`_trim_contexts`)."""
    import onnx

    model_path = str(model_path)
    config = str(config_path) if config_path is not None else None
    paths = split_paths(model_path, cache_dir) if cache_dir is not None else None
    cached = paths is not None and paths.front.is_file() and paths.decoder.is_file()
    models: dict[str, Any] = {}  # front / flow / decoder graphs (the front not read if cached)
    flow_seam: FlowSeam | None = None
    if paths is not None and cached:
        models["decoder"] = onnx.load(str(paths.decoder))
        seam = decoder_seam(models["decoder"],
                             tuple(o.name for o in models["decoder"].graph.output), prefix)
        if paths.flow.is_file():
            models["flow"] = onnx.load(str(paths.flow))
            flow_seam = FlowSeam(tuple(i.name for i in models["flow"].graph.input),
                                 models["flow"].graph.output[0].name)
    else:
        model = onnx.load(model_path)
        seam = find_seam(model, prefix)
        flow_seam = find_flow_seam(model, seam, flow_prefix) if seam is not None else None
        if seam is not None and flow_seam is not None:
            models = dict(zip(("front", "flow", "decoder"), split_flow(model, seam, flow_seam),
                              strict=True))
        elif seam is not None:
            models = dict(zip(("front", "decoder"), split_model(model, seam), strict=True))
    if seam is None:
        log.info("tts_decode_path", model=model_path, path="whole", reason="no latent seam")
        return None
    try:
        field = receptive_field(models["decoder"], seam.latent)
    except ValueError as exc:
        log.info("tts_decode_path", model=model_path, path="whole", reason=str(exc))
        return None
    flow_field = None
    if flow_seam is not None:
        flow_field = _walk_flow(models["flow"], flow_seam, model_path)
        if flow_field is None and cached:  # its cached front ends before the flow
            log.info("tts_decode_path", model=model_path, path="whole", reason="cached flow")
            return None
        if flow_field is None:
            flow_seam = None
            models = dict(zip(("front", "decoder"), split_model(model, seam), strict=True))
    kinds = ("front", "flow", "decoder") if flow_seam is not None else ("front", "decoder")
    if not cached and paths is not None and not all(_save(models[k], getattr(paths, k))
                                                    for k in reversed(kinds)):
        paths = None  # written front last: a cached front means the rest is there
    rewrite = decoder_rewrite(threads)

    def session(kind: str) -> Any:
        wanted = rewrite if kind == "decoder" else None
        if paths is not None:
            return create_session(getattr(paths, kind), threads=threads, cache_dir=cache_dir,
                                  rewrite=wanted, shared_weights=True)
        if wanted is not None:  # in memory (no cache, or it is unwritable): rewritten here
            try:
                wanted.apply(models[kind])
            except ValueError as exc:
                log.info("graph_rewrite_skipped", model=model_path, rewrite=wanted.tag,
                         reason=str(exc))
        return create_session(models[kind].SerializeToString(), threads=threads)

    sessions = {k: session(k) for k in kinds}
    voice = SplitVoice(sessions["front"], sessions["decoder"], seam, field,
                       flow=sessions.get("flow"), flow_seam=flow_seam, flow_field=flow_field)
    outputs = {o.name for o in voice.front.get_outputs()}
    if set(voice._front_outputs()) != outputs:  # a cache entry that does not fit
        log.warning("tts_decode_path", model=model_path, path="whole",
                    reason=f"front outputs {sorted(outputs)}")
        return None
    _trim_contexts(voice, model_path, paths.contexts if paths is not None else None, config)
    probe = probe_feeds(model_path, [i.name for i in voice.front.get_inputs()], config) \
        if vocoder != "fp32" else None
    left, right = voice.context or (field.left, field.right)
    sizes = [voice.frames_for(s, probe[1]) + left + right for s in chunks_s] if probe else []
    voice.fast, voice.vocoder = pick_decoder(
        vocoder, voice.decoder, models["decoder"].SerializeToString(),
        voice.latent(probe[0]) if probe is not None else None, seam.latent, sizes,
        threads=threads, cache_dir=str(cache_dir) if cache_dir is not None else None,
        model=model_path,
        verdict=verdict_path(paths.contexts, threads, sizes) if paths is not None else None)
    flow = None if flow_field is None else voice.flow_context or (flow_field.left,
                                                                  flow_field.right)
    log.info("tts_decode_path", model=model_path, path="split", latent=seam.latent,
             hop=field.hop, context=voice.context or (field.left, field.right), flow=flow)
    return voice
