"""English text normalization for call-center speech: the rule pipeline.

Order matters: dates and times before phone numbers (both hold dashes and digits),
money before plain numbers, units before plain numbers, abbreviations before sentence
splitting ("Dr." must not end a sentence).
"""

from __future__ import annotations

import re

from cosyvoiced.tts.frontend.normalize.en_calls import spell
from cosyvoiced.tts.frontend.normalize.en_dates import dates, times
from cosyvoiced.tts.frontend.normalize.en_numbers import (
    DIGIT_WORDS,
    cardinal,
    decimal_digits,
    digits,
    grouped_digits,
    money_and_percent,
    number,
    ordinals,
    plain_numbers,
    year,
)

PHONETIC = {
    "A": "Adam", "B": "boy", "C": "Charlie", "D": "David", "E": "Edward", "F": "Frank",
    "G": "George", "H": "Henry", "I": "Ida", "J": "John", "K": "king", "L": "Larry",
    "M": "Mary", "N": "Nancy", "O": "ocean", "P": "Peter", "Q": "queen", "R": "Robert",
    "S": "Sam", "T": "Tom", "U": "uncle", "V": "Victor", "W": "William", "X": "x-ray",
    "Y": "yellow", "Z": "zebra",
}
"""Call-center spelling words: "B, as in boy"."""

# -- phone numbers -----------------------------------------------------------------------
PHONE_RE = re.compile(
    r"(?<![\w-])(\+?1[-. ])?(\(\d{3}\)\s?|\d{3}[-. ])(\d{3})[-. ](\d{4})(?![\w-])")
TOLL_FREE_WORDS = {"800", "888", "877", "866", "855", "844", "833"}


def phone_number(raw: str) -> str:
    """Digits in groups with short pauses: "five five five, eight six seven, five three zero nine"."""
    ds = decimal_digits(raw)
    groups = [ds[-4:], ds[-7:-4], ds[-10:-7]][::-1]
    if len(ds) == 11:
        groups.insert(0, ds[0])
    elif len(ds) != 10:
        return ", ".join(digits(g) for g in re.findall(r"\d{1,4}", ds))
    return ", ".join(digits(g) for g in groups if g)


def _phone(m: re.Match[str]) -> str:
    return phone_number(m.group(0)) + ","


# -- confirmation codes --------------------------------------------------------------------
CODE_RE = re.compile(r"(?<![\w-])(?=[A-Z0-9-]*[A-Z])(?=[A-Z0-9-]*\d)[A-Z0-9]{2,}(?:-[A-Z0-9]+)*(?![\w-])")


def spell_code(code: str, *, phonetic: bool = True) -> str:
    """"B7X" -> "B, as in boy, seven, X, as in x-ray"; phonetic=False: "B, seven, X"."""
    parts = []
    for c in code.upper():
        if c.isdecimal():
            parts.append(DIGIT_WORDS[int(c)])
        elif c in PHONETIC:
            parts.append(f"{c}, as in {PHONETIC[c]}" if phonetic else c)
    return ", ".join(parts)


def _code(m: re.Match[str]) -> str:
    return spell(m.group(0))


def characters(text: str) -> str:
    """Letters and digits one by one: "AB1" -> "A, B, one"."""
    return spell_code("".join(c for c in text if c.isalnum()), phonetic=False)


# -- account, claim and order numbers -----------------------------------------------------
ID_RE = re.compile(
    r"\b((?:account|claim|policy|order|reference|member|ticket|case|invoice|tracking|"
    r"confirmation|routing|card|ID|PIN|extension)(?:\s+(?:number|no\.|#))?:?\s*#?)"
    r"(\d(?:[\d -]*\d)?)(?![\w.,]\d)", re.IGNORECASE)


def _id(m: re.Match[str]) -> str:
    return m.group(1).rstrip("#") + grouped_digits(m.group(2))


# -- abbreviations ---------------------------------------------------------------------------
ABBREVIATIONS = {
    "Mr.": "Mister", "Mrs.": "Missus", "Ms.": "Miz", "Jr.": "Junior", "Sr.": "Senior",
    "Ave.": "Avenue", "Blvd.": "Boulevard", "Rd.": "Road", "Apt.": "apartment",
    "Ste.": "suite", "Dept.": "department", "Inc.": "incorporated", "Corp.": "corporation",
    "Co.": "company", "Ltd.": "limited", "etc.": "et cetera", "vs.": "versus",
    "approx.": "approximately", "Mt.": "Mount", "Ft.": "Fort", "Hwy.": "highway",
    "ext.": "extension", "Ext.": "extension", "min.": "minutes", "hr.": "hour",
}
ABBR_RE = re.compile(r"(?<!\w)(" + "|".join(re.escape(a) for a in ABBREVIATIONS) + r")(?=\s|$|,)")
DR_RE = re.compile(r"\bDr\.(?=\s+[A-Z])")
ST_RE = re.compile(r"\bSt\.(?=\s+[A-Z])")
NO_RE = re.compile(r"\b(?:No|Nos|no)\.\s?(?=\d)|#(?=\d)")


def abbreviations(text: str) -> str:
    text = DR_RE.sub("Doctor", text)
    text = ST_RE.sub("Saint", text)
    text = re.sub(r"\bDr\.", "Drive", text)
    text = re.sub(r"\bSt\.", "Street", text)
    text = NO_RE.sub("number ", text)
    return ABBR_RE.sub(lambda m: ABBREVIATIONS[m.group(1)], text)


# -- units ---------------------------------------------------------------------------------
UNITS = {
    "kg": ("kilogram", "kilograms"), "g": ("gram", "grams"), "mg": ("milligram", "milligrams"),
    "lb": ("pound", "pounds"), "lbs": ("pound", "pounds"), "oz": ("ounce", "ounces"),
    "km": ("kilometer", "kilometers"), "m": ("meter", "meters"), "cm": ("centimeter", "centimeters"),
    "mm": ("millimeter", "millimeters"), "mi": ("mile", "miles"), "ft": ("foot", "feet"),
    "in": ("inch", "inches"), "mph": ("mile per hour", "miles per hour"),
    "km/h": ("kilometer per hour", "kilometers per hour"),
    "l": ("liter", "liters"), "ml": ("milliliter", "milliliters"), "gal": ("gallon", "gallons"),
    "KB": ("kilobyte", "kilobytes"), "MB": ("megabyte", "megabytes"),
    "GB": ("gigabyte", "gigabytes"), "TB": ("terabyte", "terabytes"),
    "Mbps": ("megabit per second", "megabits per second"),
    "ms": ("millisecond", "milliseconds"), "sec": ("second", "seconds"),
    "min": ("minute", "minutes"), "mins": ("minute", "minutes"), "hr": ("hour", "hours"),
    "hrs": ("hour", "hours"), "kWh": ("kilowatt hour", "kilowatt hours"),
    "°F": ("degree Fahrenheit", "degrees Fahrenheit"), "°C": ("degree Celsius", "degrees Celsius"),
}
AMBIGUOUS_UNITS = ("in", "m", "g", "l", "min", "sec")
"""Read as units only when no lowercase word follows ("5 in the box", "2 g of")."""
UNIT_RE = re.compile(
    r"(?<![\w.])(-?\d{1,3}(?:,\d{3})+(?:\.\d+)?|-?\d+(?:\.\d+)?)\s?("
    + "|".join(re.escape(u) for u in sorted(UNITS, key=len, reverse=True))
    + r")(?![\w/])(\s+[a-z])?")


def _unit(m: re.Match[str]) -> str:
    if m.group(3) and m.group(2) in AMBIGUOUS_UNITS:
        return m.group(0)
    one, many = UNITS[m.group(2)]
    value = m.group(1)
    return f"{number(value)} {one if value in ('1', '1.0') else many}{m.group(3) or ''}"


def units(text: str) -> str:
    return UNIT_RE.sub(_unit, text)


# -- symbols -------------------------------------------------------------------------------
SYMBOLS = (("&", " and "), ("@", " at "), ("+", " plus "), ("=", " equals "), ("°", " degrees "))


def symbols(text: str) -> str:
    for sym, words in SYMBOLS:
        text = text.replace(sym, words)
    text = re.sub(r"(?<=\w)/(?=\w)", " slash ", text)
    return re.sub(r"[ \t]{2,}", " ", text)


YEAR_RE = re.compile(
    r"\b((?:in|since|of|by|from|until|before|after|during|year|early|late|mid)\s+)"
    r"(1[89]\d\d|20\d\d)(s?)(?![\w,.]\d)", re.IGNORECASE)


def _year(m: re.Match[str]) -> str:
    words = year(int(m.group(2)))
    if m.group(3):  # "the 1990s": "nineteen nineties"
        words = words[:-1] + "ies" if words.endswith("y") else words + "s"
    return m.group(1) + words


def ranges(text: str) -> str:
    """"9-5" between plain numbers reads "9 to 5" (phone and dates are handled before)."""
    return re.sub(r"(?<![\w-])(\d+)\s?[-–]\s?(\d+)(?![\w-])", r"\1 to \2", text)


def normalize_en(text: str) -> str:
    """Written English to speakable English (numbers and symbols as words)."""
    text = text.replace("\u2019", "'")
    text = dates(text)
    text = times(text)
    text = PHONE_RE.sub(_phone, text)
    text = CODE_RE.sub(_code, text)
    text = ID_RE.sub(_id, text)
    text = money_and_percent(text)
    text = YEAR_RE.sub(_year, text)
    text = units(text)
    text = ordinals(text)
    text = abbreviations(text)
    text = ranges(text)
    text = plain_numbers(text)
    text = symbols(text)
    text = re.sub(r",\s*([,.!?;:])", r"\1", text)  # "nine,." after a trailing group
    return re.sub(r"\s+", " ", text).strip()


__all__ = ["normalize_en", "phone_number", "spell_code", "characters", "cardinal"]
