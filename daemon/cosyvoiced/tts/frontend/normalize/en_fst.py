"""NeMo's English grammars applied with kaldifst: written text to words, no pynini.

The grammars are built once (`grammar_build`, ~35 s) into a directory of arcsorted
OpenFst files; this module reads them (~0.2 s, ~45 MB) and runs NeMo's pipeline: the
tagger composed with the input's bytes (shortest path), NeMo's token parser and field
reorderings (`tagged`), the verbalizer, then the post-processing graph. The cost is the
compose with the 7.5 MB tagger and grows with the input, so callers hand it short
windows (`en_text`), and each window's reading is kept in an LRU cache.
"""

from __future__ import annotations

import json
import re
import threading
from collections import OrderedDict
from pathlib import Path

from cosyvoiced.tts.frontend.normalize.tagged import TokenParser, permutations, split_tokens

_SPACES = re.compile(r" {2,}")
CACHE_ENTRIES = 4096
"""Windows remembered per process (a window is a few tokens: a few hundred KB in all)."""


class GrammarError(Exception):
    """The grammar directory cannot be used."""


class EnglishGrammars:
    """The three FSTs of one build, and a cache of the windows they read."""

    def __init__(self, directory: str | Path) -> None:
        try:
            import kaldifst
        except ImportError as exc:  # pragma: no cover - a dependency of the package
            raise GrammarError(f"kaldifst is not installed ({exc})") from None
        d = Path(directory)
        try:
            self._tagger = kaldifst.TextNormalizer(str(d / "tagger.fst"))
            self._verbalizer = kaldifst.TextNormalizer(str(d / "verbalizer.fst"))
            self._post = kaldifst.TextNormalizer(str(d / "post.fst"))
            self.words = frozenset(json.loads((d / "words.json").read_text()))
        except (RuntimeError, OSError, ValueError) as exc:
            raise GrammarError(f"{d}: {exc}") from None
        """The whitelist's written forms ("Dr.", "Mrs."): words the tagger reads."""
        self.directory = d
        self._cache: OrderedDict[str, str] = OrderedDict()
        self._lock = threading.Lock()

    def normalize(self, text: str) -> str:
        """`text` in words, as NeMo's `Normalizer.normalize` says it (without its
        punctuation pre/post-processing); `text` unchanged where the grammars fail."""
        text = text.strip()
        if not text:
            return text
        with self._lock:
            hit = self._cache.get(text)
            if hit is not None:
                self._cache.move_to_end(text)
                return hit
        out = self._normalize(text)
        with self._lock:
            self._cache[text] = out
            if len(self._cache) > CACHE_ENTRIES:
                self._cache.popitem(last=False)
        return out

    def _normalize(self, text: str) -> str:
        tagged = self._tagger(text)
        if not tagged:
            return text
        parser = TokenParser()
        try:
            parser(tagged)
            tokens = parser.parse()
            output = ""
            for run in split_tokens(tokens):
                spoken = ""
                for serialized in permutations(run):
                    spoken = self._verbalizer(serialized)
                    if spoken:
                        break
                if not spoken:
                    return text
                output += " " + spoken
        except (AssertionError, ValueError, IndexError):
            return text
        output = _SPACES.sub(" ", output[1:]).strip()
        return (self._post(output) or output) if output else output
