"""Scores: composition of reward, late feedback and the learned quality model; `collector score`
(with and without --retrain) and `collector stats` through the CLI; the 0002 migration's backfill."""

from __future__ import annotations

import json
import random
import sqlite3
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import sqlalchemy as sa
from _curate_data import make
from fastapi.testclient import TestClient
from _trajs import traj
from typer.testing import CliRunner

from collector import CollectorSettings, Store, create_app, open_store
from collector._cli import app as cli_app
from collector._curate import score
from collector._schema import TrajectoryRow
from collector._quality import QualityModel
from collector._score import compose
from sdk._types import Feedback, Outcome


def seed(store: Store, n: int, *, seed_: int = 0, unlabeled_every: int = 3, start: int = 0) -> list[Any]:
    rng = random.Random(seed_)
    ts = [make(i, good=rng.random() < 0.5, rng=rng, labeled=i % unlabeled_every != 0) for i in range(start, start + n)]
    store.add_trajectories(ts, anonymize=False)
    return ts


def column(store: Store, col: str) -> dict[str, Any]:
    with store.engine.connect() as conn:
        return dict(conn.execute(sa.select(TrajectoryRow.id, getattr(TrajectoryRow, col))).all())


def test_compose_rule() -> None:
    assert compose(1.0, None, 0.1) == (1.0, "reward")
    assert compose(1.0, -1.0, 0.9) == (0.5, "reward+feedback")
    assert compose(None, 0.5, 0.1) == (0.75, "feedback")
    assert compose(None, None, 0.3) == (0.3, "model")
    assert compose(None, None, None) == (None, None)


def test_sql_composition_matches_python(store: Store) -> None:
    cases = [(r, f, q) for r in (None, 0.0, 1.0) for f in (None, -1.0, 0.5) for q in (None, 0.25)]
    store.add_trajectories([traj(i, reward=None) for i in range(len(cases))])
    with store.engine.begin() as conn:
        for i, (r, _f, q) in enumerate(cases):
            conn.execute(sa.update(TrajectoryRow).where(TrajectoryRow.id == f"traj-{i:04d}").values(reward=r, quality=q))
    for i, (_r, f, _q) in enumerate(cases):
        if f is not None:
            store.add_feedback(Feedback(trajectory_id=f"traj-{i:04d}", rating=f))
    store.recompose_scores()
    scores, sources = column(store, "score"), column(store, "score_source")
    for i, (r, f, q) in enumerate(cases):
        want = compose(r, f, q)
        assert (scores[f"traj-{i:04d}"], sources[f"traj-{i:04d}"]) == pytest.approx(want), (r, f, q)


def test_late_feedback_updates_the_score(store: Store) -> None:
    store.add_trajectories([traj(1, reward=None), traj(2, reward=1.0)])
    store.add_feedback(Feedback(trajectory_id="traj-0001", rating=1.0))
    assert (column(store, "score")["traj-0001"], column(store, "score_source")["traj-0001"]) == (1.0, "feedback")
    store.add_feedback(Feedback(trajectory_id="traj-0001", rating=-1.0, text="no, wrong"))  # mean rating 0
    assert column(store, "score")["traj-0001"] == 0.5 and column(store, "feedback_rating")["traj-0001"] == 0.0
    store.add_feedback(Feedback(trajectory_id="traj-0002", rating=-1.0))
    assert (column(store, "score")["traj-0002"], column(store, "score_source")["traj-0002"]) == (0.5, "reward+feedback")
    store.add_feedback(Feedback(trajectory_id="traj-0002", correction="better answer"))  # no rating: score unchanged
    assert column(store, "score")["traj-0002"] == 0.5


def test_crashed_verifier_is_no_reward(store: Store) -> None:
    t = traj(1, reward=None)
    t.outcome = Outcome(success=False, reward=0.0, error="ZeroDivisionError: boom")
    store.add_trajectories([t])
    assert column(store, "reward")["traj-0001"] is None and column(store, "score")["traj-0001"] is None


@pytest.mark.slow
def test_quality_model_learns_and_fills_unlabeled_rows(store: Store) -> None:
    ts = seed(store, 1200)
    report = score(store, retrain=True)
    assert report.auc is not None and report.auc >= 0.85, report
    assert report.n_train + report.n_test == 800 and report.n_test > 0  # the labeled rows, split by task
    assert report.rows_scored == 1200 and report.score_sources["model"] == 400 and report.score_sources["reward"] == 800
    quality, scores, sources = column(store, "quality"), column(store, "score"), column(store, "score_source")
    unlabeled = [t for t in ts if t.outcome is None]
    assert all(sources[t.id] == "model" and scores[t.id] == quality[t.id] for t in unlabeled)
    # The model never saw these rows' outcomes: compare with the hidden truth, regenerated with seed()'s draws.
    regen = random.Random(0)
    good = {}
    for i in range(1200):
        g = regen.random() < 0.5
        make(i, good=g, rng=regen, labeled=i % 3 != 0)
        good[f"t{i:06d}"] = g
    pos = [quality[t.id] for t in unlabeled if good[t.id]]
    neg = [quality[t.id] for t in unlabeled if not good[t.id]]
    auc_unlabeled = float(np.mean([p > n for p in pos for n in neg]))
    assert auc_unlabeled >= 0.85, auc_unlabeled


@pytest.mark.slow
def test_model_is_stored_as_json_and_reloads_identically(store: Store) -> None:
    seed(store, 300)
    score(store, retrain=True)
    row = store.score_model("quality")
    assert row is not None and row.auc is not None
    params = json.loads(row.params)  # plain JSON, no pickle anywhere
    assert set(params) >= {"features", "coef", "intercept", "mean", "scale"}
    model = QualityModel.from_json(params)
    with store.engine.connect() as conn:
        ids, data = zip(*conn.execute(sa.select(TrajectoryRow.id, TrajectoryRow.data).order_by(TrajectoryRow.id).limit(50)).all())
    q = column(store, "quality")
    assert np.allclose(model.predict([json.loads(d) for d in data]), [q[i] for i in ids])
    with pytest.raises(ValueError, match="--retrain"):
        QualityModel.from_json(params | {"features": ["other"]})


@pytest.mark.slow
def test_score_without_retrain_scores_only_new_rows(store: Store) -> None:
    seed(store, 300)
    first = score(store)  # no model yet: fits one
    assert first.quality_model_id is not None and first.rows_scored == 300
    again = score(store)
    assert again.rows_scored == 0 and again.quality_model_id == first.quality_model_id
    seed(store, 30, seed_=9, start=1000)
    later = score(store)
    assert later.rows_scored == 30 and later.rows_clustered == 30 and later.quality_model_id == first.quality_model_id
    assert None not in column(store, "quality").values() and None not in column(store, "cluster").values()
    refit = score(store, retrain=True)
    assert refit.quality_model_id != first.quality_model_id and refit.rows_scored == 330


@pytest.mark.slow
def test_too_few_labels_is_reported_not_raised(store: Store) -> None:
    store.add_trajectories([traj(i, reward=1.0) for i in range(5)])
    report = score(store, retrain=True)
    assert report.quality_model_id is None and "at least 20" in (report.quality_note or "")
    assert report.rows_clustered == 5 and report.score_sources["reward"] == 5


@pytest.mark.slow
def test_cli_score_retrain_and_stats(db_url: str, store: Store) -> None:
    seed(store, 600)
    runner = CliRunner()
    r = runner.invoke(cli_app, ["score", "--retrain", "--db", db_url])
    assert r.exit_code == 0, r.output
    assert "held-out AUC" in r.output and "(refitted)" in r.output and "scored 600 rows" in r.output
    r = runner.invoke(cli_app, ["score", "--db", db_url, "--json"])
    assert r.exit_code == 0 and json.loads(r.stdout)["rows_scored"] == 0
    r = runner.invoke(cli_app, ["stats", "--db", db_url, "--json"])
    s = json.loads(r.stdout)
    assert r.exit_code == 0 and s["quality_model"]["auc"] >= 0.8 and s["quality_scored"] == 600
    assert s["score_sources"] == {"reward+feedback": 0, "reward": 400, "feedback": 0, "model": 200, "none": 0}
    r = runner.invoke(cli_app, ["stats", "--db", db_url])
    assert r.exit_code == 0 and "held-out AUC" in r.output and "model 200" in r.output


@pytest.mark.slow
def test_http_stats_report_the_model(db_url: str, store: Store) -> None:
    seed(store, 300)
    score(store, retrain=True)
    with TestClient(create_app(CollectorSettings(db_url=db_url))) as c:
        s = c.get("/v1/stats").json()
    assert s["quality_model"]["auc"] is not None and s["score_sources"]["model"] == 100 and s["clusters"] >= 2


def test_migration_0002_backfills_scores_of_an_existing_database(tmp_path: Path) -> None:
    from alembic import command

    from collector._engine import make_engine
    from collector._migrate import alembic_config

    path = tmp_path / "old.db"
    engine = make_engine(f"sqlite:///{path}")
    cfg = alembic_config(str(engine.url))
    with engine.begin() as conn:
        cfg.attributes["connection"] = conn
        command.upgrade(cfg, "0001")
    engine.dispose()
    row = "'x', 't', 'm', NULL, {s}, {r}, {r}, 1, 'h', '2025-01-01', '2025-01-01', '2025-01-01', '{{}}'"
    with sqlite3.connect(path) as conn:
        for tid, s, r in (("a", 1, 1.0), ("b", "NULL", "NULL"), ("c", 0, 0.0)):
            conn.execute(f"INSERT INTO trajectories VALUES ('{tid}', {row.format(s=s, r=r)})")
        conn.execute("INSERT INTO feedback (trajectory_id, rating, created_at) VALUES ('b', 1.0, '2025-01-02')")
        conn.execute("INSERT INTO feedback (trajectory_id, rating, created_at) VALUES ('c', 1.0, '2025-01-02')")
    store = open_store(f"sqlite:///{path}")
    try:
        assert column(store, "score") == {"a": 1.0, "b": 1.0, "c": 0.5}
        assert column(store, "score_source") == {"a": "reward", "b": "feedback", "c": "reward+feedback"}
    finally:
        store.close()


def test_postgres_score_and_stats(pg_url: str) -> None:
    store = open_store(pg_url)
    try:
        seed(store, 300)
        store.add_feedback(Feedback(trajectory_id="t000001", rating=-1.0))
        report = score(store, retrain=True)
        assert report.auc is not None and report.rows_scored == 300
        assert score(store).rows_scored == 0
        s = store.stats()
        assert s.quality_model is not None and s.score_sources["model"] == 100 and sum(s.score_sources.values()) == 300
        assert s.score_sources["reward+feedback"] + s.score_sources["feedback"] == 1
    finally:
        store.close()
