"""NeMo's English grammars applied with kaldifst: written text to words, no pynini.

The grammars are built once (`grammar_build`, ~40 s) into a directory of OpenFst files;
this module reads them (~0.2 s, ~45 MB) and runs NeMo's pipeline: the tagger composed
with the input's bytes (shortest path), NeMo's token parser and field reorderings
(`tagged`), the verbalizer, then the post-processing graph. The cost is the compose with
the tagger, and in NeMo's tagger most of it was walking the chains of arcs that read
nothing and write one byte of the tagged form each (`tokens { money { integer_part: "`):
138k of its 345k arcs. The build folds each such chain into one arc that writes the
whole string (`grammar_build.fold_chains`; the strings are in `tagger_strings.json`),
which leaves 74k of 161k states and makes a compose ~5x cheaper (~1.6 ms for a window
here) with the same readings. Callers hand it short windows (`en_read`), and each
window's reading is kept in an LRU cache.
"""

from __future__ import annotations

import json
import re
import threading
from collections import OrderedDict
from pathlib import Path

from cosyvoiced.tts.errors import TtsError
from cosyvoiced.tts.frontend.normalize.tagged import TokenParser, permutations, split_tokens

_SPACES = re.compile(r" {2,}")
CACHE_ENTRIES = 4096
"""Windows remembered per process (a window is a few tokens: a few hundred KB in all)."""
FIRST_STRING = 256
"""The tagger's output labels from here on are strings (`tagger_strings.json`); below,
bytes."""


class GrammarError(TtsError):
    """The grammar directory cannot be used (English is then read by the rules; logged,
    never answered)."""


class EnglishGrammars:
    """The three FSTs of one build, and a cache of the windows they read."""

    def __init__(self, directory: str | Path) -> None:
        try:
            import kaldifst
        except ImportError as exc:  # pragma: no cover - a dependency of the package
            raise GrammarError(f"kaldifst is not installed ({exc})") from None
        d = Path(directory)
        try:
            self._kf = kaldifst
            # const: its arcs in one array, ~10% faster to compose with than a vector FST
            self._tagger = kaldifst.StdConstFst(kaldifst.StdVectorFst.read(str(d / "tagger.fst")))
            strings = json.loads((d / "tagger_strings.json").read_text(encoding="utf-8"))
            self._verbalizer = kaldifst.TextNormalizer(str(d / "verbalizer.fst"))
            self._post = kaldifst.TextNormalizer(str(d / "post.fst"))
            self.words = frozenset(json.loads((d / "words.json").read_text()))
        except (RuntimeError, OSError, ValueError) as exc:
            raise GrammarError(f"{d}: {exc}") from None
        """The whitelist's written forms ("Dr.", "Mrs."): words the tagger reads."""
        self._labels = [bytes([b]) for b in range(FIRST_STRING)]
        self._labels[0] = b""
        self._labels += [s.encode("latin-1") for s in strings]  # bytes, one a char
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

    def clear(self) -> None:
        """Forget every window read (the bench's first pass)."""
        with self._lock:
            self._cache.clear()

    def tag(self, text: str) -> str:
        """The tagger's reading of `text` (NeMo's tagged tokens), "" where none."""
        kf = self._kf
        lattice = kf.compose(kf.make_linear_acceptor(list(text.encode("utf-8"))),
                             self._tagger, compose_filter="auto", connect=True)
        ok, _, olabels, _ = kf.get_linear_symbol_sequence(kf.shortest_path(lattice, 1))
        if not ok:
            return ""
        labels = self._labels
        return b"".join([labels[b] for b in olabels]).decode("utf-8", "replace").strip()

    def _normalize(self, text: str) -> str:
        tagged = self.tag(text)
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
