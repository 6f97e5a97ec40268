"""Training the name/address model: labelled sentences from `_names_data`, word features from
`_name_features`, one-vs-rest logistic loss with scikit-learn's `SGDClassifier`. The result is plain
data (arrays and JSON-able lists), which `_names` caches and `_name_model.NameModel` runs.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from ._pii_scan import find_masked
from ._name_features import _PAD_L, _PAD_R, FEATURE_VERSION, OFFSETS, TOKEN, Featurizer

#: Locales whose names, streets and cities the model is trained on.
TRAIN_LOCALES = (
    "en_US", "en_GB", "en_IE", "en_NZ", "en_IN", "de_DE", "de_AT", "de_CH", "fr_FR", "fr_CH", "es_ES", "es_MX",
    "it_IT", "nl_NL", "nl_BE", "pt_BR", "pt_PT", "pl_PL", "sv_SE", "da_DK", "no_NO", "ro_RO", "hr_HR", "sk_SK",
    "sl_SI", "id_ID", "fi_FI", "cs_CZ", "hu_HU",
    # names (and where Faker has them, streets) from further afield; lt_LT, lv_LV and tr_TR stay out
    # so that `bench/anonymize.py` keeps locales the model never saw
    "az_AZ", "et_EE", "ga_IE", "is_IS", "vi_VN", "yo_NG", "sw", "tw_GH", "zu_ZA", "es_AR", "es_CO", "fr_CA",
    "en_AU", "en_CA", "en_TH",
)


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
    """What the training data and features are made of (inference code does not change a model)."""
    here = Path(__file__).resolve().parent
    h = hashlib.sha256()
    for name in ("_names_data.py", "_name_features.py", "_name_train.py"):
        h.update((here / name).read_bytes())
    return h.hexdigest()[:16]



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
        # The model sees text as inference does: e-mails, keys and tokens blanked out (same offsets).
        text = find_masked(text)[1]
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

