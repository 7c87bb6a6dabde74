"""One request's audio: sentences -> front run -> vocoder chunks, step by step.

A `Synthesis` is an iterator of audio chunks, each yielded as soon as it is made. With a
split voice (`tts.decode = "chunked"`) each sentence runs whole through the voice's text
front, then its vocoder in chunks (`first_chunk_s` for the request's first, `chunk_s`
after): the chunks of a sentence join to its whole decode, so its prosody is the full
sentence's and the first audio still leaves after one small chunk. Otherwise each clause
is one whole-graph run. A sentence already said with the same voice and settings comes
from the prompt cache (`tts.streaming.prompt_cache`) in steps of the same sizes. Fades are at a
sentence's (clause's) edges, the pause after it ends its last chunk. `upcoming()` tells a
scheduler what each next step will cost (`Step`); a cancel event is checked between
steps (barge-in).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np
import structlog

from cosyvoiced.audio.codec import f32_to_s16, mulaw_encode
from cosyvoiced.audio.resample import StreamResampler
from cosyvoiced.config.schema import TtsConfig
from cosyvoiced.runtime.onnx import run as onnx_run
from cosyvoiced.tts.frontend.phonemize import raw_phonemes, text_phonemes, to_ids
from cosyvoiced.tts.frontend.plan import Clause
from cosyvoiced.tts.request import LENGTH_SCALE_RANGE, AudioChunk, SynthesisOptions, WordTime
from cosyvoiced.tts.streaming.prompt_cache import KeptWord, PromptCache, PromptKey, keep_words
from cosyvoiced.tts.streaming.words import alone, clause_words, id_frames
from cosyvoiced.tts.voice.catalog import Voice
from cosyvoiced.tts.voice.split import chunk_bounds

log = structlog.get_logger(__name__)

CUT_TAIL_MS = 40
"""Silence kept after a clause that was cut mid-phrase for length."""
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


SPEECH_PER_CHAR_EWMA = 0.2
"""How fast a voice's learned seconds of speech per character follow new sentences."""


def fade_edges(audio: np.ndarray, fade_samples: int, head: bool = True,
               tail: bool = True) -> None:
    """Raised-cosine fade-in (`head`) and fade-out (`tail`), in place."""
    n = min(fade_samples, audio.shape[0] // 2)
    if n <= 0:
        return
    ramp = (0.5 - 0.5 * np.cos(np.linspace(0.0, np.pi, n, dtype=np.float32))).astype(np.float32)
    if head:
        audio[:n] *= ramp
    if tail:
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


def model_inputs(ids: list[int], length_scale: float, noise_scale: float, noise_w: float,
                 sid: int | None) -> dict[str, np.ndarray]:
    """A Piper voice graph's inputs for one run."""
    feeds = {
        "input": np.asarray([ids], dtype=np.int64),
        "input_lengths": np.asarray([len(ids)], dtype=np.int64),
        "scales": np.asarray([noise_scale, length_scale, noise_w], dtype=np.float32),
    }
    if sid is not None:
        feeds["sid"] = np.asarray([sid], dtype=np.int64)
    return feeds


@dataclass(frozen=True)
class Step:
    """One `next()` of a `Synthesis`: one uninterruptible stretch of work on the worker."""

    front_chars: int
    """Characters whose text front runs in this step (0: vocoder only, or a whole run)."""
    speech_s: float
    """Speech it yields (exact once its sentence's front ran, else guessed from text)."""
    pause_s: float = 0.0
    """Silence after it (costs nothing to make)."""
    cached: bool = False
    """Its sentence is in the prompt cache: a copy, no model run."""



class Synthesis(Iterator[AudioChunk]):
    """One request's audio, chunk by chunk (see the module doc)."""

    def __init__(self, config: TtsConfig, voice: Voice, clauses: list[Clause],
                 options: SynthesisOptions, sid: int | None,
                 cancel: threading.Event | None, *, prompts: PromptCache | None = None,
                 persist_prompts: bool = False, source: str = "") -> None:
        cfg = voice.config
        self.config = config
        self.voice = voice
        self.clauses = clauses
        self.options = options
        self.sid = sid
        self.cancel = cancel
        self.length = options.length_scale if options.length_scale is not None \
            else cfg.length_scale
        self.noise = options.noise_scale if options.noise_scale is not None else cfg.noise_scale
        self.noise_w = options.noise_w_scale if options.noise_w_scale is not None \
            else cfg.noise_w_scale
        self._at = 0
        """The next clause whose run has not started."""
        self._first_speech = next((n for n, c in enumerate(clauses) if c.text), -1)
        self._left: list[tuple[int, int]] = []
        """Chunks of the current sentence not decoded yet (latent frames)."""
        self._left_cached: list[tuple[int, int]] = []
        """Chunks of the current sentence, from the prompt cache, not yielded yet."""
        self._pause_s = 0.0
        """The pause after the current sentence."""
        self.source = source
        """The caller's input as sent (what word times point into)."""
        self._words: list[WordTime] = []
        """The current clause's words not yielded yet (seconds from the clause's start)."""
        # with words: a sentence kept with its words' times, else synthesized (and kept so)
        self.prompts = prompts if prompts is not None and prompts.enabled else None
        self.persist_prompts = persist_prompts
        self._gen = self._chunks()

    def __next__(self) -> AudioChunk:
        return next(self._gen)

    def close(self) -> None:
        self._gen.close()

    def _first_frames(self, n: int) -> int | None:
        """The first chunk's size for clause `n`: small for the request's first speech."""
        split = self.voice.split
        assert split is not None
        return split.frames_for(self.config.first_chunk_s, self.voice.sample_rate_hz) \
            if n == self._first_speech else None

    def _key(self, clause: Clause) -> PromptKey:
        return PromptKey(self.voice.model_id, clause.text, clause.phonemes,
                         effective_length_scale(self.length, clause.rate), self.noise,
                         self.noise_w, self.sid, "chunked" if self.voice.split else "whole")

    def _cut(self, n: int, samples: int) -> list[tuple[int, int]]:
        """A cached sentence's steps (samples), sized as its synthesis would be."""
        rate = self.voice.sample_rate_hz
        size = max(1, int(self.config.chunk_s * rate))
        first = int(self.config.first_chunk_s * rate) if n == self._first_speech else size
        bounds, a = [], 0
        while a < samples:
            b = min(samples, a + (first if a == 0 else size))
            bounds.append((a, b))
            a = b
        return bounds

    def upcoming(self) -> Iterator[Step]:
        """The steps still to come, in order (later sentences' audio guessed from text)."""
        voice, rate = self.voice, self.voice.sample_rate_hz
        split = voice.split
        hop_s = split.field.hop / rate if split is not None else 0.0
        for i, (a, b) in enumerate(self._left):
            yield Step(0, (b - a) * hop_s, self._pause_s if i == len(self._left) - 1 else 0.0)
        for i, (a, b) in enumerate(self._left_cached):
            yield Step(0, (b - a) / rate, self._pause_s if i == len(self._left_cached) - 1
                       else 0.0, cached=True)
        for n in range(self._at, len(self.clauses)):
            clause = self.clauses[n]
            pause_s = clause.pause_after_ms / 1000
            cached = self.prompts.samples(self._key(clause), self.options.words) \
                if self.prompts is not None and clause.text else None
            if cached is not None:
                bounds = self._cut(n, cached)
                for i, (a, b) in enumerate(bounds):
                    yield Step(0, (b - a) / rate, pause_s if i == len(bounds) - 1 else 0.0,
                               cached=True)
                continue
            speech_s = len(clause.text) * voice.speech_s_per_char * \
                effective_length_scale(self.length, clause.rate)
            if not clause.text or split is None:
                yield Step(0, speech_s, pause_s)
                continue
            size = split.frames_for(self.config.chunk_s, rate)
            bounds = chunk_bounds(max(1, round(speech_s / hop_s)), size, self._first_frames(n))
            for i, (a, b) in enumerate(bounds):
                yield Step(len(clause.text) if i == 0 else 0, (b - a) * hop_s,
                           pause_s if i == len(bounds) - 1 else 0.0)

    def _learn_speech_rate(self, clause: Clause, frames: int) -> None:
        split, voice = self.voice.split, self.voice
        assert split is not None
        scale = effective_length_scale(self.length, clause.rate)
        if clause.text and scale > 0:
            per_char = frames * split.field.hop / voice.sample_rate_hz / len(clause.text) / scale
            voice.speech_s_per_char += SPEECH_PER_CHAR_EWMA * (per_char - voice.speech_s_per_char)

    def _pieces(self, n: int, clause: Clause) -> Iterator[tuple[np.ndarray, int, float, bool]]:
        """(speech, front chars, front seconds, cached) of a clause's steps, in order: from
        the prompt cache, or synthesized (and then kept there, before its last piece leaves:
        the caller may stop after it)."""
        key = self._key(clause) if self.prompts is not None else None
        kept, told = self.prompts.lookup(key, self.options.words, clause.spans, self.source) \
            if self.prompts is not None and key is not None else (None, [])
        if kept is not None:
            self._words = told
            self._left_cached = self._cut(n, kept.shape[0])
            while self._left_cached:
                a, b = self._left_cached.pop(0)
                yield kept[a:b].copy(), 0, 0.0, True
            return
        made: list[np.ndarray] = []
        timed: tuple[KeptWord, ...] | None = None
        for speech, front_chars, front_s in self._synthesize(n, clause):
            if self.prompts is not None and key is not None:
                if not made and self.options.words:  # all its words, none told yet
                    timed = keep_words(self._words, clause.spans)
                made.append(speech.copy())
                if not self._left:
                    self.prompts.put(key, np.concatenate(made), persist=self.persist_prompts,
                                     words=timed)
            yield speech, front_chars, front_s, False

    def _synthesize(self, n: int, clause: Clause) -> Iterator[tuple[np.ndarray, int, float]]:
        """(speech, front chars, front seconds) of a clause's model runs, in order."""
        voice, cfg = self.voice, self.voice.config
        t0 = time.perf_counter()
        phonemes = (raw_phonemes(clause.text) if clause.phonemes
                    else text_phonemes(clause.text, cfg))
        # what the voice is told to say (lexicon and <phoneme> entries spliced in): content
        log.debug("tts_phonemes", voice=voice.name, clause=n, phonemes="".join(phonemes))
        ids = to_ids(phonemes, cfg.phoneme_id_map)
        self._words = []
        feeds = model_inputs(ids, effective_length_scale(self.length, clause.rate),
                             self.noise, self.noise_w, self.sid)
        split = voice.split
        if split is None:
            assert voice.session is not None
            audio = np.asarray(onnx_run(voice.session, feeds)[0], dtype=np.float32).reshape(-1)
            if self.options.words:  # no durations out of a whole graph: spread over its ids
                self._time_words(clause, phonemes, np.full(len(ids), audio.shape[0] / len(ids)))
            yield audio, 0, 0.0
            return
        sentence = split.sentence(feeds)
        if self.options.words:
            hop = split.field.hop
            durations = sentence.durations if sentence.durations is not None \
                else np.full(len(ids), sentence.frames / len(ids))
            self._time_words(clause, phonemes, durations * hop)
        self._learn_speech_rate(clause, sentence.frames)
        size = split.frames_for(self.config.chunk_s, voice.sample_rate_hz)
        self._left = chunk_bounds(sentence.frames, size, self._first_frames(n))
        front_s = time.perf_counter() - t0
        front_chars = len(clause.text)
        while self._left:
            a, b = self._left.pop(0)
            yield split.decode_chunk(sentence, a, b), front_chars, front_s
            front_chars, front_s = 0, 0.0

    def _time_words(self, clause: Clause, phonemes: list[str], samples: np.ndarray) -> None:
        """The clause's words, timed from each id's `samples` (at the voice's rate)."""
        if clause.phonemes:
            return
        cfg = self.voice.config
        starts, _ = id_frames(phonemes, cfg.phoneme_id_map, samples)
        rate = self.voice.sample_rate_hz
        self._words = [WordTime(w.text, w.char_start, w.char_end, w.start_s / rate,
                                w.end_s / rate)
                       for w in clause_words(clause.text, clause.spans, self.source, phonemes,
                                             starts, alone(cfg.espeak_voice))]

    def _due(self, clause_s: float, until_s: float, speech_end_s: float,
             tail: bool) -> tuple[WordTime, ...]:
        """The clause's words starting before `until_s` (all left, at its `tail`), on the
        request's timeline (the clause starts at `clause_s`), kept inside its speech."""
        due: list[WordTime] = []
        while self._words and (tail or clause_s + self._words[0].start_s < until_s):
            w = self._words.pop(0)
            if clause_s + w.start_s >= speech_end_s:
                continue  # not spoken: the audio was capped before it
            due.append(WordTime(w.text, w.char_start, w.char_end, clause_s + w.start_s,
                                min(clause_s + w.end_s, speech_end_s)))
        return tuple(due)

    def _chunks(self) -> Iterator[AudioChunk]:
        voice, options, config = self.voice, self.options, self.config
        in_rate = voice.sample_rate_hz
        out_rate = options.rate_hz or config.rate_hz or in_rate
        fmt = options.format or config.format
        resampler = StreamResampler(in_rate, out_rate) if out_rate != in_rate else None
        gain = np.float32(voice.gain * options.volume)
        fade = int(round(config.fade_ms * in_rate / 1000))
        left = int(config.max_audio_s * in_rate)  # samples still allowed (voice rate)
        index = 0
        made = 0  # samples yielded so far (voice rate)
        for n, clause in enumerate(self.clauses):
            clause_s = made / in_rate
            self._at = n + 1
            self._pause_s = clause.pause_after_ms / 1000
            pause = np.zeros(min(clause.pause_after_ms * in_rate // 1000, left),
                             dtype=np.float32)
            pieces = self._pieces(n, clause) if clause.text \
                else iter([(pause[:0], 0, 0.0, False)])
            head = True
            for speech, front_chars, front_s, cached in pieces:
                if self.cancel is not None and self.cancel.is_set():
                    log.info("tts_cancelled", voice=voice.name, at_clause=n,
                             clauses=len(self.clauses))
                    return
                tail = not self._left and not self._left_cached
                if tail and clause.cut:  # mid-phrase: no end-of-utterance pause where none is
                    speech = trim_trailing_silence(speech, keep=CUT_TAIL_MS * in_rate // 1000)
                np.multiply(speech, gain, out=speech)
                np.clip(speech, -1.0, 1.0, out=speech)
                fade_edges(speech, fade, head, tail)
                head = False
                speech_s = speech.shape[0] / in_rate
                audio = np.concatenate([speech, pause]) if tail and pause.size else speech
                last = tail and n == len(self.clauses) - 1
                if audio.shape[0] > left or (audio.shape[0] == left and not last):
                    log.warning("tts_audio_capped", voice=voice.name, at_clause=n,
                                clauses=len(self.clauses), max_audio_s=config.max_audio_s)
                    last = True
                audio = audio[:left]
                left -= audio.shape[0]
                spoken_to = (made + min(speech.shape[0], audio.shape[0])) / in_rate \
                    if tail or last else float("inf")
                words = self._due(clause_s, (made + audio.shape[0]) / in_rate, spoken_to,
                                  tail or last) if self.options.words else ()
                made += audio.shape[0]
                if resampler is not None:
                    audio = resampler.process(audio)
                    if last:
                        audio = np.concatenate([audio, resampler.flush()])
                    np.clip(audio, -1.0, 1.0, out=audio)  # the filter rings past full scale
                yield AudioChunk(audio, encode(audio, fmt), out_rate, fmt, index, clause.text,
                                 last, speech_s=speech_s, front_chars=front_chars,
                                 front_s=front_s, cached=cached, words=words)
                index += 1
                if last:
                    return

