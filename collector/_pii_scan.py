"""The scan engine: runs the detector table (`_pii_detectors`) over a text.

Speed comes from not running patterns where they cannot match: a cheap trigger per detector
(`"@" in text`, a key prefix, `"://"`), for the digit-based detectors a scan restricted to runs of
digits and phone/card punctuation (not those inside hashes and UUIDs), class-first patterns that
`re` can skip through in C, and masking: keys, tokens, PEM blocks and e-mails are found first and
blanked out, so nothing else looks for numbers or names inside them.

`find(text)` returns candidates `(start, end, tier, rank, kind, key)`; the anonymizer picks
non-overlapping ones. `key` is the normalized value (same value, same pseudonym).
"""

from __future__ import annotations

import re

from ._pii_detectors import _EMAIL_AFTER, _EMAIL_BEFORE, _IBAN_LEFT, _IBAN_RIGHT, _NUMERIC_RUN, _RUN_TAIL, DETECTORS, Detector

Candidate = tuple[int, int, int, int, str, str]  # start, end, tier, rank, kind, key

_NO_DIGITS = str.maketrans("", "", "0123456789")


def _numeric_windows(text: str) -> list[tuple[int, int, str, int]]:
    """(start, end, window text, digits in the run) for runs of 7+ characters."""
    n = len(text)
    out = []
    for m in _NUMERIC_RUN.finditer(text):
        s, e = m.span()
        if e - s >= 7:
            if s and e < n and text[s - 1].isalpha() and text[e].isalnum():
                continue  # inside a hash, UUID or base64 token: nothing can match there
            run = m.group(0)
            out.append((s, min(n, e + _RUN_TAIL), run, len(run) - len(run.translate(_NO_DIGITS))))
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


# The table, split by scope once. `find` is the hot path of every ingest, so it dispatches inline
# (a generic loop with a lambda per detector cost a third of the time on short strings).
_TEXT_DETS = tuple(d for d in DETECTORS if d.scope not in ("numeric", "iban"))
_NUM_DETS = tuple(d for d in DETECTORS if d.scope == "numeric")
(_IBAN_DET,) = (d for d in DETECTORS if d.scope == "iban")


def _run(det: Detector, text: str, s: int, e: int, found: list[Candidate]) -> None:
    if det.spans is not None:
        for a, b, key in det.spans(text, s, e):
            found.append((a, b, det.tier, det.rank, det.kind, key))
        return
    validate = det.validate
    # finditer(text, pos, endpos) still lets lookbehinds see the characters before pos.
    for m in det.pattern.finditer(text, s, e):  # type: ignore[union-attr]
        key = validate(text, m)  # type: ignore[misc]
        if key is not None:
            found.append((m.start(), m.end(), det.tier, det.rank, det.kind, key))


# Fixed-shape secrets and e-mails: found first, then blanked out so that no other detector (or the
# name model) looks for digits, colons or capitals inside a key, a token or an address.
_MASKED_KINDS = frozenset({"PRIVATE_KEY", "JWT", "API_KEY", "EMAIL"})
_FIRST_DETS = tuple(d for d in _TEXT_DETS if d.kind in _MASKED_KINDS or d.kind == "URL_CREDENTIALS")
_LATER_DETS = tuple(d for d in _TEXT_DETS if d not in _FIRST_DETS)


def find(text: str) -> list[Candidate]:
    """Every validated candidate of every detector, overlapping ones included."""
    return find_masked(text)[0]


def find_masked(text: str) -> tuple[list[Candidate], str]:
    """`find`, and `text` with the fixed-shape secrets and e-mails replaced by spaces (same length,
    same offsets) for detectors that come after."""
    found: list[Candidate] = []
    low = text.lower()
    for det in _FIRST_DETS:
        if det.trigger(text, low):
            if det.scope == "text":
                _run(det, text, 0, len(text), found)
            else:
                for s, e in _at_windows(text):
                    _run(det, text, s, e, found)
    if found:
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
        text = "".join(pieces)
        low = text.lower()
    for det in _LATER_DETS:
        if det.trigger(text, low):
            scope = det.scope
            if scope == "text":
                _run(det, text, 0, len(text), found)
            else:
                for s, e in _hexcolon_windows(text):
                    _run(det, text, s, e, found)
    n = len(text)
    for s, e, w, nd in _numeric_windows(text):
        for det in _NUM_DETS:
            if det.window_ok(w, nd):
                _run(det, text, s, e, found)
        if nd >= 8:  # IBAN: the country code is left of the digits
            left = text[max(0, s - _IBAN_LEFT):s + 4]
            if left != left.lower():
                _run(_IBAN_DET, text, max(0, s - _IBAN_LEFT), min(n, e + _IBAN_RIGHT), found)
    return found, text
