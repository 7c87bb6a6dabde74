"""Typed errors for bad TTS input; each has a stable `code` clients can match on."""

from __future__ import annotations

from cosyvoiced.errors import CosyvoicedError


class TtsError(CosyvoicedError):
    """Base of every TTS request error."""

    code = "tts_error"


class EmptyText(TtsError):
    code = "empty_text"


class TextTooLong(TtsError):
    code = "text_too_long"

    def __init__(self, length: int, max_chars: int) -> None:
        super().__init__(f"text is {length} characters long; the limit is {max_chars}")
        self.length = length
        self.max_chars = max_chars


class InvalidUtf8(TtsError):
    code = "invalid_utf8"

    def __init__(self, position: int) -> None:
        super().__init__(f"text is not valid UTF-8 (bad byte at offset {position})")
        self.position = position


class ControlCharacters(TtsError):
    code = "control_characters"

    def __init__(self, position: int, char: str) -> None:
        super().__init__(f"control character U+{ord(char):04X} at offset {position}")
        self.position = position


class UnknownVoice(TtsError):
    code = "unknown_voice"

    def __init__(self, name: str, available: list[str]) -> None:
        listed = ", ".join(available) if available else "(none)"
        super().__init__(f"unknown voice {name!r}; available: {listed}")
        self.name = name
        self.available = available


class InvalidVoiceName(TtsError):
    code = "invalid_voice_name"


class UnknownSpeaker(TtsError):
    code = "unknown_speaker"


class UnsupportedRate(TtsError):
    code = "unsupported_rate"


class UnsupportedFormat(TtsError):
    code = "unsupported_format"


class BadParameter(TtsError):
    """An override outside its allowed range (speed, noise, volume)."""

    code = "bad_parameter"


class NoInt8Variant(TtsError):
    code = "no_int8_variant"


class BadSsml(TtsError):
    code = "bad_ssml"

    def __init__(self, message: str, line: int, column: int) -> None:
        super().__init__(f"malformed SSML at line {line}, column {column}: {message}")
        self.line = line
        self.column = column


class PausesTooLong(TtsError):
    """The `<break>`s of one SSML document add up to more than `tts.max_pause_s`."""

    code = "pauses_too_long"

    def __init__(self, total_ms: int, max_ms: int, line: int, column: int) -> None:
        super().__init__(f"<break>s add up to over {max_ms} ms (at least {total_ms} ms by "
                         f"line {line}, column {column}); the limit is tts.max_pause_s")
        self.total_ms = total_ms
        self.max_ms = max_ms
        self.line = line
        self.column = column


class AudioTooLong(TtsError):
    """A request would speak for longer than `tts.max_audio_s`, even at the fastest
    reading a voice does (checked before any audio)."""

    code = "audio_too_long"

    def __init__(self, at_least_s: float, max_s: float) -> None:
        super().__init__(f"this request speaks for at least {at_least_s:.0f} s; the limit "
                         f"is {max_s:.0f} s (tts.max_audio_s)")
        self.at_least_s = at_least_s
        self.max_s = max_s


class UnreadableText(TtsError):
    """The text normalizer could not read the text (a rule failed on it)."""

    code = "unreadable_text"
