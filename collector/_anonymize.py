"""Replace personal data and secrets in trajectories before anything is stored.

Runs on every ingest (`Store.add_trajectories`, `Store.add_feedback`) and behind
`collector anonymize`, always through `Anonymizer.text`. Two kinds of detectors feed it:

- rules (`_pii_scan` runs the table in `_pii_detectors`; one hyperscan pass decides which can
  match): e-mail, phone (international, E.164, NANP, national formats with and without a trunk 0,
  extensions, 9-10 bare digits, 2-5 groups of digits as numbers are written across Europe and the
  Americas even without a phone word, any grouping when introduced as one), IPv4/IPv6, payment cards (12-19
  digits, issuer ranges, Luhn), IBAN (mod-97), US SSN (SSA rules; unformatted only when called an
  SSN), dates of birth next to "born", "DOB", "date of birth" and their French/German/Spanish/
  Italian/Dutch equivalents, `user:password@` in URLs, API keys and tokens (known prefixes, JWTs,
  PEM private keys) and the values of key-like names (`api_key=`, `"client_secret":`,
  `password:`, `Bearer ...`, `mysql -p'...'`, "my password is ..."). Every context rule (`_pii_context`) matches whole
  words: "server 10.2.3.4" is an address, "version 10.2.3.4" is not;
- a token classifier for person names and street addresses (`_names`): logistic regression over
  word features and gazetteers, trained on generated text the first time it is needed, with rules
  around it: names joined by particles or standing in lowercase prose, the values of person fields
  (`"recipient": ...`), names in scripts without capitals (`_script_names`), and addresses made
  whole from street to city with the world's postcode formats (`_address_rules`).

How well this generalizes is measured on text this project did not generate, with a hold-out
kept out of tuning: `bench/anonymize_eval.py`.

Overlaps are resolved by tier (URL credentials first, then the other rules, then names and
addresses; a name or address span that runs over a rule's span keeps what lies outside it), then
longest first, then by how specific the kind is, so a card number is never
half-replaced as a phone and `admin:pw@db.example.com` never loses `pw@db.example.com` as an e-mail.
The name model sees the text with keys, tokens and e-mails already blanked out.

Replacements (`mode`, see `_pseudonyms`): `<EMAIL_1>` placeholders numbered per trajectory (the
default), keyed `<EMAIL_3f9a1c2b>` pseudonyms stable across trajectories, or format-preserving
fakes. Within one trajectory the same value always gets the same replacement, so a trained model
still sees that the prompt and the tool output talk about the same person. If anything was
replaced, the per-turn token ids and logprobs are dropped: they encode the original text.

Every string of a trajectory is scanned except identifiers and enums (ids, roles, timestamps):
messages, names, tool-call arguments, step actions/observations/info, outcome details, metadata
(keys and values, nested). A string that is JSON and contains escapes (`\\u00e9`, `\\n`) is
decoded, anonymized value by value and re-encoded in the same style, so escaping cannot hide a
value from the detectors.

Deliberately not done: reversible pseudonymization (the mapping would itself be the PII), and
generic high-entropy strings without a key-like name (they are everywhere in code and hashes).
"""

from __future__ import annotations

import bisect
import json
import re
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NamedTuple

from sdk import Trajectory, wire

from . import _pii_scan, _pseudonyms
from ._defaults import ENV_PSEUDONYM_KEY
from ._name_features import _UPPER
from ._pseudonyms import MODES

#: File under `$LOOPLIFT_HOME` holding that key when the variable is unset (created 0600 on first use).
PSEUDONYM_KEY_FILE = "collector_pseudonym.key"

# Trajectory fields that are identifiers or enums, never free text: leaving them alone keeps ids
# joinable (feedback, tool_call_id) and the schema valid. Everything else that is a string is
# scanned, dict keys included.
_STRUCTURAL_KEYS = frozenset(
    {"id", "schema_version", "app", "model", "served_version", "role", "tool_call_id", "type",
     "finish_reason", "started_at", "finished_at", "message_index", "index", "turns", "end_reason"}
)

_NAME_TIER, _PERSON_RANK, _ADDRESS_RANK = 2, 30, 31
_MEMO_MAX_LEN, _MEMO_SIZE = 256, 65_536
_STREET_AND_NUMBER = re.compile(r"[^\W\d_]{2,}\.?[ \t]\d|\d[\w/-]*[ \t][^\W\d_]{2,}")
_COUNTRY_CODE_BEFORE = re.compile(r"\(\+\d{1,4}\)[ \t]?\Z")
_NAME_WORD = rf"{_UPPER}[^\W\d_]+(?:['’-][^\W\d_]+)*"
_CAPITALIZED_RUN = re.compile(rf"(?<![\w'’-]){_NAME_WORD}(?:[ \t]{_NAME_WORD}){{1,3}}(?![\w'’-])")
_TRIVIAL = re.compile(r"[a-z_ .,;!?'()\n]*")


class Entity(NamedTuple):
    """One replaced span: its kind, where it was in the input text, and what replaced it.

    The original value is deliberately not kept; slice the input text if a caller needs it.
    """

    kind: str
    start: int
    end: int
    placeholder: str


@dataclass
class AnonymizerState:
    """Replacements shared by every string of one trajectory.

    Pass the same state to successive `anonymize_text` calls to get consistent replacements.
    """

    placeholders: dict[tuple[str, str], str] = field(default_factory=dict)
    counters: dict[str, int] = field(default_factory=dict)
    used: set[str] = field(default_factory=set)

    def placeholder_for(self, kind: str, key: str) -> str:
        """The numbered placeholder for `key` of `kind`, allocating the next number on first sight."""
        found = self.placeholders.get((kind, key))
        if found is None:
            n = self.counters.get(kind, 0) + 1
            self.counters[kind] = n
            found = f"<{kind}_{n}>"
            self.placeholders[(kind, key)] = found
        return found


def resolve_pseudonym_key(home: Path | None = None) -> str:
    """`$LOOPLIFT_COLLECTOR_PSEUDONYM_KEY`, else the key in `$LOOPLIFT_HOME/collector_pseudonym.key`,
    created (random, mode 0600) if missing."""
    from sdk.infra import ensure_secret

    return ensure_secret(ENV_PSEUDONYM_KEY, PSEUDONYM_KEY_FILE, home)


class Anonymizer:
    """Detects PII and secrets and replaces them.

    Args:
        mode: `placeholder` (`<EMAIL_1>`, the default), `hmac` (`<EMAIL_3f9a1c2b>`, stable across
            trajectories for one key) or `fake` (format-preserving fake values, deterministic for
            a value and a key).
        key: the secret for `hmac` and `fake`; when None, `resolve_pseudonym_key()` (environment
            variable or a 0600 file under `$LOOPLIFT_HOME`). Ignored for `placeholder`.
        names: also detect person names and street addresses (a model trained on first use, see
            `collector._names`). Off only for callers that know their text has none.
        preload: load (or train) the name model now instead of on the first string with a
            capitalized word (servers do, so the first request is not the slow one).
    """

    def __init__(self, mode: str = "placeholder", key: str | bytes | None = None, *, names: bool = True,
                 preload: bool = False) -> None:
        if mode not in MODES:
            raise ValueError(f"unknown anonymization mode {mode!r}: use one of {', '.join(MODES)}")
        self.mode = mode
        self._key: bytes | None = None
        if mode != "placeholder":
            raw = key if key is not None else resolve_pseudonym_key()
            self._key = raw.encode() if isinstance(raw, str) else raw
            if not self._key:
                raise ValueError(f"mode {mode!r} needs a non-empty key")
        self.names = names
        self._name_model: Any = None
        self._lock = threading.Lock()
        self._memo: dict[str, list[tuple[int, int, str, str]]] = {}
        if names and preload:
            self.name_model()

    def __repr__(self) -> str:  # never the key
        return f"Anonymizer(mode={self.mode!r}, names={self.names})"

    def name_model(self) -> Any:
        """The person/address model (loaded, or trained and cached, on first call)."""
        if self._name_model is None:
            with self._lock:
                if self._name_model is None:
                    from ._names import load_name_model

                    self._name_model = load_name_model()
        return self._name_model

    # -- detection ---------------------------------------------------------------------------

    def detect(self, text: str) -> list[tuple[int, int, str, str]]:
        """Non-overlapping `(start, end, kind, key)` spans of `text`, in order; `key` is the
        normalized value (what decides "same value").

        Short strings repeat across trajectories (system prompts, tool names, metadata values,
        "ok"), so their spans are memoized (bounded; `clear_cache()` empties it). Lowercase prose
        without digits, `@`, `=`, `:` or `/` cannot hold any kind this anonymizer detects (names
        need a capital letter, every structured kind a digit, `@`, a separator or a capital)."""
        if len(text) <= _MEMO_MAX_LEN:
            got = self._memo.get(text)
            if got is None:
                got = [] if (_TRIVIAL.fullmatch(text) and "bearer" not in text and "basic" not in text) \
                    else self._detect(text)
                if len(self._memo) >= _MEMO_SIZE:
                    self._memo.clear()
                self._memo[text] = got
            return list(got)
        return self._detect(text)

    def clear_cache(self) -> None:
        """Forget memoized spans and the name model's per-word scores (benchmarks: measure as if
        every string were new)."""
        self._memo.clear()
        if self._name_model is not None:
            self._name_model.clear_cache()

    def _detect(self, text: str) -> list[tuple[int, int, str, str]]:
        cands, masked = _pii_scan.find_masked(text)
        if self.names:
            found = (self._name_model or self.name_model()).find(masked)
            if cands and found:
                found = _outside(masked, found, cands)
            for s, e, kind in found:
                key = " ".join(text[s:e].lower().replace(",", " ").split())
                cands.append((s, e, _NAME_TIER, _PERSON_RANK if kind == "PERSON" else _ADDRESS_RANK, kind, key))
        if len(cands) > 1:
            cands = _select(cands)
        return [(_with_country_code(text, s) if kind == "PHONE" else s, e, kind, key)
                for s, e, _t, _r, kind, key in cands]

    # -- replacement -------------------------------------------------------------------------

    def replacement(self, kind: str, key: str, original: str, state: AnonymizerState) -> str:
        """What replaces the value `original` (normalized: `key`) of `kind`, consistently within `state`."""
        found = state.placeholders.get((kind, key))
        if found is not None:
            return found
        if self.mode == "placeholder":
            return state.placeholder_for(kind, key)
        assert self._key is not None
        if self.mode == "hmac":
            rep = _pseudonyms.hmac_pseudonym(self._key, kind, key)
        else:
            rep = _pseudonyms.fake_value(self._key, kind, key, original)
            salt = 0
            while rep in state.used and salt < 20:  # two values, one fake: draw again
                salt += 1
                rep = _pseudonyms.fake_value(self._key, kind, key, original, salt)
        state.placeholders[(kind, key)] = rep
        state.used.add(rep)
        return rep

    def text(self, text: str, state: AnonymizerState | None = None) -> tuple[str, list[Entity]]:
        """Replace PII and secrets in `text`.

        Args:
            text: any string.
            state: replacements to reuse (one per trajectory); a fresh one when None.

        Returns:
            The anonymized text and the replaced entities (positions refer to the input `text`).
        """
        spans = self.detect(text)
        if not spans:
            return text, []
        if state is None:
            state = AnonymizerState()
        out: list[str] = []
        entities: list[Entity] = []
        pos = 0
        for start, end, kind, key in spans:
            rep = self.replacement(kind, key, text[start:end], state)
            out.append(text[pos:start])
            out.append(rep)
            entities.append(Entity(kind, start, end, rep))
            pos = end
        out.append(text[pos:])
        return "".join(out), entities

    def strings(self, *texts: str | None) -> list[str | None]:
        """Several related strings (e.g. a feedback's correction and text) with one shared state."""
        state = AnonymizerState()
        return [self._string(t, state, []) if t else t for t in texts]

    def trajectory(self, traj: Trajectory) -> Trajectory:
        """Anonymize every free-text string of a trajectory with one consistent replacement map.

        Covers the task id, message content and name, tool-call names and arguments, step
        action/observation/info, outcome details/error and metadata, recursively (dict keys too).
        Ids, roles and timestamps are left alone. If anything was replaced, every turn's token ids
        and logprobs are set to None and `metadata["looplift_token_ids_redacted"]` is set to True.

        Returns:
            An anonymized copy (the input is not modified); the input itself when nothing was found.
        """
        return self.trajectory_entities(traj)[0]

    def trajectory_entities(self, traj: Trajectory) -> tuple[Trajectory, list[Entity]]:
        """`trajectory`, also returning the replaced entities (positions are per string; for
        JSON strings that were decoded, per decoded value)."""
        state = AnonymizerState()
        found: list[Entity] = []
        data = self._walk_record(traj.model_dump(mode="json"), state, found)
        if not found:
            return traj, []
        # Token ids encode the original text, so they would still carry the PII.
        data["turns"] = [
            {**t, "prompt_token_ids": None, "completion_token_ids": None, "completion_logprobs": None}
            for t in data.get("turns", [])
        ]
        data["metadata"][wire.TOKEN_IDS_REDACTED_KEY] = True
        return Trajectory.model_validate(data), found

    # -- walking -----------------------------------------------------------------------------

    def _string(self, s: str, state: AnonymizerState, found: list[Entity]) -> str:
        head = s.lstrip()[:1]
        if head in ("{", "[") and "\\" in s:
            try:
                decoded = json.loads(s)
            except ValueError:
                decoded = None
            if isinstance(decoded, (dict, list)):
                n = len(found)
                walked = self._walk(decoded, state, found)
                if len(found) == n:
                    return s
                return _dumps_like(walked, s)
        new, ents = self.text(s, state)
        found.extend(ents)
        return new

    def _walk(self, value: Any, state: AnonymizerState, found: list[Entity]) -> Any:
        if isinstance(value, str):
            return self._string(value, state, found)
        if isinstance(value, dict):
            return {self._walk(k, state, found) if isinstance(k, str) else k: self._walk(v, state, found)
                    for k, v in value.items()}
        if isinstance(value, (list, tuple)):
            return [self._walk(v, state, found) for v in value]
        return value

    def _walk_record(self, record: dict[str, Any], state: AnonymizerState, found: list[Entity]) -> dict[str, Any]:
        """Like `_walk` for a trajectory-schema object: structural keys keep their values."""
        out: dict[str, Any] = {}
        for k, v in record.items():
            if k in _STRUCTURAL_KEYS:
                out[k] = v
            elif k in ("messages", "steps", "tool_calls") and isinstance(v, list):
                out[k] = [self._walk_record(x, state, found) if isinstance(x, dict) else self._walk(x, state, found)
                          for x in v]
            elif k in ("outcome", "function", "tool_call") and isinstance(v, dict):
                out[k] = self._walk_record(v, state, found)
            else:
                out[k] = self._walk(v, state, found)
        return out


def _dumps_like(value: Any, original: str) -> str:
    """JSON in the style of `original`: compact or spaced separators, ASCII-escaped or not, indented or not."""
    compact = '":"' in original or '","' in original or (":" in original and ": " not in original)
    indent = None
    nl = original.find("\n")
    if nl != -1:
        rest = original[nl + 1:]
        indent = len(rest) - len(rest.lstrip(" ")) or None
    ascii_only = "\\u" in original
    if indent:
        return json.dumps(value, ensure_ascii=ascii_only, indent=indent)
    return json.dumps(value, ensure_ascii=ascii_only, separators=(",", ":") if compact else (", ", ": "))


def _outside(text: str, spans: list[tuple[int, int, str]],
             rules: list[tuple[int, int, int, int, str, str]]) -> list[tuple[int, int, str]]:
    """The name model's spans with the parts that rule spans (IBANs, phones, cards) cover cut out.

    The model reads numbers as tokens, so an address it finds may run over the IBAN before it
    ("AT61 1904 ..., Kontoinhaber Florian Gruber, Herrengasse 16, 8010 Graz"); `_select` would drop the
    whole span for overlapping the IBAN, and the name and address with it. What is left on each side
    stays, trimmed of separators: an address part only if it still has a word next to a number
    ("Herrengasse 16"), else the runs of two to four capitalized words in it as names, else nothing
    ("Mastercard")."""
    out: list[tuple[int, int, str]] = []
    for s, e, kind in spans:
        pieces = [(s, e)]
        for c in rules:
            rs, r_end = c[0], c[1]
            if rs < e and s < r_end:
                pieces = [p for a, b in pieces for p in ((a, min(b, rs)), (max(a, r_end), b)) if p[0] < p[1]]
        if pieces == [(s, e)]:
            out.append((s, e, kind))
            continue
        for a, b in pieces:
            while a < b and not text[a].isalnum():
                a += 1
            while b > a and not (text[b - 1].isalnum() or text[b - 1] == "."):
                b -= 1
            piece = text[a:b]
            if kind == "PERSON" or _STREET_AND_NUMBER.search(piece):
                if any(ch.isalpha() for ch in piece):
                    out.append((a, b, kind))
            else:  # what is left of an "address" may hold a name: "Inhaber Lukas Brunner", "Sokrat Vrabel gave"
                out.extend((a + m.start(), a + m.end(), "PERSON") for m in _CAPITALIZED_RUN.finditer(piece)
                           if not any(w.isupper() for w in m.group(0).split()))
    return out


def _with_country_code(text: str, start: int) -> int:
    """Where a phone number starts once a country code in brackets before it is counted: "(+971) 52 473 1591"
    (the detectors match the national number; the code alone identifies no one, but left behind it tells
    the country)."""
    m = _COUNTRY_CODE_BEFORE.search(text, max(0, start - 9), start)
    return m.start() if m else start


def _select(cands: list[tuple[int, int, int, int, str, str]]) -> list[tuple[int, int, int, int, str, str]]:
    """Non-overlapping spans: lowest tier first, then longest, then most specific kind, then leftmost."""
    if len(cands) <= 1:
        return cands
    starts: list[int] = []  # accepted spans, sorted by start; they never overlap each other
    ends: list[int] = []
    chosen: list[tuple[int, int, int, int, str, str]] = []
    for c in sorted(cands, key=lambda c: (c[2], c[0] - c[1], c[3], c[0])):
        i = bisect.bisect_right(starts, c[0])
        # Only the neighbours can overlap: the span starting at or before c, and the one after.
        if (i > 0 and ends[i - 1] > c[0]) or (i < len(starts) and starts[i] < c[1]):
            continue
        starts.insert(i, c[0])
        ends.insert(i, c[1])
        chosen.append(c)
    chosen.sort()
    return chosen


# ---------------------------------------------------------------------------------------------
# The default anonymizer (placeholders, names on) and the functional API.

_default: Anonymizer | None = None
_default_lock = threading.Lock()


def default_anonymizer() -> Anonymizer:
    """The process-wide placeholder-mode anonymizer (what ingest uses unless configured otherwise)."""
    global _default
    if _default is None:
        with _default_lock:
            if _default is None:
                _default = Anonymizer()
    return _default


def anonymize_text(text: str, state: AnonymizerState | None = None, *,
                   anonymizer: Anonymizer | None = None) -> tuple[str, list[Entity]]:
    """Replace PII and secrets in `text` with placeholders such as `<EMAIL_1>`.

    Args:
        text: any string.
        state: replacements to reuse (one per trajectory); a fresh one when None.
        anonymizer: how to detect and replace (default: `default_anonymizer()`, placeholders).

    Returns:
        The anonymized text and the replaced entities (positions refer to the input `text`).
    """
    return (anonymizer or default_anonymizer()).text(text, state)


def anonymize_trajectory(traj: Trajectory, *, anonymizer: Anonymizer | None = None) -> Trajectory:
    """`Anonymizer.trajectory` with the default (or the given) anonymizer."""
    return (anonymizer or default_anonymizer()).trajectory(traj)


def anonymize_trajectory_entities(traj: Trajectory, *, anonymizer: Anonymizer | None = None) -> tuple[Trajectory, list[Entity]]:
    """`anonymize_trajectory`, also returning the replaced entities (positions are per string)."""
    return (anonymizer or default_anonymizer()).trajectory_entities(traj)
