"""Database backends for parametrized collector tests: SQLite always, Postgres when
LOOPLIFT_TEST_POSTGRES_URL names a server (`.ci/run` starts one with scripts/setup_postgres.sh).

Each Postgres case gets a schema of its own (dropped afterwards) through the URL's `search_path`,
so cases never see each other's rows and the test database's other schemas are left alone.
The Postgres case is marked `postgres`: without the URL it skips, except under CI (`CI` set), where
it fails (tests/_resources.py): CI must test the real server, and a silently skipped dialect is how
a Postgres-only bug ships.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from _resources import PG_ENV, require

DIALECTS = ["sqlite", pytest.param("postgresql", marks=pytest.mark.postgres)]


def postgres_base_url() -> str:
    """The Postgres URL to test against; skips (locally) or fails (CI) without one."""
    require("postgres")
    return os.environ[PG_ENV].strip()


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
