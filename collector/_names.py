"""Person names and street addresses: a linear token classifier over hand-built token features.

Why not regexes: names and addresses have no syntax of their own ("Grace", "Baker Street",
"Jean de la Fontaine", "Roskothstr. 6867") and a rule that catches them also catches "Docker",
"ValueError" and "Monday". Why not a large NER model: ingest must stay fast and must not download
anything.

The model. Each token is described by the properties of the words at offsets -2..+2 around it:
lowercased word, shape (`Xx`, `XX`, `d`, `Xx-Xx`), prefixes and suffixes, length, capitalization, and
membership in gazetteers (first names, surnames, street words, city words, titles, common English
words, all taken from Faker's locale data). A one-vs-rest logistic-loss classifier (scikit-learn's
`SGDClassifier`, averaged, fixed epochs) maps these to O / PERSON / ADDRESS. Because every feature
belongs to one word at one offset, a token's score is a sum of per-(word, offset) contributions,
computed once per distinct word and memoized: classifying a token costs five dict lookups.

What gets classified. Only text with a capitalized word that is not a common English word, an
acronym or a CONSTANT, and only if one such word has some evidence of being a name or a place (a
gazetteer entry, a street suffix, a capitalized neighbour, a house number, a preceding "by"/"Dear"/
"Mr."); then the capitalized and street words of its window, and, while anything is found, their
neighbours ("van", house numbers, commas inside an address). Decoding adds hysteresis (a capitalized
word next to a found name joins it on a weaker score) and joins addresses across their commas, line
breaks and postcodes. Everything else is O without being looked at, which keeps code fast.

Training data is generated (`_names_data`: templates, Faker, a seed; a quarter of the names and
streets have a letter or two changed so the model also learns from context and form), so the model
is rebuilt deterministically without network: on first use it is trained (~10 s on 2 cores; 24,000
sentences) and cached as plain arrays and JSON (no pickle) under
`$LOOPLIFT_HOME/models/anonymizer-names-<hash>/`, the hash covering the config, this code and the
Faker and scikit-learn versions. It is written to a temp directory and renamed, so a crash never
leaves half a model.
"""

from __future__ import annotations

import dataclasses
import hashlib
import string
import json
import logging
import re
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from sdk.infra import atomic_dir

log = logging.getLogger("looplift.collector")

#: Bump when features or training data change meaning (part of the cache key).
FEATURE_VERSION = 1
OFFSETS = (-2, -1, 0, 1, 2)
KINDS = ("PERSON", "ADDRESS")

#: Locales whose names, streets and cities the model is trained on.
TRAIN_LOCALES = (
    "en_US", "en_GB", "en_IE", "en_NZ", "en_IN", "de_DE", "de_AT", "de_CH", "fr_FR", "fr_CH", "es_ES", "es_MX",
    "it_IT", "nl_NL", "nl_BE", "pt_BR", "pt_PT", "pl_PL", "sv_SE", "da_DK", "no_NO", "ro_RO", "hr_HR", "sk_SK",
    "sl_SI", "id_ID", "fi_FI", "cs_CZ", "hu_HU",
)

_PAD_L, _PAD_R = "\x02", "\x03"
_DIGITS_TO_ZERO = str.maketrans("123456789", "000000000")
_HAS_DIGIT = re.compile(r"[0-9]").search


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
    "said", "says", "asked", "told", "per", "via", "c/o", "attn", "attention",
})
_SPLIT_NAME = re.compile(r"['’\-]").split


def _BRIDGE(w: str) -> bool:
    """Tokens that may sit between a street and a city: ",", a line break, a postcode ("80882", "H-2048")."""
    return w in (",", "\n") or any(ch.isdigit() for ch in w)
_ZERO = (0.0,) * (2 * len(OFFSETS))
TOKEN = re.compile(r"\w+(?:['’\-]\w+)*|\n|[^\w\s]")


def _upper_class() -> str:
    """A regex character class of every uppercase letter in the BMP (Python's `re` has no \\p{Lu})."""
    ranges: list[tuple[int, int]] = []
    for cp in range(0x41, 0x10000):
        ch = chr(cp)
        if ch.isupper() and ch.isalpha():
            if ranges and ranges[-1][1] == cp - 1:
                ranges[-1] = (ranges[-1][0], cp)
            else:
                ranges.append((cp, cp))
    return "[" + "".join(re.escape(chr(a)) + ("-" + re.escape(chr(b)) if b > a else "") for a, b in ranges) + "]"


_UPPER = _upper_class()


@dataclass(frozen=True)
class NameModelConfig:
    """How the name/address model is built. Every field (and the Faker version) changes the cache key."""

    seed: int = 0
    locales: tuple[str, ...] = TRAIN_LOCALES
    n_sentences: int = 24_000
    alpha: float = 3e-5
    """L2 regularization of the logistic-loss SGD classifier."""
    epochs: int = 8
    average: bool = True
    """Averaged SGD (weights averaged over the updates)."""
    mutate_p: float = 0.25
    """Fraction of generated names and streets with a letter or two changed (names no gazetteer has)."""
    min_prop_count: int = 2
    """Properties seen on fewer training tokens are dropped (keeps the model small)."""

    def key(self) -> str:
        """Hash of this config, the feature and data code, and the Faker and scikit-learn versions: a
        cached model is reused only if it would be rebuilt identically."""
        from importlib.metadata import version  # not `import sklearn`: ~1.5 s we need not pay to load

        blob = json.dumps(
            {**dataclasses.asdict(self), "features": FEATURE_VERSION, "faker": version("faker"),
             "sklearn": version("scikit-learn"), "code": _code_hash()},
            sort_keys=True,
        ).encode()
        return hashlib.sha256(blob).hexdigest()[:12]


def _code_hash() -> str:
    here = Path(__file__).resolve().parent
    h = hashlib.sha256()
    for name in ("_names.py", "_names_data.py"):
        h.update((here / name).read_bytes())
    return h.hexdigest()[:16]


# ---------------------------------------------------------------------------------------------
# Features


_SHAPE_TABLE = str.maketrans(
    string.ascii_uppercase + string.ascii_lowercase + string.digits, "X" * 26 + "x" * 26 + "d" * 10
)


def _shape(w: str) -> str:
    """`Xx`, `XX`, `d`, `Xx-Xx`, `X.`: character classes with runs collapsed, at most 8 long."""
    w = w[:16]
    if w.isascii():
        t = w.translate(_SHAPE_TABLE)
    else:
        t = "".join("X" if ch.isupper() else "x" if ch.isalpha() else "d" if ch.isdigit() else ch for ch in w)
    out = t[0]
    for ch in t[1:]:
        if ch != out[-1]:
            out += ch
    return out[:8]


class Featurizer:
    """Word -> property strings. Gazetteer sets come from the training data (`_names_data.gazetteers`)."""

    def __init__(self, gaz: dict[str, list[str]]) -> None:
        self.first = frozenset(gaz["first"])
        self.last = frozenset(gaz["last"])
        self.street = frozenset(gaz["street"])
        self.city = frozenset(gaz["city"])
        self.title = frozenset(gaz["title"])
        self.common = frozenset(gaz["common"])
        # Compound street names: "Roskothstr", "Hauptstraße", "Kungsgatan", "Olafring".
        self._street_suffixes = frozenset(s for s in self.street if len(s) >= 3)

    def props(self, w: str) -> list[str]:
        if w == _PAD_L:
            return ["<s>"]
        if w == _PAD_R:
            return ["</s>"]
        if w == "\n":
            return ["nl"]
        if len(w) > 32:  # hashes, base64, URLs: never part of a name or an address
            return ["long"]
        if len(w) > 6 and not w[0].isdigit() and not w.isalpha() and _HAS_DIGIT(w):
            return ["s=" + _shape(w), "mix"]  # ids, keys, tokens: only their shape matters
        lw = w.lower()
        out = ["s=" + _shape(w)]
        c0 = w[0]
        if len(lw) <= 24 and not (c0.isdigit() and len(lw) > 2):  # numbers: only shape and length
            out.append("w=" + lw)
        if c0.isalpha():
            n = len(lw)
            out.append("L=" + (str(n) if n < 5 else "5-7" if n < 8 else "8+"))
            if n >= 3:
                out += ["p2=" + lw[:2], "p3=" + lw[:3], "x2=" + lw[-2:], "x3=" + lw[-3:]]
                if n >= 5:
                    out.append("x4=" + lw[-4:])
            cap = "A" if w.isupper() and n > 1 else "C" if c0.isupper() else "l"
            parts = re.split(r"['’\-]", lw) if ("-" in lw or "'" in lw or "’" in lw) else [lw]
            if all(p in self.first for p in parts):
                out.append("gF" + cap)
            if all(p in self.last for p in parts):
                out.append("gL" + cap)
            if lw in self.street:
                out.append("gS" + cap)
            elif n > 5:
                suffixes = self._street_suffixes
                for k in range(3, min(n - 2, 9)):
                    if lw[-k:] in suffixes:
                        out.append("gs" + cap)
                        break
            if lw in self.city:
                out.append("gC" + cap)
            if lw in self.title:
                out.append("gT")
            if lw in self.common:
                out.append("gW" + cap)
        elif c0.isdigit():
            digits = sum(ch.isdigit() for ch in w)
            out.append("nd=" + str(min(digits, 6)))
            if digits != len(w):
                out.append("alnum")
        return out


# ---------------------------------------------------------------------------------------------
# Training


def _label_tokens(text: str, spans: list[tuple[int, int, int]]) -> tuple[list[str], list[int]]:
    words, labels = [], []
    for m in TOKEN.finditer(text):
        s, e = m.span()
        lab = 0
        for a, b, label in spans:
            if a < e and s < b:
                lab = label
                break
        words.append(m.group(0))
        labels.append(lab)
    return words, labels


def train(config: NameModelConfig, progress: bool = True) -> dict[str, Any]:
    """Generate the training data, fit the classifier and return the model as plain data."""
    from scipy import sparse
    from sklearn.linear_model import SGDClassifier

    from . import _names_data

    t0 = time.perf_counter()
    gaz = _names_data.gazetteers(config.locales)
    feat = Featurizer(gaz)
    gen = _names_data.SentenceGenerator(config.locales, config.seed, mutate_p=config.mutate_p)
    type_ids: dict[str, int] = {_PAD_L: 0, _PAD_R: 1}
    seqs: list[np.ndarray] = []
    ys: list[int] = []
    for text, spans in gen.sentences(config.n_sentences):
        words, labels = _label_tokens(text, spans)
        ids = [type_ids.setdefault(w, len(type_ids)) for w in words]
        seqs.append(np.asarray(ids, dtype=np.int64))
        ys.extend(labels)
    t_data = time.perf_counter() - t0

    # Property vocabulary, counted over token occurrences.
    types = list(type_ids)
    type_props = [feat.props(w) for w in types]
    occ = np.bincount(np.concatenate(seqs), minlength=len(types))
    counts: dict[str, int] = {}
    for props, n in zip(type_props, occ):
        for p in props:
            counts[p] = counts.get(p, 0) + int(n)
    counts["<s>"] = counts["</s>"] = config.min_prop_count
    vocab = sorted(p for p, n in counts.items() if n >= config.min_prop_count)
    index = {p: i for i, p in enumerate(vocab)}
    rows, cols = [], []
    for t, props in enumerate(type_props):
        for p in props:
            j = index.get(p)
            if j is not None:
                rows.append(t)
                cols.append(j)
    n_props = len(vocab)
    tmat = sparse.csr_matrix((np.ones(len(rows), dtype=np.float64), (rows, cols)), shape=(len(types), n_props))

    # Word type at each offset, padded per sentence.
    blocks = []
    for k in OFFSETS:
        idx = []
        for seq in seqs:
            n = len(seq)
            shifted = np.empty(n, dtype=np.int64)
            lo, hi = max(0, -k), min(n, n - k)
            shifted[:] = 0 if k < 0 else 1
            if hi > lo:
                shifted[lo:hi] = seq[lo + k:hi + k]
            idx.append(shifted)
        blocks.append(tmat[np.concatenate(idx)])
    x = sparse.hstack(blocks, format="csr")
    y = np.asarray(ys)
    t_feat = time.perf_counter() - t0 - t_data

    # Logistic loss, one-vs-rest, a fixed number of epochs: deterministic for the seed, and ~4x
    # faster than lbfgs on this problem for the same held-out accuracy.
    clf = SGDClassifier(loss="log_loss", alpha=config.alpha, max_iter=config.epochs, tol=None,
                        random_state=config.seed, n_jobs=2, average=config.average)
    clf.fit(x, y)
    t_fit = time.perf_counter() - t0 - t_data - t_feat
    return {
        "config": {**dataclasses.asdict(config), "key": config.key()},
        "vocab": vocab,
        "gazetteers": gaz,
        "coef": clf.coef_.astype(np.float32),
        "intercept": clf.intercept_.astype(np.float32),
        "stats": {
            "sentences": config.n_sentences, "tokens": int(len(y)), "features": int(x.shape[1]),
            "seconds": {"data": round(t_data, 2), "features": round(t_feat, 2), "fit": round(t_fit, 2),
                        "total": round(time.perf_counter() - t0, 2)},
            "n_iter": int(np.max(clf.n_iter_)),
        },
    }


# ---------------------------------------------------------------------------------------------
# Persistence


def _model_dir(config: NameModelConfig, home: Path | None) -> Path:
    from sdk import looplift_home

    return (home or looplift_home()) / "models" / f"anonymizer-names-{config.key()}"


def _save(model: dict[str, Any], path: Path) -> None:
    with atomic_dir(path, replace=False) as tmp:  # another process finished first: keep theirs
        np.savez(tmp / "weights.npz", coef=model["coef"], intercept=model["intercept"])
        meta = {k: model[k] for k in ("config", "vocab", "gazetteers", "stats")}
        (tmp / "model.json").write_text(json.dumps(meta, ensure_ascii=False))


def _load(path: Path) -> dict[str, Any] | None:
    try:
        meta = json.loads((path / "model.json").read_text())
        with np.load(path / "weights.npz", allow_pickle=False) as w:
            return {**meta, "coef": w["coef"], "intercept": w["intercept"]}
    except (OSError, ValueError, KeyError):
        return None


# ---------------------------------------------------------------------------------------------
# Inference


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
            if e > m.end() and e < n:
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
            before = text[max(0, p - 24):p].split()
            if before:
                prev = before[-1].lower().strip(".,:;(\"'")
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
        if not any_found:
            return []
        wds = words  # padded: token i is wds[i + 2]
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
        if 2 in labels:
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
            span = self._accept(toks, i, j, lab)
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
        i = 0
        while i < n:
            if labels[i] != 1:
                i += 1
                continue
            j = i
            while j + 1 < n and labels[j + 1] == 1:
                j += 1
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
                if k < n and labels[k] == 2:
                    span = (i, k - 1)
            if span is not None:
                for k in range(span[0], span[1] + 1):
                    labels[k] = 2
            i = j + 1
        for i in range(1, n):
            if labels[i] == 0 and labels[i - 1] == 2:
                w = wds[i + 2]
                if w in (",", "\n") and i + 1 < n and labels[i + 1] == 2:
                    labels[i] = 2
                elif len(w) <= 8 and w.isalnum() and _HAS_DIGIT(w):
                    labels[i] = 2

    def _accept(self, toks: list[tuple[int, int, str]], i: int, j: int, lab: int) -> tuple[int, int, str] | None:
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
        return toks[i][0], toks[j][1], "ADDRESS"


# ---------------------------------------------------------------------------------------------
# Loading (train on first use)

_cache: dict[str, NameModel] = {}
_cache_lock = threading.Lock()


def load_name_model(config: NameModelConfig | None = None, home: Path | None = None) -> NameModel:
    """The model for `config`, from memory, the on-disk cache, or trained now (and cached).

    Raises:
        ConfigError: it must be trained and Faker or scikit-learn is not installed.
    """
    config = config or NameModelConfig()
    key = config.key() if _faker_available() else None
    path = _model_dir(config, home) if key else None
    mem_key = str(key)  # same key, same model, whichever home it was cached in
    with _cache_lock:
        found = _cache.get(mem_key)
        if found is not None:
            return found
        if path is None:
            from .errors import ConfigError

            raise ConfigError(
                "the anonymizer's name/address model must be built once and needs Faker and scikit-learn: "
                "pip install 'looplift[collector]'"
            )
        model = _load(path)
        if model is None:
            log.warning("collector: training the name/address detector (one time, ~10-30 s); cached at %s", path)
            t0 = time.perf_counter()
            model = train(config)
            _save(model, path)
            log.warning("collector: name/address detector ready in %.1f s", time.perf_counter() - t0)
        nm = NameModel(model)
        _cache[mem_key] = nm
        return nm


def _faker_available() -> bool:
    from importlib.util import find_spec

    return find_spec("faker") is not None and find_spec("sklearn") is not None
