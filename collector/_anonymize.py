"""Replace personal data and secrets in trajectories with consistent placeholders.

Runs on every ingest, before anything is stored. Detection is rule-based: one compiled regex per
entity kind, a validator where a regex alone over-fires (Luhn for cards, `ipaddress` for IPv6,
digit counts for phones), and a cheap trigger test so that text without an `@`, a digit or a key
prefix never reaches the expensive patterns. Overlapping candidates are resolved longest first,
then by how specific the kind is, so a card number is never half-replaced as a phone.

Within one trajectory the same value always becomes the same placeholder (`<EMAIL_1>` in the
prompt and in the tool output), so a trained model still sees that the two places are the same
entity. If anything was replaced, the per-turn token ids and logprobs are dropped: they encode the
original text and would leak it.

Deliberately not done: names, street addresses and other free-form PII (that needs an NER model;
rules would drown in false positives on code), reversible pseudonymization (the mapping would
itself be the PII), and detection of generic high-entropy strings (they are everywhere in code and
hashes).
"""

from __future__ import annotations

import bisect
import ipaddress
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from sdk._types import Trajectory

#: Metadata key set on a trajectory whose token ids/logprobs were dropped by the anonymizer.
TOKEN_IDS_REDACTED_KEY = "looplift_token_ids_redacted"

# Trajectory fields that are identifiers or enums, never free text: leaving them alone keeps ids
# joinable (feedback, tool_call_id) and the schema valid. Everything else that is a string is
# scanned, dict keys included.
_STRUCTURAL_KEYS = frozenset(
    {"id", "schema_version", "app", "model", "served_version", "role", "tool_call_id", "type",
     "finish_reason", "started_at", "finished_at", "message_index", "index", "turns"}
)


@dataclass(frozen=True)
class Entity:
    """One replaced span: its kind, where it was in the input text, and what replaced it.

    The original value is deliberately not kept; slice the input text if a caller needs it.
    """

    kind: str
    start: int
    end: int
    placeholder: str


@dataclass
class AnonymizerState:
    """Placeholder assignments shared by every string of one trajectory.

    Pass the same state to successive `anonymize_text` calls to get consistent placeholders.
    """

    placeholders: dict[tuple[str, str], str] = field(default_factory=dict)
    counters: dict[str, int] = field(default_factory=dict)

    def placeholder_for(self, kind: str, key: str) -> str:
        """The placeholder for `key` of `kind`, allocating the next number on first sight."""
        found = self.placeholders.get((kind, key))
        if found is None:
            n = self.counters.get(kind, 0) + 1
            self.counters[kind] = n
            found = f"<{kind}_{n}>"
            self.placeholders[(kind, key)] = found
        return found


# ---------------------------------------------------------------------------------------------
# Validators and normalizers. A validator returns the normalized key (same value -> same
# placeholder) or None to reject the candidate.


def _digits(s: str) -> str:
    return re.sub(r"\D", "", s)


def _luhn_ok(digits: str) -> bool:
    total = 0
    for i, ch in enumerate(reversed(digits)):
        d = ord(ch) - 48
        if i % 2 == 1:
            d *= 2
            if d > 9:
                d -= 9
        total += d
    return total % 10 == 0


def _card(s: str) -> str | None:
    digits = _digits(s)
    if not 13 <= len(digits) <= 19:
        return None
    # Mixed separators ("4111-1111 1111") are not how cards are written; they are how tables are.
    seps = {c for c in s if c in " -"}
    if len(seps) > 1:
        return None
    # Issuer prefixes (2-6) rule out millisecond/nanosecond timestamps and other long integers
    # that start with 1 and would otherwise pass Luhn one time in ten.
    if digits[0] not in "23456":
        return None
    if len(set(digits)) == 1:  # 0000000000000, 4444444444444: placeholders, not cards
        return None
    return digits if _luhn_ok(digits) else None


def _phone_intl(s: str) -> str | None:
    digits = _digits(s)
    return "+" + digits if 8 <= len(digits) <= 15 else None


def _phone(s: str) -> str | None:
    digits = _digits(s)
    return digits if 10 <= len(digits) <= 12 else None


def _ipv6(s: str) -> str | None:
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


def _lower(s: str) -> str | None:
    return s.lower()


def _same(s: str) -> str | None:
    return s


@dataclass(frozen=True)
class _Detector:
    kind: str
    pattern: re.Pattern[str]
    validate: Callable[[str], str | None]
    # Cheap pre-test on the whole string; skips the regex when it cannot match.
    trigger: Callable[[str], bool]
    # Lower is more specific; breaks ties between candidates of equal length.
    rank: int
    # Where to look: "text" (the whole string, if `trigger` passes), "numeric" (only inside runs
    # of digits and phone/card/IP punctuation), "at" (only around each "@").
    scope: str = "text"
    # For windowed scopes: a cheap test on the window's text before running the regex in it.
    window_ok: Callable[[str], bool] = lambda w: True


_HAS_DIGIT = re.compile(r"\d").search
# Runs of the characters phones, cards and IPv4 addresses are written with. Python's regex engine
# costs tens of ns per position and pattern, so the digit-based detectors run only inside these
# runs instead of each scanning the whole string (5x faster on code-heavy text).
_NUMERIC_RUN = re.compile(r"[\d(+][\d .()+\-]*\d")
# An email's local part is at most 64 characters, its domain at most 255.
_EMAIL_BEFORE, _EMAIL_AFTER = 66, 260
# Lookaheads in the numeric patterns inspect at most this many characters past a run.
_RUN_TAIL = 3
_KEY_PREFIX = re.compile(r"sk-|gh[pousr]_|github_pat_|AKIA|ASIA|xox[abpr]-").search

_OCTET = r"(?:25[0-5]|2[0-4]\d|1\d\d|[1-9]?\d)"
_PEM_BEGIN = r"-----BEGIN (?P<label>[A-Z0-9]+(?: [A-Z0-9]+)* )?PRIVATE KEY-----"

_DETECTORS: tuple[_Detector, ...] = (
    _Detector(
        "PRIVATE_KEY",
        re.compile(_PEM_BEGIN + r"[A-Za-z0-9+/=\s:,.\-]*?-----END (?P=label)?PRIVATE KEY-----"),
        _same, lambda t: "PRIVATE KEY-----" in t, 0,
    ),
    # A truncated block (no END line) must still not leak its base64 body.
    _Detector(
        "PRIVATE_KEY",
        re.compile(_PEM_BEGIN + r"(?:[A-Za-z0-9+/=]|\s)*"),
        _same, lambda t: "PRIVATE KEY-----" in t, 1,
    ),
    _Detector(
        "JWT",
        re.compile(r"(?<![A-Za-z0-9_-])eyJ[A-Za-z0-9_-]{5,}\.[A-Za-z0-9_-]{5,}\.[A-Za-z0-9_-]{5,}"),
        _same, lambda t: "eyJ" in t, 2,
    ),
    _Detector(
        "API_KEY",
        re.compile(
            r"(?<![A-Za-z0-9_-])(?:"
            r"sk-[A-Za-z0-9_-]{20,}"  # OpenAI (sk-, sk-proj-), Anthropic (sk-ant-)
            r"|gh[pousr]_[A-Za-z0-9]{30,}"  # GitHub classic tokens
            r"|github_pat_[A-Za-z0-9_]{22,}"  # GitHub fine-grained tokens
            r"|(?:AKIA|ASIA)[0-9A-Z]{16}(?![0-9A-Za-z])"  # AWS access key ids
            r"|xox[abpr]-[A-Za-z0-9-]{10,}"  # Slack
            r")"
        ),
        _same, lambda t: _KEY_PREFIX(t) is not None, 3,
    ),
    _Detector(
        "EMAIL",
        re.compile(
            r"(?<![\w.%+-])[A-Za-z0-9][A-Za-z0-9._%+-]{0,63}@"
            r"(?:[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?\.)+[A-Za-z]{2,24}(?![\w-])"
        ),
        _lower, lambda t: "@" in t, 4, "at",
    ),
    _Detector(
        "CREDIT_CARD",
        re.compile(r"(?<![\d.-])\d(?:[ -]?\d){12,18}(?![\d-]|\.\d)"),
        _card, _HAS_DIGIT, 5, "numeric", lambda w: len(w) >= 13,
    ),
    _Detector(
        "IPV6",
        re.compile(
            r"(?<![\w:.])(?:[0-9A-Fa-f]{0,4}:){2,7}(?:" + _OCTET + r"(?:\." + _OCTET + r"){3}|[0-9A-Fa-f]{1,4})?(?![\w:]|\.\d)"
        ),
        _ipv6, lambda t: "::" in t or t.count(":") >= 7, 6,
    ),
    _Detector(
        "IPV4",
        re.compile(r"(?<![\w.])" + _OCTET + r"(?:\." + _OCTET + r"){3}(?![\w]|\.\d)"),
        _same, lambda t: "." in t and _HAS_DIGIT(t) is not None, 7, "numeric", lambda w: w.count(".") >= 3,
    ),
    # International: "+" then 8-15 digits in groups separated by single spaces, dots or dashes,
    # optionally "(0)". The "+" must not follow an operand, so `37+58*2` never starts a match.
    _Detector(
        "PHONE",
        re.compile(
            r"(?<![\w)\]+])\+\d{1,3}(?:[ .-]?(?:\(\d{1,4}\)|\d{1,5})){1,6}(?![\w+*/=^%]|[.-]\d)"
        ),
        _phone_intl, lambda t: "+" in t, 8, "numeric", lambda w: "+" in w,
    ),
    # North American: (555) 123-4567, 555-123-4567, 555.123.4567, 1-800-555-1234. Area codes
    # start 2-9 (the NANP rule), which keeps dates and serials out.
    _Detector(
        "PHONE",
        re.compile(
            r"(?<![\w+.\-/*=])(?:1[ .-])?(?:\([2-9]\d{2}\) ?|[2-9]\d{2}[-. ])\d{3}[-. ]\d{4}(?![\w]|[.\-/]\d)"
        ),
        _phone, _HAS_DIGIT, 9, "numeric", lambda w: len(w) >= 12,
    ),
    # National with a trunk 0: 020 7946 0958, 030-1234-5678.
    _Detector(
        "PHONE",
        re.compile(r"(?<![\w+.\-/*=])\(?0\d{1,4}\)?[ -]\d{3,4}[ -]\d{3,4}(?![\w]|[.\-/]\d)"),
        _phone, _HAS_DIGIT, 10, "numeric", lambda w: len(w) >= 10 and "0" in w,
    ),
)


def _windows(text: str, scope: str) -> list[tuple[int, int]]:
    """Merged (start, end) windows of `text` where detectors of `scope` can match."""
    n = len(text)
    spans: list[tuple[int, int]] = []
    if scope == "numeric":
        for m in _NUMERIC_RUN.finditer(text):
            s, e = m.span()
            if e - s >= 7:  # "1.2.3.4" is the shortest thing these detectors accept
                spans.append((s, min(n, e + _RUN_TAIL)))
    elif scope == "at":
        at = text.find("@")
        while at != -1:
            s, e = max(0, at - _EMAIL_BEFORE), min(n, at + _EMAIL_AFTER)
            if spans and s <= spans[-1][1]:
                spans[-1] = (spans[-1][0], e)
            else:
                spans.append((s, e))
            at = text.find("@", at + 1)
    return spans


def _candidates(text: str) -> list[tuple[int, int, int, str, str]]:
    found: list[tuple[int, int, int, str, str]] = []
    windows: dict[str, list[tuple[int, int]]] = {}
    for det in _DETECTORS:
        if det.scope == "text":
            if det.trigger(text):
                matches = list(det.pattern.finditer(text))
            else:
                continue
        else:
            if det.scope not in windows:
                windows[det.scope] = _windows(text, det.scope) if det.trigger(text) else []
            # finditer(text, pos, endpos) still lets lookbehinds see the characters before pos.
            ok = det.window_ok
            matches = [m for s, e in windows[det.scope] if ok(text[s:e]) for m in det.pattern.finditer(text, s, e)]
        for m in matches:
            key = det.validate(m.group(0))
            if key is not None:
                found.append((m.start(), m.end(), det.rank, det.kind, key))
    return found


def _select(cands: list[tuple[int, int, int, str, str]]) -> list[tuple[int, int, int, str, str]]:
    """Non-overlapping spans: longest first, then most specific kind, then leftmost."""
    if len(cands) <= 1:
        return cands
    starts: list[int] = []  # accepted spans, sorted by start; they never overlap each other
    ends: list[int] = []
    chosen: list[tuple[int, int, int, str, str]] = []
    for c in sorted(cands, key=lambda c: (c[0] - c[1], c[2], c[0])):
        i = bisect.bisect_right(starts, c[0])
        # Only the neighbours can overlap: the span starting at or before c, and the one after.
        if (i > 0 and ends[i - 1] > c[0]) or (i < len(starts) and starts[i] < c[1]):
            continue
        starts.insert(i, c[0])
        ends.insert(i, c[1])
        chosen.append(c)
    chosen.sort()
    return chosen


def anonymize_text(text: str, state: AnonymizerState | None = None) -> tuple[str, list[Entity]]:
    """Replace PII and secrets in `text` with placeholders such as `<EMAIL_1>`.

    Args:
        text: any string.
        state: placeholder assignments to reuse (one per trajectory); a fresh one when None.

    Returns:
        The anonymized text and the replaced entities (positions refer to the input `text`).
    """
    if state is None:
        state = AnonymizerState()
    spans = _select(_candidates(text))
    if not spans:
        return text, []
    out: list[str] = []
    entities: list[Entity] = []
    pos = 0
    for start, end, _rank, kind, key in spans:
        ph = state.placeholder_for(kind, key)
        out.append(text[pos:start])
        out.append(ph)
        entities.append(Entity(kind, start, end, ph))
        pos = end
    out.append(text[pos:])
    return "".join(out), entities


def _walk(value: Any, state: AnonymizerState, found: list[Entity]) -> Any:
    if isinstance(value, str):
        new, ents = anonymize_text(value, state)
        found.extend(ents)
        return new
    if isinstance(value, dict):
        return {_walk(k, state, found) if isinstance(k, str) else k: _walk(v, state, found) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_walk(v, state, found) for v in value]
    return value


def _walk_record(record: dict[str, Any], state: AnonymizerState, found: list[Entity]) -> dict[str, Any]:
    """Like `_walk` for a trajectory-schema object: structural keys keep their values."""
    out: dict[str, Any] = {}
    for k, v in record.items():
        if k in _STRUCTURAL_KEYS:
            out[k] = v
        elif k in ("messages", "steps", "tool_calls") and isinstance(v, list):
            out[k] = [_walk_record(x, state, found) if isinstance(x, dict) else _walk(x, state, found) for x in v]
        elif k in ("outcome", "function") and isinstance(v, dict):
            out[k] = _walk_record(v, state, found)
        else:
            out[k] = _walk(v, state, found)
    return out


def anonymize_trajectory(traj: Trajectory) -> Trajectory:
    """Anonymize every free-text string of a trajectory with one consistent placeholder map.

    Covers the task id, message content and name, tool-call names and arguments, step
    action/observation/info, outcome details/error and metadata, recursively (dict keys too).
    Ids, roles and timestamps are left alone. If anything was replaced, every turn's token ids and
    logprobs are set to None and `metadata["looplift_token_ids_redacted"]` is set to True.

    Returns:
        An anonymized copy (the input is not modified); the input itself when nothing was found.
    """
    return anonymize_trajectory_entities(traj)[0]


def anonymize_trajectory_entities(traj: Trajectory) -> tuple[Trajectory, list[Entity]]:
    """`anonymize_trajectory`, also returning the replaced entities (positions are per string)."""
    state = AnonymizerState()
    found: list[Entity] = []
    data = _walk_record(traj.model_dump(mode="json"), state, found)
    if not found:
        return traj, []
    # Token ids encode the original text, so they would still carry the PII.
    data["turns"] = [
        {**t, "prompt_token_ids": None, "completion_token_ids": None, "completion_logprobs": None}
        for t in data.get("turns", [])
    ]
    data["metadata"][TOKEN_IDS_REDACTED_KEY] = True
    return Trajectory.model_validate(data), found
