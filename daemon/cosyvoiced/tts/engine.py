"""The TTS engine of one worker: voices loaded on demand and warmed up, requests checked
and planned, each then spoken by a `Synthesis` (`tts.streaming.synthesis`: what a request's audio is
made of, step by step).

What one request may cost is bounded: each clause runs at a length scale within
`LENGTH_SCALE_RANGE` whatever its SSML rate, the `<break>`s of a document add up to
`tts.max_pause_s` at most (`PausesTooLong` otherwise), and a request whose audio would
be longer than `tts.max_audio_s` even at the fastest reading is refused before any run
(`AudioTooLong`); one that turns out longer is cut there (logged `tts_audio_capped`).
"""

from __future__ import annotations

import threading
from dataclasses import replace
from pathlib import Path

import numpy as np
import structlog

from cosyvoiced.config.schema import TtsConfig
from cosyvoiced.runtime.onnx import run as onnx_run
from cosyvoiced.tts.errors import AudioTooLong, EmptyText
from cosyvoiced.tts.frontend.lexicon import Lexicon
from cosyvoiced.tts.frontend.normalize import (
    Segment,
    load_grammars,
    plain_segments,
    set_phonetic,
)
from cosyvoiced.tts.frontend.phonemize import text_to_ids
from cosyvoiced.tts.frontend.plan import PlanLimits, plan
from cosyvoiced.tts.frontend.ssml import parse_ssml
from cosyvoiced.tts.request import SynthesisOptions, check_text
from cosyvoiced.tts.streaming.prompt_cache import PromptCache, read_prompts
from cosyvoiced.tts.streaming.synthesis import Synthesis, audio_floor_s, model_inputs
from cosyvoiced.tts.voice.catalog import (
    Voice,
    VoiceMeta,
    describe,
    discover,
    find_voice,
    load_voice,
)
from cosyvoiced.tts.voice.split import chunk_bounds

log = structlog.get_logger(__name__)

WARMUP_TEXT = "Thank you for calling, how can I help you today?"
UNCAPPED_S = 86_400.0
"""The audio cap of the daemon's own runs: the largest `tts.max_audio_s` there is."""
TARGET_PEAK = 0.8
"""Warm-up sets a fixed voice gain so this is the warm-up sentence's peak (no per-clause
peak normalization: it would make clauses of one sentence differ in loudness)."""


class TtsEngine:
    """Voices loaded on demand (and kept), synthesizing for one worker process."""

    def __init__(self, config: TtsConfig, *, threads: int = 1, cache_dir: str | None = None,
                 state_dir: str | None = None, lexicon: Lexicon | None = None) -> None:
        self.config = config
        self.threads = threads
        self.cache_dir = cache_dir
        self.state_dir = state_dir
        self.lexicon = lexicon
        """`tts.lexicon`, parsed in the main process (replaced whole on reload)."""
        if cache_dir is not None:  # NeMo's English grammars, once per process (template)
            load_grammars(cache_dir)
        set_phonetic(config.spell_phonetic)
        self._voices: dict[tuple[str, str], Voice] = {}
        self._lock = threading.Lock()
        persist = Path(cache_dir) / "prompts" if cache_dir and config.cache_persist else None
        self.prompts = PromptCache(int(config.cache_mb * 2**20), persist)

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
                                   cache_dir=self.cache_dir, state_dir=self.state_dir,
                                   decode=self.config.decode, vocoder=self.config.vocoder,
                                   flow=self.config.flow,
                                   chunks_s=(self.config.first_chunk_s, self.config.chunk_s))
                self._voices[key] = self._warm_up(voice)
            return self._voices[key]

    def warm_prompts(self) -> int:
        """Synthesize `tts.cache_prompts` into the prompt cache (default voice and settings;
        read from disk instead where `cache_persist` kept them); returns the prompts said."""
        path = self.config.cache_prompts
        if not path or not self.prompts.enabled:
            return 0
        prompts = read_prompts(path)
        for text in prompts:
            for _ in self.synthesize(text, persist_prompts=True):
                pass
        return len(prompts)

    def register(self, voice: Voice, precision: str) -> Voice:
        """Serve an already loaded voice (tools judging a model file) under its name."""
        with self._lock:
            self._voices[(voice.name, precision)] = self._warm_up(voice)
        return voice

    def _warm_up(self, voice: Voice) -> Voice:
        """One run before the voice is used (allocates ORT's buffers, on the split path in
        chunks as synthesis runs it) that sets its gain and its speech per character."""
        if not self.config.warmup:
            return voice
        cfg, rate = voice.config, voice.sample_rate_hz
        feeds = model_inputs(text_to_ids(WARMUP_TEXT, cfg), cfg.length_scale, 0.0, 0.0,
                             voice.speaker_id(None))
        split = voice.split
        if split is None:
            assert voice.session is not None
            audio = np.asarray(onnx_run(voice.session, feeds)[0], dtype=np.float32).reshape(-1)
        else:
            sentence = split.sentence(feeds)
            bounds = chunk_bounds(sentence.frames, split.frames_for(self.config.chunk_s, rate),
                                  split.frames_for(self.config.first_chunk_s, rate))
            audio = np.concatenate([split.decode_chunk(sentence, a, b) for a, b in bounds])
            voice.speech_s_per_char = audio.shape[0] / rate / len(WARMUP_TEXT) / cfg.length_scale
        peak = float(np.abs(audio).max()) if audio.size else 0.0
        voice.gain = float(np.clip(TARGET_PEAK / peak, 0.5, 4.0)) if peak > 1e-4 else 1.0
        return voice

    def segments(self, text: str, voice: Voice, ssml: bool) -> list[Segment]:
        if ssml:
            return parse_ssml(text, voice.language,
                              max_pause_ms=int(round(self.config.max_pause_s * 1000)),
                              lexicon=self.lexicon)
        return plain_segments(text, voice.language, lexicon=self.lexicon)

    def limits(self, voice: Voice) -> PlanLimits:
        """How `voice`'s text is cut: whole sentences when it is split, clauses otherwise."""
        c = self.config
        if voice.split is not None:
            return PlanLimits(c.min_clause_chars, c.max_sentence_chars, c.max_sentence_chars,
                              c.clause_silence_ms, c.sentence_silence_ms, whole_sentences=True)
        return PlanLimits(c.min_clause_chars, c.max_clause_chars, c.first_clause_max_chars,
                          c.clause_silence_ms, c.sentence_silence_ms)

    def synthesize(self, text: str | bytes, options: SynthesisOptions | None = None, *,
                   precision: str | None = None, cancel: threading.Event | None = None,
                   persist_prompts: bool = False, capped: bool = True) -> Synthesis:
        """Check the request now (typed errors raised here), then stream its chunks.
        `capped=False`: the daemon's own runs (a worker timing itself), which
        `tts.max_audio_s` neither refuses nor cuts."""
        options = options or SynthesisOptions()
        options.check()
        text = check_text(text, self.config.max_chars)
        voice = self.voice(options.voice, precision)
        sid = voice.speaker_id(options.speaker)
        clauses = plan(self.segments(text, voice, options.ssml), self.limits(voice))
        if not clauses:
            raise EmptyText("nothing to speak (no words, phonemes or breaks)")
        length = (options.length_scale if options.length_scale is not None
                  else voice.config.length_scale)
        floor_s = audio_floor_s(clauses, length)
        if capped and floor_s > self.config.max_audio_s:
            raise AudioTooLong(floor_s, self.config.max_audio_s)
        config = self.config if capped else replace(self.config, max_audio_s=UNCAPPED_S)
        return Synthesis(config, voice, clauses, options, sid, cancel,
                         prompts=self.prompts, persist_prompts=persist_prompts, source=text)


