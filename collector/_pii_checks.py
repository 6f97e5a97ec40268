"""Value checks for the rule-based detectors: what a regex alone cannot decide about a candidate
value, looking at the value only (never at the text around it; that is `_pii_context`).

Luhn and issuer ranges for payment cards, ISO 13616 lengths and mod-97 for IBANs, calendar dates
(day-first and month-first, month names in six languages) for dates of birth, and whether a value
after a key-like name is a secret (entropy, character classes) or a placeholder, a template or code.
"""

from __future__ import annotations

import math
import re
from collections import Counter
from datetime import date

_NON_DIGITS = re.compile(r"[^0-9]+")


def _digits(s: str) -> str:
    return _NON_DIGITS.sub("", s)


def luhn_ok(digits: str) -> bool:
    total = 0
    for i, ch in enumerate(reversed(digits)):
        d = ord(ch) - 48
        if i % 2 == 1:
            d *= 2
            if d > 9:
                d -= 9
        total += d
    return total % 10 == 0


def card_iin_ok(d: str) -> bool:
    """Does the number start with an issuer prefix that issues numbers of this length?"""
    n = len(d)
    p2, p3, p4, p6 = int(d[:2]), int(d[:3]), int(d[:4]), int(d[:6])
    if d[0] == "4":
        return n in (13, 16, 19)  # Visa
    if 51 <= p2 <= 55 or 2221 <= p4 <= 2720:
        return n == 16  # Mastercard
    if p2 in (34, 37):
        return n == 15  # American Express
    if 300 <= p3 <= 305 or p2 in (36, 38, 39) or p4 == 3095:
        return 14 <= n <= 19  # Diners Club
    if p2 == 35:
        return 16 <= n <= 19  # JCB (assigned 3528-3589; test data uses all of 35xx)
    if p4 in (1800, 2131):
        return n == 15  # JCB (legacy 15-digit)
    if p4 == 6011 or 644 <= p3 <= 649 or p2 == 65 or 622126 <= p6 <= 622925:
        return 16 <= n <= 19  # Discover
    if 2200 <= p4 <= 2204:
        return 16 <= n <= 19  # Mir
    if p2 == 62 or p2 == 81:
        return 16 <= n <= 19  # UnionPay
    if p2 == 50 or 56 <= p2 <= 69:
        return 12 <= n <= 19  # Maestro (incl. 6304, 6759, 676x)
    if p4 == 9792:
        return n == 16  # Troy
    return False



#: IBAN length per country (ISO 13616 registry).
IBAN_LENGTHS = {
    "AD": 24, "AE": 23, "AL": 28, "AT": 20, "AZ": 28, "BA": 20, "BE": 16, "BG": 22, "BH": 22, "BI": 27, "BR": 29,
    "BY": 28, "CH": 21, "CR": 22, "CY": 28, "CZ": 24, "DE": 22, "DJ": 27, "DK": 18, "DO": 28, "EE": 20, "EG": 29,
    "ES": 24, "FI": 18, "FK": 18, "FO": 18, "FR": 27, "GB": 22, "GE": 22, "GI": 23, "GL": 18, "GR": 27, "GT": 28,
    "HR": 21, "HU": 28, "IE": 22, "IL": 23, "IQ": 23, "IS": 26, "IT": 27, "JO": 30, "KW": 30, "KZ": 20, "LB": 28,
    "LC": 32, "LI": 21, "LT": 20, "LU": 20, "LV": 21, "LY": 25, "MC": 27, "MD": 24, "ME": 22, "MK": 19, "MN": 20,
    "MR": 27, "MT": 31, "MU": 30, "NI": 28, "NL": 18, "NO": 15, "OM": 23, "PK": 24, "PL": 28, "PS": 29, "PT": 25,
    "QA": 29, "RO": 24, "RS": 22, "RU": 33, "SA": 24, "SC": 31, "SD": 18, "SE": 24, "SI": 19, "SK": 24, "SM": 27,
    "SO": 23, "ST": 25, "SV": 28, "TL": 23, "TN": 24, "TR": 26, "UA": 29, "VA": 22, "VG": 24, "XK": 20,
}


def iban_mod97(s: str) -> int:
    moved = s[4:] + s[:4]
    return int("".join(str(int(ch, 36)) for ch in moved)) % 97


_MONTHS = {
    m: i + 1 for i, names in enumerate([
        ("january", "jan", "januar", "janvier", "enero", "gennaio", "januari"),
        ("february", "feb", "februar", "février", "fevrier", "febrero", "febbraio", "februari"),
        ("march", "mar", "märz", "maerz", "mars", "marzo", "maart"),
        ("april", "apr", "avril", "abril", "aprile"),
        ("may", "mai", "mayo", "maggio", "mei"),
        ("june", "jun", "juni", "juin", "junio", "giugno"),
        ("july", "jul", "juli", "juillet", "julio", "luglio"),
        ("august", "aug", "août", "aout", "agosto", "augustus"),
        ("september", "sep", "sept", "septembre", "septiembre", "settembre"),
        ("october", "oct", "oktober", "octobre", "octubre", "ottobre", "okt"),
        ("november", "nov", "novembre", "noviembre"),
        ("december", "dec", "dezember", "décembre", "decembre", "diciembre", "dicembre", "dez"),
    ]) for m in names
}


def parse_date(s: str) -> tuple[int, int, int] | None:
    """(year, month, day) if `s` is a calendar date, trying day-first and month-first orders."""
    low = s.lower()
    nums = [int(x) for x in _NUMS.findall(low)]
    word = _WORD.search(_ORDINAL.sub("", low).replace("of", ""))
    cands: list[tuple[int, int, int]] = []
    if word:
        mon = _MONTHS.get(word.group(0))
        if mon is None or len(nums) != 2:
            return None
        day, year = (nums[0], nums[1]) if nums[1] > 31 else (nums[1], nums[0])
        cands.append((year, mon, day))
    elif len(nums) == 3:
        a, b, c = nums
        if _YEAR_FIRST.match(s):
            cands.append((a, b, c))
        else:
            year = c + (1900 if c >= 30 else 2000) if c < 100 else c
            cands += [(year, b, a), (year, a, b)]
    for y, mo, d in cands:
        try:
            dt = date(y, mo, d)
        except ValueError:
            continue
        # Years before the one this process started in are in the past without asking the clock.
        if _FIRST_DAY <= dt and (y < _START_YEAR or dt <= date.today()):
            return y, mo, d
    return None


_NUMS = re.compile(r"\d+")
_WORD = re.compile(r"[a-zäéû]+")
_ORDINAL = re.compile(r"\d+(?:st|nd|rd|th)")
_YEAR_FIRST = re.compile(r"\d{4}")
_FIRST_DAY = date(1900, 1, 1)
_START_YEAR = date.today().year




_DOTTED_IDENT = re.compile(r"^[A-Za-z_]\w*(?:\.[A-Za-z_]\w*)+$")
_PLACEHOLDER_VALUES = {"none", "null", "true", "false", "undefined", "nil", "empty", "required", "optional", "string",
                       "password", "secret", "token", "changeme", "example", "redacted", "hidden", "xxxxxx",
                       "default", "example_key", "your_api_key", "your-api-key"}


def shannon_entropy(s: str) -> float:
    n = len(s)
    return -sum(c / n * math.log2(c / n) for c in Counter(s).values())  # Counter counts in C


def _char_classes(s: str) -> int:
    return (any(c.islower() for c in s) + any(c.isupper() for c in s) + any(c.isdigit() for c in s)
            + any(not c.isalnum() for c in s))


def secret_value_ok(value: str, password_like: bool, quoted: bool = False) -> bool:
    """Is `value` (after a key-like name) a secret rather than code, a placeholder or a count?
    A quoted value may be a short mixed string ("k5v(6Rrp!"); an unquoted one must look random."""
    low = value.lower()
    if low in _PLACEHOLDER_VALUES or value.isdigit() or len(set(value)) <= 2:
        return False
    if _TEMPLATE_VALUE.match(value) or value.startswith(("os.", "process.", "env.", "self.", "http")):
        return False
    if _DOTTED_IDENT.match(value):  # config.secret, settings.API_KEY
        return False
    if password_like:
        # Any password is a secret, but "required" or "string" (schemas, docs) are not passwords.
        return _char_classes(value) >= 2 or len(value) >= 12
    if quoted and len(value) >= 8 and _char_classes(value) >= 3:
        return True
    if len(value) < 16:
        return False
    has_digit = any(c.isdigit() for c in value)
    has_alpha = any(c.isalpha() for c in value)
    if not (has_digit and has_alpha):
        return False
    return shannon_entropy(value) >= 3.0




_TEMPLATE_VALUE = re.compile(r"^(?:\$\{.*\}|\$[A-Z_][A-Z0-9_]*|%\(\w+\)s|\{\{.*\}\}|\*+|x+|X+|<.*>|\.\.\.)$")


def random_secret(value: str) -> bool:
    """A value that is a secret by its look alone: 8+ characters from 3+ classes (lower, upper,
    digit, punctuation) and 3+ bits of entropy per character (`k;X(2]v~Qz!`, not `a,b,c`)."""
    return len(value) >= 8 and _char_classes(value) >= 3 and shannon_entropy(value) >= 3.0
