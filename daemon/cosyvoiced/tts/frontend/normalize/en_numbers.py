"""English numbers: words for cardinals, ordinals, years, decimals, digits, money, percent.

num2words does the verbalizing; these helpers only shape its output for speech
(no commas or "and" inside a number, so a number never splits a clause).
"""

from __future__ import annotations

import re

from num2words import num2words

DIGIT_WORDS = ("zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine")
MAX_WORD_DIGITS = 36
"""Longest number read as words (up to "undecillion"); a longer one is read digit by digit
in groups. Far below what int() (4300 digits) and num2words (~10^300) refuse."""


def _clean(words: str) -> str:
    return words.replace(",", "").replace(" and ", " ").replace("-", " ")


def _too_long(n: int) -> bool:
    return abs(n) >= 10 ** MAX_WORD_DIGITS


def cardinal(n: int) -> str:
    """1250 -> "one thousand two hundred fifty"."""
    if n < 0:
        return "minus " + cardinal(-n)
    return grouped_digits(str(n)) if _too_long(n) else _clean(num2words(n))


def ordinal(n: int) -> str:
    """21 -> "twenty first"."""
    return grouped_digits(str(n)) if _too_long(n) else _clean(num2words(n, to="ordinal"))


def year(n: int) -> str:
    """2024 -> "twenty twenty four", 2005 -> "two thousand five", 1999 -> "nineteen ninety nine"."""
    return grouped_digits(str(n)) if _too_long(n) else _clean(num2words(n, to="year"))


def decimal_digits(s: str) -> str:
    """The decimal digits of `s` (any script: "٣" is three), without the rest ("²" is a
    superscript, not a digit: int() refuses it)."""
    return "".join(c for c in s if c.isdecimal())


def digits(s: str) -> str:
    """"4071" -> "four zero seven one" (non-digits dropped)."""
    return " ".join(DIGIT_WORDS[int(c)] for c in s if c.isdecimal())


def whole_number(ds: str) -> str:
    """A string of decimal digits read as a number: words, or digit groups when it is
    longer than `MAX_WORD_DIGITS` (never an int() of thousands of digits)."""
    return grouped_digits(ds) if len(ds) > MAX_WORD_DIGITS else cardinal(int(ds or "0"))


def ordinal_number(ds: str) -> str:
    """A string of decimal digits read as an ordinal ("21" -> "twenty first")."""
    return grouped_digits(ds) if len(ds) > MAX_WORD_DIGITS else ordinal(int(ds or "0"))


def grouped_digits(s: str, group: int = 4) -> str:
    """Long digit strings read in groups with short pauses: "one two three four, five six"."""
    ds = decimal_digits(s)
    if len(ds) <= group + 1:
        return digits(ds)
    chunks = [ds[i:i + group] for i in range(0, len(ds), group)]
    if len(chunks[-1]) == 1:  # never leave a lone digit at the end
        chunks[-2:] = [chunks[-2] + chunks[-1]]
    return ", ".join(digits(c) for c in chunks)


def number(s: str) -> str:
    """A written number, with thousands separators and optional decimals: "1,250.5"."""
    neg = s.startswith(("-", "−"))
    s = s.lstrip("-−").replace(",", "")
    whole, _, frac = s.partition(".")
    words = whole_number(whole)
    if frac:
        words += " point " + digits(frac)
    return ("minus " + words) if neg else words


CURRENCIES = {"$": ("dollar", "dollars", "cent", "cents"),
              "€": ("euro", "euros", "cent", "cents"),
              "£": ("pound", "pounds", "penny", "pence")}
SCALES = ("thousand", "million", "billion", "trillion")

_NUM = r"\d{1,3}(?:,\d{3})+|\d+"
CURRENCY_RE = re.compile(
    rf"(?<![\w.])(-?)([$€£])\s?({_NUM})(?:\.(\d{{1,2}}))?(?:\s?({'|'.join(SCALES)})\b)?")


def currency(symbol: str, whole: str, cents: str | None, scale: str | None = None) -> str:
    """("$", "1,250", "00") -> "one thousand two hundred fifty dollars"."""
    one, many, sub_one, sub_many = CURRENCIES[symbol]
    ds = whole.replace(",", "")
    if len(ds) > MAX_WORD_DIGITS:
        return f"{grouped_digits(ds)} {many}"
    n = int(ds)
    if scale:
        amount = number(whole + (f".{cents}" if cents else ""))
        return f"{amount} {scale} {many}"
    c = int(cents.ljust(2, "0")) if cents else 0
    parts = []
    if n or not c:
        parts.append(f"{cardinal(n)} {one if n == 1 else many}")
    if c:
        parts.append(f"{cardinal(c)} {sub_one if c == 1 else sub_many}")
    return " and ".join(parts)


def _currency_sub(m: re.Match[str]) -> str:
    words = currency(m.group(2), m.group(3), m.group(4), m.group(5))
    return ("minus " + words) if m.group(1) else words


PERCENT_RE = re.compile(rf"(?<![\w.])(-?(?:{_NUM})(?:\.\d+)?)\s?%")
ORDINAL_RE = re.compile(r"\b(\d+)(st|nd|rd|th)\b", re.IGNORECASE)
DECIMAL_RE = re.compile(rf"(?<![\w.])(-?(?:{_NUM})\.\d+)(?![\w.]\d)")
THOUSANDS_RE = re.compile(r"(?<![\w.,])(-?\d{1,3}(?:,\d{3})+)(?![\w,]\d)")
LONG_DIGITS_RE = re.compile(r"(?<![\w.,])(\d{5,})(?![\w.,]\d)")
INTEGER_RE = re.compile(r"(?<![\w.,])(-?\d+)(?![\w,]\d)")


def money_and_percent(text: str) -> str:
    text = CURRENCY_RE.sub(_currency_sub, text)
    return PERCENT_RE.sub(lambda m: number(m.group(1)) + " percent", text)


def ordinals(text: str) -> str:
    return ORDINAL_RE.sub(lambda m: ordinal_number(m.group(1)), text)


def plain_numbers(text: str) -> str:
    """Decimals, numbers with thousands separators, long digit strings (read as digits,
    as account and claim numbers are), then the remaining integers."""
    text = DECIMAL_RE.sub(lambda m: number(m.group(1)), text)
    text = THOUSANDS_RE.sub(lambda m: number(m.group(1)), text)
    text = LONG_DIGITS_RE.sub(lambda m: grouped_digits(m.group(1)), text)
    return INTEGER_RE.sub(lambda m: number(m.group(1)), text)
