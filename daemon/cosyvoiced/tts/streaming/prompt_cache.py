"""Sentences said before, kept as audio: repeated prompts are synthesized once.

Call centers say the same sentences all day (greetings, menus, hold messages,
confirmations). `PromptCache` keeps the raw speech of a sentence (voice rate, before gain,
fades and the pause after it) under a key made of everything that shapes it: the voice
model (name, precision, file size and time), the sentence's text and whether it is
phonemes, its length scale, both noise scales, the speaker and the decode path. A hit
costs a copy instead of a front run and a vocoder.

Bounded in bytes, least recently used first out (`tts.cache_mb`; each worker keeps its
own). With a directory (`tts.cache_persist`), a sentence heard a second time is also
written there, one raw float32 file per key, so the other workers, a replacement worker and
the next start find it without synthesizing; the directory is held to the same byte bound,
oldest files out. `tts.cache_prompts` names a file of prompts synthesized into the cache
when a worker starts (see `TtsEngine.warm_prompts`).

A sentence synthesized with word timing is kept with its words' times, each by the span
of the sentence it reads (sentence offsets, so the same sentence in another request, at
other offsets of its input, maps them to its own); a request asking for words takes
only such entries (`lookup`): one kept without them (from disk, a prompts file, a request
without words) is synthesized again and kept with them.
"""

from __future__ import annotations

import hashlib
import os
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import structlog

from cosyvoiced.runtime.onnx import write_cache_file
from cosyvoiced.tts.frontend.segments import SourceSpan
from cosyvoiced.tts.request import WordTime

log = structlog.get_logger(__name__)

SUFFIX = ".f32"
MAX_PROMPTS = 1000
"""Most lines a prompts file may hold (more: the rest ignored, logged)."""


@dataclass(frozen=True)
class PromptKey:
    """Everything that shapes a sentence's raw speech."""

    voice: str
    """The loaded model's identity (`Voice.model_id`)."""
    text: str
    phonemes: bool
    length_scale: float
    noise_scale: float
    noise_w: float
    speaker: int | None
    decode: str

    def digest(self) -> str:
        parts = (self.voice, self.text, str(self.phonemes), repr(float(self.length_scale)),
                 repr(float(self.noise_scale)), repr(float(self.noise_w)), str(self.speaker),
                 self.decode)
        return hashlib.sha256("\x1f".join(parts).encode("utf-8", "surrogatepass")).hexdigest()


@dataclass(frozen=True)
class KeptWord:
    """A word of a kept sentence: its span's offsets in the sentence, seconds from it."""

    start: int
    end: int
    start_s: float
    end_s: float


def keep_words(words: Sequence[WordTime], spans: Sequence[SourceSpan]
               ) -> tuple[KeptWord, ...] | None:
    """`words` (offsets into the request's input) by their spans in the sentence; None
    if one has no span of its own."""
    by_src = {(s.src_start, s.src_end): s for s in spans}
    kept = []
    for w in words:
        span = by_src.get((w.char_start, w.char_end))
        if span is None:
            return None
        kept.append(KeptWord(span.start, span.end, w.start_s, w.end_s))
    return tuple(kept)


def told_words(kept: tuple[KeptWord, ...], spans: Sequence[SourceSpan], source: str
               ) -> list[WordTime] | None:
    """Kept words on this request's input (its sentence's `spans` into `source`); None if
    its sentence's spans lie otherwise (the same text read from other input)."""
    by_start = {(s.start, s.end): s for s in spans}
    out = []
    for k in kept:
        span = by_start.get((k.start, k.end))
        if span is None:
            return None
        out.append(WordTime(source[span.src_start:span.src_end], span.src_start,
                            span.src_end, k.start_s, k.end_s))
    return out


class PromptCache:
    """Sentence audio by `PromptKey`, bounded in bytes (LRU), optionally on disk."""

    def __init__(self, max_bytes: int, directory: str | Path | None = None) -> None:
        self.max_bytes = max(0, int(max_bytes))
        self.directory = Path(directory) if directory and self.max_bytes else None
        self._entries: OrderedDict[str, np.ndarray] = OrderedDict()
        self._on_disk: set[str] = set()
        self._words: dict[str, tuple[KeptWord, ...]] = {}
        """Word times of the entries synthesized with them (in memory only)."""
        self.bytes = 0
        self.hits = 0
        self.misses = 0

    @property
    def enabled(self) -> bool:
        return self.max_bytes > 0

    def __len__(self) -> int:
        return len(self._entries)

    def _path(self, digest: str) -> Path:
        assert self.directory is not None
        return self.directory / f"{digest}{SUFFIX}"

    def samples(self, key: PromptKey, words: bool = False) -> int | None:
        """The cached length of `key` in samples (with `words`: only if kept with its word
        times), or None (counts neither hit nor miss)."""
        if not self.enabled:
            return None
        digest = key.digest()
        audio = self._entries.get(digest)
        if audio is None or (words and digest not in self._words):
            return None
        return int(audio.shape[0])

    def lookup(self, key: PromptKey, words: bool, spans: Sequence[SourceSpan], source: str
               ) -> tuple[np.ndarray | None, list[WordTime]]:
        """(`get`, and with `words` the sentence's words on this request's input); (None,
        []) when words are asked and it was not kept with them (a miss)."""
        if not words:
            return self.get(key), []
        kept = self._words.get(key.digest()) if self.enabled else None
        told = told_words(kept, spans, source) if kept is not None else None
        if told is None:
            self.misses += 1 if self.enabled else 0
            return None, []
        return self.get(key), told

    def get(self, key: PromptKey) -> np.ndarray | None:
        """The sentence's raw speech (read-only: copy before changing it), or None."""
        if not self.enabled:
            return None
        digest = key.digest()
        audio = self._entries.get(digest)
        if audio is not None:
            self._entries.move_to_end(digest)
            self.hits += 1
            if self.directory is not None and digest not in self._on_disk:
                self._persist(digest, audio)  # heard twice: worth keeping
            return audio
        audio = self._load(digest)
        if audio is None:
            self.misses += 1
            return None
        self.hits += 1
        self._on_disk.add(digest)
        self._insert(digest, audio)
        return audio

    def put(self, key: PromptKey, audio: np.ndarray, *, persist: bool = False,
            words: tuple[KeptWord, ...] | None = None) -> None:
        """Keep `audio` (float32 mono) for `key`, with its `words` when timed; `persist`:
        on disk at once too (the audio only)."""
        if not self.enabled or audio.nbytes > self.max_bytes:
            return
        digest = key.digest()
        audio = np.ascontiguousarray(audio, dtype=np.float32)
        audio.flags.writeable = False
        self._insert(digest, audio)
        if words is not None and digest in self._entries:
            self._words[digest] = words
        if persist and self.directory is not None and digest not in self._on_disk:
            self._persist(digest, audio)

    def _insert(self, digest: str, audio: np.ndarray) -> None:
        old = self._entries.pop(digest, None)
        self._words.pop(digest, None)  # new audio: the old times are not its
        if old is not None:
            self.bytes -= old.nbytes
        self._entries[digest] = audio
        self.bytes += audio.nbytes
        while self.bytes > self.max_bytes and self._entries:
            gone, dropped = self._entries.popitem(last=False)
            self._words.pop(gone, None)
            self.bytes -= dropped.nbytes

    def _load(self, digest: str) -> np.ndarray | None:
        if self.directory is None:
            return None
        path = self._path(digest)
        try:
            audio = np.fromfile(path, dtype="<f4")
        except (OSError, ValueError):  # absent (the usual case), or unreadable
            return None
        if not audio.size or not np.isfinite(audio).all():
            log.warning("tts_prompt_cache_bad_file", path=str(path))
            return None
        try:
            os.utime(path)  # recently used: pruned last
        except OSError:
            pass
        audio = audio.astype(np.float32, copy=False)
        audio.flags.writeable = False
        return audio

    def _persist(self, digest: str, audio: np.ndarray) -> None:
        data = audio.astype("<f4", copy=False).tobytes()
        if write_cache_file(self._path(digest), lambda tmp: Path(tmp).write_bytes(data),
                            what="tts_prompt"):
            self._on_disk.add(digest)
            self._prune()

    def _prune(self) -> None:
        """Hold the directory (shared by every worker) to `max_bytes`, oldest out."""
        assert self.directory is not None
        try:
            files = [(e.stat().st_mtime, e.stat().st_size, e.path)
                     for e in os.scandir(self.directory) if e.name.endswith(SUFFIX)]
        except OSError:
            return
        total = sum(size for _, size, _ in files)
        for _, size, path in sorted(files):
            if total <= self.max_bytes:
                break
            try:
                os.unlink(path)
            except OSError:
                continue
            total -= size
            self._on_disk.discard(Path(path).stem)


def read_prompts(path: str | Path) -> list[str]:
    """The prompts of a prompts file: one per line, `#` comments and blank lines skipped."""
    lines = [line.strip() for line in Path(path).read_text(encoding="utf-8").splitlines()]
    prompts = [line for line in lines if line and not line.startswith("#")]
    if len(prompts) > MAX_PROMPTS:
        log.warning("tts_prompts_truncated", path=str(path), prompts=len(prompts),
                    kept=MAX_PROMPTS)
    return prompts[:MAX_PROMPTS]
