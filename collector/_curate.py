"""`collector score`: fit the quality model and the diversity clusters, apply them, recompose scores.

One batch job, safe to run from cron beside ingest. Without `retrain` it keeps the current
models (fitting them only when none is stored yet) and fills in the rows that lack a quality or
cluster value (new rows since the last run). With `retrain` it refits both on the current data
and rescores every row. Either way it ends by recomposing every row's `score` from reward,
feedback and quality (`_score.py`), so late feedback is always reflected.

Memory: training reads at most `QUALITY_MAX_TRAIN` / `CLUSTER_FIT_ROWS` recent rows as
features; scoring walks the table in id-ordered pages of `SCORE_BATCH_SIZE` rows.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np
import sqlalchemy as sa
from scipy import sparse
from sqlmodel import col

from . import _cluster, _defaults, _quality
from ._schema import TrajectoryRow
from ._store import Store, open_store
from ._shingle import trajectory_text


@dataclass(frozen=True)
class ScoreReport:
    """What `collector score` did."""

    retrained: bool
    quality_model_id: int | None
    auc: float | None
    n_train: int
    n_test: int
    quality_note: str | None = field(default=None, metadata={"doc": "why there is no quality model, if there is none"})
    cluster_model_id: int | None = None
    clusters: int = 0
    rows_scored: int = 0
    rows_clustered: int = 0
    score_sources: dict[str, int] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready dict."""
        return asdict(self)


def _pages(store: Store, cols: list[sa.SQLColumnExpression[Any]], where: sa.ColumnElement[bool],
           batch: int) -> Iterator[Sequence[sa.Row[*tuple[Any, ...]]]]:
    """Yield lists of rows (id first) in id order, one short query per page."""
    t = TrajectoryRow
    last: str | None = None
    while True:
        q = sa.select(col(t.id), *cols).where(where)
        if last is not None:
            q = q.where(col(t.id) > last)
        with store.engine.connect() as conn:
            page = conn.execute(q.order_by(t.id).limit(batch)).all()
        if page:
            yield page
            last = page[-1][0]
        if len(page) < batch:
            return


def _recent(store: Store, cols: list[sa.SQLColumnExpression[Any]], where: sa.ColumnElement[bool], limit: int,
            batch: int) -> Iterator[Sequence[sa.Row[*tuple[Any, ...]]]]:
    """Yield pages of the `limit` most recently ingested rows matching `where`."""
    t = TrajectoryRow
    q = sa.select(*cols).where(where).order_by(col(t.created_at).desc(), col(t.id).desc()).limit(limit)
    with store.engine.connect() as conn:
        res = conn.execution_options(stream_results=True, yield_per=batch).execute(q)
        yield from res.partitions(batch)


def _fit_quality(store: Store, batch: int) -> tuple[int | None, _quality.FitResult | str]:
    t = TrajectoryRow
    nums, words, labels, tasks = [], [], [], []
    cols: list[sa.SQLColumnExpression[Any]] = [col(t.task_id), col(t.success), col(t.data)]
    for page in _recent(store, cols, col(t.success).is_not(None), _defaults.QUALITY_MAX_TRAIN, batch):
        n, w = _quality.featurize([json.loads(r[2]) for r in page])
        nums.append(n)
        words.append(w)
        labels += [bool(r[1]) for r in page]
        tasks += [r[0] for r in page]
    if not labels:
        return None, _quality.fit(np.zeros((0, len(_quality.NUMERIC))), None, [], [])
    res = _quality.fit(np.vstack(nums), sparse.vstack(words).tocsr(), labels, tasks)
    if isinstance(res, str):
        return None, res
    mid = store.save_score_model("quality", res.model.to_json(), auc=res.auc, n_train=res.n_train, n_test=res.n_test)
    return mid, res


def _fit_clusters(store: Store, k: int, batch: int) -> tuple[int | None, _cluster.Clusterer | None]:
    t = TrajectoryRow
    parts = [_cluster.counts([trajectory_text(json.loads(r[0])) for r in page])
             for page in _recent(store, [col(t.data)], sa.true(), _defaults.CLUSTER_FIT_ROWS, batch)]
    if not parts:
        return None, None
    x = sparse.vstack(parts).tocsr()
    model = _cluster.fit(x, k)
    return store.save_score_model("cluster", model.to_json(), auc=None, n_train=x.shape[0], n_test=0), model


def score(
    db: str | Store,
    *,
    retrain: bool = False,
    clusters: int = _defaults.CLUSTERS,
    batch_size: int = _defaults.SCORE_BATCH_SIZE,
    progress: Callable[[int], None] | None = None,
) -> ScoreReport:
    """Fit (when `retrain`, or when none is stored) and apply the quality model and clusterer, then
    recompose every score. `db` is a database URL or an open `Store`."""
    store = db if isinstance(db, Store) else open_store(db)
    try:
        return _score(store, retrain, clusters, batch_size, progress)
    finally:
        if not isinstance(db, Store):
            store.close()


def _score(store: Store, retrain: bool, k: int, batch: int, progress: Callable[[int], None] | None) -> ScoreReport:
    t = TrajectoryRow
    note: str | None = None
    qrow, crow = store.score_model("quality"), store.score_model("cluster")
    quality: _quality.QualityModel | None = None
    refit_q = retrain or qrow is None
    if refit_q:
        _mid, res = _fit_quality(store, batch)
        if isinstance(res, str):
            note = res
            refit_q = False
    if qrow is not None or refit_q:
        qrow = store.score_model("quality")
    if qrow is not None:
        try:
            quality = _quality.QualityModel.from_json(json.loads(qrow.params))
        except ValueError as e:
            note, quality, qrow = str(e), None, None
    refit_c = retrain or crow is None
    if refit_c:
        _fit_clusters(store, k, batch)
        crow = store.score_model("cluster")
    clusterer = _cluster.Clusterer.from_json(json.loads(crow.params)) if crow is not None else None

    # Rows to (re)score: all after a refit of that model, else only the ones it has not seen.
    need_q = sa.true() if refit_q else col(t.quality).is_(None)
    need_c = sa.true() if refit_c else col(t.cluster).is_(None)
    where = sa.or_(need_q if quality is not None else sa.false(), need_c if clusterer is not None else sa.false())
    stmt = sa.update(t).where(col(t.id) == sa.bindparam("_id")).values(
        quality=sa.bindparam("_q"), cluster=sa.bindparam("_c"))
    n_q = n_c = done = 0
    for page in _pages(store, [col(t.data), col(t.quality), col(t.cluster)], where, batch):
        docs = [json.loads(r[1]) for r in page]
        q = quality.predict(docs) if quality is not None else [r[2] for r in page]
        c = clusterer.assign([trajectory_text(d) for d in docs]) if clusterer is not None else [r[3] for r in page]
        with store.engine.begin() as conn:
            conn.execute(stmt, [{"_id": r[0], "_q": None if qv is None else float(qv), "_c": None if cv is None else int(cv)}
                                for r, qv, cv in zip(page, q, c)])
        n_q += len(page) if quality is not None else 0
        n_c += len(page) if clusterer is not None else 0
        done += len(page)
        if progress is not None:
            progress(done)
    store.recompose_scores()
    st = store.stats()
    return ScoreReport(
        retrained=retrain, quality_model_id=qrow.id if qrow else None, auc=qrow.auc if qrow else None,
        n_train=qrow.n_train if qrow else 0, n_test=qrow.n_test if qrow else 0, quality_note=note,
        cluster_model_id=crow.id if crow else None,
        clusters=int(json.loads(crow.params)["k"]) if crow else 0, rows_scored=n_q, rows_clustered=n_c,
        score_sources=st.score_sources,
    )
