"""Database backends for parametrized collector tests: SQLite always, Postgres when
LOOPLIFT_TEST_POSTGRES_URL names a server (`.ci/run` starts one with scripts/setup_postgres.sh).

Each Postgres case gets a schema of its own (dropped afterwards) through the URL's `search_path`,
so cases never see each other's rows and the test database's other schemas are left alone.
Without the URL the Postgres cases skip, except under CI (`CI` set), where they fail: CI must
test the real server, and a silently skipped dialect is how a Postgres-only bug ships.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

PG_ENV = "LOOPLIFT_TEST_POSTGRES_URL"
DIALECTS = ["sqlite", "postgresql"]


def postgres_base_url() -> str:
    """The Postgres URL to test against; skips (locally) or fails (CI) without one."""
    url = os.environ.get(PG_ENV, "").strip()
    if url:
        return url
    if os.environ.get("CI"):
        pytest.fail(f"CI is set but {PG_ENV} is not: .ci/run must start PostgreSQL (scripts/setup_postgres.sh) and export it")
    pytest.skip(f"set {PG_ENV}=postgresql+psycopg://USER@127.0.0.1:PORT/DB to run the Postgres case")


@contextmanager
def postgres_schema(base_url: str) -> Iterator[str]:
    """A URL whose connections use a fresh schema (created here, dropped with everything in it on exit)."""
    import sqlalchemy as sa

    schema = f"t_{uuid.uuid4().hex[:12]}"
    admin = sa.create_engine(base_url)
    with admin.begin() as conn:
        conn.execute(sa.text(f'CREATE SCHEMA "{schema}"'))
    url = sa.make_url(base_url).update_query_dict({"options": f"-csearch_path={schema}"})
    try:
        yield url.render_as_string(hide_password=False)
    finally:
        with admin.begin() as conn:
            conn.execute(sa.text(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE'))
        admin.dispose()


@contextmanager
def database(dialect: str, tmp_path: Path) -> Iterator[str]:
    """A fresh, empty collector database URL of `dialect` (`sqlite` or `postgresql`)."""
    if dialect == "sqlite":
        yield f"sqlite:///{tmp_path / 'collector.db'}"
        return
    with postgres_schema(postgres_base_url()) as url:
        yield url
