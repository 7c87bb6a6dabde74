"""When each word of a clause is spoken, from the voice's own phoneme durations.

The voice is given a clause's phonemes as ids (BOS, PAD, then each phoneme's ids and a
PAD, then EOS); its front predicts every id's frames before the vocoder runs. espeak-ng
separates words by spaces in its output, but joins some ("in the" -> `ɪnðə`) and splits
none we rely on, so its words are matched to the clause's written words: one to one where
the counts agree, else by aligning each written word's phonemes (phonemized alone, only
for this) against espeak's words. What the voice receives never changes. A written word
is reported as the caller wrote it: by its `SourceSpan` (`$5` for "five dollars", a
lexicon or `<phoneme>` word as written); words sharing a span are one.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from cosyvoiced.tts.frontend.segments import SourceSpan, split_inline
from cosyvoiced.tts.request import WordTime

WORD_RE = re.compile(r"\S+")
STRESS = str.maketrans("", "", "ˈˌːˑ'")
PUNCTUATION = frozenset(",.;:!?¡¿—…\"()-'")


@dataclass(frozen=True)
class Unit:
    """A written word of a clause: where it is in the clause text, and its phonemes when
    known without espeak (an inline IPA word)."""

    start: int
    end: int
    ipa: str | None = None


def clause_units(text: str) -> list[Unit]:
    """The written words of a clause text (punctuation alone is no word; inline IPA pieces
    give their IPA words, all at the marker's place)."""
    units: list[Unit] = []
    pos = 0
    for piece, is_ipa in split_inline(text):
        at = text.find(piece, pos) if not is_ipa else text.find("\ue000", pos)
        at = max(at, pos)
        if is_ipa:
            end = text.find("\ue001", at) + 1
            units.extend(Unit(at, end, w) for w in piece.split())
            pos = end
            continue
        for m in WORD_RE.finditer(piece):
            if any(c.isalnum() for c in m.group()):
                units.append(Unit(at + m.start(), at + m.end()))
        pos = at + len(piece)
    return units


def phoneme_words(phonemes: Sequence[str]) -> list[tuple[int, int]]:
    """[first, last] phoneme indices of each word in a phoneme list (spaces split words;
    punctuation is no sound of the word it follows)."""
    words: list[tuple[int, int]] = []
    start = last = -1
    for i, p in enumerate([*phonemes, " "]):
        if not p.strip():
            if start >= 0:
                words.append((start, last))
            start = -1
        elif p not in PUNCTUATION:
            start = i if start < 0 else start
            last = i
    return words


def id_frames(phonemes: Sequence[str], id_map: dict[str, Sequence[int]],
              durations: np.ndarray) -> tuple[np.ndarray, float]:
    """(start frame of each phoneme and, last, the end of the last one; all frames) from the
    durations of the ids `to_ids` makes of `phonemes`; a phoneme the map lacks has none (it
    was dropped)."""
    starts = np.zeros(len(phonemes) + 1, dtype=np.float64)
    cum = np.concatenate([[0.0], np.cumsum(durations.astype(np.float64))])
    pos = len(id_map.get("^", ())) + len(id_map.get("_", ()))
    for i, p in enumerate(phonemes):
        starts[i] = cum[min(pos, len(cum) - 1)]
        if p in id_map:
            pos += len(id_map[p]) + len(id_map.get("_", ()))
    starts[len(phonemes)] = cum[min(pos, len(cum) - 1)]
    return starts, float(cum[-1])


def _letters(s: str) -> str:
    return "".join(c for c in s.translate(STRESS) if c.isalpha())


def align(units: list[str], words: list[str]) -> list[tuple[int, int, int, int]]:
    """Groups (unit lo, unit hi, word lo, word hi) matching written words (their phonemes
    alone) to espeak's words in order: 1:1, n:1 (espeak joined them) or 1:n, n <= 3. A
    group costs how far its lengths in letters differ, and whether its first letters do
    (O(1) each: this runs before a sentence's first audio)."""
    n, m = len(units), len(words)
    ucum = np.concatenate([[0], np.cumsum([len(u) for u in units])])
    wcum = np.concatenate([[0], np.cumsum([len(w) for w in words])])
    inf = float("inf")
    cost = np.full((n + 1, m + 1), inf)
    back: dict[tuple[int, int], tuple[int, int]] = {}
    cost[0, 0] = 0.0
    for i in range(n + 1):
        for j in range(m + 1):
            here = cost[i, j]
            if here == inf:
                continue
            for a, b in ((1, 1), (2, 1), (3, 1), (1, 2), (1, 3), (1, 0), (0, 1)):
                if i + a > n or j + b > m:
                    continue
                if a and b:
                    la, lb = ucum[i + a] - ucum[i], wcum[j + b] - wcum[j]
                    c = abs(la - lb) / max(la, lb, 1) + 0.15 * (a + b - 2)
                    c += 0.5 * (units[i][:1] != words[j][:1])
                else:
                    c = 1.5
                if here + c < cost[i + a, j + b]:
                    cost[i + a, j + b] = here + c
                    back[(i + a, j + b)] = (i, j)
    groups: list[tuple[int, int, int, int]] = []
    at = (n, m)
    while at != (0, 0):
        i, j = back[at]
        groups.append((i, at[0], j, at[1]))
        at = (i, j)
    return groups[::-1]


def clause_words(text: str, spans: Sequence[SourceSpan], source: str,
                 phonemes: Sequence[str], starts: np.ndarray,
                 phonemize: Callable[[list[str]], list[str]]) -> list[WordTime]:
    """The words of one clause with times in frames (as `start_s`/`end_s`; the caller
    scales them): `starts` the start frame of each phoneme (`id_frames`), `phonemize` the
    phonemes of written words alone (called only where espeak's words do not match them
    one to one)."""
    units = clause_units(text)
    spoken = phoneme_words(phonemes)
    if not units or not spoken:
        return []
    times = [(float(starts[a]), float(starts[b + 1])) for a, b in spoken]
    unit_times: list[tuple[float, float] | None] = [None] * len(units)
    if len(units) == len(spoken):
        unit_times = list(times)
    else:
        plain = [u for u in units if u.ipa is None]
        alone = iter(phonemize([text[u.start:u.end] for u in plain]) if plain else [])
        written = [_letters(u.ipa if u.ipa is not None else next(alone, "")) for u in units]
        said = [_letters("".join(phonemes[a:b + 1])) for a, b in spoken]
        for ulo, uhi, wlo, whi in align(written, said):
            if ulo == uhi or wlo == whi:
                continue
            t0, t1 = times[wlo][0], times[whi - 1][1]
            weights = [max(1, len(w)) for w in written[ulo:uhi]]
            total, acc = float(sum(weights)), 0.0
            for k in range(ulo, uhi):
                a = t0 + (t1 - t0) * acc / total
                acc += weights[k - ulo]
                unit_times[k] = (a, t0 + (t1 - t0) * acc / total)
    out: list[WordTime] = []
    last_span: SourceSpan | None = None
    for unit, t in zip(units, unit_times, strict=True):
        if t is None:
            continue
        span = next((s for s in spans if s.start <= unit.start < s.end), None)
        if span is None:
            continue  # no source: nothing the caller wrote to point at
        if span is last_span and out:
            prev = out[-1]
            out[-1] = WordTime(prev.text, prev.char_start, prev.char_end, prev.start_s,
                               max(prev.end_s, t[1]))
            continue
        last_span = span
        out.append(WordTime(source[span.src_start:span.src_end], span.src_start, span.src_end,
                            t[0], t[1]))
    return out


def alone(espeak_voice: str) -> Callable[[list[str]], list[str]]:
    """Phonemes of written words, each phonemized on its own (for `clause_words`): one
    espeak-ng call with each word a sentence, or one call per word where espeak finds
    other sentences than the words."""
    from cosyvoiced.tts.frontend.phonemize import espeak_phonemes, espeak_sentences

    def run(words: list[str]) -> list[str]:
        bare = [" ".join(re.findall(r"[^\W_]+(?:'[^\W_]+)?", w)) or w for w in words]
        said = espeak_sentences(". ".join(bare) + ".", espeak_voice)
        if len(said) == len(words):
            return said
        return ["".join(espeak_phonemes(w, espeak_voice)) for w in bare]

    return run
