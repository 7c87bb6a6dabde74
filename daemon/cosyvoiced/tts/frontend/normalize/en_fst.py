"""NeMo's English grammars applied with kaldifst: written text to words, no pynini.

The grammars are built once (`grammar_build`, ~35 s) into a directory of arcsorted
OpenFst files; this module reads them (~0.2 s, ~45 MB) and runs NeMo's pipeline: the
tagger composed with the input's bytes (shortest path), NeMo's token parser and field
reorderings (`tagged`), the verbalizer, then the post-processing graph. The cost is the
compose with the 7.5 MB tagger (161k states, 138k of its arcs read no input), so callers
hand it short windows (`en_read`), each window's reading is kept in an LRU cache, and
the tagger is first cut down to the arcs that read bytes the window holds (its
*alphabet*: digits, lower-case and upper-case letters each as a group, any other byte
alone): a compose of the tagger with a one-state filter, trimmed, that leaves 4-17% of
the states and makes a window's compose 2-10x cheaper. The paths that read the window
are the same in both, so is the reading. A cut costs ~15-30 ms to make: the build makes
those of common call-center windows (`cuts/` beside the grammars), and one made at run
time is kept in memory (LRU) and written to `cut_dir` (the daemon's cache dir), where
the next start, and the other workers, find it.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import threading
from collections import OrderedDict
from pathlib import Path

import structlog

from cosyvoiced.tts.errors import TtsError
from cosyvoiced.tts.frontend.normalize.tagged import TokenParser, permutations, split_tokens

log = structlog.get_logger(__name__)

_SPACES = re.compile(r" {2,}")
CACHE_ENTRIES = 4096
"""Windows remembered per process (a window is a few tokens: a few hundred KB in all)."""
ALPHABETS = 64
"""Cut-down taggers kept in memory per process (~0.2-1.5 MB each: at most ~40 MB)."""
MAX_CUT_FILES = 1024
"""Cut-down taggers written to `cut_dir` at most (then made in memory only)."""
COMMON_WINDOWS = (
    "42", "1,250", "3.5", "$1,234.56", "$5", "25%", "12/03/2023", "2024-11-29", "5:30 PM",
    "10:00 a.m.", "8 AM", "March 14, 2024", "Jan. 5", "21st", "5 kg", "#5", "1-800",
    "(555) 123", "john.doe@example.com", "www.example.com/help", "Dr.", "3-5", "A1",
    "100 million", "$5M", "72°F", "½")
"""Windows whose alphabets the build cuts in advance."""
DIGITS, LOWER, UPPER = range(48, 58), range(97, 123), range(65, 91)


def alphabet(data: bytes) -> tuple[int, ...]:
    """The bytes a tagger cut for `data` keeps: those of `data`, each of digits, lower-
    and upper-case letters as a whole group where one of them is there."""
    seen = set(data)
    for group in (DIGITS, LOWER, UPPER):
        if not seen.isdisjoint(group):
            seen.update(group)
    return tuple(sorted(seen))


class GrammarError(TtsError):
    """The grammar directory cannot be used (English is then read by the rules; logged,
    never answered)."""


class EnglishGrammars:
    """The three FSTs of one build, and a cache of the windows they read."""

    def __init__(self, directory: str | Path, cut_dir: str | Path | None = None) -> None:
        try:
            import kaldifst
        except ImportError as exc:  # pragma: no cover - a dependency of the package
            raise GrammarError(f"kaldifst is not installed ({exc})") from None
        d = Path(directory)
        try:
            self._kf = kaldifst
            self._tagger = kaldifst.StdVectorFst.read(str(d / "tagger.fst"))
            self._verbalizer = kaldifst.TextNormalizer(str(d / "verbalizer.fst"))
            self._post = kaldifst.TextNormalizer(str(d / "post.fst"))
            self.words = frozenset(json.loads((d / "words.json").read_text()))
        except (RuntimeError, OSError, ValueError) as exc:
            raise GrammarError(f"{d}: {exc}") from None
        """The whitelist's written forms ("Dr.", "Mrs."): words the tagger reads."""
        self.directory = d
        self.cut_dir = Path(cut_dir) if cut_dir is not None else None
        """Where cuts made at run time are written (None: memory only)."""
        self._cache: OrderedDict[str, str] = OrderedDict()
        self._cut: OrderedDict[tuple[int, ...], object] = OrderedDict()
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

    def _cut_tagger(self, letters: tuple[int, ...]) -> object:
        """The tagger cut down to `letters` (built once per alphabet, LRU)."""
        with self._lock:
            hit = self._cut.get(letters)
            if hit is not None:
                self._cut.move_to_end(letters)
                return hit
        kf = self._kf
        name = hashlib.sha1(bytes(letters)).hexdigest()[:20] + ".fst"
        cut = None
        for where in (self.directory / "cuts", self.cut_dir):
            if where is not None and (where / name).is_file():
                try:
                    cut = kf.StdVectorFst.read(str(where / name))
                    break
                except RuntimeError:  # a torn or foreign file: made again below
                    cut = None
        if cut is None:
            only = kf.compile("".join(f"0 0 {b} {b}\n" for b in letters) + "0\n",
                              acceptor=False)
            kf.arcsort(only, "olabel")
            cut = kf.compose(only, self._tagger, connect=True)
            kf.arcsort(cut, "ilabel")
            self._keep(cut, name)
        with self._lock:
            self._cut[letters] = cut
            if len(self._cut) > ALPHABETS:
                self._cut.popitem(last=False)
        return cut

    def _keep(self, cut: object, name: str) -> None:
        """A cut made here written to `cut_dir` (atomically; best effort)."""
        if self.cut_dir is None:
            return
        try:
            self.cut_dir.mkdir(parents=True, exist_ok=True)
            if sum(1 for _ in self.cut_dir.glob("*.fst")) >= MAX_CUT_FILES:
                return
            tmp = self.cut_dir / f".{name}.{os.getpid()}.tmp"
            cut.write(str(tmp))  # type: ignore[attr-defined]
            os.replace(tmp, self.cut_dir / name)
        except (OSError, RuntimeError) as exc:
            log.warning("tn_cut_not_kept", path=str(self.cut_dir), error=str(exc))

    def tag(self, text: str) -> str:
        """The tagger's reading of `text` (NeMo's tagged tokens), "" where none."""
        kf = self._kf
        data = text.encode("utf-8")
        lattice = kf.compose(kf.make_linear_acceptor(list(data)),
                             self._cut_tagger(alphabet(data)), connect=True)
        ok, _, olabels, _ = kf.get_linear_symbol_sequence(kf.shortest_path(lattice, 1))
        if not ok:
            return ""
        return bytes(b for b in olabels if b).decode("utf-8", "replace")

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


def precut(directory: str | Path) -> None:
    """Cut the tagger in `directory` for the alphabets of `COMMON_WINDOWS` (written to
    its `cuts/`): what the build does last."""
    grammars = EnglishGrammars(directory, cut_dir=Path(directory) / "cuts")
    for window in COMMON_WINDOWS:
        grammars.tag(window)
