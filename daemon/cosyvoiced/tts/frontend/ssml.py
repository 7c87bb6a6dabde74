"""The SSML subset: `<speak>`, `<break>`, `<say-as>`, `<prosody rate>`, `<p>`, `<s>`, `<sub>`,
`<phoneme alphabet="ipa">`.

Parsed with expat, with document type declarations refused outright (so no entity
expansion and no external entities can ever be read). Every error, syntax or meaning,
is a BadSsml naming the line and column; nothing else escapes but other `TtsError`s
(`PausesTooLong`, `UnreadableText`).

What a document can ask for is bounded: nested `<prosody rate>`s multiply, but the rate
is clamped to `SPEED_RANGE` at each level (the API's own `speed` range), and the
`<break>`s of one document may add up to `max_pause_ms` at most (`tts.max_pause_s`).
A `<phoneme ph>` is checked (IPA symbols only, at most `MAX_PHONEME_CHARS`) and spoken
inside its sentence; the lexicon (`tts.lexicon`) applies to the document's text, not to
`ph`, `say-as` or `sub` aliases' results.
"""

from __future__ import annotations

import re
from array import array
from bisect import bisect_left
from dataclasses import dataclass, field
from itertools import accumulate
from xml.parsers import expat

import structlog

from cosyvoiced.tts.errors import BadSsml, PausesTooLong, TtsError
from cosyvoiced.tts.frontend.lexicon import Lexicon, check_ipa
from cosyvoiced.tts.frontend.normalize import normalize_text, plain_segments
from cosyvoiced.tts.frontend.normalize.en_calls import PHONE_RE, phone, spell
from cosyvoiced.tts.frontend.normalize.en_numbers import cardinal, digits
from cosyvoiced.tts.frontend.normalize.en_say_as import (
    say_cardinal,
    say_currency,
    say_date,
    say_ordinal,
)
from cosyvoiced.tts.frontend.normalize.en_text import characters, phone_number
from cosyvoiced.tts.frontend.segments import (
    Pause,
    Segment,
    SourceSpan,
    Speech,
    inline_phonemes,
    merge_speech,
    strip_markers,
)
from cosyvoiced.tts.request import SPEED_RANGE

log = structlog.get_logger(__name__)

TAGS = ("speak", "break", "say-as", "prosody", "p", "s", "sub", "phoneme")
INTERPRET_AS = ("digits", "telephone", "date", "time", "currency", "characters", "spell-out",
                "verbatim", "cardinal", "number", "ordinal")
RATE_WORDS = {"x-slow": 0.6, "slow": 0.8, "medium": 1.0, "default": 1.0, "fast": 1.25,
              "x-fast": 1.5}
STRENGTH_MS = {"none": 0, "x-weak": 100, "weak": 200, "medium": 400, "strong": 700,
               "x-strong": 1000}
MAX_BREAK_MS = 10_000
"""Longest single `<break>`."""
DEFAULT_MAX_PAUSE_MS = 60_000
"""All `<break>`s of one document together, unless the caller says otherwise (the default
of `tts.max_pause_s`)."""
TIME_RE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(ms|s)\s*$")


@dataclass
class _Frame:
    tag: str
    rate: float
    say_as: str | None = None
    fmt: str = ""
    alias: str | None = None
    """`<sub alias>`, or the checked IPA of `<phoneme ph>` (`phoneme`)."""
    phoneme: bool = False
    text: str = ""
    src: list[tuple[int, int]] = field(default_factory=list)
    """Per character of `text`: its (start, end) in the document (an entity's whole
    reference for the one character it stands for)."""
    tag_span: tuple[int, int] = (0, 0)
    """The element's start tag in the document."""

    def content_span(self) -> tuple[int, int]:
        """The element's content in the document, spaces around it left out; the start
        tag where it has none."""
        keep = [r for c, r in zip(self.text, self.src, strict=True) if not c.isspace()]
        return (keep[0][0], keep[-1][1]) if keep else self.tag_span


def parse_rate(value: str) -> float:
    """"slow", "150%", "+20%", "-10%", "1.2" -> speaking-rate multiplier."""
    v = value.strip().lower()
    if v in RATE_WORDS:
        return RATE_WORDS[v]
    m = re.fullmatch(r"([+-]?)(\d+(?:\.\d+)?)(%?)", v)
    if not m:
        raise ValueError(f"bad prosody rate {value!r}")
    x = float(m.group(2))
    if m.group(3):
        x = 1.0 + (x / 100 if m.group(1) != "-" else -x / 100) if m.group(1) else x / 100
    lo, hi = SPEED_RANGE
    if not lo <= x <= hi:
        raise ValueError(f"prosody rate {value!r} outside {lo:.0%}..{hi:.0%}")
    return x


def clamp_rate(rate: float) -> float:
    """A (multiplied) speaking rate kept within `SPEED_RANGE`."""
    lo, hi = SPEED_RANGE
    return min(max(rate, lo), hi)


def parse_break(attrs: dict[str, str]) -> int:
    if "time" in attrs:
        m = TIME_RE.match(attrs["time"])
        if not m:
            raise ValueError(f"bad break time {attrs['time']!r} (use e.g. 300ms or 1.5s)")
        ms = float(m.group(1)) * (1000 if m.group(2) == "s" else 1)
        if ms > MAX_BREAK_MS:
            raise ValueError(f"break of {ms:.0f} ms is longer than {MAX_BREAK_MS} ms")
        return int(round(ms))
    strength = attrs.get("strength", "medium")
    if strength not in STRENGTH_MS:
        raise ValueError(f"bad break strength {strength!r}")
    return STRENGTH_MS[strength]


def say_as(kind: str, text: str, fmt: str) -> str:
    """The words `text` is read as under `<say-as interpret-as=kind format=fmt>`; a
    ValueError says why it cannot be."""
    text = text.strip()
    if kind == "digits":
        return digits(text)
    if kind == "telephone":  # in the groups agents read, as in plain text
        m = PHONE_RE.fullmatch(text)
        return phone(m) if m else phone_number(text)
    if kind == "time":  # "5:30 PM EST": the English reader (NeMo's grammars where loaded)
        return normalize_text(text)
    if kind == "verbatim":
        return characters(text)
    if kind == "date":  # cardinal, ordinal, date, currency: NeMo's grammars where loaded
        return say_date(text, fmt)
    if kind == "currency":
        return say_currency(text, fmt)
    if kind in ("characters", "spell-out"):
        if fmt == "phonetic":  # "Q as in Quebec, X as in X-ray, four"
            return spell("".join(c for c in text if c.isalnum()), phonetic=True)
        return characters(text)
    if kind in ("cardinal", "number"):
        return say_cardinal(text, kind)
    if kind == "ordinal":
        return say_ordinal(text)
    return text


class _Parser:
    def __init__(self, language: str, max_pause_ms: int, lexicon: Lexicon | None) -> None:
        self.language = language
        self.lexicon = lexicon
        self.max_pause_ms = max_pause_ms
        self.doc = ""
        """The document being parsed (spans point into it)."""
        self._ascii = True
        self._starts: array[int] | None = None
        """Where each character starts in the UTF-8 document (where it is not ASCII)."""
        self.pause_ms = 0
        """The document's `<break>`s so far."""
        self.out: list[Segment] = []
        self.stack: list[_Frame] = []
        self.p = expat.ParserCreate()
        self.p.SetParamEntityParsing(expat.XML_PARAM_ENTITY_PARSING_NEVER)
        self.p.StartDoctypeDeclHandler = self._doctype
        self.p.StartElementHandler = self._start
        self.p.EndElementHandler = self._end
        self.p.CharacterDataHandler = self._chars
        self.p.ExternalEntityRefHandler = self._external

    def fail(self, message: str) -> BadSsml:
        return BadSsml(message, self.p.CurrentLineNumber, self.p.CurrentColumnNumber + 1)

    def _doctype(self, *_: object) -> None:
        raise self.fail("document type declarations are not allowed")

    def _external(self, *_: object) -> int:
        raise self.fail("external entities are not allowed")

    def _flush(self) -> None:
        top = self.stack[-1]
        if top.text and top.say_as is None and top.alias is None:
            self.out.extend(plain_segments(top.text, self.language, top.rate, self.lexicon,
                                           source=top.src))
            top.text, top.src = "", []

    def _start(self, tag: str, attrs: dict[str, str]) -> None:
        if tag not in TAGS:
            raise self.fail(f"unsupported element <{tag}>; supported: {', '.join(TAGS)}")
        if not self.stack and tag != "speak":
            raise self.fail(f"the root element must be <speak>, not <{tag}>")
        if self.stack and tag == "speak":
            raise self.fail("<speak> cannot be nested")
        if self.stack:
            if self.stack[-1].say_as is not None or self.stack[-1].alias is not None:
                raise self.fail(f"<{tag}> is not allowed inside <{self.stack[-1].tag}>")
            self._flush()
        rate = self.stack[-1].rate if self.stack else 1.0
        frame = _Frame(tag, rate)
        at = self._offset()
        end = self.doc.find(">", at)
        frame.tag_span = (at, end + 1 if end >= 0 else len(self.doc))
        try:
            if tag == "break":
                self._pause(parse_break(attrs))
            elif tag == "prosody":
                frame.rate = clamp_rate(rate * parse_rate(attrs.get("rate", "medium")))
            elif tag == "say-as":
                kind = attrs.get("interpret-as", "")
                if kind not in INTERPRET_AS:
                    raise ValueError(f"say-as interpret-as={kind!r} is not one of "
                                     f"{', '.join(INTERPRET_AS)}")
                frame.say_as, frame.fmt = kind, attrs.get("format", "")
            elif tag == "sub":
                if "alias" not in attrs:
                    raise ValueError("<sub> needs an alias attribute")
                frame.alias = attrs["alias"]
            elif tag == "phoneme":
                alphabet = attrs.get("alphabet", "ipa")
                if alphabet != "ipa":
                    raise ValueError(f"<phoneme alphabet={alphabet!r}>: only \"ipa\" is "
                                     f"supported")
                if "ph" not in attrs:
                    raise ValueError("<phoneme> needs a ph attribute")
                frame.alias, frame.phoneme = check_ipa(attrs["ph"]), True
        except ValueError as exc:
            raise self.fail(str(exc)) from None
        self.stack.append(frame)

    def _pause(self, ms: int) -> None:
        self.pause_ms += ms
        if self.pause_ms > self.max_pause_ms:
            raise PausesTooLong(self.pause_ms, self.max_pause_ms, self.p.CurrentLineNumber,
                                self.p.CurrentColumnNumber + 1)
        self.out.append(Pause(ms))

    def _end(self, tag: str) -> None:
        frame = self.stack[-1]
        self._flush()
        self.stack.pop()
        if frame.say_as is not None:
            try:
                words = say_as(frame.say_as, frame.text, frame.fmt)
            except (ValueError, ArithmeticError, LookupError) as exc:
                raise self.fail(f"<say-as interpret-as=\"{frame.say_as}\">: {exc}") from None
            if words:
                self.out.append(_pointing(Speech(words, frame.rate), frame))
        elif frame.phoneme:
            self.out.append(_pointing(Speech(inline_phonemes(frame.alias or ""), frame.rate),
                                      frame))
        elif frame.alias is not None:
            self.out.extend(_pointing(seg, frame) for seg in
                            plain_segments(frame.alias, self.language, frame.rate))
        elif tag in ("p", "s") and self.out and isinstance(self.out[-1], Speech):
            last = self.out[-1]
            if not last.text.rstrip().endswith((".", "!", "?")):
                self.out[-1] = Speech(last.text.rstrip() + ".", last.rate, last.spans)

    def _chars(self, data: str) -> None:
        if not self.stack:
            return
        if self.stack[-1].tag == "break" and data.strip():
            raise self.fail("<break> must be empty")
        top = self.stack[-1]
        at = self._offset()
        top.text += strip_markers(data)
        if self.doc.startswith("&", at):  # an entity or character reference: all of it
            end = self.doc.find(";", at) + 1
            top.src.extend([(at, max(end, at + 1))] * len(data))
        elif self.doc.startswith(data, at):
            top.src.extend((i, i + 1) for i in range(at, at + len(data)))
        else:  # a CDATA section, a line end expat normalized: the stretch as a whole
            top.src.extend([(at, at + len(data))] * len(data))

    def _offset(self) -> int:
        """The parser's position as a character offset into the document."""
        byte = self.p.CurrentByteIndex
        if self._ascii:
            return byte
        if self._starts is None:  # each character's first byte, in order
            lengths = (len(c.encode("utf-8", "surrogatepass")) for c in self.doc)
            self._starts = array("q", accumulate(lengths, initial=0))
        return bisect_left(self._starts, byte)

    def parse(self, text: str) -> list[Segment]:
        self.doc = text
        self._ascii = text.isascii()
        try:
            self.p.Parse(text, True)
        except expat.ExpatError as exc:
            raise BadSsml(expat.ErrorString(exc.code), exc.lineno, exc.offset + 1) from None
        except TtsError:
            raise
        except UnicodeError as exc:  # e.g. a lone surrogate, which expat cannot encode
            raise BadSsml(f"not encodable text ({exc.reason})", 1, 1) from None
        except Exception as exc:  # a rule's bug must not become a 500: refuse the document
            # the message may quote the input: its type only above debug
            log.warning("ssml_failed", error=type(exc).__name__, text_chars=len(text))
            log.debug("ssml_failed_detail", error=repr(exc)[:200])
            raise self.fail(f"cannot read this document ({type(exc).__name__})") from exc
        return merge_speech(self.out)


def _pointing(seg: Segment, frame: _Frame) -> Segment:
    """A Speech read from an element (`<say-as>`, `<sub>`, `<phoneme>`): one span over all
    its words, at the element's content."""
    if not isinstance(seg, Speech) or not seg.text.strip():
        return seg
    a, b = frame.content_span()
    return Speech(seg.text, seg.rate, (SourceSpan(0, len(seg.text), a, b),))


def parse_ssml(text: str, language: str = "en", *,
               max_pause_ms: int = DEFAULT_MAX_PAUSE_MS,
               lexicon: Lexicon | None = None) -> list[Segment]:
    """An SSML document to segments (normalized speech, phonemes, pauses); adjacent
    speech at one rate is one segment, so markup inside a sentence does not cut it.

    Raises only `TtsError`s: `BadSsml` (where and why), `PausesTooLong` when its
    `<break>`s add up to more than `max_pause_ms`, `UnreadableText`."""
    return _Parser(language, max_pause_ms, lexicon).parse(text)


__all__ = ["DEFAULT_MAX_PAUSE_MS", "clamp_rate", "parse_ssml", "parse_rate", "parse_break",
           "say_as", "cardinal"]
