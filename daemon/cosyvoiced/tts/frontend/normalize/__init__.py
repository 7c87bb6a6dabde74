"""Text normalization: written text to speakable words, one normalizer per language.

Languages plug in through `register(language, normalizer)`; a voice's language family
("en" for en_US) selects the normalizer. Languages without one are passed through as is
(espeak-ng still reads digits, less well).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

import structlog

from cosyvoiced.tts.errors import TtsError, UnreadableText
from cosyvoiced.tts.frontend.normalize.en_read import EnglishReader, Piece, join_pieces
from cosyvoiced.tts.frontend.normalize.en_text import ABBREVIATIONS, normalize_en
from cosyvoiced.tts.frontend.segments import (
    PHONEME_BLOCK,
    Pause,
    Phonemes,
    Segment,
    SourceSpan,
    Speech,
    inline_phonemes,
    strip_markers,
)

if TYPE_CHECKING:
    from cosyvoiced.tts.frontend.lexicon import Lexicon

Normalizer = Callable[[str], str]
Reader = Callable[[str], list[Piece]]
"""Text -> pieces (spoken words, start, end), offsets relative to the text."""
SourceMap = Sequence[tuple[int, int]]
"""Per character of a text: the (start, end) of the caller's input it came from."""

log = structlog.get_logger(__name__)

RULE_WORDS = frozenset([*ABBREVIATIONS, "Dr.", "St.", "No.", "Nos."])
RULES_READER = EnglishReader(normalize_en, RULE_WORDS, context=2)
"""English by the hand-written rules: the fallback where the grammars are not built."""
_REGISTRY: dict[str, Reader] = {"en": RULES_READER.pieces}


def register(language: str, normalizer: Normalizer) -> None:
    """Add or replace the normalizer of a language family ("en", "de", ...); its
    reading of a text is one span over the whole text."""
    _REGISTRY[language.lower()] = lambda text: [(normalizer(text), 0, len(text))]


def languages() -> list[str]:
    return sorted(_REGISTRY)


_LOADED: dict[str, EnglishReader] = {}
"""Readers on grammars loaded in this process, by directory (loaded once)."""
_GRAMMAR_WINDOW: list[Callable[[str], str]] = []
"""The grammars English is read by now (one window reader), none under the rules."""


def grammar_reading(written: str) -> str | None:
    """`written` as one window read by NeMo's grammars alone (no call-center rules around
    it), or None where English is read by the rules (`<say-as>` builds a written form of
    the class it asks for and reads it so)."""
    return _GRAMMAR_WINDOW[0](written) if _GRAMMAR_WINDOW else None


def use_grammars(directory: str | Path | None) -> bool:
    """English read by NeMo's grammars built in `directory` (`grammars.grammar_dir`), or
    by the rules where None or unusable (logged); True when the grammars are in use.
    Process-wide: a worker template loads them once for the workers it forks."""
    from cosyvoiced.tts.frontend.normalize.en_fst import EnglishGrammars, GrammarError

    _GRAMMAR_WINDOW.clear()
    if directory is None:
        _REGISTRY["en"] = RULES_READER.pieces
        return False
    key = str(Path(directory).resolve())
    if key not in _LOADED:
        try:
            grammars = EnglishGrammars(directory)
        except GrammarError as exc:
            log.warning("tn_grammars_unusable", path=str(directory), error=str(exc))
            _REGISTRY["en"] = RULES_READER.pieces
            return False
        _LOADED[key] = EnglishReader(grammars.normalize, grammars.words,
                                     long_window=normalize_en,
                                     phonetic=RULES_READER.phonetic)
    _REGISTRY["en"] = _LOADED[key].pieces
    _GRAMMAR_WINDOW.append(_LOADED[key].window)
    return True


def set_phonetic(on: bool) -> None:
    """Letters in codes read with NATO words ("Q as in Quebec") or alone ("Q"):
    `tts.spell_phonetic`, process-wide."""
    for reader in (RULES_READER, *_LOADED.values()):
        reader.phonetic = on


def load_grammars(cache_dir: str | Path | None = None) -> bool:
    """English read by the built grammars (`grammars.find`: under `cache_dir`, or the
    install's; `grammars.ensure` builds them before the workers start), or by the rules
    where there are none (logged: `tn_grammars_missing`). True when the grammars are in
    use."""
    from cosyvoiced.tts.frontend.normalize.grammars import find, grammar_dir

    directory = find(cache_dir)
    if directory is None:
        log.warning("tn_grammars_missing", path=str(grammar_dir(cache_dir)),
                    hint="English is read by the hand-written rules")
        return use_grammars(None)
    t0 = time.monotonic()
    ok = use_grammars(directory)
    if ok:
        log.info("tn_grammars_loaded", path=str(directory),
                 seconds=round(time.monotonic() - t0, 3))
    return ok


def normalize_pieces(text: str, language: str = "en") -> list[Piece]:
    """Plain text (no phoneme blocks) for `language` ("en", "en_US", "en-us") as pieces.

    A rule that fails on the text is a typed `UnreadableText` (answered 400), never an
    untyped error: the rules are meant to read or leave whatever they match, so it is also
    logged as the bug it is."""
    family = language.replace("-", "_").split("_")[0].lower()
    fn = _REGISTRY.get(family)
    if fn is None:
        return [(text, 0, len(text))]
    try:
        return fn(text)
    except TtsError:
        raise
    except Exception as exc:  # a rule's bug must not become a 500
        # the message may quote the input: its type only above debug
        log.warning("normalize_failed", language=family, error=type(exc).__name__,
                    text_chars=len(text))
        log.debug("normalize_failed_detail", error=repr(exc)[:200])
        raise UnreadableText(f"the {family} text normalizer could not read this text "
                             f"({type(exc).__name__})") from exc


def normalize_text(text: str, language: str = "en") -> str:
    """Plain text (no phoneme blocks) normalized for `language`."""
    return join_pieces(normalize_pieces(text, language))[0]


def _run_pieces(text: str, a: int, b: int, language: str,
                lexicon: Lexicon | None) -> list[Piece]:
    """Pieces of `text[a:b]`, offsets into `text`: lexicon entries first (a respelling
    or IPA points at the word it replaces), the rest normalized."""
    out: list[Piece] = []
    pos = a
    matches = lexicon.matches(text, a, b) if lexicon is not None else []
    for start, end, kind, value in [*matches, (b, b, "", "")]:
        if start > pos:
            out.extend((w, x + pos, y + pos)
                       for w, x, y in normalize_pieces(text[pos:start], language))
        if kind == "ipa":
            out.append((inline_phonemes(value), start, end))
        elif kind == "say":
            out.append((normalize_text(value, language), start, end))
        pos = max(pos, end)
    return out


def _speech(pieces: list[Piece], rate: float, source: SourceMap | None) -> Speech | None:
    words, spans = join_pieces(pieces)
    if not words:
        return None
    out = []
    for start, end, a, b in spans:
        if source is not None:
            a, b = (source[a][0], source[b - 1][1]) if b > a else (source[a][0],) * 2
        out.append(SourceSpan(start, end, a, b))
    return Speech(words, rate, tuple(out))


def plain_segments(text: str, language: str = "en", rate: float = 1.0,
                   lexicon: Lexicon | None = None,
                   source: SourceMap | None = None) -> list[Segment]:
    """Plain text (with optional `[[ phonemes ]]` blocks) to normalized segments; the
    lexicon's words respelled or kept as inline IPA inside their Speech segment. Each
    Speech carries the spans of `text` its words read (mapped through `source`, per
    character of `text`, where `text` is itself a piece of a larger input)."""
    text = strip_markers(text)
    out: list[Segment] = []
    pos = 0
    for m in [*PHONEME_BLOCK.finditer(text), None]:
        end = m.start() if m is not None else len(text)
        if end > pos:
            speech = _speech(_run_pieces(text, pos, end, language, lexicon), rate, source)
            if speech is not None:
                out.append(speech)
        if m is not None:
            if m.group(1).strip():
                out.append(Phonemes(m.group(1).strip(), rate))
            pos = m.end()
    return out


__all__ = ["Pause", "Phonemes", "Segment", "Speech", "normalize_text", "normalize_pieces",
           "plain_segments", "register", "languages", "use_grammars", "load_grammars",
           "set_phonetic", "grammar_reading"]
