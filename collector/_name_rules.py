"""The name model's rules that need no weights: what decoding (`_name_model.NameModel`) does to a window's
token labels by rule alone, and the one rule it applies to the text itself.

- The labels and their window: `_O` / `_PERSON` / `_ADDRESS`, and `_Window`, one window's words with, per word,
  its label, whether the model has scored it and its PERSON score.
- Rules on the labels: a capitalized word after a title is a person (`_label_after_titles`); an address of
  punctuation alone is none (`_drop_punctuation_addresses`); an address is made whole across its commas, line
  breaks and postcodes, taking in the names next to it (`_join_address`); the runs of one label (`_label_runs`,
  `_runs`).
- The value of a field that holds a person (`"recipient": "Boer, Udo"`: `_name_fields`), and merging those spans
  with the model's (`_merge_spans`).

Deliberately not here: whatever needs the trained weights or the gazetteers (scoring, known names, hysteresis,
inverted and comma names, accepting a span: `NameModel` in `_name_model`), word features (`_name_features`),
and the rules that run on the spans found: postal rules (`_address_rules`) and names in scripts without
capitals (`_script_names`).
"""

from __future__ import annotations

import re

from ._name_features import _HAS_DIGIT, _PAD_L, _PAD_R, OFFSETS

#: Token labels: none, part of a name, part of an address.
_O, _PERSON, _ADDRESS = 0, 1, 2

# Lowercase words that belong to names: "Ludwig van Beethoven", "Jean de la Fontaine".
_PARTICLES = frozenset({"van", "von", "de", "der", "den", "del", "della", "di", "da", "dos", "das", "do", "du",
                        "la", "le", "ten", "ter", "zu", "bin", "ibn", "al", "el", "y", "e"})

# Keys whose value is a person, in JSON, key=value, "Key: value" and CSV-like records.
_NAME_KEYS = frozenset({"name", "full_name", "fullname", "full name", "display_name", "customer", "customer_name", "client",
              "recipient", "receiver", "sender", "assignee", "reporter", "author", "owner", "contact", "holder",
              "cardholder", "account_holder", "patient", "employee", "first_name", "firstname", "last_name",
              "lastname", "surname", "given_name", "family_name", "signed_by", "approver", "reviewer", "requester",
              "requested_by", "created_by", "caller", "tenant", "guest", "passenger", "beneficiary", "attn"})
_SHORT_TEXT = 300
_VALUE_OPENERS = frozenset(" \t\"'=:")
_KEY_SEP = re.compile(r"(?<![\w-])([A-Za-z][A-Za-z_]{1,22})[\"']?[ \t]*[:=][ \t]*[\"']?")
_KEY_BEFORE_VALUE = re.compile(r"(?<![\w-])([A-Za-z][A-Za-z_]{1,22})[\"']?[ \t]*[:=][ \t]*[\"']?\Z")
_NAME_VALUE = re.compile(
    r"[^\W\d_][\w'’.-]*(?:,?[ \t][^\W\d_][\w'’.-]*){0,3}"
    r"(?=[\"']|[ \t]*(?:$|\n|[,;|)}\]]|[ \t][a-z_]+=))"
)
# Values of those keys that are no one: placeholders, booleans, roles.
_NOT_A_NAME = frozenset({"none", "null", "nil", "true", "false", "unknown", "n/a", "na", "tbd", "anonymous", "admin",
                         "root", "system", "user", "customer", "guest", "test", "string", "str", "name", "redacted",
                         "me", "you", "nobody", "everyone", "team", "support", "undefined", "empty", "default"})

# Honorifics after which a capitalized word is a person whatever else it could be ("Ms. Post").
_TITLES = frozenset({"mr", "mrs", "ms", "miss", "mx", "dr", "prof", "sir", "dame", "herr", "frau", "mme", "mlle",
                     "sr", "sra", "srta", "sig", "dott", "dhr", "mevr", "pan", "pani", "rev", "capt"})
_TITLE_FORMS = frozenset(f for t in _TITLES for f in (t.capitalize(), t.upper()))


def _name_fields(text: str, starts: list[int], skip: frozenset[str]) -> list[tuple[int, int, str]]:
    """Values of fields that hold a person ("name": "Thao Waters", recipient="Boer, Udo", assignee=UCHE ONOH,
    Customer: Pace, Claudia): one to four words, no digit, capitalized, all capitals or in a script without
    capitals, not all of them common words (`skip`: name="World"). The key says what the value is, whatever
    the value's words are. In short text (a record, a log line) every "key:" and "key=" is looked at; in
    long text only those before a capitalized word at `starts`, so that code and JSON stay cheap."""
    if len(text) <= _SHORT_TEXT:
        values = [k.end() for k in _KEY_SEP.finditer(text) if k.group(1).lower() in _NAME_KEYS]
    else:
        values = [p for p in starts if p and text[p - 1] in _VALUE_OPENERS
                  and (k := _KEY_BEFORE_VALUE.search(text, max(0, p - 32), p)) is not None
                  and k.group(1).lower() in _NAME_KEYS]
    out: list[tuple[int, int, str]] = []
    for p in values:
        m = _NAME_VALUE.match(text, p)
        if m is None or (out and m.start() < out[-1][1]):
            continue
        words = m.group(0).replace(",", " ").split()
        if not 1 <= len(words) <= 4 or any(w.lower() in _NOT_A_NAME for w in words) or all(w in skip for w in words):
            continue
        if not all(w[0].isupper() or not w[0].islower() or w.lower() in _PARTICLES for w in words):
            continue
        out.append((m.start(), m.end(), "PERSON"))
    return out


def _merge_spans(a: list[tuple[int, int, str]], b: list[tuple[int, int, str]]) -> list[tuple[int, int, str]]:
    """Both lists' spans, sorted; where two overlap, the one from `a` (the model's) stays."""
    out = list(a)
    for s, e, k in b:
        if not any(s < e2 and s2 < e for s2, e2, _k in a):
            out.append((s, e, k))
    return sorted(out)


def _BRIDGE(w: str) -> bool:
    """Tokens that may sit between a street and a city: ",", a line break, a postcode ("80882", "H-2048")."""
    return w in (",", "\n") or any(ch.isdigit() for ch in w)


class _Window:
    """One window's words and, per word, what decoding has found out: its label, whether the model has scored
    it, and its PERSON score (-1e9 until scored). Token `i` is `words[i]` in every list."""

    __slots__ = ("words", "n", "labels", "scored", "person_score", "_padded")

    def __init__(self, words: list[str]) -> None:
        self.words = words
        self.n = len(words)
        self.labels = [_O] * self.n
        self.scored = [False] * self.n
        self.person_score = [-1e9] * self.n
        # Pads past both edges give every word a neighbour at each offset of OFFSETS (-2..+2, contiguous).
        self._padded = [_PAD_L] * -OFFSETS[0] + words + [_PAD_R] * OFFSETS[-1]

    def context(self, i: int) -> list[str]:
        """The words at OFFSETS around word `i`, in OFFSETS order (pads past the edges of the window)."""
        return self._padded[i:i + len(OFFSETS)]  # padded[i] is the word at OFFSETS[0] from word i

    def neighbours(self, tokens: list[int]) -> list[int]:
        """The words just before and after each of `tokens` (in that order) that exist."""
        n = self.n
        return [j for i in tokens for j in (i - 1, i + 1) if 0 <= j < n]


def _label_after_titles(win: _Window) -> bool:
    """"Ms. Post", "Dr. Lindgren": a capitalized word after a title is a person; whether one was labelled."""
    labels, words = win.labels, win.words
    any_found = False
    for title in [i for i, w in enumerate(words) if w in _TITLE_FORMS]:
        with_dot = title + 1 < win.n and words[title + 1] == "."
        name = title + 2 if with_dot else title + 1
        if name < win.n and labels[name] == _O:
            w = words[name]
            if w[0].isupper() and not w.isupper() and w.isalpha():
                labels[name] = _PERSON
                any_found = True
                if win.person_score[name] < 0:
                    win.person_score[name] = 0.0
    return any_found


def _label_runs(labels: list[int]) -> list[tuple[int, int, int]]:
    """(first, last, label) of every maximal run of one label other than O, in order."""
    out = []
    i, n = 0, len(labels)
    while i < n:
        lab = labels[i]
        if lab == _O:
            i += 1
            continue
        j = i
        while j + 1 < n and labels[j + 1] == lab:
            j += 1
        out.append((i, j, lab))
        i = j + 1
    return out


def _runs(labels: list[int], lab: int) -> list[tuple[int, int]]:
    """(first, last) token of every maximal run of `lab` in `labels`."""
    return [(i, j) for i, j, run_lab in _label_runs(labels) if run_lab == lab]


def _drop_punctuation_addresses(labels: list[int], words: list[str]) -> None:
    """An ADDRESS run of commas and line breaks alone is none (it would pull a name next to it in)."""
    for i, j in _runs(labels, _ADDRESS):
        if not any(w[0].isalnum() for w in words[i:j + 1]):
            for k in range(i, j + 1):
                labels[k] = _O


def _join_address(labels: list[int], words: list[str]) -> None:
    """Make addresses whole. PERSON tokens next to ADDRESS tokens (directly, or across line
    breaks, commas and postcodes) are part of the address: "Plaza [Carlito] Riquelme 55",
    "75002 [Paris]"; an address continues across its commas and line breaks and takes its
    trailing postcode ("NW1 6XE")."""
    n = len(words)
    for i, j in _runs(labels, _PERSON):
        span = None
        k = i - 1
        while k >= 0 and i - k <= 3 and labels[k] == _O and _BRIDGE(words[k]):
            k -= 1
        if k >= 0 and labels[k] == _ADDRESS:
            span = (k + 1, j)
        else:
            k = j + 1
            while k < n and k - j <= 3 and labels[k] == _O and _BRIDGE(words[k]):
                k += 1
            # A name then a comma or a line break then an address is a name and its address
            # ("Giulia Bianchi, Via Roma 10"); joined only when adjacent or across a number.
            if k < n and labels[k] == _ADDRESS and (k == j + 1 or any(_HAS_DIGIT(w) for w in words[j + 1:k])):
                span = (i, k - 1)
        if span is not None:
            for k in range(span[0], span[1] + 1):
                labels[k] = _ADDRESS
    for i in range(n - 2, -1, -1):  # a house number before the street: "957 Bjørnheimveien"
        if labels[i] == _O and labels[i + 1] == _ADDRESS:
            w = words[i]
            if len(w) <= 6 and w[0].isdigit() and w.isalnum():
                labels[i] = _ADDRESS
    for i in range(1, n):
        if labels[i] == _O and labels[i - 1] == _ADDRESS:
            w = words[i]
            if w in (",", "\n") and i + 1 < n and labels[i + 1] == _ADDRESS:
                labels[i] = _ADDRESS
            elif len(w) <= 8 and w.isalnum() and _HAS_DIGIT(w):
                labels[i] = _ADDRESS
