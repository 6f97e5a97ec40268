"""Alembic environment for the collector's schema.

Run by `collector._migrate.migrate`, which passes an open connection in `config.attributes`; no
alembic.ini is needed. Also works from the alembic CLI with `sqlalchemy.url` set (offline
`--sql` mode included). The version table is `collector_alembic_version` so other components can
migrate their own tables in the same database.
"""

from __future__ import annotations

from alembic import context
from sqlalchemy import create_engine, text

from collector import _defaults
from collector._schema import metadata

config = context.config
# Any constant works: it only has to be the same for every collector replica.
_PG_LOCK_ID = 0x6C6F6F70  # "loop"


def _configure(**kw: object) -> None:
    context.configure(
        target_metadata=metadata,
        version_table=_defaults.ALEMBIC_VERSION_TABLE,
        render_as_batch=True,  # SQLite cannot ALTER most things; batch mode rebuilds tables
        compare_type=True,
        **kw,  # type: ignore[arg-type]
    )


def run_offline() -> None:
    _configure(url=config.get_main_option("sqlalchemy.url"), literal_binds=True)
    with context.begin_transaction():
        context.run_migrations()


def run_online() -> None:
    connection = config.attributes.get("connection")
    if connection is None:
        engine = create_engine(config.get_main_option("sqlalchemy.url") or "")
        with engine.begin() as conn:
            config.attributes["connection"] = conn
            run_online()
        return
    if connection.dialect.name == "postgresql":
        # Several replicas may start together; one migrates, the others wait and find it done.
        connection.execute(text("SELECT pg_advisory_xact_lock(:k)"), {"k": _PG_LOCK_ID})
    _configure(connection=connection)
    with context.begin_transaction():
        context.run_migrations()


if context.is_offline_mode():
    run_offline()
else:
    run_online()
