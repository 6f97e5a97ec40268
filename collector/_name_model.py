"""Inference of the name/address model: finds PERSON and ADDRESS spans with the trained weights
(see `_names` for how the model works and is built). Scoring a token is a sum of memoized per-word,
per-offset contributions; decoding adds hysteresis for names and joins addresses across commas,
line breaks and postcodes.
"""

from __future__ import annotations

import re
import threading
from typing import Any

import numpy as np

from ._name_features import _DIGITS_TO_ZERO, _HAS_DIGIT, _PAD_L, _PAD_R, _UPPER, OFFSETS, TOKEN, Featurizer, _shape

_ZERO = (0.0,) * (2 * len(OFFSETS))

# Lowercase words that belong to names: "Ludwig van Beethoven", "Jean de la Fontaine".
_PARTICLES = frozenset({"van", "von", "de", "der", "den", "del", "della", "di", "da", "dos", "das", "do", "du",
                        "la", "le", "ten", "ter", "zu", "bin", "ibn", "al", "el", "y", "e"})


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
# Honorifics after which a capitalized word is a person whatever else it could be ("Ms. Post").
_TITLES = frozenset({"mr", "mrs", "ms", "miss", "mx", "dr", "prof", "sir", "dame", "herr", "frau", "mme", "mlle",
                     "sr", "sra", "srta", "sig", "dott", "dhr", "mevr", "pan", "pani", "rev", "capt"})
_TITLE_FORMS = frozenset(f for t in _TITLES for f in (t.capitalize(), t.upper()))
_SPLIT_NAME = re.compile(r"['’\-]").split


def _BRIDGE(w: str) -> bool:
    """Tokens that may sit between a street and a city: ",", a line break, a postcode ("80882", "H-2048")."""
    return w in (",", "\n") or any(ch.isdigit() for ch in w)

def _runs(labels: list[int], lab: int, n: int) -> list[tuple[int, int]]:
    """(first, last) token of every maximal run of `lab` in `labels[:n]`."""
    out = []
    i = 0
    while i < n:
        if labels[i] != lab:
            i += 1
            continue
        j = i
        while j + 1 < n and labels[j + 1] == lab:
            j += 1
        out.append((i, j))
        i = j + 1
    return out


def _drop_punctuation_addresses(labels: list[int], wds: list[str], n: int) -> None:
    """An ADDRESS run of commas and line breaks alone is none (it would pull a name next to it in)."""
    for i, j in _runs(labels, 2, n):
        if not any(wds[k + 2][0].isalnum() for k in range(i, j + 1)):
            for k in range(i, j + 1):
                labels[k] = 0


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

    def clear_cache(self) -> None:
        """Forget the per-word contributions (benchmarks: measure as if every word were new)."""
        self._memo.clear()

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
        """(start, end, kind) spans of PERSON / ADDRESS in `text`, sorted, non-overlapping."""
        cands = self._candidates(text)
        if cands:
            cands = self._evidence(text, cands)
        if not cands:
            return []
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
        words = TOKEN.findall(text, ws, we)
        ok, street = self._is_candidate, self._street_any
        # Capitalized words (not common words that merely start a sentence, not acronyms) and street
        # words start the search.
        todo = [i for i, w in enumerate(words) if (w[0].isupper() and ok(w)) or w in street]
        if not todo:
            return []
        n = len(words)
        words = [_PAD_L, _PAD_L, *words, _PAD_R, _PAD_R]
        memo = self._memo
        contrib = self._contrib
        labels = [0] * n
        done = [False] * n
        person_score = [-1e9] * n
        bp, ba = self._b
        any_found = False
        while todo:
            found = []
            for i in todo:
                if done[i]:
                    continue
                done[i] = True
                c0 = memo.get(words[i]) or contrib(words[i])
                c1 = memo.get(words[i + 1]) or contrib(words[i + 1])
                c2 = memo.get(words[i + 2]) or contrib(words[i + 2])
                c3 = memo.get(words[i + 3]) or contrib(words[i + 3])
                c4 = memo.get(words[i + 4]) or contrib(words[i + 4])
                sp = bp + c0[0] + c1[2] + c2[4] + c3[6] + c4[8]
                sa = ba + c0[1] + c1[3] + c2[5] + c3[7] + c4[9]
                person_score[i] = sp
                if sp > 0 or sa > 0:
                    lab = 1 if sp >= sa else 2
                    w = words[i + 2]
                    if lab == 1 and not w[0].isupper() and w not in _PARTICLES:
                        # A lowercase word is part of a name only as a particle ("van", "de").
                        if sa <= 0:
                            continue
                        lab = 2
                    labels[i] = lab
                    found.append(i)
            if found:
                any_found = True
            todo = [j for i in found for j in (i - 1, i + 1) if 0 <= j < n and not done[j]]
        wds = words  # padded: token i is wds[i + 2]
        for k in [k for k in range(n) if wds[k + 2] in _TITLE_FORMS]:
            # "Ms. Post", "Dr. Lindgren": a capitalized word after a title is a person
            i = k + 2 if k + 1 < n and wds[k + 3] == "." else k + 1
            if i < n and labels[i] == 0:
                w = wds[i + 2]
                if w[0].isupper() and not w.isupper() and w.isalpha():
                    labels[i] = 1
                    any_found = True
                    if person_score[i] < 0:
                        person_score[i] = 0.0
        if not any_found:
            return []
        # Hysteresis: a capitalized word next to a found name joins it on a weaker score
        # ("Dawid" before "Gierek"): the linear model cannot see its neighbour's label.
        edge = [j for i in range(n) if labels[i] == 1 for j in (i - 1, i + 1) if 0 <= j < n and labels[j] == 0]
        while edge:
            grown = []
            for i in edge:
                if labels[i] or not wds[i + 2][0].isupper():
                    continue
                if not done[i]:  # a skipped word ("Will" in "Will Smith"): score it now
                    done[i] = True
                    person_score[i] = bp + sum(contrib(wds[i + k])[2 * k] for k in range(5))
                if person_score[i] > -self.extend_margin:
                    labels[i] = 1
                    grown.append(i)
            edge = [j for i in grown for j in (i - 1, i + 1) if 0 <= j < n and labels[j] == 0]
        for i in range(n - 2):
            # "Koós, Szenta", "Lerche, Bethuel wrote": a lone surname, a comma, a lone first name.
            if labels[i] == 1 and wds[i + 3] == "," and labels[i + 2] == 0 and (i == 0 or labels[i - 1] != 1) \
                    and wds[i + 4][0].isupper() and wds[i + 4].isalpha() and not (i + 3 < n and labels[i + 3] == 1):
                if not done[i + 2]:
                    done[i + 2] = True
                    person_score[i + 2] = bp + sum(contrib(wds[i + 2 + k])[2 * k] for k in range(5))
                if person_score[i + 2] > -self.extend_margin:
                    labels[i + 1] = labels[i + 2] = 1
        if 2 in labels:
            _drop_punctuation_addresses(labels, wds, n)
            self._join_address(labels, wds, n)
        # Token offsets, only up to the last labelled token (finditer is the slow part).
        last = n
        while not labels[last - 1]:
            last -= 1
        toks = []
        for m in TOKEN.finditer(text, ws, we):
            toks.append((m.start(), m.end(), m.group(0)))
            if len(toks) >= last:
                break
        spans: list[tuple[int, int, str]] = []
        i = 0
        while i < last:
            lab = labels[i]
            if lab == 0:
                i += 1
                continue
            j = i
            while j + 1 < last and labels[j + 1] == lab:
                j += 1
            span = self._accept(toks, i, j, lab, person_score)
            if span is not None:
                spans.append(span)
            i = j + 1
        return spans

    @staticmethod
    def _join_address(labels: list[int], wds: list[str], n: int) -> None:
        """Make addresses whole. PERSON tokens next to ADDRESS tokens (directly, or across line
        breaks, commas and postcodes) are part of the address: "Plaza [Carlito] Riquelme 55",
        "75002 [Paris]"; an address continues across its commas and line breaks and takes its
        trailing postcode ("NW1 6XE")."""
        for i, j in _runs(labels, 1, n):
            span = None
            k = i - 1
            while k >= 0 and i - k <= 3 and labels[k] == 0 and _BRIDGE(wds[k + 2]):
                k -= 1
            if k >= 0 and labels[k] == 2:
                span = (k + 1, j)
            else:
                k = j + 1
                while k < n and k - j <= 3 and labels[k] == 0 and _BRIDGE(wds[k + 2]):
                    k += 1
                # A name then a comma or a line break then an address is a name and its address
                # ("Giulia Bianchi, Via Roma 10"); joined only when adjacent or across a number.
                if k < n and labels[k] == 2 and (k == j + 1 or any(_HAS_DIGIT(wds[x + 2]) for x in range(j + 1, k))):
                    span = (i, k - 1)
            if span is not None:
                for k in range(span[0], span[1] + 1):
                    labels[k] = 2
        for i in range(n - 2, -1, -1):  # a house number before the street: "957 Bjørnheimveien"
            if labels[i] == 0 and labels[i + 1] == 2:
                w = wds[i + 2]
                if len(w) <= 6 and w[0].isdigit() and w.isalnum():
                    labels[i] = 2
        for i in range(1, n):
            if labels[i] == 0 and labels[i - 1] == 2:
                w = wds[i + 2]
                if w in (",", "\n") and i + 1 < n and labels[i + 1] == 2:
                    labels[i] = 2
                elif len(w) <= 8 and w.isalnum() and _HAS_DIGIT(w):
                    labels[i] = 2

    def _accept(self, toks: list[tuple[int, int, str]], i: int, j: int, lab: int,
                person_score: list[float]) -> tuple[int, int, str] | None:
        # Trim punctuation and newlines at the edges; a span needs a word with a letter.
        while i <= j and not toks[i][2][0].isalnum():
            i += 1
        while j >= i and not toks[j][2][0].isalnum() and toks[j][2] != ".":
            j -= 1
        if j >= i and toks[j][2] == "." and (j == i or len(toks[j - 1][2]) > 1):
            j -= 1  # keep the dot of "J." or "Str." only
        if j < i:
            return None
        words = [t[2] for t in toks[i:j + 1]]
        if not any(w[0].isalpha() for w in words):
            return None
        if lab == 1:
            if not any(w[0].isupper() for w in words) and not all(w.islower() for w in words if w[0].isalpha()):
                return None
            if len(words) == 1 and len(words[0]) == 1:  # a lone letter ("W^6QzGrR")
                return None
            return toks[i][0], toks[j][1], "PERSON"
        if sum(1 for w in words if w[0].isalnum()) < 2:
            return None
        if not any(_HAS_DIGIT(w) or self._is_street(w) for w in words):
            # No house number, postcode or street word: a name ("7,Ägwar Lestander,") or a place
            # on its own ("Boa Vista"), never an address.
            if all(w[0].isupper() for w in words if w[0].isalpha()) and \
                    max(person_score[k] for k in range(i, j + 1)) > 0:
                return toks[i][0], toks[j][1], "PERSON"
            return None
        return toks[i][0], toks[j][1], "ADDRESS"

    def _is_street(self, w: str) -> bool:
        lw = w.lower()
        if lw in self.feat.street:
            return True
        suffixes = self.feat._street_suffixes
        return len(lw) > 5 and any(lw[-k:] in suffixes for k in range(3, min(len(lw) - 2, 9)))

