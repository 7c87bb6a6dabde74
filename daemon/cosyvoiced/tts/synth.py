"""Streaming synthesis: text -> segments -> clauses -> one ONNX run each -> audio chunks.

`TtsEngine.synthesize()` is a generator: each clause's audio is yielded as soon as it is
synthesized (fades at its edges, then the pause after it), so the first audio leaves
after the first clause. A cancel event is checked between clauses (barge-in).

What one request may cost is bounded: each clause runs at a length scale within
`LENGTH_SCALE_RANGE` whatever its SSML rate, the `<break>`s of a document add up to
`tts.max_pause_s` at most (`PausesTooLong` otherwise), and a request whose audio would
be longer than `tts.max_audio_s` even at the fastest reading is refused before any run
(`AudioTooLong`); one that turns out longer is cut there (logged `tts_audio_capped`).
"""

from __future__ import annotations

import threading
from collections.abc import Iterator

import numpy as np
import structlog

from cosyvoiced.audio.codec import f32_to_s16, mulaw_encode
from cosyvoiced.audio.resample import StreamResampler
from cosyvoiced.config.schema import TtsConfig
from cosyvoiced.runtime.onnx import run as onnx_run
from cosyvoiced.tts.errors import AudioTooLong, EmptyText
from cosyvoiced.tts.normalize import Segment, plain_segments
from cosyvoiced.tts.normalize.ssml import parse_ssml
from cosyvoiced.tts.phonemize import raw_phonemes, text_to_ids, to_ids
from cosyvoiced.tts.plan import Clause, PlanLimits, plan
from cosyvoiced.tts.request import LENGTH_SCALE_RANGE, AudioChunk, SynthesisOptions, check_text
from cosyvoiced.tts.voices import Voice, VoiceMeta, describe, discover, find_voice, load_voice

log = structlog.get_logger(__name__)

WARMUP_TEXT = "Thank you for calling, how can I help you today?"
CUT_TAIL_MS = 40
"""Silence kept after a clause that was cut mid-phrase for length."""
TARGET_PEAK = 0.8
"""Warm-up sets a fixed voice gain so this is the warm-up sentence's peak (no per-clause
peak normalization: it would make clauses of one sentence differ in loudness)."""
FAST_CHARS_PER_S = 30.0
"""Characters per second faster than any voice reads at length scale 1 (Piper medium
voices read ~23): a request speaks at least its characters over this, times its length
scale, so refusing on that never refuses one that would have fitted."""


def effective_length_scale(length_scale: float, rate: float) -> float:
    """The length scale a clause is synthesized at: the request's over the clause's
    speaking rate, kept within `LENGTH_SCALE_RANGE` (one ONNX run's output is bounded)."""
    lo, hi = LENGTH_SCALE_RANGE
    return min(max(length_scale / (rate if rate > 0 else 1.0), lo), hi)


def audio_floor_s(clauses: list[Clause], length_scale: float) -> float:
    """The least audio `clauses` can come to: their pauses, and their text read at
    `FAST_CHARS_PER_S`."""
    speech = sum(len(c.text) / FAST_CHARS_PER_S * effective_length_scale(length_scale, c.rate)
                 for c in clauses if c.text)
    return speech + sum(c.pause_after_ms for c in clauses) / 1000


def fade_edges(audio: np.ndarray, fade_samples: int) -> None:
    """Raised-cosine fade-in and fade-out, in place."""
    n = min(fade_samples, audio.shape[0] // 2)
    if n <= 0:
        return
    ramp = (0.5 - 0.5 * np.cos(np.linspace(0.0, np.pi, n, dtype=np.float32))).astype(np.float32)
    audio[:n] *= ramp
    audio[-n:] *= ramp[::-1]


def trim_trailing_silence(audio: np.ndarray, keep: int, threshold: float = 0.01) -> np.ndarray:
    """Drop near-silence at the end, keeping `keep` samples after the last louder one."""
    loud = np.flatnonzero(np.abs(audio) > threshold)
    if loud.size == 0:
        return audio
    return audio[:min(audio.shape[0], int(loud[-1]) + 1 + keep)]


def encode(audio: np.ndarray, fmt: str) -> bytes:
    """float32 samples -> bytes in `fmt` (float32 | s16le | mulaw), little-endian."""
    if fmt == "float32":
        return audio.astype("<f4", copy=False).tobytes()
    if fmt == "s16le":
        return f32_to_s16(audio, np.empty(audio.shape, dtype=np.int16)).astype("<i2").tobytes()
    return mulaw_encode(audio).tobytes()


class TtsEngine:
    """Voices loaded on demand (and kept), synthesizing for one worker process."""

    def __init__(self, config: TtsConfig, *, threads: int = 1, cache_dir: str | None = None,
                 state_dir: str | None = None) -> None:
        self.config = config
        self.threads = threads
        self.cache_dir = cache_dir
        self.state_dir = state_dir
        self._voices: dict[tuple[str, str], Voice] = {}
        self._lock = threading.Lock()

    def voice_names(self) -> list[str]:
        return sorted(discover(self.config.voices_dirs))

    def voices(self) -> list[VoiceMeta]:
        """Every available voice, described from its JSON (no model loaded)."""
        return [describe(f) for _, f in sorted(discover(self.config.voices_dirs).items())]

    def preload(self) -> Voice:
        """Load and warm up the default voice (call before reporting READY)."""
        return self.voice()

    def voice(self, name: str | None = None, precision: str | None = None) -> Voice:
        """The loaded voice `name` at `precision` (defaults from config), loading it once."""
        name = name or self.config.voice
        precision = precision or self.config.precision
        key = (name, precision)
        with self._lock:
            if key not in self._voices:
                files = find_voice(name, self.config.voices_dirs)
                voice = load_voice(files, precision=precision, threads=self.threads,
                                   cache_dir=self.cache_dir, state_dir=self.state_dir)
                self._voices[key] = self._warm_up(voice)
            return self._voices[key]

    def register(self, voice: Voice, precision: str) -> Voice:
        """Serve an already loaded voice (tools judging a model file) under its name."""
        with self._lock:
            self._voices[(voice.name, precision)] = self._warm_up(voice)
        return voice

    def _warm_up(self, voice: Voice) -> Voice:
        """One run before the voice is used (allocates ORT's buffers) that sets its gain."""
        if not self.config.warmup:
            return voice
        ids = text_to_ids(WARMUP_TEXT, voice.config)
        cfg = voice.config
        audio = self._run(voice, ids, cfg.length_scale, 0.0, 0.0, voice.speaker_id(None))
        peak = float(np.abs(audio).max()) if audio.size else 0.0
        voice.gain = float(np.clip(TARGET_PEAK / peak, 0.5, 4.0)) if peak > 1e-4 else 1.0
        return voice

    def _run(self, voice: Voice, ids: list[int], length_scale: float, noise_scale: float,
             noise_w: float, sid: int | None) -> np.ndarray:
        feeds = {
            "input": np.asarray([ids], dtype=np.int64),
            "input_lengths": np.asarray([len(ids)], dtype=np.int64),
            "scales": np.asarray([noise_scale, length_scale, noise_w], dtype=np.float32),
        }
        if sid is not None:
            feeds["sid"] = np.asarray([sid], dtype=np.int64)
        return np.asarray(onnx_run(voice.session, feeds)[0], dtype=np.float32).reshape(-1)

    def segments(self, text: str, voice: Voice, ssml: bool) -> list[Segment]:
        if ssml:
            return parse_ssml(text, voice.language,
                              max_pause_ms=int(round(self.config.max_pause_s * 1000)))
        return plain_segments(text, voice.language)

    def limits(self) -> PlanLimits:
        c = self.config
        return PlanLimits(c.min_clause_chars, c.max_clause_chars, c.first_clause_max_chars,
                          c.clause_silence_ms, c.sentence_silence_ms)

    def synthesize(self, text: str | bytes, options: SynthesisOptions | None = None, *,
                   precision: str | None = None,
                   cancel: threading.Event | None = None) -> Iterator[AudioChunk]:
        """Check the request now (typed errors raised here), then stream its chunks."""
        options = options or SynthesisOptions()
        options.check()
        text = check_text(text, self.config.max_chars)
        voice = self.voice(options.voice, precision)
        sid = voice.speaker_id(options.speaker)
        clauses = plan(self.segments(text, voice, options.ssml), self.limits())
        if not clauses:
            raise EmptyText("nothing to speak (no words, phonemes or breaks)")
        length = (options.length_scale if options.length_scale is not None
                  else voice.config.length_scale)
        floor_s = audio_floor_s(clauses, length)
        if floor_s > self.config.max_audio_s:
            raise AudioTooLong(floor_s, self.config.max_audio_s)
        return self._stream(voice, clauses, options, sid, cancel)

    def _stream(self, voice: Voice, clauses: list[Clause], options: SynthesisOptions,
                sid: int | None, cancel: threading.Event | None) -> Iterator[AudioChunk]:
        cfg = voice.config
        in_rate = cfg.sample_rate
        out_rate = options.rate_hz or self.config.rate_hz or in_rate
        fmt = options.format or self.config.format
        resampler = StreamResampler(in_rate, out_rate) if out_rate != in_rate else None
        length = options.length_scale if options.length_scale is not None else cfg.length_scale
        noise = options.noise_scale if options.noise_scale is not None else cfg.noise_scale
        noise_w = options.noise_w_scale if options.noise_w_scale is not None else cfg.noise_w_scale
        gain = np.float32(voice.gain * options.volume)
        fade = int(round(self.config.fade_ms * in_rate / 1000))
        left = int(self.config.max_audio_s * in_rate)  # samples still allowed (voice rate)
        index = 0
        for n, clause in enumerate(clauses):
            if cancel is not None and cancel.is_set():
                log.info("tts_cancelled", voice=voice.name, at_clause=n, clauses=len(clauses))
                return
            pause = np.zeros(min(clause.pause_after_ms * in_rate // 1000, left),
                             dtype=np.float32)
            if clause.text:
                ids = (to_ids(raw_phonemes(clause.text), cfg.phoneme_id_map) if clause.phonemes
                       else text_to_ids(clause.text, cfg))
                speech = self._run(voice, ids, effective_length_scale(length, clause.rate),
                                   noise, noise_w, sid)
                if clause.cut:  # mid-phrase: no end-of-utterance pause where none is written
                    speech = trim_trailing_silence(speech, keep=CUT_TAIL_MS * in_rate // 1000)
                np.multiply(speech, gain, out=speech)
                np.clip(speech, -1.0, 1.0, out=speech)
                fade_edges(speech, fade)
                audio = np.concatenate([speech, pause]) if pause.size else speech
            else:
                audio = pause
            last = n == len(clauses) - 1
            if audio.shape[0] > left or (audio.shape[0] == left and not last):
                log.warning("tts_audio_capped", voice=voice.name, at_clause=n,
                            clauses=len(clauses), max_audio_s=self.config.max_audio_s)
                last = True
            audio = audio[:left]
            left -= audio.shape[0]
            if resampler is not None:
                audio = resampler.process(audio)
                if last:
                    audio = np.concatenate([audio, resampler.flush()])
            yield AudioChunk(audio, encode(audio, fmt), out_rate, fmt, index, clause.text, last)
            index += 1
            if last:
                return

