"""Diversity clusters: MiniBatchKMeans over TF-IDF of hashed words, for balanced exports.

`fit` takes a bounded sample of trajectory texts (the most recent `CLUSTER_FIT_ROWS`), hashes
their words into `CLUSTER_FEATURES` columns (`HashingVectorizer`: stateless, so no vocabulary
grows with the data), weights them by IDF learned on the sample, L2-normalizes, and runs
scikit-learn's `MiniBatchKMeans` with a fixed seed. `Clusterer.assign` puts any trajectory in
its nearest centroid; `collector score` stores the result in `trajectories.cluster`, and
`collector export --balance cluster` samples the same number from each.

Persistence: IDF weights and centroids as base64 float32 in JSON (`score_models` table), never a
pickle.
"""

from __future__ import annotations

import base64
from dataclasses import dataclass
from typing import Any

import numpy as np

from . import _defaults


def _vectorizer(n_features: int) -> Any:
    from sklearn.feature_extraction.text import HashingVectorizer

    return HashingVectorizer(n_features=n_features, alternate_sign=False, norm=None, token_pattern=r"(?u)\b\w\w+\b")


def _b64(a: np.ndarray) -> str:
    return base64.b64encode(np.ascontiguousarray(a, dtype="<f4").tobytes()).decode("ascii")


def _unb64(s: str, shape: tuple[int, ...]) -> np.ndarray:
    return np.frombuffer(base64.b64decode(s), dtype="<f4").astype(np.float64).reshape(shape)


@dataclass
class Clusterer:
    """Fitted IDF weights and centroids."""

    idf: np.ndarray  # (H,)
    centroids: np.ndarray  # (K, H)

    def _tfidf(self, texts: list[str]) -> Any:
        from sklearn.preprocessing import normalize

        x = _vectorizer(self.idf.size).transform(texts)
        x.data = np.log1p(x.data)  # sublinear tf: one long trajectory's repetitions do not dominate
        return normalize(x.multiply(self.idf).tocsr())

    def assign(self, texts: list[str]) -> np.ndarray:
        """(N,) nearest-centroid index per text."""
        if not texts:
            return np.zeros(0, dtype=np.int64)
        x = self._tfidf(texts)
        d = (self.centroids**2).sum(axis=1)[None, :] - 2 * np.asarray(x @ self.centroids.T)  # (N, K) minus |x|^2
        nearest: np.ndarray = d.argmin(axis=1)
        return nearest

    def to_json(self) -> dict[str, Any]:
        """JSON-ready parameters."""
        k, h = self.centroids.shape
        return {"k": k, "features": h, "idf": _b64(self.idf), "centroids": _b64(self.centroids)}

    @classmethod
    def from_json(cls, p: dict[str, Any]) -> Clusterer:
        """Rebuild from `to_json()` output."""
        k, h = int(p["k"]), int(p["features"])
        return cls(_unb64(p["idf"], (h,)), _unb64(p["centroids"], (k, h)))


def counts(texts: list[str], n_features: int = _defaults.CLUSTER_FEATURES) -> Any:
    """(N, n_features) sparse hashed word counts (what `fit` takes, built in chunks by the caller)."""
    return _vectorizer(n_features).transform(texts)


def fit(x: Any, k: int = _defaults.CLUSTERS) -> Clusterer:
    """Fit at most `k` clusters (fewer when there are fewer distinct rows) on stacked `counts` output."""
    from sklearn.cluster import MiniBatchKMeans
    from sklearn.preprocessing import normalize

    n, h = x.shape
    df = np.bincount(x.indices, minlength=h)
    idf = np.log((1 + n) / (1 + df)) + 1.0
    model = Clusterer(idf, np.zeros((0, h)))
    x = x.astype(np.float64)
    x.data = np.log1p(x.data)
    xt = normalize(x.multiply(idf).tocsr())
    if n < 4 * k:  # few rows: never ask for more clusters than there are distinct rows
        k = len({xt[i].data.tobytes() + xt[i].indices.tobytes() for i in range(n)})
    k = max(1, min(k, n))
    km = MiniBatchKMeans(n_clusters=k, random_state=0, n_init=3, batch_size=1024)
    km.fit(xt)
    model.centroids = km.cluster_centers_.astype(np.float64)
    return model
