"""A TTS request: per-request overrides, input checks, and the audio chunks it yields."""

from __future__ import annotations

import unicodedata
from dataclasses import dataclass
from typing import Literal

import numpy as np

from cosyvoiced.audio.resample import SUPPORTED_RATES_HZ
from cosyvoiced.tts.errors import (
    BadParameter,
    ControlCharacters,
    EmptyText,
    InvalidUtf8,
    TextTooLong,
    UnsupportedFormat,
    UnsupportedRate,
)

AudioFormat = Literal["float32", "s16le", "mulaw"]
FORMATS: tuple[str, ...] = ("float32", "s16le", "mulaw")
BYTES_PER_SAMPLE = {"float32": 4, "s16le": 2, "mulaw": 1}
ALLOWED_CONTROLS = frozenset("\n\r\t")
SPEED_RANGE = (0.25, 4.0)
"""Speaking-rate multipliers a request may ask for (the API's `speed`, one SSML
`<prosody rate>`, and nested ones multiplied: clamped to this)."""
LENGTH_SCALE_RANGE = (0.1, 10.0)
"""Length scales a request may ask for; a clause is never synthesized outside them."""


@dataclass(frozen=True, kw_only=True)
class SynthesisOptions:
    """Per-request overrides of the voice's and the config's defaults (None: default)."""

    voice: str | None = None
    """Voice name; None: `tts.voice`."""
    speaker: int | str | None = None
    """Speaker id or name (multi-speaker voices)."""
    length_scale: float | None = None
    """Phoneme length multiplier (< 1 faster, > 1 slower); None: the voice's."""
    noise_scale: float | None = None
    """Generator noise; None: the voice's."""
    noise_w_scale: float | None = None
    """Phoneme-duration noise; None: the voice's."""
    volume: float = 1.0
    """Output gain multiplier (clipped to [-1, 1] after)."""
    rate_hz: int | None = None
    """Output sample rate; None: `tts.rate_hz` (0 there: the voice's own rate)."""
    format: str | None = None
    """float32 | s16le | mulaw; None: `tts.format`."""
    ssml: bool = False
    """Text is SSML (a `<speak>` document)."""
    words: bool = False
    """Report when each word is spoken (`AudioChunk.words`)."""

    def check(self) -> None:
        """Raise a typed error for an unsupported rate/format or an out-of-range value."""
        if self.rate_hz is not None and self.rate_hz not in SUPPORTED_RATES_HZ:
            raise UnsupportedRate(f"unsupported rate {self.rate_hz} Hz; supported: "
                                  f"{', '.join(map(str, SUPPORTED_RATES_HZ))}")
        if self.format is not None and self.format not in FORMATS:
            raise UnsupportedFormat(f"unsupported format {self.format!r}; supported: "
                                    f"{', '.join(FORMATS)}")
        for name, lo, hi in (("length_scale", *LENGTH_SCALE_RANGE), ("noise_scale", 0.0, 2.0),
                             ("noise_w_scale", 0.0, 2.0), ("volume", 0.0, 10.0)):
            value = getattr(self, name)
            if value is not None and not lo <= value <= hi:
                raise BadParameter(f"{name} must be within [{lo}, {hi}], got {value}")


@dataclass(frozen=True)
class WordTime:
    """One spoken word on the output audio's timeline."""

    text: str
    """The word as the caller wrote it (`source[char_start:char_end]`)."""
    char_start: int
    """Offset in the caller's input as sent (raw text, or the SSML document)."""
    char_end: int
    start_s: float
    """Seconds from the start of the request's audio."""
    end_s: float

    def shifted(self, by_s: float) -> WordTime:
        return WordTime(self.text, self.char_start, self.char_end, self.start_s + by_s,
                        self.end_s + by_s)

    def to_json(self) -> dict[str, object]:
        return {"text": self.text, "start": round(self.start_s, 3), "end": round(self.end_s, 3),
                "char_start": self.char_start, "char_end": self.char_end}


@dataclass(frozen=True)
class AudioChunk:
    """One piece of synthesized audio, yielded as soon as it is ready."""

    audio: np.ndarray
    """float32 mono samples in [-1, 1] at `rate_hz` (what `data` encodes)."""
    data: bytes
    """`audio` encoded in `format` (little-endian)."""
    rate_hz: int
    format: str
    index: int
    """0-based position of the chunk in the stream."""
    text: str
    """The clause this chunk speaks ("" for pure silence or the resampler's tail)."""
    is_last: bool
    """No chunk follows."""
    speech_s: float = 0.0
    """Seconds of it that were synthesized (the rest: the pause after a sentence)."""
    front_chars: int = 0
    """Characters whose text front ran for this chunk (its sentence's first chunk)."""
    front_s: float = 0.0
    """How long that front run took (with phonemization)."""
    cached: bool = False
    """Copied from the prompt cache (no model run: its time says nothing of one)."""
    words: tuple[WordTime, ...] = ()
    """With `SynthesisOptions.words`: the words whose start falls in this chunk (times
    from the start of the request's audio), or ahead of it."""

    @property
    def samples(self) -> int:
        return int(self.audio.shape[0])

    @property
    def duration_s(self) -> float:
        return self.samples / self.rate_hz


def decode_text(text: str | bytes) -> str:
    """Bytes must be UTF-8; the typed error names the offset of the first bad byte."""
    if isinstance(text, bytes | bytearray | memoryview):
        try:
            return bytes(text).decode("utf-8")
        except UnicodeDecodeError as exc:
            raise InvalidUtf8(exc.start) from exc
    return text


def check_text(text: str | bytes, max_chars: int) -> str:
    """Decoded, checked text: not empty, not too long, no control characters."""
    text = decode_text(text)
    if len(text) > max_chars:
        raise TextTooLong(len(text), max_chars)
    for i, ch in enumerate(text):
        if ch in ALLOWED_CONTROLS:
            continue
        if unicodedata.category(ch) in ("Cc", "Cs") or ch in "\u2028\u2029":
            raise ControlCharacters(i, ch)
    if not text.strip():
        raise EmptyText("text is empty or whitespace only")
    return text
