"""Schema migrations at open: `alembic upgrade head` on the store's own connection.

The schema is created and changed only by the migrations shipped in `collector/migrations`
(`migrations/env.py` is the Alembic environment); `open_store` calls `migrate`, a no-op when the
database is current. Several workers or replicas may start on a fresh database at once: SQLite's
write lock (a transaction begun IMMEDIATE) or a Postgres advisory lock (in `env.py`) lets one
migrate while the others wait and then find the schema at head.

Deliberately not here: `create_all` (never over a live database) and downgrades (a database
created by a newer looplift needs that version).
"""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

from sqlalchemy.engine import Engine

from . import _defaults
from .errors import MigrationError

_MIGRATIONS_DIR = Path(__file__).resolve().parent / "migrations"


def alembic_config(engine_url: str) -> Any:
    """An Alembic config for the shipped migrations and `engine_url` (no alembic.ini needed)."""
    from alembic.config import Config

    cfg = Config()
    cfg.set_main_option("script_location", str(_MIGRATIONS_DIR))
    cfg.set_main_option("sqlalchemy.url", engine_url.replace("%", "%%"))
    return cfg


_MIGRATE_LOCK = threading.Lock()


def migrate(engine: Engine) -> str:
    """Run `alembic upgrade head` on `engine` (a no-op when current); returns the head revision."""
    from alembic import command
    from alembic.runtime.migration import MigrationContext

    cfg = alembic_config(engine.url.render_as_string(hide_password=False))
    try:
        # Several workers or replicas may start on a fresh database at once: on SQLite the write
        # lock (IMMEDIATE) serializes them, on Postgres the advisory lock in migrations/env.py;
        # the later ones find the schema at head and do nothing.
        # Alembic keeps its `context` in module globals: one migration per process at a time.
        with _MIGRATE_LOCK, engine.connect() as conn, conn.execution_options(sqlite_immediate=True).begin():
            cfg.attributes["connection"] = conn
            command.upgrade(cfg, "head")
        with engine.connect() as conn:
            ctx = MigrationContext.configure(conn, opts={"version_table": _defaults.ALEMBIC_VERSION_TABLE})
            rev = ctx.get_current_revision()
    except Exception as e:  # any driver/alembic failure: say which database and what to do
        raise MigrationError(
            f"could not migrate the collector database {engine.url.render_as_string(hide_password=True)} "
            f"to the latest schema: {e}. Check that the URL is reachable and writable; a database "
            "created by a newer looplift needs that version."
        ) from e
    return rev or ""
