"""The learned quality model: P(success) of a trajectory from its shape and text, for the ones no
verifier has judged.

Features (`features`): counts (messages per role, tool calls, steps), log lengths (all text,
assistant text, final answer), whether a final answer is there, error markers in tool output
and step observations (Traceback, Error, failed, timeout, ...), repetition (repeated assistant
messages and lines, distinct-word ratio), truncated turns (`finish_reason == "length"`), mean
completion logprob when the server returned logprobs, duration, plus hashed words of the
assistant text and the observations. Model: scikit-learn `LogisticRegression` over the
standardized counts and the hashed words.

Training data: the most recent `QUALITY_MAX_TRAIN` trajectories whose outcome is known
(`success` not null). Held out: every trajectory of a deterministic 20% of tasks (hash of the
task id), so the AUC measures generalization to unseen tasks, not to other rollouts of the same
task. The model that is stored is the one fitted on the other 80%, so the reported AUC is
exactly its own.

Persistence: the fitted parameters (scaler, coefficients, hashing settings) are plain JSON in
the `score_models` table, never a pickle: loading runs no code, and every replica reads the same
model from the database.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import Any

import numpy as np
from scipy import sparse

from . import _defaults
from ._shingle import unit_hash

_ERROR = re.compile(
    r"traceback|exception|\berror\b|errno|failed|failure|timed? ?out|not found|invalid|denied|refused|segmentation fault",
    re.IGNORECASE,
)
NUMERIC = (
    "n_messages", "n_user", "n_assistant", "n_tool", "n_tool_calls", "n_steps",
    "log_chars", "log_assistant_chars", "log_final_chars", "final_answer",
    "error_markers", "error_fraction", "repeated_messages", "repeated_lines", "distinct_words",
    "truncated_turns", "mean_logprob", "has_logprobs", "step_reward", "log_seconds",
)
_HASH_FEATURES = 2**10


def _hasher() -> Any:
    from sklearn.feature_extraction.text import HashingVectorizer

    return HashingVectorizer(n_features=_HASH_FEATURES, alternate_sign=False, norm="l2", token_pattern=r"(?u)\b\w\w+\b")


def features(d: dict[str, Any]) -> tuple[list[float], str]:
    """(numeric features in `NUMERIC` order, text for the hashed words) of one trajectory JSON dict."""
    msgs = d.get("messages") or []
    roles = [m.get("role") for m in msgs]
    asst = [m.get("content") or "" for m in msgs if m.get("role") == "assistant"]
    tool_out = [m.get("content") or "" for m in msgs if m.get("role") == "tool"]
    observations = [s.get("observation") or "" for s in d.get("steps") or []]
    n_calls = sum(len(m.get("tool_calls") or ()) for m in msgs)
    all_chars = sum(len(m.get("content") or "") for m in msgs)
    last = msgs[-1] if msgs else {}
    final = (last.get("content") or "") if last.get("role") == "assistant" and not last.get("tool_calls") else ""
    errors = [len(_ERROR.findall(t)) for t in tool_out + observations]
    lines = [ln.strip() for t in asst for ln in t.splitlines() if ln.strip()]
    words = " ".join(asst).lower().split()
    logprobs = [x for t in d.get("turns") or [] for x in (t.get("completion_logprobs") or ())]
    turns_cut = sum(1 for t in d.get("turns") or [] if t.get("finish_reason") == "length")
    steps = d.get("steps") or []
    try:
        from datetime import datetime

        secs = (datetime.fromisoformat(d["finished_at"]) - datetime.fromisoformat(d["started_at"])).total_seconds()
    except (KeyError, TypeError, ValueError):
        secs = 0.0
    num = [
        len(msgs), roles.count("user"), len(asst), len(tool_out), n_calls, len(steps),
        math.log1p(all_chars), math.log1p(sum(map(len, asst))), math.log1p(len(final)), float(bool(final.strip())),
        math.log1p(sum(errors)), sum(1 for e in errors if e) / max(1, len(errors)),
        1 - len(set(asst)) / len(asst) if asst else 0.0,
        1 - len(set(lines)) / len(lines) if lines else 0.0,
        len(set(words)) / len(words) if words else 0.0,
        turns_cut, float(np.mean(logprobs)) if logprobs else 0.0, float(bool(logprobs)),
        float(sum(s.get("reward") or 0.0 for s in steps)), math.log1p(max(0.0, secs)),
    ]
    return num, "\n".join(asst + tool_out + observations)


def featurize(docs: list[dict[str, Any]]) -> tuple[np.ndarray, Any]:
    """(N, len(NUMERIC)) numeric features and (N, H) sparse hashed words of trajectory JSON dicts."""
    feats = [features(d) for d in docs]
    num = np.array([f[0] for f in feats], dtype=np.float64).reshape(len(feats), len(NUMERIC))
    return num, _hasher().transform([f[1] for f in feats])


def in_holdout(task_id: str, fraction: float = _defaults.QUALITY_HOLDOUT) -> bool:
    """Whether the quality model's AUC is measured on this task (deterministic by task id)."""
    return unit_hash("quality:" + task_id) < fraction


@dataclass
class QualityModel:
    """A fitted quality model; `predict` gives P(success) for a batch of trajectory dicts."""

    mean: np.ndarray  # (F,)
    scale: np.ndarray  # (F,)
    coef: np.ndarray  # (F + H,)
    intercept: float

    def predict(self, docs: list[dict[str, Any]]) -> np.ndarray:
        """(N,) P(success) for trajectory JSON dicts."""
        if not docs:
            return np.zeros(0)
        num, words = featurize(docs)
        x = sparse.hstack([sparse.csr_matrix((num - self.mean) / self.scale), words]).tocsr()
        z = x @ self.coef + self.intercept
        p: np.ndarray = 1.0 / (1.0 + np.exp(-z))
        return p

    def to_json(self) -> dict[str, Any]:
        """JSON-ready parameters (see `from_json`)."""
        return {"features": list(NUMERIC), "hash_features": _HASH_FEATURES, "mean": self.mean.tolist(),
                "scale": self.scale.tolist(), "coef": self.coef.tolist(), "intercept": self.intercept}

    @classmethod
    def from_json(cls, p: dict[str, Any]) -> QualityModel:
        """Rebuild from `to_json()` output; refuses parameters written for other features."""
        if p.get("features") != list(NUMERIC) or p.get("hash_features") != _HASH_FEATURES:
            raise ValueError("the stored quality model was fitted on other features; run `collector score --retrain`")
        return cls(np.array(p["mean"]), np.array(p["scale"]), np.array(p["coef"]), float(p["intercept"]))


@dataclass(frozen=True)
class FitResult:
    """A fitted model with its held-out evaluation."""

    model: QualityModel
    auc: float | None
    n_train: int
    n_test: int


def fit(num: np.ndarray, words: Any, labels: list[bool], task_ids: list[str]) -> FitResult | str:
    """Fit on `featurize` output for the tasks outside the holdout, measure ROC AUC on the rest.
    Returns the fit, or a sentence saying why there is nothing to fit (too few labels, one class only)."""
    from sklearn.linear_model import LogisticRegression
    from sklearn.metrics import roc_auc_score

    y = np.array(labels, dtype=bool)
    if y.size < _defaults.QUALITY_MIN_LABELED or y.all() or not y.any():
        return (f"{y.size} trajectories with a known outcome ({int(y.sum())} successes): the quality model needs at "
                f"least {_defaults.QUALITY_MIN_LABELED} with both successes and failures")
    test = np.array([in_holdout(t) for t in task_ids], dtype=bool)
    if y[~test].all() or not y[~test].any():
        test[:] = False  # every failure (or success) sits in held-out tasks: train on all, report no AUC
    mean, scale = num[~test].mean(axis=0), num[~test].std(axis=0)
    scale[scale == 0] = 1.0
    proto = QualityModel(mean, scale, np.zeros(0), 0.0)
    x = sparse.hstack([sparse.csr_matrix((num - mean) / scale), words]).tocsr()
    lr = LogisticRegression(C=1.0, max_iter=2000)
    lr.fit(x[~test], y[~test])
    proto.coef, proto.intercept = lr.coef_[0].astype(np.float64), float(lr.intercept_[0])
    auc = None
    if test.any() and y[test].any() and not y[test].all():
        auc = float(roc_auc_score(y[test], lr.decision_function(x[test])))
    return FitResult(proto, auc, int((~test).sum()), int(test.sum()))
