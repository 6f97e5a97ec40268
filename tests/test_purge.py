"""Store-level behaviour on both dialects: retention by age, deletion of one user's data by a
metadata key, idempotent ingest and the feedback join; plus the `collector purge` CLI.

Every store test runs on SQLite and on Postgres (see `_dbs.py`: skipped locally without
LOOPLIFT_TEST_POSTGRES_URL, failing under CI)."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest
import sqlalchemy as sa
from typer.testing import CliRunner

from collector import ConfigError, Store, UnknownTrajectoryError, open_store
from collector._cli import app as cli_app
from collector._cli import parse_duration
from collector._schema import TrajectoryRow
from collector._export import export
from sdk._types import Feedback, Message, Outcome, Trajectory


def traj(i: int, user: str | int | None = None, content: str = "what is 2+2?") -> Trajectory:
    return Trajectory(
        id=f"t-{i:04d}",
        app="demo",
        task_id=f"task-{i % 3}",
        model="policy",
        messages=[Message(role="user", content=content), Message(role="assistant", content="4")],
        outcome=Outcome(success=True, reward=1.0),
        metadata={} if user is None else {"user_id": user},
    )


@pytest.fixture
def store(any_db_url: str) -> Iterator[Store]:
    s = open_store(any_db_url)
    yield s
    s.close()


def age(store: Store, ids: list[str], days: float) -> None:
    """Pretend `ids` were ingested `days` ago (the ingest time is set by the store, not the client)."""
    then = datetime.now(timezone.utc).replace(tzinfo=None) - timedelta(days=days)
    with store.engine.begin() as conn:
        conn.execute(sa.update(TrajectoryRow).where(TrajectoryRow.id.in_(ids)).values(created_at=then))  # type: ignore[attr-defined]


def ids_in(store: Store) -> set[str]:
    with store.engine.connect() as conn:
        return set(conn.execute(sa.select(TrajectoryRow.id)).scalars())


def test_purge_older_than_deletes_old_trajectories_and_their_feedback(store: Store) -> None:
    store.add_trajectories([traj(i) for i in range(6)])
    old = ["t-0000", "t-0001", "t-0002"]
    age(store, old, days=40)
    age(store, ["t-0003"], days=29)
    for tid in ("t-0000", "t-0001", "t-0003"):
        store.add_feedback(Feedback(trajectory_id=tid, rating=1.0, text="thanks"))
    cutoff = datetime.now(timezone.utc) - timedelta(days=30)

    dry = store.purge(before=cutoff, dry_run=True)
    assert (dry.trajectories, dry.feedback, dry.dry_run) == (3, 2, True)
    assert len(ids_in(store)) == 6  # a dry run deletes nothing

    done = store.purge(before=cutoff, batch_size=2)  # two transactions
    assert (done.trajectories, done.feedback, done.dry_run) == (3, 2, False)
    assert ids_in(store) == {"t-0003", "t-0004", "t-0005"}
    assert [f.trajectory_id for f in store.feedback_for("t-0003")] == ["t-0003"]
    assert store.feedback_for("t-0000") == [] and store.stats().feedback == 1
    assert store.purge(before=cutoff).trajectories == 0  # nothing left to do


def test_purge_where_deletes_exactly_one_users_data(store: Store) -> None:
    store.add_trajectories([traj(i, user="u-42" if i % 3 == 0 else f"u-{i}") for i in range(10)])
    store.add_trajectories([traj(100, user="u-420"), traj(101, user="U-42"), traj(102), traj(103, user=None)])
    store.add_feedback(Feedback(trajectory_id="t-0003", text="mine"))
    store.add_feedback(Feedback(trajectory_id="t-0004", text="not mine"))

    dry = store.purge(where={"user_id": "u-42"}, dry_run=True)
    assert (dry.trajectories, dry.feedback) == (4, 1)
    done = store.purge(where={"user_id": "u-42"}, batch_size=3)
    assert (done.trajectories, done.feedback) == (4, 1)
    left = ids_in(store)
    assert not left & {"t-0000", "t-0003", "t-0006", "t-0009"}
    assert {"t-0100", "t-0101", "t-0102", "t-0103", "t-0004"} <= left and len(left) == 10
    assert [f.text for f in store.feedback_for("t-0004")] == ["not mine"]


def test_purge_where_and_older_than_combine(store: Store) -> None:
    store.add_trajectories([traj(i, user="u-7") for i in range(4)] + [traj(9, user="u-8")])
    age(store, ["t-0000", "t-0001", "t-0009"], days=10)
    r = store.purge(before=datetime.now(timezone.utc) - timedelta(days=5), where={"user_id": "u-7"})
    assert r.trajectories == 2 and ids_in(store) == {"t-0002", "t-0003", "t-0009"}


def test_purge_where_matches_numbers_by_digits_and_odd_keys(store: Store) -> None:
    a, b, c = traj(1, user=42), traj(2, user="42"), traj(3, user=421)
    c.metadata["tenant id.v2"] = "acme"
    store.add_trajectories([a, b, c])
    assert store.purge(where={"user_id": "42"}, dry_run=True).trajectories == 2
    assert store.purge(where={"tenant id.v2": "acme"}).trajectories == 1
    assert store.purge(where={"no_such_key": "x"}).trajectories == 0


@pytest.mark.parametrize("value", ["alice@example.org", "+44 20 7946 0958", "4111 1111 1111 1111"])
def test_purge_refuses_a_pii_value_and_says_why(store: Store, value: str) -> None:
    # The anonymizer stored this user id as a placeholder shared with every other user's email.
    store.add_trajectories([traj(1, user=value), traj(2, user="bob@example.org")])
    stored = store.get("t-0001")
    assert stored is not None and stored.metadata["user_id"] != value
    with pytest.raises(ConfigError, match="looks like personal data .* non-personal user key"):
        store.purge(where={"user_id": value})
    placeholder = stored.metadata["user_id"]
    with pytest.raises(ConfigError, match="placeholder"):
        store.purge(where={"user_id": placeholder})
    assert len(ids_in(store)) == 2


def test_purge_needs_a_condition(store: Store) -> None:
    store.add_trajectories([traj(1)])
    with pytest.raises(ConfigError, match="refusing to delete everything"):
        store.purge()
    with pytest.raises(ConfigError, match="quotes"):
        store.purge(where={'a"b': "x"})
    assert ids_in(store) == {"t-0001"}


def test_purged_id_can_be_ingested_again(store: Store) -> None:
    store.add_trajectories([traj(1, user="u-1")])
    store.purge(where={"user_id": "u-1"})
    r = store.add_trajectories([traj(1, user="u-1", content="again")])
    assert r.accepted == 1 and store.get("t-0001").messages[0].content == "again"  # type: ignore[union-attr]


def test_ingest_is_idempotent_and_first_duplicate_in_a_batch_wins(store: Store) -> None:
    r = store.add_trajectories([traj(1), traj(2, content="first"), traj(2, content="second"), traj(3)])
    assert (r.accepted, r.duplicates, r.ids) == (3, 1, ["t-0001", "t-0002", "t-0002", "t-0003"])
    assert store.get("t-0002").messages[0].content == "first"  # type: ignore[union-attr]
    r = store.add_trajectories([traj(3, content="changed"), traj(4)])  # a retry with one new id
    assert (r.accepted, r.duplicates) == (1, 1)
    assert store.get("t-0003").messages[0].content == "what is 2+2?"  # type: ignore[union-attr]
    assert store.count() == 4


def test_feedback_joins_by_id_oldest_first(store: Store) -> None:
    store.add_trajectories([traj(1), traj(2)])
    first, joined = store.add_feedback(Feedback(trajectory_id="t-0001", rating=-1.0, correction="use 5, mail x@y.org"))
    second, _ = store.add_feedback(Feedback(trajectory_id="t-0001", rating=1.0))
    assert joined == "t-0001"
    fb = store.feedback_for("t-0001")
    assert [f.id for f in fb] == [first, second] and fb[0].correction == "use 5, mail <EMAIL_1>"
    assert store.feedback_for("t-0002") == []
    with pytest.raises(UnknownTrajectoryError, match="nope"):
        store.add_feedback(Feedback(trajectory_id="nope", rating=1.0))
    assert store.stats().feedback == 2


def test_feedback_while_ingest_writes_never_fails(store: Store) -> None:
    # Feedback reads (does the trajectory exist?) then writes; under concurrent ingest a deferred
    # SQLite transaction failed that write with "database is locked" (~500 of 1,500 before the fix).
    store.add_trajectories([traj(1)])
    stop = time.monotonic() + 1.5
    errors: list[str] = []
    done = [0, 0]

    def ingest() -> None:
        k = 1000
        while time.monotonic() < stop:
            store.add_trajectories([traj(k + i) for i in range(20)])
            k += 20
            done[0] += 1

    def feedback() -> None:
        while time.monotonic() < stop:
            try:
                store.add_feedback(Feedback(trajectory_id="t-0001", rating=1.0))
                done[1] += 1
            except Exception as e:  # noqa: BLE001 - collected and asserted below
                errors.append(repr(e))
            time.sleep(0.002)

    threads = [threading.Thread(target=ingest), threading.Thread(target=feedback), threading.Thread(target=feedback)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert errors == [] and done[0] > 0 and done[1] > 0
    assert len(store.feedback_for("t-0001")) == done[1]


def test_sqlite_purge_leaves_no_copy_of_deleted_text_in_the_files(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'c.db'}"
    s = open_store(url)
    marker = "ZEBRA-MARKER-{}-" + "x" * 3000  # overflow pages too
    s.add_trajectories([traj(i, user="u-42" if i < 5 else "u-1", content=marker.format(i)) for i in range(10)])
    s.add_trajectories([traj(100 + i, user="u-1") for i in range(50)])  # more writes after them
    r = s.purge(where={"user_id": "u-42"})
    assert r.trajectories == 5 and r.wal_truncated is True
    s.close()
    raw = b"".join(p.read_bytes() for p in tmp_path.glob("c.db*"))
    for i in range(10):
        assert (f"ZEBRA-MARKER-{i}-".encode() in raw) == (i >= 5), i


# ---- CLI ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("text,expected", [("30d", timedelta(days=30)), ("12h", timedelta(hours=12)), ("2w", timedelta(weeks=2)),
                                           ("90m", timedelta(minutes=90)), ("45s", timedelta(seconds=45)), (" 7 d ", timedelta(days=7))])
def test_parse_duration(text: str, expected: timedelta) -> None:
    assert parse_duration(text) == expected


@pytest.mark.parametrize("text", ["30", "d", "30x", "1.5d", "-3d", "0d", "30 days", "3d4h"])
def test_parse_duration_rejects_with_the_units(text: str) -> None:
    with pytest.raises(ConfigError, match=r"s \(seconds\), m \(minutes\), h \(hours\), d \(days\) or w \(weeks\)"):
        parse_duration(text)


def test_cli_purge(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'c.db'}"
    s = open_store(url)
    s.add_trajectories([traj(i, user="u-42" if i < 3 else "u-1") for i in range(8)])
    age(s, ["t-0003", "t-0004"], days=31)
    s.add_feedback(Feedback(trajectory_id="t-0004", rating=1.0))
    s.close()
    run = CliRunner().invoke

    r = run(cli_app, ["purge", "--older-than", "30d", "--dry-run", "--db", url])
    assert r.exit_code == 0 and "would delete 2 trajectories and 1 feedback rows" in r.output, r.output
    r = run(cli_app, ["purge", "--older-than", "30d", "--db", url])
    assert r.exit_code == 0 and "deleted 2 trajectories and 1 feedback rows (ingested before" in r.output, r.output
    r = run(cli_app, ["purge", "--where", "user_id=u-42", "--db", url, "--json"])
    assert r.exit_code == 0, r.output
    assert json.loads(r.stdout) | {"before": None} == {
        "trajectories": 3, "feedback": 0, "dry_run": False, "before": None, "where": {"user_id": "u-42"}, "wal_truncated": True}
    s = open_store(url)
    assert s.count() == 3
    s.close()

    for args, needle in [
        (["purge"], "--older-than DURATION and/or --where"),
        (["purge", "--older-than", "30x"], "not a duration"),
        (["purge", "--where", "user_id"], "not KEY=VALUE"),
        (["purge", "--where", "user_id=jo@example.org"], "looks like personal data"),
    ]:
        r = run(cli_app, [*args, "--db", url])
        assert r.exit_code == 2, (args, r.output)
        assert needle in r.output and "Traceback" not in r.output, (args, r.output)


def test_sqlite_export_page_query_is_one_index_range_scan(tmp_path: Path) -> None:
    # The keyset page after the first must not be planned as MULTI-INDEX OR + a full sort: that
    # re-reads every remaining row per page, so export time grows with the square of the table.
    s = open_store(f"sqlite:///{tmp_path / 'c.db'}")
    for b in range(4):
        s.add_trajectories([traj(b * 10 + i) for i in range(10)])
    seen: list[tuple[str, tuple[object, ...]]] = []

    @sa.event.listens_for(s.engine, "before_cursor_execute")
    def capture(_c: object, _cur: object, statement: str, params: object, _ctx: object, _many: bool) -> None:
        if statement.lstrip().upper().startswith("SELECT") and "trajectories.data" in statement:
            seen.append((statement, tuple(params)))  # type: ignore[arg-type]

    export(s, tmp_path / "out.jsonl", batch_size=7)
    ids = [json.loads(line)["id"] for line in (tmp_path / "out.jsonl").read_text().splitlines()]
    assert len(ids) == 40 and len(seen) >= 2
    statement, params = seen[1]
    with s.engine.connect() as conn:
        plan = " | ".join(str(r[-1]) for r in conn.exec_driver_sql("EXPLAIN QUERY PLAN " + statement, params))
    s.close()
    assert "MULTI-INDEX OR" not in plan and "TEMP B-TREE FOR ORDER BY" not in plan, plan
    assert "USING INDEX ix_trajectories_created_at_id" in plan, plan
