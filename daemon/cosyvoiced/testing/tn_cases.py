"""NeMo's English text-normalization cases (tests/data/nemo_tn_en/) and how they are scored.

A reading counts as right when it equals one of the case's accepted readings after both
are put in one form: lower case, punctuation out, "oh" = "zero", spelled letters joined
("p m" = "pm", so "PM" and "P M" agree), an "and" after hundred/thousand/scale or currency
words optional, and the inline IPA of a spelled "A" read back as the letter.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from cosyvoiced.tts.frontend.segments import INLINE_RE

CASES_DIR = Path(__file__).resolve().parents[3] / "tests" / "data" / "nemo_tn_en"
CALLCENTER_FILE = CASES_DIR.parent / "callcenter_tn_en" / "cases.txt"
CALL_CENTER = ("cardinal", "ordinal", "decimal", "money", "date", "time", "telephone",
               "measure", "electronic", "address")
"""The classes a call center lives on (the issue's first target)."""
SKIPPED = ("normalize_with_audio",)
"""Many readings per case, for NeMo's audio-based mode: not a deterministic target."""

_AND_AFTER = re.compile(
    r"\b(hundred|thousand|million|billion|trillion|dollars?|cents?|euros?|pounds?|pence|"
    r"yen|won|rupees?)\s+and\b")
_PUNCT = re.compile(r"[^\w\s']|_")


@dataclass(frozen=True)
class Case:
    cls: str
    written: str
    spoken: tuple[str, ...]
    """Accepted readings."""


def load_cases(directory: Path = CASES_DIR) -> list[Case]:
    """Every case of every class but `SKIPPED`, in file order."""
    out: list[Case] = []
    for path in sorted(directory.glob("test_cases_*.txt")):
        cls = path.stem.removeprefix("test_cases_")
        if cls in SKIPPED:
            continue
        for line in path.read_text(encoding="utf-8").split("\n"):
            if "~" not in line:
                continue
            written, *spoken = line.split("~")
            out.append(Case(cls, written, tuple(spoken)))
    return out


def load_callcenter(path: Path = CALLCENTER_FILE) -> list[tuple[Case, str]]:
    """Our call-center sentences: (case, why it is a known failure, or "") per line."""
    out: list[tuple[Case, str]] = []
    for line in path.read_text(encoding="utf-8").splitlines():
        if not line or line.startswith("#"):
            continue
        written, *spoken = line.split("~")
        why = spoken.pop()[1:] if spoken[-1].startswith("!") else ""
        out.append((Case("callcenter", written, tuple(spoken)), why))
    return out


def _ipa_letter(m: re.Match[str]) -> str:
    return " a " if m.group(1) == "ˈeɪ" else " "


def canonical(text: str) -> str:
    """The form both sides are compared in."""
    text = INLINE_RE.sub(_ipa_letter, text).lower()
    text = _PUNCT.sub(" ", text).replace("'", "")
    joined: list[str] = []
    letters = False  # the last word joined is a run of single letters
    for w in ("zero" if w == "oh" else w for w in text.split()):
        single = len(w) == 1 and w.isalpha()
        if single and letters:
            joined[-1] += w
        else:
            joined.append(w)
            letters = single
    return _AND_AFTER.sub(r"\1", " ".join(joined))


def matches(reading: str, case: Case) -> bool:
    got = canonical(reading)
    return any(got == canonical(s) for s in case.spoken)
