"""What call centers need beyond NeMo's grammars: readings decided before tagging.

Each rule finds its matches in the raw text and reads them itself; `en_read` leaves
what they cover alone and hands the rest to the grammars. Phone numbers in the groups
agents read (short pauses between them), account/order/card-ending/reference numbers
digit by digit, confirmation codes letter by letter ("Q X four four seven one B"; the
"Q as in Quebec" style only where asked), time zones and the street and office
abbreviations NeMo leaves as written, in full.
"""

from __future__ import annotations

import re
from collections.abc import Iterator

from cosyvoiced.tts.frontend.normalize.en_dates import spoken_date
from cosyvoiced.tts.frontend.normalize.en_numbers import (
    DIGIT_WORDS,
    cardinal,
    digits,
    grouped_digits,
    year,
)
from cosyvoiced.tts.frontend.segments import inline_phonemes

Claim = tuple[int, int, str]
"""(start, end, spoken) of a stretch of the input a rule reads."""

NATO = {
    "A": "Alpha", "B": "Bravo", "C": "Charlie", "D": "Delta", "E": "Echo", "F": "Foxtrot",
    "G": "Golf", "H": "Hotel", "I": "India", "J": "Juliett", "K": "Kilo", "L": "Lima",
    "M": "Mike", "N": "November", "O": "Oscar", "P": "Papa", "Q": "Quebec", "R": "Romeo",
    "S": "Sierra", "T": "Tango", "U": "Uniform", "V": "Victor", "W": "Whiskey", "X": "X-ray",
    "Y": "Yankee", "Z": "Zulu",
}
"""The "as in" words of the phonetic spelling style."""
LETTER_A = inline_phonemes("ˈeɪ")
"""The letter A alone: espeak-ng reads a lone "A" as the article."""

# -- phone numbers -----------------------------------------------------------------------
PHONE_RE = re.compile(
    r"(?<![\w+-])(\+?1[-. ]?)?(\(\d{3}\)[-. ]?|\d{3}[-. ])(\d{3})[-. ](\d{4})(?![\w-])"
    r"(?:,?\s*(?:ext\.?|x|extension)\s*(\d{1,6})\b)?", re.IGNORECASE)


def _group(ds: str) -> str:
    """An area code such as 800 reads "eight hundred", as agents (and NeMo) say it."""
    if len(ds) == 3 and ds.endswith("00") and ds[0] != "0":
        return f"{DIGIT_WORDS[int(ds[0])]} hundred"
    return digits(ds)


def phone(m: re.Match[str]) -> str:
    """"+1 (800) 555-0199 ext. 42" -> "plus one, eight hundred, five five five, zero one
    nine nine, extension four two"."""
    groups = []
    if m.group(1):
        groups.append("plus one" if m.group(1).startswith("+") else "one")
    groups.append(_group(re.sub(r"\D", "", m.group(2))))
    groups.append(digits(m.group(3)))
    groups.append(digits(m.group(4)))
    if m.group(5):
        groups.append("extension " + digits(m.group(5)))
    return ", ".join(groups)


# -- numbers read digit by digit in context ---------------------------------------------------
ID_RE = re.compile(
    r"\b(?:(?:account|claim|policy|order|reference|ref\.?|member(?:ship)?|subscriber|loyalty|"
    r"rewards|patient|employee|ticket|case|invoice|"
    r"tracking|confirmation|routing|card|ID|PIN|transaction|customer|serial|model|code|"
    r"P\.?\s?O\.?\s+Box)"
    r"(?:\s+(?:number|no\.|num\.|#|ID|code)(?:\s+(?:is|was|will\s+be))?)?:?\s*#?\s*|"
    r"(?:PIN|ZIP|passcode|OTP)(?:\s+(?:code|number))?(?:\s+(?:is|was))?:?\s*|"
    r"(?:ending|ends|ended)\s+(?:in|with)\s+|last\s+(?:four|4)(?:\s+digits)?(?:\s+of)?\s+)"
    r"((?:[*xX•]{2,}[ -]?)?\d(?:\d|[ -](?=\d))*\d)(?![\w.,]\d)", re.IGNORECASE)
"""A number named as an account, order, card-ending ... number; a mask before it
("****1234") is read with it, as its digits alone."""
HASH_RE = re.compile(r"(?<!#)#(?=[A-Z]*\d)")
"""'#' before a number or a code: "number"."""
EMERGENCY_RE = re.compile(r"(?<![\w.,-])(911|999|112)(?![\w-]|[.,]\d)")
"""Emergency numbers, read as dialled: "nine one one"."""


def id_number(written: str) -> str:
    """Digits one by one: in the groups written ("6620 1188 42"), or in groups of four
    when written as one long run; short pauses between groups."""
    written = written.lstrip("*xX• -")
    groups = re.split(r"[ -]", written)
    if len(groups) > 1:
        return ", ".join(digits(g) for g in groups)
    return grouped_digits(written)


# -- codes ---------------------------------------------------------------------------------
CODE_RE = re.compile(
    r"(?<![\w$.:/-])(?=[A-Z0-9-]*[A-Z])(?=[A-Z0-9-]*\d)[A-Z0-9]+(?:-[A-Z0-9]+)*(?![\w-]|\.\w)")
NOT_CODE_RE = re.compile(
    r"\d+(?:ST|ND|RD|TH|AM|PM|K|M|B|KB|MB|GB|TB|MP|HZ|KHZ|MHZ|GHZ|KG|LB|LBS|OZ|MM|CM|KM|FT|"
    r"MPH|D|S|V|W|KW|KWH|X)|[A-Z]\d{1,2}|[A-Z]{2,}-\d{1,2}|[1-4]Q\d\d", re.IGNORECASE)
"""Not read as codes (the grammars read them): 4GB, 10AM, 3D, B12, I95, COVID-19."""


CODE_CONTEXT_RE = re.compile(
    r"\b(?:code|reference|confirmation|booking|ticket|tracking|serial|model|voucher|coupon|"
    r"promo|PNR|locator|ID|OTP|passcode)(?:\s+(?:number|no\.|#|ID|code))?(?:\s+(?:is|was))?:?\s*#?"
    r"((?=[A-Za-z0-9-]*\d)[A-Za-z0-9]+(?:-[A-Za-z0-9]+)*)(?![\w-]|\.\w)", re.IGNORECASE)
"""A code named as one ("confirmation code QF8-2LM") is spelled whatever its shape."""


def spell(code: str, *, phonetic: bool = False) -> str:
    """"QX47B" -> "Q X four seven B"; phonetic: "Q as in Quebec, X as in X-ray, four,
    seven, B as in Bravo". The groups of a hyphenated code get short pauses ("C L M, two
    zero two four")."""
    groups = []
    for group in code.upper().split("-"):
        out = []
        for c in group:
            if c.isdecimal():
                out.append(DIGIT_WORDS[int(c)])
            elif c in NATO:
                letter = LETTER_A if c == "A" else c
                out.append(f"{letter} as in {NATO[c]}" if phonetic else letter)
        if out:
            groups.append((", " if phonetic else " ").join(out))
    return ", ".join(groups)


def _is_code(token: str) -> bool:
    """Letters in runs of one or two (a longer run is a word: 1-800-GO-U-HAUL), and a
    run of three digits or a digit first (B2A23C is NeMo's serial: "B two A twenty three
    C")."""
    alnum = token.replace("-", "")
    if len(alnum) < 3 or NOT_CODE_RE.fullmatch(token):
        return False
    if any(len(run) > 2 for run in re.findall(r"[A-Z]+", alnum)):
        return False
    return alnum[0].isdecimal() or any(len(r) >= 3 for r in re.findall(r"\d+", alnum))


# -- month/day dates -------------------------------------------------------------------------
SHORT_DATE_RE = re.compile(
    r"\b(?:on|by|expires?|expiring|until|till|before|after|due|from|through|thru|starting|"
    r"effective|since|of)\s+(?:(?:Mon|Tue|Tues|Wed|Thu|Thur|Thurs|Fri|Sat|Sun)[a-z]*\.?,?\s+)?"
    r"((0?[1-9]|1[0-2])/(0?[1-9]|[12]\d|3[01]))(?![\w/]|[.,]\d)", re.IGNORECASE)
""""expires 11/30": a month and day (the grammars read a fraction without a year)."""
MORE_DATES_RE = re.compile(
    r",?\s*(?:,|and|or|to|through|thru|[-–])\s*((0?[1-9]|1[0-2])/(0?[1-9]|[12]\d|3[01]))"
    r"(?![\w/]|[.,]\d)")
""""on 10/1 and 10/15": a month and day joined to one (not "ten fifteenths")."""
EXPIRY_RE = re.compile(
    r"\b(?:(?:card|Visa|Mastercard|Amex|Discover)\b[^.;!?/]{0,30}?\b(?:expires?|expiring|expired)"
    r"|expiry|expiration|exp\.|valid\s+(?:thru|through|until)|good\s+(?:thru|through))"
    r"(?:\s+(?:date|is|was|on|of))*:?\s+(0[1-9]|1[0-2])\s?/\s?(\d\d|20\d\d)(?![\w/]|[.,]\d)",
    re.IGNORECASE)
""""Your card expires 09/28": a card's MM/YY expiry, "oh nine, twenty eight", as printed
on the card (an offer that "expires 11/30" is a month and day)."""


def _two_digits(ds: str) -> str:
    """"09" -> "oh nine", "00" -> "oh oh", "28" -> "twenty eight"."""
    return f"oh {'oh' if ds[1] == '0' else DIGIT_WORDS[int(ds[1])]}" if ds[0] == "0" else (
        cardinal(int(ds)))


def expiry(month: str, yr: str) -> str:
    """("09", "28") -> "oh nine, twenty eight"; ("12", "2031") -> "twelve, twenty
    thirty one"."""
    return f"{_two_digits(month)}, {year(int(yr)) if len(yr) == 4 else _two_digits(yr)}"


# -- amounts before a noun -------------------------------------------------------------------
AMOUNT_NOUN_RE = re.compile(
    r"(?:\b([Aa]n?)\s+)?(?<![\w.,])([$€£])(\d{1,3}(?:,\d{3})+|\d+)(?![\d.,]\d|[\w%])"
    r"(?=\s+([a-z][a-z-]*))")
""""a $100 gift card", "the $25 late fee": an amount before a noun it describes."""
AMOUNT_NOUNS = frozenset((
    "fee fees charge charges credit gift deposit payment refund discount rebate bonus "
    "voucher coupon minimum limit fine surcharge late monthly annual yearly weekly daily "
    "one-time reward purchase order increase reduction bill plan balance statement fare "
    "ticket co-pay copay deductible premium upgrade cancellation activation service "
    "processing shipping restocking overdraft donation check cheque prepaid top-up "
    "difference value").split())
"""Nouns (and the adjectives of fees) an amount before them describes."""
NOT_NOUNS = frozenset((
    "a an the off or and per each in to for of on from plus more less back at with by "
    "worth is was will be thousand million billion trillion k m bn").split())
"""Words after "a $100" that make it a sum, not a describing word ("a $100 or more")."""
CURRENCY = {"$": "dollar", "€": "euro", "£": "pound"}


def _amount_before_noun(m: re.Match[str]) -> str | None:
    """The amount's reading with its currency in the singular ("one hundred dollar"), or
    None where it is a sum ("$25 to your account")."""
    noun = m.group(4)
    if noun in NOT_NOUNS or not (m.group(1) or noun in AMOUNT_NOUNS):
        return None
    return f"{cardinal(int(m.group(3).replace(',', '')))} {CURRENCY[m.group(2)]}"


# -- user names ------------------------------------------------------------------------------
USERNAME_RE = re.compile(
    r"\b(?:user\s?name|user\s+ID|login|handle|screen\s+name)(?:\s+(?:is|was|will\s+be))?"
    r":?\s+([A-Za-z]+)(\d+)(?![\w@-]|\.\w)", re.IGNORECASE)
""""username jsmith42": the letters as a word where they can be said, else an initial
and a name ("J smith") or letter by letter; the digits one by one, as typed."""
ONSETS = frozenset((
    "bl br ch cl cr dr dw fl fr gl gr gw kl kn kr ph pl pr qu sc sch scr sh shr sk sl sm sn "
    "sp sph spl spr squ st str sv sw th thr tr tw wh wr").split())
"""The consonants an English word can start with (a single one always can)."""


def _sayable(word: str) -> bool:
    w = word.lower()
    onset = re.match(r"[^aeiouy]*", w).group(0)  # type: ignore[union-attr]
    return (len(w) > 1 and onset != w and (len(onset) < 2 or onset in ONSETS)
            and not re.search(r"[^aeiouy]{4,}", w))


def username(letters: str, numbers: str) -> str:
    """("jsmith", "42") -> "J smith four two"; ("admin", "7") -> "admin seven"."""
    if _sayable(letters):
        said = letters.lower()
    elif len(letters) > 3 and _sayable(letters[1:]):
        said = f"{letters[0].upper()} {letters[1:].lower()}"
    else:
        said = spell(letters)
    return f"{said} {digits(numbers)}"


# -- ranges ---------------------------------------------------------------------------------
RANGE_RE = re.compile(
    r"(?<![\w.,$-])(\d{1,3})\s?[-–]\s?(\d{1,3})(?=\s+(?:business\s+|working\s+|calendar\s+)?"
    r"(?:days|weeks|months|years|hours|minutes|seconds|times|items|people|percent|"
    r"nights|calls|attempts|digits|characters|inches|feet|miles|pounds)\b)")
""""3-5 business days" -> "three to five business days" (NeMo says "three - five")."""
RANGE_AFTER_RE = re.compile(
    r"\b(?:pages|steps|sections|chapters|lines|rows|items|questions|options) "
    r"(\d{1,3})\s?[-–]\s?(\d{1,3})(?![\w-]|[.,]\d)", re.IGNORECASE)
""""pages 12-14": a range named before it."""
TIMES_RE = re.compile(r"(?<=\d )[x×](?= \d)|(?<=\d)×(?=\d)")
""""12 x 8 x 4 inches": "by"."""
ALWAYS_RE = re.compile(r"(?<![\w/])24/7(?![\w/])")
DAYS = {"Mon": "Monday", "Tue": "Tuesday", "Wed": "Wednesday", "Thu": "Thursday",
        "Fri": "Friday", "Sat": "Saturday", "Sun": "Sunday"}
DAY_RANGE_RE = re.compile(r"\b(Mon|Tue|Wed|Thu|Fri|Sat|Sun)\.?\s?[-–]\s?"
                          r"(Mon|Tue|Wed|Thu|Fri|Sat|Sun)\b\.?")
""""Mon-Fri": "Monday to Friday"."""
LETTER_NUMBER_RE = re.compile(r"(?<![\w$.:/-])([A-Z])-(\d{1,3})(?![\w-]|[.,]\d)")
""""error E-42": the letter, then the number ("E forty two")."""
CURRENCY_CODE_RE = re.compile(r"\b(USD|US\$)\s?(\d{1,3}(?:,\d{3})*|\d+)(?![\d.,]\d|[\w])")
""""USD 95": "ninety five US dollars" (whole amounts; the grammars leave "USD")."""


# -- time zones and abbreviations ------------------------------------------------------------
ZONES = {
    "EST": "Eastern Standard Time", "EDT": "Eastern Daylight Time", "ET": "Eastern Time",
    "CST": "Central Standard Time", "CDT": "Central Daylight Time", "CT": "Central Time",
    "MST": "Mountain Standard Time", "MDT": "Mountain Daylight Time", "MT": "Mountain Time",
    "PST": "Pacific Standard Time", "PDT": "Pacific Daylight Time", "PT": "Pacific Time",
    "AKST": "Alaska Standard Time", "HST": "Hawaii Standard Time", "UTC": "U T C",
    "GMT": "Greenwich Mean Time",
}
ZONE_RE = re.compile(r"\b(" + "|".join(z for z in ZONES if len(z) > 2) + r")\b|"
                     r"(?:(?<![A-Za-z])[AaPp]\.?[Mm]\.?|\d:\d\d)\s(ET|CT|MT|PT)\b")
"""Three- and four-letter zones anywhere; ET, CT, MT, PT only after a time."""
ABBREVIATIONS = {
    "Ave.": "Avenue", "Blvd.": "Boulevard", "Rd.": "Road", "Apt.": "apartment",
    "Ste.": "suite", "Dept.": "department", "Ln.": "Lane", "Ct.": "Court", "Hwy.": "highway",
    "Pkwy.": "Parkway", "ext.": "extension", "Ext.": "extension", "approx.": "approximately",
    "Jan.": "January", "Feb.": "February", "Mar.": "March", "Apr.": "April",
    "Aug.": "August", "Sep.": "September", "Sept.": "September", "Oct.": "October",
    "Nov.": "November", "Dec.": "December", "Mon.": "Monday", "Tue.": "Tuesday",
    "Wed.": "Wednesday", "Thu.": "Thursday", "Fri.": "Friday", "Sat.": "Saturday",
    "Sun.": "Sunday", "Tues.": "Tuesday", "Thur.": "Thursday", "Thurs.": "Thursday",
    "hrs.": "hours", "min.": "minutes", "mins.": "minutes",
}
MONTH_ABBR = frozenset(("Jan. Feb. Mar. Apr. Aug. Sep. Sept. Oct. Nov. Dec.").split())
ABBR_RE = re.compile(r"(?<![\w.])(" + "|".join(re.escape(a) for a in ABBREVIATIONS)
                     + r"|St\.)(?=\s|$|,|;)")


_DIGIT_AFTER = re.compile(r"\s*\d")
_DIGIT_BEFORE = re.compile(r"\d\s*$")
_NEXT_SENTENCE = re.compile(r"\s+[A-Z]")


def _street_or_saint(text: str, start: int, end: int) -> str:
    """"Main St." is a street; "St. Louis" (no name before it) a saint."""
    before = text[max(0, start - 40):start].rstrip()
    after = text[end:end + 40].lstrip()
    named_before = bool(re.search(r"[A-Z][a-z]+$|\d+(?:st|nd|rd|th)$", before))
    if not named_before and after[:1].isupper():
        return "Saint"
    return "Street"


def claims(text: str, *, phonetic: bool = False) -> Iterator[Claim]:
    """Every stretch of `text` these rules read, in order, never overlapping."""
    found: list[Claim] = []
    for m in ID_RE.finditer(text):  # before a phone number at the same place
        found.append((m.start(1), m.end(1), id_number(m.group(1))))
    for m in PHONE_RE.finditer(text):
        found.append((m.start(), m.end(), phone(m)))
    for m in CODE_CONTEXT_RE.finditer(text):
        if any(c.isalpha() for c in m.group(1)):
            found.append((m.start(1), m.end(1), spell(m.group(1), phonetic=phonetic)))
    for m in CODE_RE.finditer(text):
        if _is_code(m.group(0)):
            found.append((m.start(), m.end(), spell(m.group(0), phonetic=phonetic)))
    for m in HASH_RE.finditer(text):
        found.append((m.start(), m.end(), "number"))
    for m in EMERGENCY_RE.finditer(text):
        found.append((m.start(), m.end(), digits(m.group(1))))
    for m in USERNAME_RE.finditer(text):
        found.append((m.start(1), m.end(2), username(m.group(1), m.group(2))))
    for m in EXPIRY_RE.finditer(text):  # before a month and day at the same place
        found.append((m.start(1), m.end(2), expiry(m.group(1), m.group(2))))
    for m in SHORT_DATE_RE.finditer(text):
        date: re.Match[str] | None = m
        while date is not None:
            spoken = spoken_date(int(date.group(2)), int(date.group(3)), None)
            if not spoken:
                break
            found.append((date.start(1), date.end(1), spoken))
            date = MORE_DATES_RE.match(text, date.end(1))
    for m in AMOUNT_NOUN_RE.finditer(text):
        spoken = _amount_before_noun(m)
        if spoken:
            found.append((m.start(2), m.end(3), spoken))
    for m in RANGE_RE.finditer(text):
        found.append((m.start(), m.end(),
                      f"{cardinal(int(m.group(1)))} to {cardinal(int(m.group(2)))}"))
    for m in RANGE_AFTER_RE.finditer(text):
        found.append((m.start(1), m.end(),
                      f"{cardinal(int(m.group(1)))} to {cardinal(int(m.group(2)))}"))
    for m in TIMES_RE.finditer(text):
        found.append((m.start(), m.end(), "by"))
    for m in ALWAYS_RE.finditer(text):
        found.append((m.start(), m.end(), "twenty four seven"))
    for m in DAY_RANGE_RE.finditer(text):
        found.append((m.start(), m.end(), f"{DAYS[m.group(1)]} to {DAYS[m.group(2)]}"))
    for m in LETTER_NUMBER_RE.finditer(text):
        letter = LETTER_A if m.group(1) == "A" else m.group(1)
        found.append((m.start(), m.end(), f"{letter} {cardinal(int(m.group(2)))}"))
    for m in CURRENCY_CODE_RE.finditer(text):
        amount = int(m.group(2).replace(",", ""))
        found.append((m.start(), m.end(),
                      f"{cardinal(amount)} US dollar{'s' if amount != 1 else ''}"))
    for m in ZONE_RE.finditer(text):
        g = 1 if m.group(1) else 2
        found.append((m.start(g), m.end(g), ZONES[m.group(g)]))
    for m in ABBR_RE.finditer(text):
        word = m.group(1)
        if word in MONTH_ABBR and (_DIGIT_AFTER.match(text, m.end())
                                   or _DIGIT_BEFORE.search(text, max(0, m.start() - 8),
                                                           m.start())):
            continue  # a date: the grammars read it
        spoken = (_street_or_saint(text, m.start(), m.end()) if word == "St."
                  else ABBREVIATIONS[word])
        if word[0].islower() and _NEXT_SENTENCE.match(text, m.end()):
            spoken += "."  # "in 5 min. Thanks": it ends the sentence too
        found.append((m.start(), m.end(), spoken))
    found.sort(key=lambda c: c[0])  # stable: at one place, the rule found first wins
    end = 0
    for claim in found:  # the first (and longest) at a place wins
        if claim[0] >= end:
            yield claim
            end = claim[1]
