"""Inference of the name/address model: finds PERSON and ADDRESS spans with the trained weights
(see `_names` for how the model works and is built). Scoring a token is a sum of memoized per-word,
per-offset contributions; decoding adds hysteresis for names and joins addresses across commas,
line breaks and postcodes.

Deliberately not here: word features (`_name_features`), the decoding rules that need no weights
(`_name_rules`: the window's labels, names after titles, person fields, addresses made whole), training and
caching the weights (`_name_train`, `_names`), and the structured detectors (e-mail, phone, ...), which run
before this model (`_pii_scan`).
"""

from __future__ import annotations

import re
import threading
from itertools import islice
from typing import Any

import numpy as np

from ._address_rules import AddressRules
from ._script_names import ScriptNames, script_names
from ._name_features import _DIGITS_TO_ZERO, _HAS_DIGIT, _UPPER, OFFSETS, TOKEN, Featurizer, _shape
from ._name_rules import (_ADDRESS, _O, _PARTICLES, _PERSON, _SHORT_TEXT, _TITLE_FORMS, _drop_punctuation_addresses,
                          _join_address, _label_after_titles, _label_runs, _merge_spans, _name_fields, _runs, _Window)

_ZERO = (0.0,) * (2 * len(OFFSETS))
#: A word's contributions (`NameModel._contrib`) are (PERSON, ADDRESS) pairs, one per offset of OFFSETS from the
#: word scored; these are the columns of each kind, in OFFSETS order.
_PERSON_COLS = tuple(2 * k for k in range(len(OFFSETS)))
_ADDRESS_COLS = tuple(2 * k + 1 for k in range(len(OFFSETS)))

# Particles that come capitalized or are rarer ("Pier Paolo Lo Russo", "Björn af Klintberg", "Niamh Ní Bhriain").
_MORE_PARTICLES = frozenset({"lo", "af", "av", "mac", "mc", "ní", "nic", "ó", "ua", "ap", "ben", "bat", "abu",
                             "des", "degli", "dei", "delle", "van't", "vom", "zum", "zur", "i"})

_ARTICLES = frozenset({"the", "a", "an", "this", "that", "our", "your", "my", "their", "its", "le", "la", "les", "der",
                       "die", "das", "el", "los", "las", "il", "lo", "de", "het", "een", "of", "in", "on", "at", "for"})

# Words after which a capitalized word is likely a person or a place.
_NAME_CONTEXT = frozenset({
    "by", "to", "from", "with", "for", "and", "or", "dear", "hi", "hello", "hey", "thanks", "contact", "cc", "ask",
    "tell", "call", "email", "mail", "met", "meet", "meeting", "of", "at", "in", "on", "named", "name", "user",
    "customer", "client", "owner", "author", "assignee", "reviewer", "reporter", "signed", "regards", "sincerely",
    "mr", "mrs", "ms", "miss", "dr", "prof", "sir", "madam", "herr", "frau", "m", "mme", "sr", "sra", "sig",
    "address", "street", "ship", "deliver", "delivered", "lives", "live", "moved", "visit", "is", "was", "wrote",
    "said", "says", "asked", "told", "per", "via", "c/o", "attn", "attention", "holder", "cardholder", "inhaber",
    "inhaberin", "titular", "titolare", "recipient", "sender", "patient", "applicant", "candidate", "employee",
    "tenant", "guest", "member", "first_name", "last_name", "full_name", "display_name", "surname",
    "firstname", "lastname", "fullname", "username", "approver", "manager", "ceo",
})
# Words after which a capitalized word is likely the person who does it ("Alpike will draft it").
_NAME_AFTER = frozenset({
    "will", "would", "can", "could", "should", "is", "was", "has", "had", "said", "says", "wrote", "writes",
    "asked", "asks", "reviews", "reviewed", "approved", "approves", "joined", "left", "called", "replied",
    "reported", "thinks", "agreed", "mentioned", "sent", "shared", "commented", "added", "signed", "confirmed",
    "owns", "leads", "covers", "presents", "finished", "started", "needs", "wants", "told", "and",
})
_WORD = re.compile(r"[a-z]+")
_PREV_WORDS = re.compile(r"\w+").findall
_SPLIT_NAME = re.compile(r"['’\-]").split


class NameModel:
    """Finds PERSON and ADDRESS spans in text with a trained model (see the module docstring)."""

    def __init__(self, model: dict[str, Any], thresholds: tuple[float, float] = (0.0, 0.0),
                 extend_margin: float = 4.0) -> None:
        self.extend_margin = extend_margin
        self.feat = Featurizer(model["gazetteers"])
        self.index = {p: i for i, p in enumerate(model["vocab"])}
        self.stats = model.get("stats", {})
        coef = np.asarray(model["coef"], dtype=np.float64)
        intercept = np.asarray(model["intercept"], dtype=np.float64)
        n_props = len(self.index)
        # Scores relative to O: positive means more likely PERSON (row 0) / ADDRESS (row 1) than O.
        rel = (coef[1:] - coef[0]).reshape(2, len(OFFSETS), n_props)
        self._w = np.ascontiguousarray(rel.transpose(2, 1, 0).reshape(n_props, 2 * len(OFFSETS)))  # (prop, offset*class)
        self._pw = [tuple(row) for row in self._w.tolist()]
        self._b = tuple(float(v) for v in (intercept[1:] - intercept[0]) - np.asarray(thresholds))
        self._memo: dict[str, tuple[float, ...]] = {}
        self._street_any = frozenset(x for w in self.feat.street for x in (w, w.capitalize(), w.upper()))
        # Capitalized common words that are no name, street or city anywhere: "Please", "The", "ERROR".
        f = self.feat
        stop = frozenset(model["gazetteers"]["stop"])
        plain = (f.common - f.first - f.last - f.title) | stop
        self._skip = frozenset(x for w in plain for x in (w.capitalize(), w.upper()))
        self._names_lower = f.first | f.last
        self._evidence_words = (f.first | f.last | f.street | f.city | f.title) - stop
        # Names and addresses (even "12 rue de la Paix") contain a capitalized word.
        # (No lookbehind: a class-first pattern lets `re` skip ahead in C, 2x faster. The greedy \w*
        # means a match can only start inside a word after a lowercase letter: "iPhone".)
        self._cand = re.compile(_UPPER + r"\w*(?:['’\-]\w+)*")
        self._lock = threading.Lock()
        self._address_rules: AddressRules | None = None
        self._name_like_memo: dict[str, bool] = {}
        # Capitalized particles inside names ("Pier Paolo Lo Russo", "Jean de La Fontaine", "Wouter Van Damme").
        self._particles_any = frozenset(x for w in _PARTICLES | _MORE_PARTICLES for x in (w, w.capitalize()))

    def address_rules(self) -> AddressRules:
        """The postal rules that make addresses whole (`_address_rules`), built on first use."""
        if self._address_rules is None:
            self._address_rules = AddressRules(self._skip.__contains__, self._is_street)
        return self._address_rules

    def clear_cache(self) -> None:
        """Forget the per-word contributions (benchmarks: measure as if every word were new)."""
        self._memo.clear()
        self._name_like_memo.clear()

    def _contrib(self, w: str) -> tuple[float, ...]:
        """(P_-2, A_-2, P_-1, A_-1, ..., P_+2, A_+2): this word's score contributions at each offset."""
        # Words whose features depend only on their shape share one entry: numbers, long tokens,
        # ids and keys (so a stream of random tokens does not keep computing features).
        if len(w) > 32:
            norm = "\x01"
        elif w[0].isdigit():
            norm = w.translate(_DIGITS_TO_ZERO)
        elif len(w) > 6 and not w.isalpha() and _HAS_DIGIT(w):
            norm = "\x02" + _shape(w)
        else:
            norm = w
        if norm is not w:
            got = self._memo.get(norm)
            if got is not None:
                self._memo[w] = got
                return got
        index, pw = self.index, self._pw
        vecs = [pw[j] for p in self.feat.props(w) if (j := index.get(p)) is not None]
        got = tuple(map(sum, zip(*vecs))) if vecs else _ZERO
        if len(self._memo) > 200_000:
            self._memo.clear()
        self._memo[w] = self._memo[norm] = got
        return got

    def _candidates(self, text: str) -> list[int]:
        """Start offsets of capitalized words worth a look (not "Please", "ERROR", `<PERSON_1>`)."""
        ok = self._is_candidate
        return [p for m in self._cand.finditer(text)
                if ok(m.group(0)) and not ((p := m.start()) and text[p - 1].isalnum())]

    def _evidence(self, text: str, starts: list[int]) -> list[int]:
        """Is any candidate more than a capitalized word? In a gazetteer (names, streets, cities,
        titles), next to another capitalized word or a number, or after a word that introduces a
        person ("by", "to", "Dear"). Text where none is skips the model: most capitalized words
        in agent text are headings, products and sentence starts."""
        known, suffixes = self._evidence_words, self.feat._street_suffixes
        n = len(text)
        out = []
        for p in starts:
            m = self._cand.match(text, p)
            if m is None:
                continue
            w = m.group(0).lower()
            if w in known or any(part in known for part in _SPLIT_NAME(w)):
                out.append(p)
                continue
            if len(w) > 5 and any(w[-k:] in suffixes for k in range(3, min(len(w) - 2, 9))):
                out.append(p)
                continue
            e = m.end()
            while e < n and text[e] in " \t":
                e += 1
            if e < n and text[e] == "," and e + 2 < n and text[e + 1] == " " and text[e + 2].isupper():
                out.append(p)  # "Koós, Szenta": a surname, a comma, a first name
                continue
            if e > m.end() and e < n:
                if text[e].islower():  # "Alpike will draft", "Honorato wrote:"
                    m2 = _WORD.match(text, e)
                    if m2 is not None and m2.group(0) in _NAME_AFTER:
                        out.append(p)
                        continue
                if text[e].isupper():  # "Maria Garcia", "Baker Street"
                    out.append(p)
                    continue
                if text[e].isdigit():  # "Hauptstraße 5", not "Timestamp 1611395013937"
                    d = e
                    while d < n and text[d].isdigit():
                        d += 1
                    if d - e <= 5:
                        out.append(p)
                        continue
            before = _PREV_WORDS(text, max(0, p - 24), p)
            if before:
                prev = before[-1].lower()
                if prev in _NAME_CONTEXT or (prev[-1:].isdigit() and len(prev) <= 6):
                    out.append(p)
        return out

    def _is_candidate(self, w: str) -> bool:
        if w in self._skip or (not w.isalpha() and _HAS_DIGIT(w)):  # names have no digits: ids, "AKIA2..."
            return False
        if w.isupper() and not w.isdigit():
            # Acronyms ("AAAA", "SSN", "CI") and CONSTANT_NAMES / our placeholders, unless a known name.
            low = w.lower()
            return (len(w) > 4 and "_" not in w) or low in self._names_lower
        return not ("_" in w and w.split("_", 1)[0].isupper())

    def find(self, text: str) -> list[tuple[int, int, str]]:
        """(start, end, kind) spans of PERSON / ADDRESS in `text`, sorted, non-overlapping: the model's
        spans, then addresses made whole by the postal rules (`_address_rules`)."""
        starts = self._candidates(text)
        cands = self._evidence(text, starts) if starts else starts
        spans = self._find(text, cands) if cands else []
        if ("=" in text or ":" in text) and (starts or len(text) <= _SHORT_TEXT) and \
                (fields := _name_fields(text, starts, self._skip)):
            spans = _merge_spans(spans, fields)
        other_script = not text.isascii() and ScriptNames.applies(text)
        if other_script:  # names in scripts without capitals ("王小明", "أحمد حسن")
            found = script_names().find(text)
            if found:
                spans = _merge_spans(spans, found)
        elif not cands and not spans:
            return []
        # The postal rules (`_address_rules`): where an address was found, or could be (a number and a
        # separator; in other scripts a number is enough: "東京都渋谷区渋谷2-21-1").
        if any(k == "ADDRESS" for _s, _e, k in spans) or (_HAS_DIGIT(text) and (
                other_script or "," in text or "\n" in text)):
            spans = self.address_rules().complete(text, spans)
        return spans

    def _find(self, text: str, cands: list[int]) -> list[tuple[int, int, str]]:
        n = len(text)
        if n <= 160:
            return self._window(text, 0, n)
        # Longer text (code, logs): only windows around the candidates with evidence.
        windows: list[list[int]] = []
        for p in cands:
            if windows and p - windows[-1][1] < 64:
                windows[-1][1] = p
            else:
                windows.append([p, p])
        out: list[tuple[int, int, str]] = []
        last_end = 0
        for a, b in windows:
            # Enough context on each side for the +-2 token features, cut at whitespace.
            s = max(last_end, a - 40)
            while s > last_end and not text[s - 1].isspace() and a - s < 80:
                s -= 1
            e = min(n, b + 64)
            while e < n and not text[e].isspace() and e - b < 160:
                e += 1
            out.extend(self._window(text, s, e))
            last_end = e
        return out

    def _window(self, text: str, ws: int, we: int) -> list[tuple[int, int, str]]:
        """PERSON / ADDRESS spans in `text[ws:we]`: label tokens by score, then by the rules around the model."""
        words = TOKEN.findall(text, ws, we)
        ok, street = self._is_candidate, self._street_any
        # Capitalized words (not common words that merely start a sentence, not acronyms) and street
        # words start the search.
        seeds = [i for i, w in enumerate(words) if (w[0].isupper() and ok(w)) or w in street]
        if not seeds:
            return []
        win = _Window(words)
        found_by_score = self._label_by_score(win, seeds)
        found_by_title = _label_after_titles(win)
        # (Two capitalized words close together, or there is no name of several words to find.)
        found_by_names = any(b - a <= 4 for a, b in zip(seeds, seeds[1:])) and self._label_known_names(win, seeds)
        if not (found_by_score or found_by_title or found_by_names):
            return []
        self._grow_names(win)
        self._join_inverted_names(win)
        self._join_comma_names(win)
        if _ADDRESS in win.labels:
            _drop_punctuation_addresses(win.labels, words)
            self._drop_wordless_addresses(win)
            _join_address(win.labels, words)
        return self._spans(text, ws, we, win)

    def _label_by_score(self, win: _Window, seeds: list[int]) -> bool:
        """Score the seed tokens, then the neighbours of every token found, until none is; whether any was."""
        labels, scored, person_score = win.labels, win.scored, win.person_score
        any_found = False
        todo = seeds
        while todo:
            found = []
            for i in todo:
                if scored[i]:
                    continue
                scored[i] = True
                sp, sa = self._scores(win.context(i))
                person_score[i] = sp
                if sp > 0 or sa > 0:
                    lab = _PERSON if sp >= sa else _ADDRESS
                    w = win.words[i]
                    if lab == _PERSON and not w[0].isupper() and w not in _PARTICLES:
                        # A lowercase word is part of a name only as a particle ("van", "de").
                        if sa <= 0:
                            continue
                        lab = _ADDRESS
                    labels[i] = lab
                    found.append(i)
            if found:
                any_found = True
            todo = [j for j in win.neighbours(found) if not scored[j]]
        return any_found

    def _drop_wordless_addresses(self, win: _Window) -> None:
        """An ADDRESS run with no capitalized word, no digit and no street word ("soy" before "María José
        García") is none; left in, `_join_address` would pull the name next to it into a rejected address."""
        labels, words = win.labels, win.words
        for i, j in _runs(labels, _ADDRESS):
            run = words[i:j + 1]
            if not any(w[0].isupper() or _HAS_DIGIT(w) or self._is_street(w) for w in run):
                for k in range(i, j + 1):
                    labels[k] = _O

    def _label_known_names(self, win: _Window, seeds: list[int]) -> bool:
        """Capitalized words joined by spaces and name particles, one of them a known first name and
        each a name ("María José García de la Fuente", "Pier Paolo Lo Russo", "Mary-Kate O'Brien"): a
        person, whatever the model's context made of it. No street or common word may be among them
        ("Rue de la Paix", "Grace period"). Whether one was labelled."""
        words, labels, n = win.words, win.labels, win.n
        any_found = False
        name_like = self._name_like
        done = -1
        for i in seeds:  # a name starts at a capitalized word, and those are the seeds
            if i <= done or not (words[i][0].isupper() and name_like(words[i])):
                continue
            j, names, particle = i, [i], False
            while j + 1 < n:
                k = j + 1
                while k < n and words[k] in self._particles_any and k - j <= 3:
                    k += 1
                if k < n and self._name_like(words[k]):
                    particle = particle or k > j + 1
                    names.append(k)
                    j = k
                else:
                    break
            firsts = sum(1 for t in names if self._first_name(words[t]))
            known = sum(1 for t in names if self._known_name(words[t]))
            # A first name and another known name, or a first name and a particle ("Jean-Baptiste de La X"),
            # or two name-shaped words inside lowercase prose ("caller Aiga Pole gave").
            # (Tokens the model took for an address are relabelled: name-like words are no street words, and
            # `_join_address` joins a name that sits inside an address back into it.)
            if 2 <= len(names) <= 6 and ((firsts and (known >= 2 or particle)) or self._in_prose(win, i, j, names)):
                for t in range(i, j + 1):
                    if labels[t] != _PERSON:
                        labels[t] = _PERSON
                        if win.person_score[t] < 0:
                            win.person_score[t] = 0.0
                any_found = True
            done = j
        return any_found

    def _in_prose(self, win: _Window, i: int, j: int, names: list[int]) -> bool:
        """Tokens i..j, name-shaped words, sit inside lowercase prose: a lowercase word before them that is
        no article ("the Mobile App"), none of them a known city or a street ("San Francisco",
        "Reishauerstrasse"). In running text two such capitalized words together are a proper name; the
        rest of this model would need one of them in a gazetteer."""
        words = win.words
        if i == 0 or not words[i - 1].isalpha() or not words[i - 1].islower() or words[i - 1] in _ARTICLES:
            return False
        if j + 1 < win.n and words[j + 1][0].isupper():
            return False
        city, is_street = self.feat.city, self._is_street
        return not any(words[t].lower() in city or is_street(words[t]) for t in names)

    def _name_like(self, w: str) -> bool:
        """A capitalized word that could be part of a name: letters (with ' and -), not a common word,
        not a street word, not an acronym (memoized per word, like the model's scores)."""
        got = self._name_like_memo.get(w)
        if got is None:
            got = self._name_like_memo[w] = self._is_name_like(w)
            if len(self._name_like_memo) > 100_000:
                self._name_like_memo.clear()
        return got

    def _is_name_like(self, w: str) -> bool:
        if not w[0].isupper() or w in self._skip or w in self._particles_any or w in _TITLE_FORMS:
            return False
        if w.isupper() and len(w) > 1:
            return False
        lw = w.lower()
        return all(p.isalpha() for p in _SPLIT_NAME(lw) if p) and lw not in self.feat.street \
            and lw not in self.feat.common

    def _first_name(self, w: str) -> bool:
        """A known first name, whole or as the first part of a compound ("Jean-Baptiste", "Anne-Sophie")."""
        lw = w.lower()
        return lw in self.feat.first or _SPLIT_NAME(lw)[0] in self.feat.first

    def _known_name(self, w: str) -> bool:
        parts = [p for p in _SPLIT_NAME(w.lower()) if len(p) > 1]
        names = self._names_lower
        return bool(parts) and all(p in names for p in parts)

    def _grow_names(self, win: _Window) -> None:
        """Hysteresis: a capitalized word next to a found name joins it on a weaker score ("Dawid" before
        "Gierek"): the linear model cannot see its neighbour's label."""
        labels = win.labels
        names = [i for i, lab in enumerate(labels) if lab == _PERSON]
        edge = [j for j in win.neighbours(names) if labels[j] == _O]
        while edge:
            grown = []
            for i in edge:
                if labels[i] or not win.words[i][0].isupper():
                    continue
                if self._person_score_of(win, i) > -self.extend_margin:
                    labels[i] = _PERSON
                    grown.append(i)
            edge = [j for j in win.neighbours(grown) if labels[j] == _O]

    def _join_inverted_names(self, win: _Window) -> None:
        """"Koós, Szenta", "Lerche, Bethuel wrote": a lone surname, a comma, a lone first name is one name."""
        labels, words = win.labels, win.words
        for surname in range(win.n - 2):
            if labels[surname] != _PERSON:
                continue
            comma, first, after = surname + 1, surname + 2, surname + 3
            if words[comma] == "," and labels[first] == _O \
                    and (surname == 0 or labels[surname - 1] != _PERSON) \
                    and words[first][0].isupper() and words[first].isalpha() \
                    and not (after < win.n and labels[after] == _PERSON):
                if self._person_score_of(win, first) > -self.extend_margin:
                    labels[comma] = labels[first] = _PERSON

    def _join_comma_names(self, win: _Window) -> None:
        """"Grinius, Markas", "Boer, Udo": a surname, a comma and a first name, one of the two found or known, the
        other name-shaped, and no third name after another comma (that is a list: "Anna, Berit, Carl")."""
        labels, words, n = win.labels, win.words, win.n
        for i in range(n - 2):
            a, b = i, i + 2
            if words[i + 1] != "," or labels[i + 1] == _ADDRESS:
                continue
            if not (self._name_like(words[a]) and self._name_like(words[b])):
                continue
            if labels[a] == _PERSON and labels[b] == _PERSON:
                continue
            if not (labels[a] == _PERSON or labels[b] == _PERSON or self._first_name(words[b])
                    or self._known_name(words[a])):
                continue
            if labels[a] == _ADDRESS or labels[b] == _ADDRESS:
                continue
            if (b + 2 < n and words[b + 1] == "," and self._name_like(words[b + 2])) or \
                    (a >= 2 and words[a - 1] == "," and self._name_like(words[a - 2])):
                continue
            if (a and words[a - 1][0].isupper() and self._name_like(words[a - 1])) or \
                    (b + 1 < n and words[b + 1][0].isupper() and self._name_like(words[b + 1])):
                continue  # "Kind regards, Anna" / a longer capitalized run: the model's
            labels[a] = labels[a + 1] = labels[b] = _PERSON
            for t in (a, b):
                if win.person_score[t] < 0:
                    win.person_score[t] = 0.0

    def _person_score_of(self, win: _Window, i: int) -> float:
        """Token i's PERSON score, scoring it now if the search by score skipped it ("Will" in "Will Smith").
        Summed first and then added to the bias, unlike `_scores`: the order these scores have always had, so
        that every decision stays bit-for-bit what it was."""
        if not win.scored[i]:
            win.scored[i] = True
            contrib = self._contrib
            win.person_score[i] = self._b[0] + sum(contrib(w)[col] for w, col in zip(win.context(i), _PERSON_COLS))
        return win.person_score[i]

    def _scores(self, context: list[str]) -> tuple[float, float]:
        """(PERSON, ADDRESS) score of the middle word of `context` (the words at OFFSETS around it), relative
        to O, thresholds included: the bias plus what each word contributes from where it sits."""
        memo, contrib = self._memo, self._contrib
        sp, sa = self._b
        for w, p_col, a_col in zip(context, _PERSON_COLS, _ADDRESS_COLS):
            c = memo.get(w) or contrib(w)
            sp += c[p_col]
            sa += c[a_col]
        return sp, sa

    def _spans(self, text: str, ws: int, we: int, win: _Window) -> list[tuple[int, int, str]]:
        """The accepted spans of the labelled runs, as character offsets into `text`."""
        labels = win.labels
        # Where the tokens are, only up to the last labelled one (finditer is the slow part).
        last = win.n
        while not labels[last - 1]:
            last -= 1
        found = list(islice(TOKEN.finditer(text, ws, we), last))
        spans: list[tuple[int, int, str]] = []
        for i, j, lab in _label_runs(labels[:last]):
            span = self._accept(win, found, i, j, lab)
            if span is not None:
                spans.append(span)
        return spans

    def _accept(self, win: _Window, found: list[re.Match[str]], i: int, j: int, lab: int) -> tuple[int, int, str] | None:
        """The span of the run of `lab` from token i to j (`found`: where each token is in the text), trimmed, or
        None when it is no name or address after all."""
        words = win.words
        # Trim punctuation and newlines at the edges; a span needs a word with a letter.
        while i <= j and not words[i][0].isalnum():
            i += 1
        while j >= i and not words[j][0].isalnum() and words[j] != ".":
            j -= 1
        if j >= i and words[j] == "." and (j == i or len(words[j - 1]) > 1):
            j -= 1  # keep the dot of "J." or "Str." only
        if j < i:
            return None
        run = words[i:j + 1]
        start, end = found[i].start(), found[j].end()
        if not any(w[0].isalpha() for w in run):
            return None
        if lab == _PERSON:
            if not any(w[0].isupper() for w in run) and not all(w.islower() for w in run if w[0].isalpha()):
                return None
            if len(run) == 1 and len(run[0]) == 1:  # a lone letter ("W^6QzGrR")
                return None
            return start, end, "PERSON"
        if sum(1 for w in run if w[0].isalnum()) < 2:
            return None
        if not any(_HAS_DIGIT(w) or self._is_street(w) for w in run):
            # No house number, postcode or street word: a name ("7,Ägwar Lestander,") or a place
            # on its own ("Boa Vista"), never an address.
            if all(w[0].isupper() for w in run if w[0].isalpha()) and max(win.person_score[i:j + 1]) > 0:
                return start, end, "PERSON"
            return None
        return start, end, "ADDRESS"

    def _is_street(self, w: str) -> bool:
        lw = w.lower()
        if lw in self.feat.street:
            return True
        suffixes = self.feat._street_suffixes
        return len(lw) > 5 and any(lw[-k:] in suffixes for k in range(3, min(len(lw) - 2, 9)))

