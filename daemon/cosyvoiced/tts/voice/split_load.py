"""Loading a split voice: its graphs cut and cached, its sessions, the load-time checks.

`load_split` cuts the voice at its latent seam and its flow's (`tts.voice.seam`), caches the
graphs beside the optimized ones, with their layout (seams and receptive fields, a small
JSON file: a load from the cache then reads no graph into this process, so a worker holds
no copy of the weights beside the memory-mapped ones of its sessions), makes the
sessions through the one factory (the decoder with the voice's 2-D rewrite; no ORT arena:
a worker does not keep the largest chunk's activations between runs), checks on a
probe sentence that chunks with trimmed contexts join to the whole (`_trim_contexts`)
and picks the vocoder's and the flow's precision (`tts.vocoder`, `tts.flow`). What it
returns runs in `tts.voice.split`.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
import structlog

from cosyvoiced.runtime.onnx import create_session, write_cache_file
from cosyvoiced.tts.voice.flow_precision import FLOW_PAD, pick_flow
from cosyvoiced.tts.voice.receptive import ReceptiveField, receptive_field
from cosyvoiced.tts.voice.rewrites import DECODER, DECODER_2D, decoder_rewrite
from cosyvoiced.tts.voice.seam import (
    FLOW,
    FlowSeam,
    decoder_seam,
    expose_durations,
    find_flow_seam,
    find_seam,
    split_flow,
    split_model,
)
from cosyvoiced.tts.voice.split import (
    DECODER_CONTEXT,
    FLOW_CONTEXT,
    SplitVoice,
    chunk_bounds,
    longest_chunk,
)
from cosyvoiced.tts.voice.split_cache import (
    Layout,
    SplitPaths,
    read_layout,
    save_graph,
    split_paths,
    write_layout,
)
from cosyvoiced.tts.voice.vocoder_precision import decoder_2d, pick_decoder, verdict_path

log = structlog.get_logger(__name__)

MIN_JOIN_SNR_DB = 60.0
"""Chunks with trimmed contexts must join to the whole at least this close (else full)."""

PROBE_PHONEMES = ("jʊɹ pˈeɪmənt wʌz ɹᵻsˈiːvd ðɪs mˈɔːɹnɪŋ, ænd ɐn ˈeɪdʒənt wɪl kˈɔːl "
                  "juː bˈæk.")
"""The load-time check's sentence (IPA, no espeak needed), noise off."""
PROBE_FIRST_S, PROBE_CHUNK_S = 0.2, 0.5
"""Its chunks: more seams than the engine's (0.2 s then 1 s), so the check is stricter."""



def _snr_db(ref: np.ndarray, x: np.ndarray) -> float:
    noise = float(np.sum((ref.astype(np.float64) - x) ** 2))
    return float("inf") if noise == 0 else 10 * np.log10(float(np.sum(ref**2.0)) / noise)


def probe_feeds(model_path: str, inputs: list[str], config_path: str | None = None
                ) -> tuple[dict[str, np.ndarray], int] | None:
    """(model inputs, sample rate) of `PROBE_PHONEMES` through the voice's phoneme map
    (`config_path`, default its `.onnx.json`), noise off; None where the voice has no such
    config or inputs."""
    import json

    from cosyvoiced.tts.frontend.phonemize import raw_phonemes, to_ids

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
               vocoder: str = "fp32", flow: str = "fp32",
               chunks_s: tuple[float, ...] = (0.25, 1.0),
               config_path: str | os.PathLike[str] | None = None) -> SplitVoice | None:
    """The voice at `model_path` as front + flow + decoder sessions (the flow in the front
    where it cannot be split off), or None (logged: the caller keeps the whole graph)
    where it has no seam or its decoder's reach is not known. Chunks decode with trimmed
    contexts where the probe sentence says they join close enough (`_trim_contexts`)."""
    model_path = str(model_path)
    config = str(config_path) if config_path is not None else None
    paths = (split_paths(model_path, cache_dir, (DECODER_CONTEXT, FLOW_CONTEXT))
             if cache_dir is not None else None)
    cached = paths is not None and paths.front.is_file() and paths.decoder.is_file()
    layout = read_layout(paths) if paths is not None and cached else None
    loaded = ((_load_laid_out(model_path, paths, layout, threads, cache_dir), paths, None)
              if paths is not None and layout is not None else
              _load_graphs(model_path, paths, cached, threads, cache_dir, prefix, flow_prefix))
    if loaded is None:
        return None
    voice, paths, graphs = loaded
    return _checked(voice, model_path, paths, graphs, threads, cache_dir, (vocoder, flow),
                    chunks_s, config)


def _load_laid_out(model_path: str, paths: SplitPaths, layout: Layout, threads: int,
                   cache_dir: str | os.PathLike[str] | None) -> SplitVoice:
    """The sessions of the cached graphs, their layout read from its JSON (no graph is
    parsed in this process)."""
    rewrite = decoder_rewrite(threads)
    kinds = ("front", "flow", "decoder") if layout.flow_seam is not None else ("front", "decoder")
    sessions = {k: create_session(getattr(paths, k), threads=threads, cache_dir=cache_dir,
                                  rewrite=rewrite if k == "decoder" else None,
                                  shared_weights=True, arena=False) for k in kinds}
    log.debug("tts_split_layout", model=model_path, path=str(paths.layout))
    return SplitVoice(sessions["front"], sessions["decoder"], layout.seam, layout.field,
                      flow=sessions.get("flow"), flow_seam=layout.flow_seam,
                      flow_field=layout.flow_field, durations=layout.durations)


def _load_graphs(model_path: str, paths: SplitPaths | None, cached: bool, threads: int,
                 cache_dir: str | os.PathLike[str] | None, prefix: str, flow_prefix: str
                 ) -> tuple[SplitVoice, SplitPaths | None, Any] | None:
    """The voice cut (or its cached graphs read), walked, cached with its layout, and its
    sessions made, with its cache paths (None: not cached) and, where not cached, its
    decoder graph; None (logged) where it has no seam or no known reach."""
    import onnx

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
    durations = (expose_durations(models["front"]) if "front" in models
                 else _front_durations(paths))
    if not cached and paths is not None and not all(save_graph(models[k], getattr(paths, k))
                                                    for k in reversed(kinds)):
        paths = None  # written front last: a cached front means the rest is there
    if paths is not None:
        write_layout(paths.layout, Layout(seam, field, flow_seam, flow_field, durations))
    rewrite = decoder_rewrite(threads)

    def session(kind: str) -> Any:
        wanted = rewrite if kind == "decoder" else None
        if paths is not None:
            return create_session(getattr(paths, kind), threads=threads, cache_dir=cache_dir,
                                  rewrite=wanted, shared_weights=True, arena=False)
        if wanted is not None:  # in memory (no cache, or it is unwritable): rewritten here
            try:
                wanted.apply(models[kind])
            except ValueError as exc:
                log.info("graph_rewrite_skipped", model=model_path, rewrite=wanted.tag,
                         reason=str(exc))
        return create_session(models[kind].SerializeToString(), threads=threads, arena=False)

    sessions = {k: session(k) for k in kinds}
    voice = SplitVoice(sessions["front"], sessions["decoder"], seam, field,
                       flow=sessions.get("flow"), flow_seam=flow_seam, flow_field=flow_field,
                       durations=durations)
    return voice, paths, models if paths is None else None


def _front_durations(paths: SplitPaths | None) -> str | None:
    """The durations output of a cached front graph (None: it has none)."""
    import onnx

    if paths is None or not paths.front.is_file():
        return None
    names = [o.name for o in onnx.load(str(paths.front), load_external_data=False).graph.output]
    return next((n for n in names if n.endswith("Ceil_output_0")), None)


def _checked(voice: SplitVoice, model_path: str, paths: SplitPaths | None,
             graphs: dict[str, Any] | None, threads: int,
             cache_dir: str | os.PathLike[str] | None, settings: tuple[str, str],
             chunks_s: tuple[float, ...], config: str | None) -> SplitVoice | None:
    """The voice with its front's outputs checked, its contexts trimmed and the precision
    of its vocoder and flow picked (`settings`: `tts.vocoder`, `tts.flow`); None (logged)
    where the front does not fit. `graphs`: the split graphs where they are not cached
    (else read from the cache only if OpenVINO is tried)."""
    seam, field, flow_field = voice.seam, voice.field, voice.flow_field
    outputs = {o.name for o in voice.front.get_outputs()}
    if set(voice._front_outputs()) != outputs:  # a cache entry that does not fit
        log.warning("tts_decode_path", model=model_path, path="whole",
                    reason=f"front outputs {sorted(outputs)}")
        return None
    _trim_contexts(voice, model_path, paths.contexts if paths is not None else None, config)
    probe = probe_feeds(model_path, [i.name for i in voice.front.get_inputs()], config) \
        if settings != ("fp32", "fp32") else None
    left, right = voice.context or (field.left, field.right)
    chunks = [voice.frames_for(s, probe[1]) for s in chunks_s] if probe else []
    if chunks:  # a sentence's last chunk takes in its tail: a window for it too, not FP32
        chunks.append(longest_chunk(chunks[-1]))
    sizes = [n + left + right for n in chunks]

    def graph(kind: str) -> Any:
        if graphs is not None:
            return graphs[kind]
        import onnx

        assert paths is not None
        return onnx.load(str(getattr(paths, kind)))

    def verdict(kind: str, windows: list[int]) -> Path | None:
        return verdict_path(paths.contexts, threads, windows, kind) if paths else None

    where = str(cache_dir) if cache_dir is not None else None
    voice.fast, voice.vocoder = pick_decoder(
        settings[0], voice.decoder, lambda: decoder_2d(graph("decoder")),
        voice.latent(probe[0]) if probe is not None else None, seam.latent, sizes,
        threads=threads, cache_dir=where, model=model_path, verdict=verdict("vocoder", sizes),
        key=f"{paths.decoder.stem}-{DECODER_2D.tag}" if paths else None)
    if voice.flow is not None and voice.flow_seam is not None:
        inputs = voice.sentence(probe[0]).inputs if probe is not None else {}
        voice.flow, voice.flow_precision = pick_flow(
            settings[1], voice.flow, lambda: graph("flow").SerializeToString(),
            {k: inputs[k] for k in voice.flow_seam.inputs} if inputs else None,
            threads=threads, cache_dir=where, model=model_path,
            verdict=verdict("flow", [FLOW_PAD]), key=paths.flow.stem if paths else None)
    flow = None if flow_field is None else voice.flow_context or (flow_field.left,
                                                                  flow_field.right)
    log.info("tts_decode_path", model=model_path, path="split", latent=seam.latent,
             hop=field.hop, context=voice.context or (field.left, field.right), flow=flow)
    return voice
