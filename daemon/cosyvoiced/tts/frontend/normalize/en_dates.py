"""English dates and times: "March 14, 2024", "2026-11-29", "11/29/2026", "3:30 PM"."""

from __future__ import annotations

import calendar
import re

from cosyvoiced.tts.frontend.normalize.en_numbers import cardinal, ordinal, year

MONTHS = tuple(calendar.month_name)[1:]
_MONTH_ABBR = {m[:3].lower(): m for m in MONTHS} | {"sept": "September"}
_MONTH_NAME = r"(?:" + "|".join(MONTHS) + r"|(?:Jan|Feb|Mar|Apr|Jun|Jul|Aug|Sept?|Oct|Nov|Dec)\.?)"


def _month(word: str) -> str:
    w = word.rstrip(".").lower()
    return _MONTH_ABBR.get(w[:4] if w.startswith("sept") else w[:3], word)


def spoken_date(month: int, day: int, yr: int | None) -> str | None:
    """(11, 29, 2026) -> "November twenty ninth, twenty twenty six"; None if invalid."""
    if not 1 <= month <= 12:
        return None
    last = calendar.monthrange(yr if yr else 2000, month)[1]
    if not 1 <= day <= last:
        return None
    out = f"{MONTHS[month - 1]} {ordinal(day)}"
    return f"{out}, {year(yr)}" if yr is not None else out


ISO_RE = re.compile(r"\b(\d{4})-(\d{1,2})-(\d{1,2})\b")
US_RE = re.compile(r"\b(\d{1,2})/(\d{1,2})/(\d{4}|\d{2})\b")
NAMED_RE = re.compile(
    rf"\b({_MONTH_NAME})\s+(\d{{1,2}})(?:st|nd|rd|th)?\b(?:,?\s+(\d{{4}})\b)?")
DAY_OF_RE = re.compile(rf"\b(\d{{1,2}})(?:st|nd|rd|th)?\s+(?:of\s+)?({_MONTH_NAME})(?:,?\s+(\d{{4}})\b)?")


def _iso(m: re.Match[str]) -> str:
    return spoken_date(int(m.group(2)), int(m.group(3)), int(m.group(1))) or m.group(0)


def _us(m: re.Match[str]) -> str:
    y = int(m.group(3))
    if len(m.group(3)) == 2:
        y += 2000
    return spoken_date(int(m.group(1)), int(m.group(2)), y) or m.group(0)


def _named(month_word: str, day: str, yr: str | None, whole: str) -> str:
    month = MONTHS.index(_month(month_word)) + 1
    return spoken_date(month, int(day), int(yr) if yr else None) or whole


def dates(text: str) -> str:
    text = ISO_RE.sub(_iso, text)
    text = US_RE.sub(_us, text)
    text = NAMED_RE.sub(lambda m: _named(m.group(1), m.group(2), m.group(3), m.group(0)), text)
    return DAY_OF_RE.sub(lambda m: _named(m.group(2), m.group(1), m.group(3), m.group(0)), text)


_MERIDIEM = r"\s*([AaPp])(?:\.\s?[Mm]\.|\s?[Mm]\b)"
TIME_RE = re.compile(rf"\b(\d{{1,2}}):(\d{{2}})(?::\d{{2}})?(?:{_MERIDIEM})?")
HOUR_MERIDIEM_RE = re.compile(rf"\b(\d{{1,2}}){_MERIDIEM}")
OCLOCK_RE = re.compile(r"\b(\d{1,2})\s+o'?clock\b", re.IGNORECASE)


def spoken_time(hour: int, minute: int, meridiem: str | None) -> str | None:
    """(3, 30, "p") -> "three thirty P M"; (10, 5, None) -> "ten oh five"."""
    if hour > 23 or minute > 59 or (meridiem and not 1 <= hour <= 12):
        return None
    if minute == 0:
        words = cardinal(hour) + ("" if meridiem else " hundred" if hour > 12 else " o'clock")
    elif minute < 10:
        words = f"{cardinal(hour)} oh {cardinal(minute)}"
    else:
        words = f"{cardinal(hour)} {cardinal(minute)}"
    if hour == 0 and not meridiem:
        words = "zero hundred" if minute == 0 else words
    if meridiem:
        words += " A M" if meridiem.lower() == "a" else " P M"
    return words


def _time(m: re.Match[str]) -> str:
    return spoken_time(int(m.group(1)), int(m.group(2)), m.group(3)) or m.group(0)


def times(text: str) -> str:
    text = TIME_RE.sub(_time, text)
    text = HOUR_MERIDIEM_RE.sub(
        lambda m: spoken_time(int(m.group(1)), 0, m.group(2)) or m.group(0), text)
    return OCLOCK_RE.sub(lambda m: cardinal(int(m.group(1))) + " o'clock", text)
