"""The collector service end to end: real SQLite files, real HTTP on 127.0.0.1 where the wire
matters (auth, size cap, PII on disk), TestClient elsewhere, the CLI through typer's CliRunner."""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from fastapi.testclient import TestClient

import collector
from collector import (
    CollectorSettings,
    create_app,
    export,
    open_store,
    serve_in_thread,
)
from _trajs import body, traj
from sdk._types import Message, Step, ToolCall, ToolCallFunction, Trajectory

KEY = "test-key-123"


@pytest.fixture
def client(db_url: str) -> Iterator[TestClient]:
    with TestClient(create_app(CollectorSettings(db_url=db_url))) as c:
        yield c


@pytest.fixture
def server(db_url: str) -> Iterator[collector.ServerHandle]:
    with serve_in_thread(CollectorSettings(db_url=db_url, api_keys=(KEY,), max_body_bytes=64 * 1024)) as h:
        yield h


def row_count(db_url: str, table: str = "trajectories") -> int:
    with sqlite3.connect(db_url.removeprefix("sqlite:///")) as conn:
        return conn.execute(f"SELECT count(*) FROM {table}").fetchone()[0]


def test_ingest_is_idempotent(client: TestClient, db_url: str) -> None:
    b = body(traj(1), traj(2))
    r1 = client.post("/v1/trajectories", content=b)
    assert r1.status_code == 200 and r1.json() == {"accepted": 2, "duplicates": 0, "ids": ["traj-0001", "traj-0002"]}
    r2 = client.post("/v1/trajectories", content=b)
    assert r2.status_code == 200 and r2.json()["accepted"] == 0 and r2.json()["duplicates"] == 2
    # Duplicates within one batch are also stored once.
    r3 = client.post("/v1/trajectories", content=body(traj(3), traj(3)))
    assert r3.json()["accepted"] == 1 and r3.json()["duplicates"] == 1
    assert row_count(db_url) == 3


def test_scores_come_from_outcome(client: TestClient, db_url: str) -> None:
    client.post("/v1/trajectories", content=body(traj(1, reward=0.25), traj(2, reward=None)))
    with sqlite3.connect(db_url.removeprefix("sqlite:///")) as conn:
        rows = {r[0]: r[1:] for r in conn.execute("SELECT id, success, reward, score, n_messages FROM trajectories")}
    assert rows["traj-0001"] == (0, 0.25, 0.25, 4)
    assert rows["traj-0002"] == (None, None, None, 4)


def test_malformed_batch_is_422_naming_the_field_and_stores_nothing(client: TestClient, db_url: str) -> None:
    good = traj(1).model_dump(mode="json")
    bad = traj(2).model_dump(mode="json")
    del bad["task_id"]
    r = client.post("/v1/trajectories", json={"trajectories": [good, bad]})
    assert r.status_code == 422
    assert "trajectories.1.task_id" in r.json()["error"]["message"] and "Field required" in r.json()["error"]["message"]
    assert r.json()["errors"][0]["loc"] == ["trajectories", 1, "task_id"]
    assert row_count(db_url) == 0
    r = client.post("/v1/trajectories", content=b"{not json")
    assert r.status_code == 422 and "invalid trajectory batch" in r.json()["error"]["message"]


def test_422_does_not_echo_submitted_values(client: TestClient) -> None:
    bad = traj(1).model_dump(mode="json")
    bad["messages"][0]["role"] = "jane@secret.example"
    r = client.post("/v1/trajectories", json={"trajectories": [bad]})
    assert r.status_code == 422 and "jane@secret.example" not in r.text


def test_oversized_body_is_413_over_http(server: collector.ServerHandle, db_url: str) -> None:
    big = traj(1, content="x" * 100_000)
    r = httpx.post(f"{server.url}/v1/trajectories", content=body(big), headers={"X-API-Key": KEY})
    assert r.status_code == 413 and "max_body_bytes" in r.json()["error"]["message"]

    def chunks() -> Iterator[bytes]:  # no Content-Length: the cap is enforced while streaming
        data = body(big).encode()
        for i in range(0, len(data), 8192):
            yield data[i : i + 8192]

    r = httpx.post(f"{server.url}/v1/trajectories", content=chunks(), headers={"X-API-Key": KEY})
    assert r.status_code == 413
    assert row_count(db_url) == 0


def test_api_key_required_when_configured(server: collector.ServerHandle, db_url: str) -> None:
    url = f"{server.url}/v1/trajectories"
    r = httpx.post(url, content=body(traj(1)))
    assert r.status_code == 401 and "Authorization: Bearer" in r.json()["error"]["message"]
    assert httpx.post(url, content=body(traj(1)), headers={"Authorization": "Bearer wrong"}).status_code == 401
    assert httpx.post(f"{server.url}/v1/feedback", json={"trajectory_id": "traj-0001"}).status_code == 401
    assert row_count(db_url) == 0
    assert httpx.post(url, content=body(traj(1)), headers={"Authorization": f"Bearer {KEY}"}).status_code == 200
    assert httpx.post(url, content=body(traj(2)), headers={"X-API-Key": KEY}).status_code == 200
    assert row_count(db_url) == 2
    assert httpx.get(f"{server.url}/health").json()["status"] == "ok"


def test_feedback_joins_by_id_and_404_for_unknown(client: TestClient, db_url: str) -> None:
    client.post("/v1/trajectories", content=body(traj(1)))
    r = client.post("/v1/feedback", json={"trajectory_id": "traj-0001", "rating": -1, "text": "wrong, mail me at a@b.org"})
    assert r.status_code == 200 and r.json()["trajectory_id"] == "traj-0001"
    r = client.post("/v1/feedback", json={"trajectory_id": "nope", "rating": 1})
    assert r.status_code == 404 and "nope" in r.json()["error"]["message"]
    assert client.post("/v1/feedback", json={"trajectory_id": "traj-0001", "rating": 5}).status_code == 422
    store = open_store(db_url)
    fb = store.feedback_for("traj-0001")
    store.close()
    assert [(f.rating, f.text) for f in fb] == [(-1.0, "wrong, mail me at <EMAIL_1>")]


def test_stats_counts_per_app_and_version(client: TestClient) -> None:
    client.post(
        "/v1/trajectories",
        content=body(
            traj(1, reward=1.0, app="a", version="policy-v1"),
            traj(2, reward=0.0, app="a", version="policy-v2"),
            traj(3, reward=0.5, app="b", version="policy-v2"),
            traj(4, reward=None, app="b", version="policy-v2"),
        ),
    )
    s = client.get("/v1/stats").json()
    assert (s["total"], s["with_outcome"], s["successes"]) == (4, 3, 1)
    assert s["mean_reward"] == pytest.approx(0.5)
    assert s["by_app"]["a"] == {"total": 2, "with_outcome": 2, "successes": 1, "mean_reward": 0.5}
    assert s["by_app"]["b"]["total"] == 2 and s["by_app"]["b"]["with_outcome"] == 1
    assert s["by_served_version"]["policy-v2"]["total"] == 3
    assert s["by_served_version"]["policy-v1"]["successes"] == 1


PII = {
    "email": "alice.smith@private-mail.example",
    "phone": "+44 20 7946 0958",
    "us_phone": "(555) 123-4567",
    "card": "4111 1111 1111 1111",
    "key": "sk-proj-ZYXWVUTSRQPONMLKJIHGFEDCBA987654",
    "aws": "AKIAIOSFODNN7EXAMPLE",
    "ip": "203.0.113.77",
}


def test_pii_never_reaches_the_database_file(server: collector.ServerHandle, db_url: str, tmp_path: Path) -> None:
    text = " ".join(f"{k}: {v}" for k, v in PII.items())
    t = traj(1, content=f"My details: {text}")
    t.metadata["contact"] = PII["email"]
    t.steps.append(Step(index=0, action=f"lookup('{PII['card']}')", observation=PII["phone"]))
    r = httpx.post(f"{server.url}/v1/trajectories", content=body(t), headers={"X-API-Key": KEY})
    assert r.status_code == 200 and r.json()["accepted"] == 1
    r = httpx.post(
        f"{server.url}/v1/feedback",
        json={"trajectory_id": t.id, "correction": f"use {PII['us_phone']}", "text": PII["key"]},
        headers={"X-API-Key": KEY},
    )
    assert r.status_code == 200
    server.stop()  # checkpoint the WAL into the main file by closing every connection
    raw = b"".join(p.read_bytes() for p in tmp_path.glob("collector.db*"))
    assert b"<EMAIL_1>" in raw  # the row is there ...
    for value in PII.values():  # ... and none of the originals, in any encoding they were sent
        assert value.encode() not in raw, value
        assert value.replace(" ", "").encode() not in raw, value
    stored = open_store(db_url).get(t.id)
    assert stored is not None and stored.turns[0].completion_token_ids is None
    assert stored.metadata["looplift_token_ids_redacted"] is True


def test_token_ids_kept_when_no_pii(client: TestClient, db_url: str) -> None:
    client.post("/v1/trajectories", content=body(traj(1)))
    stored = open_store(db_url).get("traj-0001")
    assert stored is not None and stored.turns[0].completion_token_ids == [3]
    assert "looplift_token_ids_redacted" not in stored.metadata


def test_migrations_create_schema_and_second_start_is_noop(tmp_path: Path) -> None:
    from alembic.autogenerate import compare_metadata
    from alembic.runtime.migration import MigrationContext

    from collector._schema import metadata

    url = f"sqlite:///{tmp_path / 'fresh' / 'c.db'}"
    s1 = open_store(url)
    s1.add_trajectories([traj(1)])
    s1.close()
    with sqlite3.connect(tmp_path / "fresh" / "c.db") as conn:
        assert conn.execute("SELECT version_num FROM collector_alembic_version").fetchall() == [("0006",)]
        assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    s2 = open_store(url)  # second startup: upgrade head is a no-op, data kept
    assert s2.count() == 1
    with s2.engine.connect() as conn:
        diff = compare_metadata(MigrationContext.configure(conn, opts={"compare_type": True}), metadata)
    s2.close()
    # The migration builds exactly what the models declare (only Alembic's own table differs).
    assert [d for d in diff if not (d[0] == "remove_table" and d[1].name == "collector_alembic_version")] == []


def test_migration_0005_keeps_feedback_and_old_corrections_take_the_trajectory_rule(any_db_url: str,
                                                                                     tmp_path: Path) -> None:
    """A database at 0004 with a trajectory and a correction (as a live collector leaves it) upgrades in place.
    Catches: a migration that loses or rewrites feedback rows, a `response_id` that is not NULL on old rows, and
    old corrections (no response id) placed anywhere but the last assistant message (the trajectory-id rule)."""
    import sqlalchemy as sa
    from alembic import command

    from collector._engine import make_engine
    from collector._migrate import alembic_config

    engine = make_engine(any_db_url)
    cfg = alembic_config(engine.url.render_as_string(hide_password=False))
    with engine.begin() as conn:
        cfg.attributes["connection"] = conn
        command.upgrade(cfg, "0004")
    t, at = traj(1, reward=0.0), "2025-01-01 00:00:00"
    with engine.begin() as conn:
        conn.execute(sa.text(
            "INSERT INTO trajectories (id, app, task_id, model, n_messages, content_hash, created_at, started_at, "
            "finished_at, data) VALUES (:id, 'demo', 'task-1', 'policy', 4, 'h', :at, :at, :at, :data)"),
            {"id": t.id, "at": at, "data": t.model_dump_json()})
        conn.execute(sa.text("INSERT INTO feedback (trajectory_id, rating, correction, created_at, key_id) "
                             "VALUES (:id, -1.0, 'It is 4.', :at, 'k-old')"), {"id": t.id, "at": at})
    engine.dispose()
    store = open_store(any_db_url)  # migrates to head with the rows in place
    try:
        (fb,) = store.feedback_for(t.id)
        assert (fb.correction, fb.rating, fb.key_id, fb.response_id) == ("It is 4.", -1.0, "k-old", None)
        export(store, tmp_path / "sft.jsonl")
        # 0006 numbered the row stored before it, and ingest (Postgres: its sequence) goes on above it.
        assert store.ingest_mark() == 1
        store.add_trajectories([traj(2)], anonymize=False)
        assert store.ingest_mark() == 2 and store.window_stats(after_mark=1).total == 1
    finally:
        store.close()
    (line,) = [json.loads(x) for x in (tmp_path / "sft.jsonl").read_text().splitlines()]
    assert [m["role"] for m in line["messages"]] == ["user", "assistant", "tool", "assistant"]
    assert line["messages"][1]["tool_calls"][0]["function"]["name"] == "python"
    assert line["messages"][3] == {"role": "assistant", "content": "It is 4."}


def test_idempotent_insert_compiles_for_postgres() -> None:
    # The statement ingest builds for Postgres, compiled (the Postgres cases run it for real).
    from sqlalchemy.dialects import postgresql

    from collector._ingest import insert_statement

    sql = str(insert_statement("postgresql").compile(dialect=postgresql.dialect()))
    assert "ON CONFLICT (id) DO NOTHING" in sql and "RETURNING trajectories.id" in sql


ODD = "  Grüße,\n\tworld\x1c\x85 \u2028“quoted” \\ back\x00slash \U0001F600 \x7f  "


def test_content_hash_is_stable_across_versions() -> None:
    # Export's exact dedup compares stored hashes of old rows with new ones: these are the values the
    # earlier json.dumps(sort_keys=True) implementation gave, whitespace, escapes and non-ASCII included.
    from collector._ingest import content_hash

    odd = Trajectory(id="odd", task_id="t", model="m", messages=[
        Message(role="system", content=ODD), Message(role="user", content="hi", name="bob"),
        Message(role="assistant", tool_calls=[ToolCall(id="x1", function=ToolCallFunction(name='f"n', arguments=ODD))]),
        Message(role="tool", content="", tool_call_id="x1")])
    assert content_hash(traj(0)) == "c61494299851b0fabe28645fd335bfa7bfbe56b73489d993adfe69021ecb3612"
    assert content_hash(odd) == "d67b1bb9ebf6cb1fab48d6046c53c7266d87adf8d0e691158b88f3d941e6deb8"


def test_content_hash_is_the_documented_json_for_any_text() -> None:
    import hashlib
    import json
    import random

    from collector._ingest import content_hash

    def documented(t: Trajectory) -> str:  # what the docstring of content_hash promises
        norm = [{"role": m.role, "content": " ".join(m.content.split()) if m.content else None,
                 **({"name": m.name} if m.name else {}),
                 **({"tool_calls": [[c.function.name, " ".join(c.function.arguments.split())] for c in m.tool_calls]}
                    if m.tool_calls else {})} for m in t.messages]
        blob = json.dumps(norm, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
        return hashlib.sha256(blob.encode("utf-8")).hexdigest()

    rng = random.Random(7)
    alphabet = ODD + "a\"/\b\f\r\x0b\x1f\xa0\u2029\ufeff<>&'"
    for _ in range(300):
        s = "".join(rng.choice(alphabet) for _ in range(rng.randrange(0, 24)))
        t = Trajectory(task_id="t", model="m", messages=[
            Message(role="user", content=s, name=s or None),
            Message(role="assistant", tool_calls=[ToolCall(id="c", function=ToolCallFunction(name=s, arguments=s))])])
        assert content_hash(t) == documented(t), repr(s)


def test_settings_from_env(tmp_path: Path) -> None:
    s = CollectorSettings.from_env({"LOOPLIFT_HOME": str(tmp_path), "LOOPLIFT_COLLECTOR_KEYS": "a, b,,"})
    assert s.db_url == f"sqlite:///{tmp_path / 'collector.db'}" and s.api_keys == ("a", "b")
    s = CollectorSettings.from_env({"LOOPLIFT_COLLECTOR_DB": "sqlite:////x/y.db"}, max_body_bytes=10)
    assert s.db_url == "sqlite:////x/y.db" and s.max_body_bytes == 10 and s.api_keys == ()
    with pytest.raises(collector.ConfigError, match="max_body_bytes"):
        CollectorSettings.from_env({}, max_body_bytes=0)


def test_postgres_same_code_path(pg_url: str, tmp_path: Path) -> None:
    with TestClient(create_app(CollectorSettings(db_url=pg_url))) as c:
        assert c.post("/v1/trajectories", content=body(traj(1, reward=1.0), traj(2, reward=0.0))).json()["accepted"] == 2
        r = c.post("/v1/trajectories", content=body(traj(1), traj(3, content="mail x@y.org")))
        assert r.json() == {"accepted": 1, "duplicates": 1, "ids": ["traj-0001", "traj-0003"]}
        assert c.post("/v1/feedback", json={"trajectory_id": "traj-0002", "rating": 1}).status_code == 200
        s = c.get("/v1/stats").json()
        assert (s["total"], s["successes"], s["feedback"]) == (3, 2, 1)
    store = open_store(pg_url)  # second startup against a migrated Postgres: no-op
    assert store.get("traj-0003").messages[0].content == "mail <EMAIL_1>"  # type: ignore[union-attr]
    m = export(store, tmp_path / "pg.jsonl", min_reward=0.5)
    store.close()
    assert m.count == 2
