"""The `collector` command: `serve`, `export`, `stats`, `anonymize`.

Flags map 1:1 onto `CollectorSettings` and `export()` arguments; `--db` defaults to
`LOOPLIFT_COLLECTOR_DB` or `sqlite:///$LOOPLIFT_HOME/collector.db`. Errors print one line (no
traceback) and exit non-zero: 2 for bad input, 1 when the database or filesystem fails.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from datetime import datetime
from pathlib import Path
from typing import Annotated, Any, NoReturn, TypeVar

import typer
from rich.console import Console
from rich.progress import Progress, SpinnerColumn, TextColumn, TimeElapsedColumn
from rich.table import Table
from sqlalchemy.exc import SQLAlchemyError

from . import _defaults
from .errors import CollectorError, ConfigError, UnsupportedFormatError

app = typer.Typer(
    name="collector",
    help="looplift collector: ingest trajectories, anonymize, store, export training data.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)
_out = Console()
_err = Console(stderr=True)

T = TypeVar("T")

_DB_HELP = "Database URL (default: $LOOPLIFT_COLLECTOR_DB or sqlite:///$LOOPLIFT_HOME/collector.db)."


def _fail(message: str, code: int) -> NoReturn:
    _err.print(f"[bold red]error:[/] {message}", highlight=False, markup=True)
    raise typer.Exit(code)


def _guard(fn: Callable[[], T]) -> T:
    try:
        return fn()
    except (ConfigError, UnsupportedFormatError) as e:
        _fail(str(e), 2)
    except CollectorError as e:
        _fail(str(e), 1)
    except (OSError, SQLAlchemyError) as e:  # disk full, permissions, database gone
        _fail(f"{type(e).__name__}: {str(e).splitlines()[0]}", 1)


def _settings(db: str | None) -> Any:
    from ._settings import CollectorSettings

    return _guard(lambda: CollectorSettings.from_env(db_url=db))


def _parse_time(value: str | None, flag: str) -> datetime | None:
    if value is None:
        return None
    try:
        return datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        _fail(f"{flag} {value!r} is not an ISO date/time; use e.g. 2025-01-31 or 2025-01-31T12:00:00Z", 2)


@app.command()
def serve(
    host: str = typer.Option(_defaults.DEFAULT_HOST, help="Interface to bind (keep loopback unless proxied)."),
    port: int = typer.Option(_defaults.DEFAULT_PORT, help="TCP port."),
    db: str | None = typer.Option(None, "--db", help=_DB_HELP),
) -> None:
    """Run the ingest API (POST /v1/trajectories, /v1/feedback, GET /v1/stats, /health)."""
    import uvicorn

    from ._app import create_app

    settings = _settings(db)
    api = _guard(lambda: create_app(settings))
    auth = f"{len(settings.api_keys)} API key(s)" if settings.api_keys else "no API key (open)"
    _err.print(f"collector on http://{host}:{port}  db={settings.db_url}  {auth}", highlight=False)
    uvicorn.run(api, host=host, port=port, log_level="info")


@app.command("export")
def export_cmd(
    out: Annotated[Path, typer.Option("--out", "-o", help="JSONL file to write; FILE.manifest.json goes beside it.")],
    format: str = typer.Option("sft", "--format", "-f", help="Export format: sft (dpo, grpo planned)."),
    min_reward: float | None = typer.Option(None, "--min-reward", help="Keep trajectories with reward >= R."),
    app_name: str | None = typer.Option(None, "--app", help="Keep only this app."),
    since: str | None = typer.Option(None, "--since", help="Ingested at/after this ISO time (UTC if no zone)."),
    until: str | None = typer.Option(None, "--until", help="Ingested before this ISO time (UTC if no zone)."),
    limit: int | None = typer.Option(None, "--limit", min=0, help="At most N lines."),
    db: str | None = typer.Option(None, "--db", help=_DB_HELP),
    as_json: bool = typer.Option(False, "--json", help="Print the manifest as JSON."),
) -> None:
    """Write curated training data (JSONL) and its manifest."""
    from ._export import export

    settings = _settings(db)
    t_since, t_until = _parse_time(since, "--since"), _parse_time(until, "--until")
    with Progress(
        SpinnerColumn(), TextColumn("{task.description}"), TimeElapsedColumn(), console=_err, transient=True,
        disable=as_json,
    ) as bar:
        task = bar.add_task("exporting 0 trajectories", total=None)
        manifest = _guard(
            lambda: export(
                settings.db_url, out, format=format, min_reward=min_reward, app=app_name, since=t_since,
                until=t_until, limit=limit, progress=lambda n: bar.update(task, description=f"exporting {n} trajectories"),
            )
        )
    if as_json:
        sys.stdout.write(manifest.model_dump_json(indent=2) + "\n")
        return
    _out.print(f"wrote {manifest.count} {manifest.format} lines to {manifest.path} ({manifest.bytes} bytes)", highlight=False)
    for a, n in sorted(manifest.by_app.items()):
        _out.print(f"  {a}: {n}", highlight=False)
    _out.print(f"manifest: {manifest.manifest_path}", highlight=False)


@app.command()
def stats(
    db: str | None = typer.Option(None, "--db", help=_DB_HELP),
    as_json: bool = typer.Option(False, "--json", help="Print JSON instead of a table."),
) -> None:
    """Counts overall, per app and per served version."""
    from ._db import open_store

    settings = _settings(db)

    def read() -> Any:
        store = open_store(settings.db_url)
        try:
            return store.stats()
        finally:
            store.close()

    s = _guard(read)
    if as_json:
        sys.stdout.write(json.dumps(s.to_dict(), indent=2) + "\n")
        return

    def fmt(x: float | None) -> str:
        return "-" if x is None else f"{x:.3f}"

    table = Table(title=f"collector: {s.total} trajectories, {s.feedback} feedback")
    for col in ("group", "name", "total", "with outcome", "successes", "mean reward"):
        table.add_column(col, justify="right" if col not in ("group", "name") else "left")
    table.add_row("all", "", str(s.total), str(s.with_outcome), str(s.successes), fmt(s.mean_reward))
    for group, items in (("app", s.by_app), ("version", s.by_served_version)):
        for name, g in items.items():
            table.add_row(group, name, str(g.total), str(g.with_outcome), str(g.successes), fmt(g.mean_reward))
    _out.print(table)


@app.command()
def anonymize(
    as_json: bool = typer.Option(
        False, "--json",
        help='JSONL in and out: each input line {"text": ...} becomes {"text": anonymized, "entities": '
             '[{"type", "start", "end"}]} with offsets into the input text. Without --json each input line is '
             "plain text and the anonymized line is printed."),
    mode: str = typer.Option(
        None, "--mode",
        help="placeholder (<EMAIL_1>), hmac (<EMAIL_3f9a1c2b>, stable across runs for one key) or fake "
             "(format-preserving fakes). Default: $LOOPLIFT_COLLECTOR_ANONYMIZE_MODE or placeholder. The key "
             "for hmac/fake: $LOOPLIFT_COLLECTOR_PSEUDONYM_KEY or $LOOPLIFT_HOME/collector_pseudonym.key."),
) -> None:
    """Anonymize text from stdin with the same code path as ingest (one line in, one line out)."""
    from ._settings import CollectorSettings

    settings = _guard(lambda: CollectorSettings.from_env(anonymize_mode=mode))
    anonymizer = _guard(settings.make_anonymizer)
    for n, line in enumerate(sys.stdin, 1):
        if not as_json:
            sys.stdout.write(anonymizer.text(line.rstrip("\n"))[0] + "\n")
            continue
        if not line.strip():
            continue
        try:
            record = json.loads(line)
            text = record["text"]
            if not isinstance(text, str):
                raise TypeError("`text` must be a string")
        except (ValueError, KeyError, TypeError) as e:
            sys.stdout.flush()
            _fail(f'stdin line {n}: expected a JSON object with a string "text" field ({type(e).__name__}: {e})', 2)
        out, entities = anonymizer.text(text)
        ents = [{"type": e.kind, "start": e.start, "end": e.end} for e in entities]
        sys.stdout.write(json.dumps({"text": out, "entities": ents}) + "\n")


def main() -> None:
    """Entry point of the `collector` console script."""
    app()


if __name__ == "__main__":
    main()
