"""The pronunciation lexicon (`tts.lexicon`): words spoken as written IPA or respelled.

A TOML file of two tables, read at start and again on SIGHUP:

    [ipa]                       # word = IPA, spoken exactly so
    Qorvinta = "kɔːɹvˈiːntə"
    [say]                       # word = respelling, read by the normal rules
    nginx = "engine x"

A key written all in lower case matches the word in any case; a key with a capital
matches only that spelling ("US" is not "us"). Keys are words or short phrases, matched
whole (never inside a longer word), the longest first. Applied to plain text and SSML
text before normalization; an IPA entry stays inside its sentence (an inline phoneme
piece, see `segments.INLINE_OPEN`), so the sentence keeps its prosody.

TOML because every other file the daemon reads is TOML (stdlib `tomllib`, errors with
line numbers); sizes are capped so a lexicon cannot become a memory or regex problem.
"""

from __future__ import annotations

import re
import tomllib
import unicodedata
from dataclasses import dataclass
from typing import Any

from cosyvoiced.tts.errors import TtsError
from cosyvoiced.tts.frontend.segments import inline_phonemes

MAX_FILE_BYTES = 1024 * 1024
MAX_ENTRIES = 10_000
MAX_KEY_CHARS = 64
MAX_PHONEME_CHARS = 200
"""Longest IPA (or respelling) of one entry or one SSML `<phoneme ph>`."""
TABLES = ("ipa", "say")
IPA_PUNCTUATION = frozenset(" .,?!-'")
"""Besides letters (IPA symbols, `ˈ ˌ ː` are letters too) and combining marks."""
_KEY_RE = re.compile(r"^[\w][\w' .-]*$")


class LexiconError(TtsError):
    """The lexicon file cannot be used (the running one is kept on reload)."""

    code = "bad_lexicon"


def check_ipa(ph: str) -> str:
    """`ph` stripped, or a ValueError saying why it is no IPA string we can speak."""
    ph = unicodedata.normalize("NFC", ph).strip()
    if not ph:
        raise ValueError("ph is empty")
    if len(ph) > MAX_PHONEME_CHARS:
        raise ValueError(f"ph is {len(ph)} characters long; the limit is {MAX_PHONEME_CHARS}")
    for ch in unicodedata.normalize("NFD", ph):
        if ch in IPA_PUNCTUATION or unicodedata.category(ch)[0] in "LM":
            continue
        raise ValueError(f"ph has U+{ord(ch):04X} {unicodedata.name(ch, '?')}, which is "
                         f"no IPA symbol")
    return ph


_WORD_RE = re.compile(r"\w+(?:'\w+)*")
"""A word of the text and of a key (an apostrophe inside a word keeps it one word)."""


def _words(text: str) -> tuple[list[str], list[str]]:
    """A key's words and the separators between them (whitespace runs as one space)."""
    spans = list(_WORD_RE.finditer(text))
    seps = [" " if not (sep := text[a.end():b.start()]).strip() else sep
            for a, b in zip(spans, spans[1:], strict=False)]
    return [m.group(0) for m in spans], seps


@dataclass(frozen=True)
class Lexicon:
    """Word -> ("ipa" | "say", value); `exact` for keys with a capital, `folded` else.

    Looked up word by word (a dict per first word, longest key first): no regex of
    every key, so a full lexicon costs a request a few milliseconds and a worker
    nothing to rebuild when a new one arrives."""

    exact: dict[str, tuple[str, str]]
    folded: dict[str, tuple[str, str]]
    source: str = ""

    def __post_init__(self) -> None:
        index: dict[str, list[tuple[list[str], list[str], bool, tuple[str, str]]]] = {}
        for exact, table in ((True, self.exact), (False, self.folded)):
            for key, entry in table.items():
                words, seps = _words(key)
                words = words if exact else [w.lower() for w in words]
                if words:
                    index.setdefault(words[0].lower(), []).append((words, seps, exact, entry))
        for candidates in index.values():
            candidates.sort(key=lambda c: len(c[0]), reverse=True)
        object.__setattr__(self, "_index", index)

    def __len__(self) -> int:
        return len(self.exact) + len(self.folded)

    def matches(self, text: str, start: int = 0,
                end: int | None = None) -> list[tuple[int, int, str, str]]:
        """(start, end, "ipa" | "say", value) of each entry found in `text[start:end]`,
        in order; offsets into `text`."""
        index = self._index  # type: ignore[attr-defined]
        if not index:
            return []
        end = len(text) if end is None else end
        spans = list(_WORD_RE.finditer(text, start, end))
        out: list[tuple[int, int, str, str]] = []
        i = 0
        while i < len(spans):
            found = self._match(index.get(spans[i].group(0).lower(), ()), spans, i, text)
            if found is None:
                i += 1
                continue
            n, (kind, value) = found
            out.append((spans[i].start(), spans[i + n - 1].end(), kind, value))
            i += n
        return out

    def apply(self, text: str) -> str:
        """`text` with each entry's word respelled or made an inline phoneme piece."""
        out: list[str] = []
        pos = 0
        for start, end, kind, value in self.matches(text):
            out.append(text[pos:start])
            out.append(inline_phonemes(value) if kind == "ipa" else value)
            pos = end
        out.append(text[pos:])
        return "".join(out)

    @staticmethod
    def _match(candidates: Any, spans: list[re.Match[str]], i: int,
               text: str) -> tuple[int, tuple[str, str]] | None:
        for words, seps, exact, entry in candidates:
            n = len(words)
            if i + n > len(spans):
                continue
            got = [m.group(0) for m in spans[i:i + n]]
            if (got if exact else [w.lower() for w in got]) != words:
                continue
            between = [text[a.end():b.start()] for a, b in
                       zip(spans[i:i + n], spans[i + 1:i + n], strict=False)]
            if [" " if not b.strip() else b for b in between] == seps:
                return n, entry
        return None


EMPTY = Lexicon({}, {})


def parse_lexicon(data: bytes, source: str = "lexicon") -> Lexicon:
    """The lexicon in `data` (TOML), or a LexiconError naming the entry that is wrong."""
    if len(data) > MAX_FILE_BYTES:
        raise LexiconError(f"{source}: {len(data)} bytes; the limit is {MAX_FILE_BYTES}")
    try:
        doc = tomllib.loads(data.decode("utf-8"))
    except (UnicodeDecodeError, tomllib.TOMLDecodeError) as exc:
        raise LexiconError(f"{source}: {exc}") from None
    exact: dict[str, tuple[str, str]] = {}
    folded: dict[str, tuple[str, str]] = {}
    for table, entries in doc.items():
        if table not in TABLES or not isinstance(entries, dict):
            raise LexiconError(f"{source}: unknown table {table!r}; tables: [ipa], [say]")
        for key, value in entries.items():
            where = f"{source}: [{table}] {key!r}"
            word = " ".join(key.split())
            if not _KEY_RE.match(word) or len(word) > MAX_KEY_CHARS:
                raise LexiconError(f"{where}: a key is a word or phrase of at most "
                                   f"{MAX_KEY_CHARS} letters, digits, ' . - and spaces")
            if not isinstance(value, str):
                raise LexiconError(f"{where}: the value must be a string")
            try:
                value = check_ipa(value) if table == "ipa" else _check_say(value)
            except ValueError as exc:
                raise LexiconError(f"{where}: {exc}") from None
            target = folded if word == word.lower() else exact
            target[word.lower() if target is folded else word] = (table, value)
    if len(exact) + len(folded) > MAX_ENTRIES:
        raise LexiconError(f"{source}: {len(exact) + len(folded)} entries; the limit is "
                           f"{MAX_ENTRIES}")
    return Lexicon(exact, folded, source)


def load_lexicon(path: str) -> Lexicon:
    """The lexicon file at `path` ("" : none), or a LexiconError."""
    if not path:
        return EMPTY
    try:
        with open(path, "rb") as f:
            data = f.read(MAX_FILE_BYTES + 1)
    except OSError as exc:
        raise LexiconError(f"{path}: {exc.strerror or exc}") from None
    return parse_lexicon(data, path)


def _check_say(value: str) -> str:
    value = " ".join(value.split())
    if not value:
        raise ValueError("the respelling is empty")
    if len(value) > MAX_PHONEME_CHARS:
        raise ValueError(f"the respelling is {len(value)} characters long; the limit is "
                         f"{MAX_PHONEME_CHARS}")
    if any(unicodedata.category(ch)[0] == "C" or ch in "[]<>&" for ch in value):
        raise ValueError("the respelling has control characters or markup")
    return value
