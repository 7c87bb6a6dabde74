"""English text to spoken pieces, each with the span of the input it reads.

Plain words are never tagged: a cheap check per token (letters and punctuation, not a
whitelisted abbreviation) keeps them as they are, one piece each. The call-center rules
(`en_calls`) read their matches first; what is left that holds digits, symbols or
abbreviations is cut into short windows, each joined with the plain words next to it
that can belong to the same semiotic token (month names, am/pm, units, scale and
currency words), and each window is read by NeMo's grammars (`en_fst`, cached per
window) or, where they are not built, by the hand-written rules (`en_text`).
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable
from difflib import SequenceMatcher

from cosyvoiced.tts.frontend.normalize.en_calls import claims
from cosyvoiced.tts.frontend.normalize.en_numbers import digits

Piece = tuple[str, int, int]
"""(spoken words, start, end): the words and the span of the input they read."""

PLAIN_RE = re.compile(r"[\"'(\[{]*[A-Za-z]+(?:[-'’][A-Za-z]+)*[\"')\]},.;:!?]*")
TOKEN_RE = re.compile(r"\S+")
MONTHS = ("january february march april may june july august september october november "
          "december jan feb mar apr jun jul aug sep sept oct nov dec").split()
JOINERS = frozenset(MONTHS + (
    "am pm a.m. p.m. am. pm. thousand million billion trillion hundred dollars dollar cents "
    "cent euros euro pounds pound percent kg g mg lb lbs oz km m cm mm mi ft in inch inches "
    "mph kph l ml gal kb mb gb tb mbps gbps ms sec secs s min mins h hr hrs kw kwh w v hz "
    "khz mhz ghz bc ad ce bce st nd rd th b k bn mn").split())
"""Plain words joined to a window beside them: they belong to its semiotic token."""
STREET_WORDS = ("st|street|ave|avenue|expy|expressway|hwy|highway|dr|drive|ct|court|blvd|"
                "boulevard|rd|road|ln|lane|way|pl|place|pkwy|parkway|ter|terrace|cir|circle")
ADDRESS_RE = re.compile(
    r"(?<![\w.,:-])\d{1,6}(?:\s+[NSEW]\.?)?(?:\s+(?:\d+(?:st|nd|rd|th)|[A-Z][A-Za-z]*)){1,3}\s+"
    r"(?i:" + STREET_WORDS + r")\b\.?(?:,\s*[A-Z][a-z]+(?:\s+[A-Z][a-z]+){0,2})?"
    r"(?:,\s*[A-Z]{2}\b)?(?:,?\s*\d{5}(?:-\d{4})?\b)?")
"""A street address, read by the grammars in one window: "708 N 1st St, San City"."""
MAX_WINDOW_CHARS = 64
"""Longer windows are read by `long_window` (the grammars' cost grows with the window:
80 characters of hyphenated digits cost ~60 ms)."""
TAGGER_BUDGET_S = 0.5
"""Tagging time one text may take; its windows past it are read by `long_window` (5000
characters of "1 x 2 x 3 ..." would take seconds)."""
_TRAIL = ".,;:!?\"')]}"
_AMPM_RE = re.compile(r"\b([AP])M\b")
UNIT_WORDS = {"KB": "kilobytes", "MB": "megabytes", "GB": "gigabytes", "TB": "terabytes",
              "kB": "kilobytes", "Gb": "gigabits", "Mb": "megabits"}
"""Units the grammars leave as written after a number."""
_UNIT_RE = re.compile(r"(?<=[a-z] )(" + "|".join(UNIT_WORDS) + r")\b")


def _tidy(words: str) -> str:
    """A window's reading with "PM" as letters and bare units in full."""
    words = _AMPM_RE.sub(r"\1 M", words)
    return _UNIT_RE.sub(lambda m: UNIT_WORDS[m.group(1)], words)


_DIGITS_RE = re.compile(r"\d+")
_NEXT_SENTENCE = re.compile(r"\s+[A-Z]")
_MINUS_MONEY_RE = re.compile(r"(?<![\w.])-(?=[$€£]\d)")
_PER_RE = re.compile(r"(?<=\d)/(?=(?:month|year|week|day|night|hour|minute|person)\b)")
""""$5/month": the grammars read "$9.99/mo" but not this; "$5 per month" they do."""
_PUNCT_ONLY = frozenset(",.;:!?\"'()…—")


def _is_plain(token: str, words: frozenset[str]) -> bool:
    if not PLAIN_RE.fullmatch(token):
        return all(c in _PUNCT_ONLY for c in token)
    if token in words or token.rstrip(",;:!?\"')]}") in words:
        return False
    core = token.strip(_TRAIL + "\"'([{")
    # roman numerals (IV, XII) and all-caps abbreviations with dots are the tagger's
    return not (len(core) > 1 and re.fullmatch(r"[IVXLCDM]+", core))


def _joins(token: str) -> bool:
    word = token.rstrip(",;:!?").lower()
    return word in JOINERS or word.rstrip(".") in JOINERS


def windows(text: str, start: int, end: int, words: frozenset[str],
            context: int = 0) -> list[tuple[int, int, bool]]:
    """(start, end, needs reading) runs of `text[start:end]`: plain words one by one, and
    windows of tokens that need the tagger, with their joinable neighbours."""
    tokens = [(m.start(), m.end(), m.group(0)) for m in TOKEN_RE.finditer(text, start, end)]
    special = [not _is_plain(t, words) for _, _, t in tokens]
    take = list(special)
    for i, s in enumerate(special):
        if not s:
            continue
        core = tokens[i][2].strip(_TRAIL + "\"'([{")
        for j in range(max(0, i - context), min(len(tokens), i + context + 1)):
            take[j] = True
        if (tokens[i][2] in words and tokens[i][2].endswith(".") and tokens[i][2][0].isupper()
                and i + 1 < len(tokens)):
            take[i + 1] = True  # a title reads with the name after it: "Dr. Evil"
        if not any(c.isalnum() for c in tokens[i][2]):
            # a lone symbol ("/", "=") reads by its neighbours: "x +1 = y"
            for j in range(max(0, i - 2), min(len(tokens), i + 3)):
                take[j] = True
        elif re.fullmatch(r"[IVXLCDM]+", core):  # a roman numeral too: "Chapter IV"
            for j in (i - 1, i + 1):
                if 0 <= j < len(tokens):
                    take[j] = True
        j = i + 1  # "100 million kg", "5th of May", "5:30 p.m."
        while j < len(tokens) and not special[j] and (
                _joins(tokens[j][2]) or (tokens[j][2].lower() == "of" and j + 1 < len(tokens)
                                         and _joins(tokens[j + 1][2]))):
            take[j] = True
            j += 1
        j = i - 1  # "March 14", "the 26th May"
        while j >= 0 and not special[j] and _joins(tokens[j][2]):
            take[j] = True
            j -= 1
        if (j >= 0 and tokens[j][2].lower() == "the" and re.match(r"\d+(st|nd|rd|th)$", core)
                and i + 1 < len(tokens) and _joins(tokens[i + 1][2])):
            take[j] = True
    out: list[tuple[int, int, bool]] = []
    for (a, b, _), t in zip(tokens, take, strict=True):
        if t and out and out[-1][2] and not _sentence_end(text, out[-1][1], a, words):
            out[-1] = (out[-1][0], b, True)
        else:
            out.append((a, b, t))
    return out


def peel(text: str, start: int, end: int, spoken: str) -> list[Piece]:
    """A window's reading as pieces: the words it reads as written ("dollars" in "42
    dollars", "by" in "$5 by 12/03") get their own spans, each run of the rest one span
    over the tokens it reads."""
    tokens = [(m.start(), m.end(), m.group(0)) for m in TOKEN_RE.finditer(text, start, end)]
    words = spoken.split()
    if len(tokens) < 2 or len(words) < 2:
        return [(spoken, start, end)]
    out: list[Piece] = []
    pending: list[str] = []  # words read from no token: joined to the next group
    ops = SequenceMatcher(None, [t for _, _, t in tokens], words, autojunk=False)
    for op, i1, i2, j1, j2 in ops.get_opcodes():
        if op == "equal":
            for k in range(i2 - i1):
                word = " ".join([*pending, words[j1 + k]])
                out.append((word, tokens[i1 + k][0], tokens[i1 + k][1]))
                pending = []
        elif i2 > i1:  # tokens read as other words (or as none)
            if j2 > j1 or pending:
                out.append((" ".join([*pending, *words[j1:j2]]), tokens[i1][0],
                            tokens[i2 - 1][1]))
                pending = []
        elif out:  # words read from no token: part of the group before them
            w, a, b = out[-1]
            out[-1] = (f"{w} {' '.join(words[j1:j2])}", a, b)
        else:
            pending.extend(words[j1:j2])
    if pending:
        w, a, b = out[-1] if out else ("", start, end)
        out[-1:] = [(f"{w} {' '.join(pending)}".strip(), a, b)]
    return out


def _sentence_end(text: str, end: int, nxt: int, words: frozenset[str]) -> bool:
    """Whether a window ending at `end` ends a sentence before the token at `nxt` (not
    after an abbreviation: "Dr. Smith")."""
    if text[end - 1] in ";!?":
        return True
    if text[end - 1] != "." or not text[nxt:nxt + 1].isupper():
        return False
    return text[max(0, end - 64):end].rsplit(None, 1)[-1] not in words


class EnglishReader:
    """Reads English text as pieces; `window` reads one window (the grammars or rules)."""

    def __init__(self, window: Callable[[str], str], words: frozenset[str] = frozenset(),
                 *, context: int = 0, phonetic: bool = False,
                 long_window: Callable[[str], str] | None = None) -> None:
        self.window = window
        self.words = words
        self.context = context
        """Plain words joined to each side of a window (the rules read by context)."""
        self.phonetic = phonetic
        self.long_window = long_window or window
        """Reads a window longer than `MAX_WINDOW_CHARS` (the grammars' cost grows with
        it: 100 kB of digits must not reach them)."""

    def pieces(self, text: str) -> list[Piece]:
        deadline = time.monotonic() + TAGGER_BUDGET_S
        out: list[Piece] = []
        pos = 0
        streets = [(m.start(), m.end()) for m in ADDRESS_RE.finditer(text)]
        found = [(a, b, self._read(text[a:b], deadline)) for a, b in streets]
        found += [c for c in claims(text, phonetic=self.phonetic)
                  if not any(a < c[1] and c[0] < b for a, b in streets)]
        for a, b, spoken in sorted(found):
            out.extend(self._rest(text, pos, a, deadline))
            out.append((spoken, a, b))
            pos = b
        out.extend(self._rest(text, pos, len(text), deadline))
        return out

    def _rest(self, text: str, start: int, end: int, deadline: float) -> list[Piece]:
        out: list[Piece] = []
        for a, b, read in windows(text, start, end, self.words, self.context):
            chunk = text[a:b]
            if not read:
                out.append((chunk, a, b))
                continue
            said = self._read(chunk, deadline)
            if (chunk.endswith(".") and not said.endswith((".", "!", "?"))
                    and _NEXT_SENTENCE.match(text, b, end)):
                said += "."  # "4:45 p.m. Thanks": the period ends the sentence still
            out.extend(peel(text, a, b, said))
        return [p for p in out if p[0].strip()]

    def _read(self, chunk: str, deadline: float) -> str:
        """A window read by the grammars where it is short, valid UTF-8 (no lone
        surrogate) and the text's tagging budget is not spent; else by `long_window`."""
        taggable = len(chunk) <= MAX_WINDOW_CHARS and time.monotonic() <= deadline
        if taggable:
            try:
                chunk.encode("utf-8")
            except UnicodeEncodeError:
                taggable = False
        if taggable:
            return _tidy(self.window(_MINUS_MONEY_RE.sub("minus ", _PER_RE.sub(" per ", chunk))))
        # what the long-window reader leaves in digits ("9,9,9"), digit by digit
        return _DIGITS_RE.sub(lambda m: digits(m.group(0)), _tidy(self.long_window(chunk)))

    def __call__(self, text: str) -> str:
        return join_pieces(self.pieces(text))[0]


def join_pieces(pieces: list[Piece]) -> tuple[str, list[tuple[int, int, int, int]]]:
    """The text the pieces say, and (start, end, src_start, src_end) of each piece that
    holds a word: a space between pieces, none before punctuation."""
    parts: list[str] = []
    spans: list[tuple[int, int, int, int]] = []
    length = 0
    for spoken, a, b in pieces:
        spoken = spoken.strip()
        if not spoken:
            continue
        if parts and spoken[0] not in ".,;:!?":
            parts.append(" ")
            length += 1
        if any(c.isalnum() for c in spoken) or "\ue000" in spoken:
            spans.append((length, length + len(spoken), a, b))
        parts.append(spoken)
        length += len(spoken)
    return "".join(parts), spans
