"""`<say-as>` cardinal, ordinal, date and currency through NeMo's grammars.

Each builds the one written form the grammars read as the class asked for ("1,234" is a
cardinal where "1234" would be a year, "21st" an ordinal, "March 5, 2024" a date whatever
order the digits came in, "$5.50" money) and reads it as one window, without the
call-center rules ("911" under `cardinal` is "nine hundred and eleven"). Where the grammars
are not loaded, the hand-written rules read it as before. A ValueError says why a value
cannot be read (answered 400 by the SSML parser).
"""

from __future__ import annotations

import calendar
import re

from cosyvoiced.tts.frontend.normalize import grammar_reading, normalize_text
from cosyvoiced.tts.frontend.normalize.en_dates import MONTHS, dates, spoken_date
from cosyvoiced.tts.frontend.normalize.en_numbers import (
    CURRENCY_RE,
    MAX_WORD_DIGITS,
    currency,
    decimal_digits,
    number,
    ordinal_number,
)

DATE_FORMATS = ("mdy", "dmy", "ymd", "md", "dm", "ym", "my", "d", "m", "y")
"""`<say-as interpret-as="date" format=…>`: the order of the date's numbers."""
CURRENCIES = {"USD": "$", "EUR": "€", "GBP": "£"}
"""`<say-as interpret-as="currency" format=…>` (ISO 4217), and the codes read in the text."""
MAX_DATE_DIGITS = 9
"""A date part longer than this is no date (and never an int() of thousands)."""
_CARDINAL_RE = re.compile(r"(-?)([0-9][0-9,]*)(\.[0-9]+)?", re.ASCII)
_ORDINAL_RE = re.compile(r"([0-9][0-9,]*)(st|nd|rd|th)?", re.ASCII | re.IGNORECASE)
_MONEY_RE = re.compile(
    r"(-)?\s*(?:([$€£])|(USD|EUR|GBP)\b)?\s*(-)?\s*([0-9][0-9,]*(?:\.[0-9]+)?|\.[0-9]+)\s*"
    r"(USD|EUR|GBP)?", re.ASCII | re.IGNORECASE)


def _check_digits(kind: str, integer: str) -> None:
    if len(decimal_digits(integer)) > MAX_WORD_DIGITS:
        raise ValueError(f"a {kind} of {len(integer)} digits is too long to read as words "
                         f"(at most {MAX_WORD_DIGITS} digits); use interpret-as=\"digits\"")


def _grouped(integer: str) -> str:
    """"1234" -> "1,234" (the grammars read a bare four-digit number as a year)."""
    return f"{int(integer.replace(',', '')):,}"


def _read(written: str) -> str | None:
    """The grammars' reading of `written`; None where they are not loaded or leave it."""
    got = grammar_reading(written)
    return got if got and got != written else None


def say_cardinal(text: str, kind: str = "cardinal") -> str:
    """"1234" -> "one thousand two hundred and thirty four"; "-3.5" -> "minus three point
    five"; anything else is read as written text."""
    m = _CARDINAL_RE.fullmatch(text)
    if not m:
        return normalize_text(text) if text else text
    _check_digits(kind, m.group(2))
    written = f"{m.group(1)}{_grouped(m.group(2))}{m.group(3) or ''}"
    return _read(written) or number(text)


def _suffix(n: int) -> str:
    if n % 100 in (11, 12, 13):
        return "th"
    return {1: "st", 2: "nd", 3: "rd"}.get(n % 10, "th")


def say_ordinal(text: str) -> str:
    """"21" or "21st" -> "twenty first"."""
    m = _ORDINAL_RE.fullmatch(text)
    if not m:
        return normalize_text(text) if text else text
    _check_digits("ordinal", m.group(1))
    n = int(m.group(1).replace(",", ""))
    return _read(f"{n:,}{_suffix(n)}") or ordinal_number(str(n))


def _written_date(parts: dict[str, int], order: str) -> str | None:
    """The date in the written form the grammars read best, None if it is no date."""
    month, day, year = parts.get("m"), parts.get("d"), parts.get("y")
    if month is not None and not 1 <= month <= 12:
        return None
    if year is not None and not 0 < year <= 9999:
        return None
    if day is not None:
        last = calendar.monthrange(year or 2000, month)[1] if month else 31
        if not 1 <= day <= last:
            return None
    name = MONTHS[month - 1] if month else ""
    if order in ("mdy", "ymd"):
        return f"{name} {day}, {year}"
    if order == "dmy":
        return f"{day} {name} {year}"
    if order in ("md", "dm"):
        return f"{name} {day}" if order == "md" else f"{day} {name}"
    if order in ("my", "ym"):
        return f"{name} {year}"
    return {"d": f"{day}{_suffix(day or 0)}", "m": name, "y": str(year)}[order]


def say_date(text: str, fmt: str = "") -> str:
    """`text`'s numbers in `fmt`'s order ("dmy": "29/11/2026"); without a format, year
    first where it has four digits, else month first, and text that is no such date read
    as written ("March 5, 2024"). With a format, a text that is no date in it is refused."""
    order = fmt.strip().lower()
    if order and order not in DATE_FORMATS:
        raise ValueError(f"date format {fmt!r} is not one of {', '.join(DATE_FORMATS)}")
    found = re.findall(r"[0-9]+", text)
    nums = [int(x) for x in found] if all(len(x) <= MAX_DATE_DIGITS for x in found) else []
    if not order and nums:
        order = {3: "ymd" if len(found[0]) == 4 else "mdy", 2: "md"}.get(len(nums), "")
    if nums and len(nums) == len(order):
        parts = dict(zip(order, nums, strict=True))
        written = _written_date(parts, order)
        if written is not None and order == "m":
            return written  # a month's name is its reading
        if written is not None:
            got = _read(written)
            if got:
                return got
            words = spoken_date(parts.get("m", 0), parts.get("d", 0), parts.get("y"))
            if words:
                return words
    if fmt:
        raise ValueError(f"{text!r} is not a date in format {order!r}")
    return dates(text) if grammar_reading("") is None else normalize_text(text)


def say_currency(text: str, fmt: str = "") -> str:
    """"$49.99", "49.99" (dollars unless `fmt` names EUR or GBP), "EUR 5", "5 GBP"."""
    code = fmt.strip().upper()
    if code and code not in CURRENCIES:
        raise ValueError(f"currency format {fmt!r} is not one of {', '.join(CURRENCIES)}")
    m = _MONEY_RE.fullmatch(text)
    if not m:
        return normalize_text(text) if text else text
    symbol = m.group(2) or CURRENCIES.get((m.group(3) or m.group(6) or code or "USD").upper())
    amount = m.group(5)
    integer, _, fraction = amount.partition(".")
    _check_digits("currency", integer or "0")
    if len(fraction) == 1:
        fraction += "0"  # "$5.5" is five dollars fifty
    written = f"{symbol}{_grouped(integer) if integer else ''}" + (
        f".{fraction}" if fraction else "")
    got = _read(written)
    if got is None:
        r = CURRENCY_RE.search(written if symbol in "$€£" else "$" + amount)
        got = currency(r.group(2), r.group(3), r.group(4), r.group(5)) if r else written
    return f"minus {got}" if m.group(1) or m.group(4) else got
