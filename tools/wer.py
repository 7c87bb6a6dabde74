"""Word and character error rates as the judge scores them: number-normalized text
(Whisper's English normalizer, then every digit its own word), edit distances, and the
paired bootstrap of a WER difference over sentences and seeds."""

from __future__ import annotations

import re
from dataclasses import dataclass

import numpy as np

_NORMALIZER = None


_TENS = {"twenty": 2, "thirty": 3, "forty": 4, "fifty": 5, "sixty": 6, "seventy": 7,
         "eighty": 8, "ninety": 9}
_ORD = {"first": "1st", "second": "2nd", "third": "3rd", "fourth": "4th", "fifth": "5th",
        "sixth": "6th", "seventh": "7th", "eighth": "8th", "ninth": "9th"}
_SPLIT_MERIDIEM = re.compile(r"(\d) ?([ap]) m\b")
_COMPOUND_ORDINAL = re.compile(rf"\b({'|'.join(_TENS)})[ -]({'|'.join(_ORD)})\b", re.IGNORECASE)
_CLOCK = re.compile(r"\b(\d{1,2}):(\d)(\d)(?![\d:])")
_LEADING_ZEROS = re.compile(r"(?<![\w.,:])(0+)(?=\d)")
_CODE = re.compile(r"(?<![\w-])(?=[\w-]*\d)(?=[\w-]*[A-Za-z])[A-Za-z0-9]+(?:-[A-Za-z0-9]+)*(?![\w-])")
_NOT_CODE = re.compile(r"\d+(?:st|nd|rd|th|s|am|pm)", re.IGNORECASE)
_SPELLING_WORD = re.compile(r"\b([a-z0]) as in (?:x ray|[a-z]+)\b")
_WORDS = {"one": "1", "ms": "miz"}
"""Words the normalizer leaves in two forms ("one" stays a word, as "1" does not)."""


def _clock(m: re.Match[str]) -> str:
    hour, tens, units = m.groups()
    if tens == units == "0":
        return hour
    return f"{hour} oh {units}" if tens == "0" else f"{hour} {tens}{units}"


def _code(m: re.Match[str]) -> str:
    """Each letter-digit piece of a code letter by letter ("XK7-93B"; "ID-0027": "ID 0027")."""
    return " ".join(
        " ".join(re.findall(r"[A-Za-z]|\d+", piece))
        if re.search(r"\d", piece) and re.search(r"[A-Za-z]", piece)
        and not _NOT_CODE.fullmatch(piece) else piece
        for piece in m.group(0).split("-"))


def scoring_text(text: str) -> str:
    """Whisper's English normalizer, then each digit as its own word.

    Each rule makes two writings of the same spoken words score alike (both sides get
    them): compound ordinals ("twenty ninth") become "29th" first (the normalizer leaves
    "20 ninth"); clock times lose ":" ("6:05" is "6 oh 5", as "six oh five" is; "11:00"
    is "11"), a code is letter by letter ("XK7-93B" is "X K 7 93 B") and leading zeros
    are spelled ("0199": the normalizer drops them); after a
    number, "a m"/"p m" become "am"/"pm"; a spelling word ("B, as in boy") goes, the letter
    stays (a voice that does not spell that way is not misheard); "one" is "1".
    """
    global _NORMALIZER
    if _NORMALIZER is None:
        from whisper_normalizer.english import EnglishTextNormalizer

        _NORMALIZER = EnglishTextNormalizer()
    text = _COMPOUND_ORDINAL.sub(
        lambda m: f"{_TENS[m.group(1).lower()]}{_ORD[m.group(2).lower()]}", text)
    text = _CLOCK.sub(_clock, text)
    text = _CODE.sub(_code, text)
    text = _LEADING_ZEROS.sub(lambda m: "zero " * len(m.group(1)), text)
    norm = _NORMALIZER(text)
    norm = " ".join(_WORDS.get(w, w) for w in norm.split())
    norm = _SPELLING_WORD.sub(r"\1", norm)
    norm = _SPLIT_MERIDIEM.sub(r"\1 \2m", norm)
    norm = re.sub(r"(\d)", r" \1 ", norm)
    return re.sub(r"\s+", " ", norm).strip()


def edit_distance(ref: list[str] | str, hyp: list[str] | str) -> int:
    """Levenshtein distance (tiny DP; sentences are short, no dependency needed)."""
    prev = list(range(len(hyp) + 1))
    for i, r in enumerate(ref, 1):
        cur = [i] + [0] * len(hyp)
        for j, h in enumerate(hyp, 1):
            cur[j] = min(prev[j] + 1, cur[j - 1] + 1, prev[j - 1] + (r != h))
        prev = cur
    return prev[-1]


@dataclass
class Scores:
    word_errors: np.ndarray
    """(seeds, sentences) word edit counts."""
    word_counts: np.ndarray
    """(sentences,) reference words."""
    char_errors: np.ndarray
    char_counts: np.ndarray

    @property
    def wer(self) -> float:
        return float(self.word_errors.sum() / (self.word_counts.sum() * self.word_errors.shape[0]))

    @property
    def cer(self) -> float:
        return float(self.char_errors.sum() / (self.char_counts.sum() * self.char_errors.shape[0]))


def score(refs: list[str], hyps_by_seed: list[list[str]]) -> Scores:
    ref_norm = [scoring_text(r) for r in refs]
    we = np.zeros((len(hyps_by_seed), len(refs)))
    ce = np.zeros_like(we)
    for s, hyps in enumerate(hyps_by_seed):
        for i, (r, h) in enumerate(zip(ref_norm, hyps, strict=True)):
            hn = scoring_text(h)
            we[s, i] = edit_distance(r.split(), hn.split())
            ce[s, i] = edit_distance(r.replace(" ", ""), hn.replace(" ", ""))
    wn = np.array([max(1, len(r.split())) for r in ref_norm], dtype=float)
    cn = np.array([max(1, len(r.replace(" ", ""))) for r in ref_norm], dtype=float)
    return Scores(we, wn, ce, cn)


def bootstrap_diff(a_err: np.ndarray, b_err: np.ndarray, counts: np.ndarray,
                   draws: int = 2000, seed: int = 0) -> tuple[float, float, float]:
    """Mean and 95% interval of rate(a) - rate(b) in percentage points, resampling
    sentences and seeds (paired: the same draw for both)."""
    rng = np.random.default_rng(seed)
    n_seed, n_sent = a_err.shape
    diff = (a_err - b_err)
    mean = 100.0 * diff.sum() / (counts.sum() * n_seed)
    si = rng.integers(0, n_sent, size=(draws, n_sent))
    ki = rng.integers(0, n_seed, size=(draws, n_seed))
    per_sent = np.stack([diff[k].sum(axis=0) for k in ki])  # (draws, n_sent) over drawn seeds
    num = np.take_along_axis(per_sent, si, axis=1).sum(axis=1)
    den = counts[si].sum(axis=1) * n_seed
    boot = 100.0 * num / den
    lo, hi = np.percentile(boot, [2.5, 97.5])
    return float(mean), float(lo), float(hi)


def subset(s: Scores, idx: np.ndarray) -> Scores:
    """The scores of sentences `idx` only."""
    return Scores(s.word_errors[:, idx], s.word_counts[idx], s.char_errors[:, idx],
                  s.char_counts[idx])


def worst(s: Scores, n: int = 10) -> list[int]:
    """The `n` sentences with most word errors over all seeds (ties: the shorter first)."""
    total = s.word_errors.sum(axis=0)
    order = sorted(range(total.shape[0]), key=lambda i: (-total[i], s.word_counts[i]))
    return [i for i in order[:n] if total[i] > 0]
