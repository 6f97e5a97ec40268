"""The rule-based detectors: one compiled pattern per format and a validator per kind.

Each `Detector` says where its values can be (`scope`), a cheap trigger that must hold for it to
run at all, and either a pattern plus a validator (which may look at the value, `_pii_checks`, and
at the words before it, `_pii_context`) or a function that yields spans itself (IBANs, dates of
birth here; PEM blocks, URL credentials and keyed secrets in `_pii_secrets`). The engine that runs
them is `_pii_scan`.
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import TypeAlias

from ._pii_checks import (
    IBAN_LENGTHS,
    _MONTHS,
    _digits,
    card_iin_ok,
    iban_mod97,
    luhn_ok,
    parse_date,
)
from ._pii_context import CARD_WORDS, PHONE_WORDS, SSN_CONTEXT, WORD_END, WORD_START, after_version_word, context
from ._pii_secrets import _pem_spans, _secret_spans, _url_cred_spans

_CARD_GROUPS = {(4, 4, 4, 4), (4, 6, 5), (4, 6, 4), (4, 4, 4, 4, 3), (4, 4, 4, 1), (4, 4, 4, 2), (4, 4, 4, 3),
                (4, 4, 5), (4, 4, 4), (4, 4, 4, 4, 1), (4, 4, 4, 4, 2), (4, 4, 4, 5), (6, 13), (4, 5, 5)}


def _card(text: str, m: re.Match[str]) -> str | None:
    s = m.group(0)
    digits = _digits(s)
    if not 12 <= len(digits) <= 19 or len(set(digits)) == 1:
        return None
    seps = {c for c in s if c in " -"}
    if len(seps) > 1:  # mixed separators are tables, not card numbers
        return None
    if seps:
        groups = tuple(len(g) for g in re.split(r"[ -]", s))
        if groups not in _CARD_GROUPS:
            return None
    if not (card_iin_ok(digits) and luhn_ok(digits)):
        return None
    if not seps and context(text, m.start(), m.end(), CARD_WORDS, strict=True) < 0:
        return None
    return digits


def _phone_intl(text: str, m: re.Match[str]) -> str | None:
    s = m.group(0)
    core = re.sub(r"(?i)\s*(?:x|ext\.?|extension|#)\s*\d+$", "", s)
    digits = _digits(core.replace("(0)", ""))
    if s.startswith("00"):
        digits = digits[2:]
        if not 9 <= len(digits) <= 15 or not re.search(r"[ .\-()/]", core):
            return None
    elif not 8 <= len(digits) <= 15:
        return None
    if context(text, m.start(), m.end(), PHONE_WORDS, strict=False) < 0:
        return None
    return "+" + digits + ("x" + _digits(s[len(core):]) if len(core) < len(s) else "")


def _phone_nanp(text: str, m: re.Match[str]) -> str | None:
    if context(text, m.start(), m.end(), PHONE_WORDS, strict=False) < 0:
        return None
    return _digits(m.group(0))


def _phone_national(text: str, m: re.Match[str]) -> str | None:
    s = m.group(0)
    core = re.sub(r"(?i)\s*(?:x|ext\.?|extension|#)\s*\d+$", "", s)
    digits = _digits(core)
    # 9-12 digits; 13 with the area code in brackets ("(0929) 599013305": German numbers run long).
    if not 9 <= len(digits) <= (13 if core.startswith("(") else 12) or not re.search(r"[ .\-()/]", core):
        return None
    if _DATE_PREFIX.match(core):  # 05/06/2024 10
        return None
    if context(text, m.start(), m.end(), PHONE_WORDS, strict=False) < 0:
        return None
    return digits


_DATE_PREFIX = re.compile(r"\(?\d{1,2}([./-])\d{1,2}\1\d{2,4}")


_SEQUENTIAL = ("0123456789", "1234567890", "9876543210", "0987654321")


# Without context: a trunk 0 (9-12 digits: 0508899579), or 9-10 digits not starting with 0 or 1
# (NANP 8209679701, IT mobiles 3711766726, GR 2101825968, ES/PT/PL/CZ 957275130), or an Italian
# mobile of 11. Epoch seconds start with 1, so they stay; 8 digits (DK/NO) need a phone word:
# bare, they are dates (20240115) and ids as often as phones.
_BARE_PHONE = re.compile(r"0[1-9][0-9]{7,10}|[2-9][0-9]{8,9}|3[0-9]{10}")


def _trivial(digits: str) -> bool:
    """Two distinct digits at most, or all ten in a row (0123456789, 9876543210, ...): a placeholder, not a phone."""
    return len(set(digits)) <= 2 or any(q in digits for q in _SEQUENTIAL)


def _phone_bare(text: str, m: re.Match[str]) -> str | None:
    """Unformatted digits: a national number with a trunk 0 (9-12 digits) or a valid NANP number,
    unless introduced as something else; any 8-12 digits when introduced as a phone number."""
    s = m.group(0)
    digits = _digits(s)
    if _trivial(digits):
        return None
    ctx = context(text, m.start(), m.end(), PHONE_WORDS, strict=True)
    number = re.match(r"[0-9]+", s)  # without the extension
    if ctx > 0 or (ctx == 0 and number is not None and _BARE_PHONE.fullmatch(number.group(0))):
        return digits
    return None


_UNIT_AFTER = re.compile(r"\s?(?:€|\$|%|eur|usd|gbp|chf|pln|czk|sek|nok|dkk|kr|zł|km|kg|m|ms|s|mb|gb|kb|bytes|"
                         r"people|users|rows|items|inhabitants|habitants|einwohner)\b", re.IGNORECASE)


def _phone_grouped(text: str, m: re.Match[str]) -> str | None:
    if _UNIT_AFTER.match(text, m.end()) or text[max(0, m.start() - 2):m.start()].strip() in ("$", "€", "£"):
        return None
    if context(text, m.start(), m.end(), PHONE_WORDS, strict=False) < 0:
        return None
    return _digits(m.group(0))


_YEAR = re.compile(r"(?:19|20)[0-9]{2}")
_SHAPED_SEP = re.compile(r"[^0-9]+")
_ISO_DATE = re.compile(r"(?:19|20)[0-9]{2}([-/ ])[01]?[0-9]\1[0-3]?[0-9]")


def _phone_shaped(text: str, m: re.Match[str]) -> str | None:
    """Groups of digits the way numbers are written across Europe and the Americas, without a phone
    word: `63 822 392`, `8437-4387`, `5863-183-936`, `(3421)-4517`, `+(370) 95896935`, `92 3464-6869`,
    `06/ 981 98 46`. 8-13 digits; not a date, a year range, an amount (a unit or currency next to it)
    or an id/operand (`context`)."""
    s = m.group(0)
    digits = _digits(s)
    if not 8 <= len(digits) <= 13 or _trivial(digits):
        return None
    groups = _SHAPED_SEP.split(s.strip("(+)"))
    if len(groups) == 2 and (all(_YEAR.fullmatch(g) for g in groups)  # 2019-2024, 1990 2000
                             or (min(map(len, groups)) < 4 and "(" not in s)):  # a Brazilian CEP: 62226-290
        return None
    if _DATE_PREFIX.match(s) or _ISO_DATE.match(s):
        return None
    grouped = _phone_grouped(text, m)  # not an amount, not introduced as something else
    return None if grouped is None else ("+" if s.startswith(("+", "(+")) else "") + grouped


def _phone_announced(text: str, m: re.Match[str]) -> str | None:
    digits = _digits(m.group(0))
    if not 7 <= len(digits) <= 12 or context(text, m.start(), m.end(), PHONE_WORDS, strict=False) <= 0:
        return None
    return digits


_NOT_PERSONAL_IPV4 = frozenset({"0.0.0.0", "255.255.255.255", "127.0.0.1"})


def _ipv4(text: str, m: re.Match[str]) -> str | None:
    if m.group(0) in _NOT_PERSONAL_IPV4:
        return None
    if after_version_word(text, m.start()):  # "version 1.2.3.4", but not "server 10.2.3.4"
        return None
    return m.group(0)


def _ipv6(text: str, m: re.Match[str]) -> str | None:
    s = m.group(0)
    try:
        addr = ipaddress.IPv6Address(s)
    except ValueError:
        return None
    if addr.is_loopback or addr.is_unspecified:
        return None
    groups = [g for g in s.split(":") if g]
    # Python slices (`a[1::2]`) are valid compressed IPv6 literals; real addresses have more
    # groups or hex letters / full 4-digit groups.
    if len(groups) < 3 and not any(len(g) == 4 or re.search(r"[a-fA-F]", g) for g in groups):
        return None
    return addr.compressed





def _iban_spans(text: str, start: int, end: int) -> Iterable[tuple[int, int, str]]:
    for m in _IBAN.finditer(text, start, end):
        country = m.group(1)
        length = IBAN_LENGTHS.get(country)
        if length is None:
            continue
        # Take exactly `length` alphanumerics (spaces allowed between them): the regex may run on
        # into a following uppercase word.
        s, i, got = m.start(), m.start(), 0
        while i < m.end() and got < length:
            if text[i] != " ":
                got += 1
            elif text[i - 1] == " ":  # one space between groups at most
                break
            i += 1
        if got != length or (i < len(text) and text[i].isalnum()):
            continue
        compact = text[s:i].replace(" ", "")
        if iban_mod97(compact) == 1:
            yield s, i, compact


# Class first, lookbehind after the country code: lets `re` skip ahead in C.
_IBAN = re.compile(r"([A-Z]{2})(?<![A-Za-z0-9][A-Z]{2})[0-9]{2}[ A-Z0-9]{11,40}")


def _ssn(text: str, m: re.Match[str]) -> str | None:
    s = m.group(0)
    d = _digits(s)
    area, group, serial = int(d[:3]), int(d[3:5]), int(d[5:])
    if area == 0 or area == 666 or area >= 900 or group == 0 or serial == 0:
        return None
    if d in ("123456789", "111111111", "078051120", "219099999"):  # samples, not people
        return None
    sep = s[3] if not s[3].isdigit() else ""
    if sep != "-":  # "123 45 6789" and bare nine digits only when called an SSN
        if not SSN_CONTEXT.search(text, max(0, m.start() - 40), m.start()):
            return None
    return d



#: A prefix tree of words: each character maps to the rest; the key "" marks the end of a word.
_Trie: TypeAlias = "dict[str, _Trie]"


def _trie_regex(words: Iterable[str]) -> str:
    """An alternation of `words` as a prefix tree: `jan(?:uar(?:y|i)?|vier)?` instead of 75
    branches tried one by one at every letter of the text (the month names made DOB the slowest
    detector). Longer words are preferred, like a longest-first alternation."""
    trie: _Trie = {}
    for w in words:
        node = trie
        for ch in w:
            node = node.setdefault(ch, {})
        node[""] = {}

    def build(node: _Trie) -> str:
        alts = [re.escape(ch) + build(child) for ch, child in sorted(node.items()) if ch]
        if not alts:
            return ""
        body = alts[0] if len(alts) == 1 else "(?:" + "|".join(alts) + ")"
        return "(?:" + body + ")?" if "" in node else body

    return build(trie)


_MONTH_RE = _trie_regex(_MONTHS)
_DATE = (
    r"(?P<date>\d{4}[-/.]\d{1,2}[-/.]\d{1,2}"
    r"|\d{1,2}[-/.]\d{1,2}[-/.](?:\d{4}|\d{2})"
    r"|\d{1,2}(?:st|nd|rd|th)?\.?\s(?:of\s)?(?:" + _MONTH_RE + r")\.?,?\s\d{4}"
    r"|(?:" + _MONTH_RE + r")\.?\s\d{1,2}(?:st|nd|rd|th)?,?\s\d{4})(?![\w/.-]\d|\d)"
)
# The keywords as whole words ("born", not "stubborn"; "dob" in `patient_dob` and `DOB:`), then up
# to 32 characters that are no digit and no line break, then the date. Runs only in windows around
# trigger substrings, so case-insensitive matching on the original text (camelCase keys) is cheap.
_DOB = re.compile(
    WORD_START + r"(?:born|d\.?o\.?b\.?|date[ _-]?of[ _-]?birth|birth[ _-]?date|birthday|geburtsdatum|geburtstag|"
    r"geboren|date de naissance|n[ée]e? le|anniversaire|fecha de nacimiento|nacid[oa]|cumpleaños|data di nascita|"
    r"nat[oa] il|compleanno|geboortedatum|verjaardag|födelsedag|fødselsdag|fødselsdato|syntymäpäivä|"
    r"data urodzenia|urodzony|urodzona|data de nascimento|nascid[oa])" + WORD_END + r"[^\n\d]{0,32}?" + _DATE,
    re.IGNORECASE,
)

# The date first, then the keyword (German word order: "am 3. März 1958 geboren").
_DOB_AFTER = re.compile(
    r"(?<![\w/.-])" + _DATE + r"[^\n\d]{0,12}?" + WORD_START + r"(?:geboren|born|nacid[oa]|n[ée]e?|nat[oa])" + WORD_END,
    re.IGNORECASE,
)

# Substrings one of the DOB keywords must contain: a plain `in` test per trigger is far cheaper than
# running the keyword alternation at every position of a text that has none (most texts).
_DOB_TRIGGERS = ("born", "dob", "d.o", "do.b", "birth", "geburt", "geboren", "naissance", "né le", "ne le",
                 "née le", "nee le", "nacimiento", "nacid", "nascita", "nato il", "nata il", "geboorte", "anniversaire",
                 "cumplea", "compleanno", "verjaardag", "födelsedag", "fødselsd", "syntymä", "urodz", "nascimento",
                 "nascid")


# All of them in one pass (leftmost-longest is not needed: any occurrence opens a window).
_DOB_TRIGGER_RE = re.compile("|".join(re.escape(t) for t in sorted(_DOB_TRIGGERS, key=len, reverse=True)))


def _dob_spans(text: str, start: int, end: int) -> Iterable[tuple[int, int, str]]:
    low = text.lower()
    # The regex runs only in windows around trigger occurrences (a keyword starts at most 16
    # characters before its trigger; keyword, gap and date end within 96 after it).
    windows = [[max(start, m.start() - 16), min(end, m.end() + 96)] for m in _DOB_TRIGGER_RE.finditer(low, start, end)]
    if not windows:
        return
    merged = [windows[0]]
    for w in windows[1:]:
        if w[0] <= merged[-1][1]:
            merged[-1][1] = max(merged[-1][1], w[1])
        else:
            merged.append(w)
    for w_start, w_end in merged:
        for m in _DOB_AFTER.finditer(text, max(start, w_start - 48), w_end):
            parsed = parse_date(m.group("date"))
            if parsed is not None:
                yield m.start("date"), m.end("date"), "%04d-%02d-%02d" % parsed
        for m in _DOB.finditer(text, w_start, w_end):
            parsed = parse_date(m.group("date"))
            if parsed is not None:
                yield m.start("date"), m.end("date"), "%04d-%02d-%02d" % parsed



# ---------------------------------------------------------------------------------------------
# The detector table


@dataclass(frozen=True)
class Detector:
    kind: str
    # Either a pattern and a validator, or a function yielding (start, end, key) in a range.
    pattern: re.Pattern[str] | None
    validate: Callable[[str, re.Match[str]], str | None] | None
    # Literals one of which the text must contain for the detector to run (empty: always runs
    # where its scope says); matched ignoring ASCII case if `caseless`. `_pii_scan` looks for all
    # of them in one pass.
    stems: tuple[str, ...]
    rank: int
    # Where to look: "text" (the whole string, if `trigger` passes), "numeric" (only inside runs
    # of digits and phone/card/IP punctuation), "iban" (numeric runs widened to the left for the
    # country code and letters), "at" (only around each "@").
    scope: str = "text"
    # For numeric scopes: the fewest digits the window must hold, and a cheap test on its text.
    min_digits: int = 0
    window_ok: Callable[[str], bool] | None = None
    spans: Callable[[str, int, int], Iterable[tuple[int, int, str]]] | None = None
    tier: int = 1
    caseless: bool = False
    # Also run when this regex (valid for hyperscan and `re` alike) matches somewhere.
    trigger_pattern: str | None = None


# ASCII classes on purpose: `[0-9]` lets the regex engine skip ahead in C, `\d` does not (3x).
_NUMERIC_RUN = re.compile(r"[0-9(+][0-9 .()+\-/x]*[0-9]")
_EMAIL_BEFORE, _EMAIL_AFTER = 66, 260
_RUN_TAIL = 3
_IBAN_LEFT, _IBAN_RIGHT = 34, 8
_KEY_STEMS = ("sk-", "sk_live_", "rk_live_", "ghp_", "gho_", "ghu_", "ghs_", "ghr_", "github_pat_", "glpat-", "AKIA",
              "ASIA", "xox", "AIza", "hf_", "npm_", "pypi-")
_DOB_STEMS = ("born", "dob", "d.o.b", "birth", "geb", "naiss", "né", "Né", "NÉ", "nacim", "nacid", "nasc", "nato", "nata",
              "anniversaire", "cumplea", "compleanno", "verjaardag", "dselsda", "syntym", "urodz")
# Substrings of the words that introduce a phone number (`_pii_context.PHONE_WORDS`).
_PHONE_STEMS = ("tel", "tél", "tlf", "phone", "ph", "mob", "cell", "fax", "call", "contact", "reach", "sms", "text",
                "whats", "dial", "handy", "móvil", "movil", "numéro", "nummer", "número", "numero", "line", "portable",
                "number")
_SECRET_STEMS = ("key", "secret", "token", "pass", "pwd", "credential", "session", "cookie", "bearer", "basic", "mysql",
                 "mariadb", "contrase", "wachtwoord")


_OCTET = r"(?:25[0-5]|2[0-4][0-9]|1[0-9][0-9]|[1-9]?[0-9])"
_EXT = r"(?:\s?(?:x|ext\.?|extension|#)\s?[0-9]{1,6})?"


def _same(_text: str, m: re.Match[str]) -> str | None:
    return m.group(0)


def _lower(_text: str, m: re.Match[str]) -> str | None:
    return m.group(0).lower()


DETECTORS: tuple[Detector, ...] = (
    # From BEGIN to the matching END line; a truncated block (no END) must still not leak its base64.
    Detector("PRIVATE_KEY", None, None, ("PRIVATE KEY-----",), 0, spans=_pem_spans),
    # Credentials inside a URL: only `user:password` is replaced, scheme and host stay. Tier 0: it
    # wins over the e-mail-looking `password@host` it overlaps.
    Detector("URL_CREDENTIALS", None, None, ("://",), 2, spans=_url_cred_spans, tier=0),
    Detector(
        "JWT",
        re.compile(r"eyJ(?<![A-Za-z0-9_-]eyJ)[A-Za-z0-9_-]{5,}\.[A-Za-z0-9_-]{5,}\.[A-Za-z0-9_-]{5,}"),
        _same, ("eyJ",), 3,
    ),
    Detector(
        "API_KEY",
        re.compile(
            r"(?<![A-Za-z0-9_-])(?:"
            r"sk-[A-Za-z0-9_-]{20,}"  # OpenAI (sk-, sk-proj-), Anthropic (sk-ant-)
            r"|(?:sk|rk)_live_[A-Za-z0-9]{20,}"  # Stripe secret / restricted keys
            r"|gh[pousr]_[A-Za-z0-9]{30,}"  # GitHub classic tokens
            r"|github_pat_[A-Za-z0-9_]{22,}"  # GitHub fine-grained tokens
            r"|glpat-[A-Za-z0-9_-]{20,}"  # GitLab
            r"|(?:AKIA|ASIA)[0-9A-Z]{16}(?![0-9A-Za-z])"  # AWS access key ids
            r"|xox[abpr]-[A-Za-z0-9-]{10,}"  # Slack
            r"|AIza[0-9A-Za-z_-]{35}"  # Google API keys
            r"|hf_[A-Za-z0-9]{30,}"  # Hugging Face
            r"|npm_[A-Za-z0-9]{36}"  # npm
            r"|pypi-[A-Za-z0-9_-]{50,}"  # PyPI
            r")"
        ),
        _same, _KEY_STEMS, 4,
    ),
    Detector(
        "EMAIL",
        re.compile(
            r"[A-Za-z0-9](?<![\w.%+-][A-Za-z0-9])[A-Za-z0-9._%+-]{0,63}@"
            r"(?:[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?\.)+[A-Za-z]{2,24}(?![\w-])"
        ),
        _lower, ("@",), 5, "at",
    ),
    Detector("IBAN", None, None, (), 6, "iban", spans=_iban_spans),
    Detector(
        "CREDIT_CARD",
        re.compile(r"[0-9](?<![\w.-][0-9])(?:[ -]?[0-9]){11,18}(?![\w-]|\.[0-9])"),
        _card, (), 7, "numeric", 12,
    ),
    Detector(
        "SSN",
        re.compile(r"[0-9](?<![\w.\-/+][0-9])[0-9]{2}([- ]?)[0-9]{2}\1[0-9]{4}(?![\w]|[.\-/][0-9])"),
        _ssn, (), 8, "numeric", 9,
    ),
    Detector("DOB", None, None, _DOB_STEMS, 9, spans=_dob_spans, caseless=True),
    Detector(
        "IPV6",
        re.compile(
            r"(?<![\w:.])(?:[0-9A-Fa-f]{0,4}:){2,7}(?:" + _OCTET + r"(?:\." + _OCTET + r"){3}|[0-9A-Fa-f]{1,4})?(?![\w:]|\.[0-9])"
        ),
        _ipv6, ("::",), 10, "hexcolon", trigger_pattern=r"[0-9A-Fa-f]{1,4}(?::[0-9A-Fa-f]{1,4}){3}",
    ),
    Detector(
        "IPV4",
        re.compile(r"(?<![\w.])" + _OCTET + r"(?:\." + _OCTET + r"){3}(?![\w]|\.[0-9])"),
        _ipv4, (), 11, "numeric", 4, lambda w: w.count(".") >= 3,
    ),
    # International: "+" or "00", a country code, then groups separated by single spaces, dots,
    # dashes or slashes, optionally "(0)", then an extension. The "+" must not follow an operand.
    Detector(
        "PHONE",
        re.compile(
            r"(?<![\w)\]+\-./])(?:\+|00(?=[1-9]))[1-9][0-9]{0,2}(?:[ .-]?\(0\))?(?:[ .\-/]?(?:\([0-9]{1,5}\)|[0-9]{1,6})){1,7}"
            + _EXT + r"(?![\w+*/=^%]|[.-][0-9])"
        ),
        _phone_intl, (), 12, "numeric", 8, lambda w: "+" in w or "00" in w,
    ),
    # North American: (555) 123-4567, 555-123-4567, 555.123.4567, 555 123 4567, 1-800-555-1234.
    # The 3-3-4 grouping keeps dates, versions and serials out.
    Detector(
        "PHONE",
        re.compile(
            r"(?<![\w+.\-/*])(?:1[ .-])?(?:\([1-9][0-9]{2}\) ?|[1-9][0-9]{2}[-. ])[0-9]{3}[-. ][0-9]{4}" + _EXT
            + r"(?![\w]|[.\-/][0-9])"
        ),
        _phone_nanp, (), 13, "numeric", 10, lambda w: len(w) >= 12,
    ),
    # National with a trunk 0: 020 7946 0958, (0113) 496 0123, 05 36 84 33 53, 04952 883143, 08-246 820 34.
    Detector(
        "PHONE",
        re.compile(r"(?<![\w+.\-/*])(?:\(0[0-9]{1,4}\)|0[0-9]{1,4})(?:[ .\-/]?[0-9]{2,9}){1,4}" + _EXT
                   + r"(?![\w]|[.\-/][0-9])"),
        _phone_national, (), 14, "numeric", 9, lambda w: "0" in w and not w.isdigit(),
    ),
    # Grouped national numbers of countries without a trunk 0: 601 622 262 (CZ, SK, PL, PT),
    # 918-668-334, 21 45 17 27 (DK, NO), 912 34 56 78 (ES). Dropped after an id word, in code,
    # or before a unit or a currency ("601 622 262 EUR" is an amount written the French way).
    Detector(
        "PHONE",
        re.compile(r"(?<![\w+.\-/*])(?:[1-9][0-9]{2}([ .-])[0-9]{3}\1[0-9]{3}|[0-9]{2} [0-9]{2} [0-9]{2} [0-9]{2}"
                   r"|[1-9][0-9]{2} [0-9]{2} [0-9]{2} [0-9]{2})(?![\w]|[.,\-/][0-9]| [0-9])"),
        _phone_grouped, (), 15, "numeric", 8,
    ),
    # An area code in brackets without a trunk 0: (66) 6466-9295, (11) 98765-4321 (BR), (212) 5550148.
    Detector(
        "PHONE",
        re.compile(r"(?<![\w+.\-/*])\([1-9][0-9]{1,3}\) ?[0-9]{3,5}[ -]?[0-9]{4}" + _EXT + r"(?![\w]|[.\-/][0-9])"),
        _phone_grouped, (), 15, "numeric", 8, lambda w: "(" in w,
    ),
    # Other groupings with two to five groups of 2+ digits ("63 822 392", "8437-4387", "(3421)-4517",
    # "+(370) 95896935"); not a piece of a longer run of numbers (a table row, a grouped card).
    Detector(
        "PHONE",
        re.compile(r"(?<![\w+.\-/*])(?<![0-9][ -])(?:\+?\(\+?[0-9]{1,5}\)|[0-9]{2,5})"
                   r"(?:(?:[ \-]|/ ?|\)[ -]?)[0-9]{2,9}){1,4}(?![\w]|[.,\-/][0-9]| [0-9])"),
        _phone_shaped, (), 15, "numeric", 8, lambda w: "-" in w or " " in w or "/" in w or ")" in w,
    ),
    # Any other grouping of 7-12 digits, only when introduced as a phone number ("my new number is
    # 6321 4458", "Contact: ... | 0167.3644", "tel (0929) 599013305").
    Detector(
        "PHONE",
        re.compile(r"(?<![\w+.\-/*])(?:\([0-9]{1,5}\)|[0-9]{2,5})(?:[ .\-/][0-9](?=[ .\-/][0-9]))?"
                   r"(?:[ .\-/]?[0-9]{2,9}){1,4}" + _EXT
                   + r"(?![\w]|[.\-/][0-9])"),
        _phone_announced, _PHONE_STEMS, 15, "numeric", 7, caseless=True,
    ),
    # Unformatted: 01134960123 (UK), 0508899579 (DE/FR/IT), 8209679701 (NANP). Dropped when the
    # number is introduced as an id or count, assigned in code, or an arithmetic operand.
    Detector(
        "PHONE",
        re.compile(r"(?<![\w+.\-/*:#])[0-9]{8,12}" + _EXT + r"(?![\w]|[.\-/][0-9])"),
        _phone_bare, (), 16, "numeric", 9,
    ),
    # Secrets named by their key (last: known token formats above win ties).
    Detector("SECRET", None, None, _SECRET_STEMS, 17, spans=_secret_spans, caseless=True),
)

