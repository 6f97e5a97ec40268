"""The scan engine: runs the detector table (`_pii_detectors`) over a text.

One pass decides what can be in the text. Every detector names trigger literals (`@`, `://`, key
prefixes, the stems of "born" and "password", ...) or a trigger regex; all of them go into one
hyperscan database, scanned once over the text's UTF-8 bytes, each group reporting at most once
(`HS_FLAG_SINGLEMATCH`). Only the detectors whose group fired run their exact Python patterns and
validators, and only where they can match: around each `@`, in runs of digits and phone/card
punctuation (not those inside hashes and UUIDs), in runs of hex digits and colons. Keys, tokens,
PEM blocks and e-mails are found first and blanked out, so nothing else looks for numbers or names
inside them.

Hyperscan is what the DESIGN table names for multi-pattern scanning; its wheels (0.9.1) install
without a compiler on Linux x86-64, macOS (Intel and ARM) and Windows, where it is a dependency of
the `[collector]` extra. Linux ARM has no wheel: there, and wherever it is not installed, the same
trigger literals are tested with `in` on the text (one C substring search each) — identical
results, slower on long texts. `backend()` says which one runs; `tests/test_anonymize.py` checks
that both find the same candidates.

What hyperscan does not do here: match the detectors' own patterns. They use look-behinds and
look-aheads (hyperscan has neither) and validators that need the whole match, and hyperscan
reports every end offset of a repeat, so porting them would move the work into Python callbacks.

`find(text)` returns candidates `(start, end, tier, rank, kind, key)`; the anonymizer picks
non-overlapping ones. `key` is the normalized value (same value, same pseudonym).
"""

from __future__ import annotations

import re
import threading
from collections.abc import Callable
from typing import cast

from ._pii_detectors import _EMAIL_AFTER, _EMAIL_BEFORE, _IBAN_LEFT, _IBAN_RIGHT, _NUMERIC_RUN, _RUN_TAIL, DETECTORS, Detector

Candidate = tuple[int, int, int, int, str, str]  # start, end, tier, rank, kind, key

# ---------------------------------------------------------------------------------------------
# Windows: where a windowed detector can match

_NO_DIGITS = str.maketrans("", "", "0123456789")


def _numeric_windows(text: str) -> list[tuple[int, int, str, int, bool]]:
    """(start, end, run text, digits in the run, inside a token) for runs of 7+ characters. A run
    inside a token (a letter before it, a letter or digit after it) is a hash, a UUID or base64
    for every numeric detector, but can still be the digits of an IBAN ("FR14 2004 ... 3M02 606")."""
    n = len(text)
    out = []
    for m in _NUMERIC_RUN.finditer(text):
        s, e = m.span()
        if e - s >= 7:
            run = m.group(0)
            inside = bool(s) and e < n and text[s - 1].isalpha() and text[e].isalnum()
            out.append((s, min(n, e + _RUN_TAIL), run, len(run) - len(run.translate(_NO_DIGITS)), inside))
    return out


_HEX_COLON_RUN = re.compile(r"[0-9A-Fa-f:.]{6,}")


def _hexcolon_windows(text: str) -> list[tuple[int, int]]:
    """Runs of hex digits, colons and dots with two or more colons (where an IPv6 address can be)."""
    n = len(text)
    return [(m.start(), min(n, m.end() + 1)) for m in _HEX_COLON_RUN.finditer(text) if m.group(0).count(":") >= 2]


def _at_windows(text: str) -> list[tuple[int, int]]:
    n = len(text)
    spans: list[tuple[int, int]] = []
    at = text.find("@")
    while at != -1:
        s, e = max(0, at - _EMAIL_BEFORE), min(n, at + _EMAIL_AFTER)
        if spans and s <= spans[-1][1]:
            spans[-1] = (spans[-1][0], e)
        else:
            spans.append((s, e))
        at = text.find("@", at + 1)
    return spans


# ---------------------------------------------------------------------------------------------
# Triggers: one pass for every detector

_TRIGGERED = tuple(d for d in DETECTORS if d.stems or d.trigger_pattern)
# Bit i is set when _TRIGGERED[i] may match; NUMERIC_BIT when the text has a run of 7+ digit characters.
_NUMERIC_BIT = 1 << len(_TRIGGERED)
_TEXT_BITS = _NUMERIC_BIT - 1
_NUMERIC_TRIGGER = r"[0-9(+][0-9 .()+\-/x]{5,}[0-9]"


def _python_triggers() -> Callable[[str], int]:
    """The fallback: each literal an `in` test (on the lowercased text for caseless detectors)."""
    tests: list[tuple[int, tuple[str, ...], bool, re.Pattern[str] | None]] = [
        (1 << i, d.stems, d.caseless, re.compile(d.trigger_pattern) if d.trigger_pattern else None)
        for i, d in enumerate(_TRIGGERED)
    ]
    numeric = re.compile(_NUMERIC_TRIGGER)

    def triggers(text: str) -> int:
        low = None
        bits = _NUMERIC_BIT if numeric.search(text) else 0
        for bit, stems, caseless, pattern in tests:
            if caseless:
                if low is None:
                    low = text.lower()
                hay = low
            else:
                hay = text
            if any(s in hay for s in stems) or (pattern is not None and pattern.search(text)):
                bits |= bit
        return bits

    return triggers


def _hyperscan_triggers() -> Callable[[str], int] | None:
    """One hyperscan block-mode database of every trigger; None when hyperscan is not installed."""
    try:
        import hyperscan
    except ImportError:
        return None
    exprs: list[bytes] = []
    ids: list[int] = []
    flags: list[int] = []
    single = hyperscan.HS_FLAG_SINGLEMATCH
    for i, d in enumerate(_TRIGGERED):
        for stem in d.stems:
            exprs.append(re.escape(stem).encode())
            ids.append(i)
            flags.append(single | (hyperscan.HS_FLAG_CASELESS if d.caseless else 0))
        if d.trigger_pattern:
            exprs.append(d.trigger_pattern.encode())
            ids.append(i)
            flags.append(single)
    exprs.append(_NUMERIC_TRIGGER.encode())
    ids.append(len(_TRIGGERED))
    flags.append(single)
    db = hyperscan.Database(mode=hyperscan.HS_MODE_BLOCK)
    db.compile(expressions=exprs, ids=ids, elements=len(exprs), flags=flags)
    local = threading.local()  # scratch space is per thread

    def append_id(id_: int, _from: int, _to: int, _flags: int, hits: list[int]) -> None:
        hits.append(id_)

    # hyperscan hands `context` (the list below) back to the handler as is; its stub types it `object`.
    on_match = cast("Callable[[int, int, int, int, object], None]", append_id)

    def triggers(text: str) -> int:
        scratch = getattr(local, "scratch", None)
        if scratch is None:
            scratch = local.scratch = hyperscan.Scratch(db)
        hits: list[int] = []
        db.scan(text.encode("utf-8", "surrogatepass"), match_event_handler=on_match, context=hits, scratch=scratch)
        bits = 0
        for i in hits:
            bits |= 1 << i
        return bits

    return triggers


_PY_TRIGGERS = _python_triggers()
_HS_TRIGGERS = _hyperscan_triggers()
_triggers = _HS_TRIGGERS or _PY_TRIGGERS


def backend() -> str:
    """`hyperscan` or `python`: what finds the triggers in this process."""
    return "hyperscan" if _triggers is _HS_TRIGGERS else "python"


def use_backend(name: str) -> None:
    """Switch the trigger backend (`hyperscan` or `python`); for tests and benchmarks."""
    global _triggers
    if name == "hyperscan" and _HS_TRIGGERS is None:
        raise RuntimeError("hyperscan is not installed: pip install 'looplift[collector]'")
    _triggers = _HS_TRIGGERS if name == "hyperscan" else _PY_TRIGGERS  # type: ignore[assignment]


# ---------------------------------------------------------------------------------------------
# Running the table


def _run(det: Detector, text: str, s: int, e: int, found: list[Candidate]) -> None:
    if det.spans is not None:
        for a, b, key in det.spans(text, s, e):
            found.append((a, b, det.tier, det.rank, det.kind, key))
        return
    pattern, validate = det.pattern, det.validate
    assert pattern is not None and validate is not None  # a detector without `spans` has both
    # finditer(text, pos, endpos) still lets lookbehinds see the characters before pos.
    for m in pattern.finditer(text, s, e):
        matched = validate(text, m)
        if matched is not None:
            found.append((m.start(), m.end(), det.tier, det.rank, det.kind, matched))


# Fixed-shape secrets and e-mails: found first, then blanked out so that no other detector (or the
# name model) looks for digits, colons or capitals inside a key, a token or an address.
_MASKED_KINDS = frozenset({"PRIVATE_KEY", "JWT", "API_KEY", "EMAIL"})
_FIRST = tuple((1 << i, d) for i, d in enumerate(_TRIGGERED)
               if d.scope != "numeric" and (d.kind in _MASKED_KINDS or d.kind == "URL_CREDENTIALS"))
_LATER = tuple((1 << i, d) for i, d in enumerate(_TRIGGERED)
               if d.scope != "numeric" and d.kind not in _MASKED_KINDS and d.kind != "URL_CREDENTIALS")
# Numeric detectors with trigger literals run only when theirs fired; the others on every run.
_NUM_DETS = tuple((1 << _TRIGGERED.index(d) if d in _TRIGGERED else _NUMERIC_BIT, d)
                  for d in DETECTORS if d.scope == "numeric")
# The numeric detectors a window with `nd` digits can hold (index min(nd, _MAX_ND)), worked out once:
# most windows are short and rule most detectors out before any Python call.
_MAX_ND = max(d.min_digits for _b, d in _NUM_DETS)
_NUM_BY_ND = tuple(tuple((bit, d, d.window_ok) for bit, d in _NUM_DETS if d.min_digits <= nd)
                   for nd in range(_MAX_ND + 1))
# An IBAN's country code and check digits, somewhere left of a run of digits.
_IBAN_HEAD = re.compile(r"[A-Z]{2}[0-9]{2}")
(_IBAN_DET,) = (d for d in DETECTORS if d.scope == "iban")


def find(text: str) -> list[Candidate]:
    """Every validated candidate of every detector, overlapping ones included."""
    return find_masked(text)[0]


def _mask(text: str, found: list[Candidate]) -> str:
    pieces, pos = [], 0
    for a, b, *_rest in sorted(c for c in found if c[4] in _MASKED_KINDS):
        if a >= pos:
            pieces.append(text[pos:a])
            pieces.append(" " * (b - a))
            pos = b
        elif b > pos:
            pieces.append(" " * (b - pos))
            pos = b
    pieces.append(text[pos:])
    return "".join(pieces)


def find_masked(text: str) -> tuple[list[Candidate], str]:
    """`find`, and `text` with the fixed-shape secrets and e-mails replaced by spaces (same length,
    same offsets) for detectors that come after."""
    found: list[Candidate] = []
    bits = _triggers(text)
    if bits & _TEXT_BITS:
        _run_fired(_FIRST, bits, text, found, _at_windows)
        if found:
            text = _mask(text, found)
        _run_fired(_LATER, bits, text, found, _hexcolon_windows)
    if bits & _NUMERIC_BIT:
        _scan_numbers(text, found, bits)
    return found, text


def _run_fired(dets: tuple[tuple[int, Detector], ...], bits: int, text: str, found: list[Candidate],
               windows: Callable[[str], list[tuple[int, int]]]) -> None:
    """Run the detectors whose trigger fired: over the whole text, or in their windows."""
    for bit, det in dets:
        if bits & bit:
            if det.scope == "text":
                _run(det, text, 0, len(text), found)
            else:
                for s, e in windows(text):
                    _run(det, text, s, e, found)


def _scan_numbers(text: str, found: list[Candidate], bits: int) -> None:
    """The numeric detectors in each run of digits, most specific first (IBAN, then the table's
    order). Once a candidate covers the whole run, the rest stop: what they could still find lies
    inside the run, is no longer and ranks lower, so `_select` would drop it (a phone number matched
    by seven patterns was validated seven times, context words and all)."""
    n = len(text)
    for s, e, w, nd, inside in _numeric_windows(text):
        run_end = s + len(w)
        if nd >= 8:  # IBAN: the country code is left of the digits
            if _IBAN_HEAD.search(text, max(0, s - _IBAN_LEFT), s + 4):
                k = len(found)
                _run(_IBAN_DET, text, max(0, s - _IBAN_LEFT), min(n, e + _IBAN_RIGHT), found)
                if len(found) > k and any(c[0] <= s and c[1] >= run_end for c in found[k:]):
                    continue
        # An ISO date (2024-06-02, the head of every log timestamp) is none of these kinds.
        if not inside and not (nd == 8 and len(w) == 10 and w[4] == "-" == w[7]):
            for bit, det, ok in _NUM_BY_ND[nd if nd < _MAX_ND else _MAX_ND]:
                if bits & bit and (ok is None or ok(w)):
                    k = len(found)
                    _run(det, text, s, e, found)
                    if len(found) > k and any(c[0] <= s and c[1] >= run_end for c in found[k:]):
                        break
