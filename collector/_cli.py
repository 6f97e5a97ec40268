"""The `collector` command: `serve`, `export`, `score`, `stats`, `purge`, `anonymize`.

Flags map 1:1 onto `CollectorSettings` and `export()` arguments; `--db` defaults to
`LOOPLIFT_COLLECTOR_DB` or `sqlite:///$LOOPLIFT_HOME/collector.db`. Errors print one line (no
traceback) and exit non-zero: 2 for bad input, 1 when the database or filesystem fails.
"""

from __future__ import annotations

import json
import re
import sys
from collections.abc import Callable
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Annotated, Any, TypeVar

import typer
from rich.console import Console
from rich.progress import Progress, SpinnerColumn, TextColumn, TimeElapsedColumn
from rich.table import Table
from sqlalchemy.exc import SQLAlchemyError

from sdk.infra import cli_fail, print_table

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

#: `collector export --format langfuse-dataset`: the sft export, pushed as a Langfuse dataset (`_langfuse_dataset`).
LANGFUSE_DATASET = "langfuse-dataset"

_DB_HELP = "Database URL (default: $LOOPLIFT_COLLECTOR_DB or sqlite:///$LOOPLIFT_HOME/collector.db)."


def _guard(fn: Callable[[], T]) -> T:
    try:
        return fn()
    except (ConfigError, UnsupportedFormatError) as e:
        cli_fail(str(e), 2)
    except CollectorError as e:
        cli_fail(str(e), 1)
    except (OSError, SQLAlchemyError) as e:  # disk full, permissions, database gone
        cli_fail(f"{type(e).__name__}: {str(e).splitlines()[0]}", 1)


def _settings(db: str | None) -> Any:
    from ._settings import CollectorSettings

    return _guard(lambda: CollectorSettings.from_env(db_url=db))


def _parse_time(value: str | None, flag: str) -> datetime | None:
    if value is None:
        return None
    try:
        return datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        cli_fail(f"{flag} {value!r} is not an ISO date/time; use e.g. 2025-01-31 or 2025-01-31T12:00:00Z", 2)


@app.command()
def serve(
    host: str = typer.Option(_defaults.DEFAULT_HOST, help="Interface to bind (keep loopback unless proxied)."),
    port: int = typer.Option(_defaults.DEFAULT_PORT, help="TCP port."),
    db: str | None = typer.Option(None, "--db", help=_DB_HELP),
    gateway: str | None = typer.Option(None, "--gateway", help="Gateway URL the dashboard (/dashboard) reads versions, "
                                       "swaps and health from (default $LOOPLIFT_GATEWAY_URL)."),
    workers: int = typer.Option(1, "--workers", min=1, help="Server processes. Ingest is CPU-bound (anonymizing is "
                                "most of it), so N workers on N free cores ingest up to N times faster; the "
                                "database only serializes the short writes."),
) -> None:
    """Run the ingest API (POST /v1/trajectories, /v1/feedback, GET /v1/stats, /health) and the dashboard (/dashboard)."""
    import os

    import uvicorn

    from ._app import create_app
    from ._store import open_store

    settings = _settings(db)
    if gateway is not None:
        settings = settings.model_copy(update={"gateway_url": gateway})
        os.environ[_defaults.ENV_GATEWAY_URL] = gateway  # --workers N: each worker reads its settings from the env
    auth = f"{len(settings.api_keys)} API key(s)" if settings.api_keys else "no API key (open)"
    if workers == 1:
        api = _guard(lambda: create_app(settings))
        freeze_startup_objects()
        _err.print(f"collector on http://{host}:{port}  db={settings.db_url}  {auth}  dashboard /dashboard", highlight=False)
        uvicorn.run(api, host=host, port=port, log_level="info")
        return
    # Once, here: migrate the database and load (or train) the name model into its cache, so the
    # workers start on a current schema and a cached model. Each worker then builds the app from
    # the environment, which carries every setting (--db included).
    _guard(lambda: settings.make_anonymizer(preload=True))
    _guard(lambda: open_store(settings.db_url)).close()
    os.environ[_defaults.ENV_DB] = settings.db_url
    os.environ[_SUPERVISOR_ENV] = str(os.getpid())
    _err.print(f"collector on http://{host}:{port}  db={settings.db_url}  {auth}  {workers} workers", highlight=False)
    # uvicorn's supervisor SIGKILLs (and replaces) a worker that has not answered its health ping within
    # `timeout_worker_healthcheck`; a worker answers only once it has imported the collector, 3.5-5 s on two busy
    # cores, so uvicorn's 5 s killed starting workers over and over (7 kills and 52 s to bring up 2, measured by
    # bench/ingest_workers.py). The cost of a longer wait: the supervisor checks its workers one at a time, so one
    # that hangs holds up that loop (noticing other deaths, handling SIGTERM) for up to this long.
    uvicorn.run("collector._cli:worker_app", factory=True, host=host, port=port, workers=workers, log_level="info",
                timeout_worker_healthcheck=_defaults.WORKER_HEALTHCHECK_S)


def freeze_startup_objects() -> None:
    """Take what a server process built at startup out of the garbage collector's sight.

    The name model, the detector tables and SQLAlchemy's metadata (~170k tracked objects) live as long
    as the process, and every full collection would walk them again while ingest allocates freely:
    frozen, ingest gains 3% per CPU-second (bench/collector.py, same run). Only the `serve` command
    does this: `create_app` is a library call, and freezing is a decision for the process as a whole.
    """
    import gc

    gc.collect()
    gc.freeze()


#: The pid of `collector serve --workers`, for its workers (uvicorn starts them; we cannot spawn them tied).
_SUPERVISOR_ENV = "LOOPLIFT_COLLECTOR_SUPERVISOR_PID"


def worker_app() -> Any:
    """The app of one `serve --workers` worker, frozen like the single-process server's. The worker gets
    SIGTERM when the uvicorn supervisor that started it dies (uvicorn's workers otherwise keep serving the
    port after a SIGKILLed supervisor)."""
    import os

    from sdk.infra import die_with_parent

    from ._app import create_app

    supervisor = os.environ.get(_SUPERVISOR_ENV)
    if supervisor:
        die_with_parent(int(supervisor))
    api = create_app()
    freeze_startup_objects()
    return api


@app.command("export")
def export_cmd(
    out: Annotated[Path, typer.Option("--out", "-o", help="JSONL file to write; FILE.manifest.json goes beside it.")],
    format: str = typer.Option("sft", "--format", "-f", help="sft (chat), dpo (chosen/rejected pairs per task), grpo "
                               "(groups per task with rewards and token ids) or langfuse-dataset (the sft export, "
                               "also pushed as a Langfuse dataset; needs LANGFUSE_PUBLIC_KEY/SECRET_KEY/HOST)."),
    dataset: str | None = typer.Option(None, "--dataset", help="With --format langfuse-dataset: the dataset name "
                                       "(default: looplift-<app or all>-<date>)."),
    since: str | None = typer.Option(None, "--since", help="Ingested at/after this ISO time (UTC if no zone)."),
    until: str | None = typer.Option(None, "--until", help="Ingested before this ISO time (UTC if no zone)."),
    app_name: str | None = typer.Option(None, "--app", help="Keep only this app."),
    task: str | None = typer.Option(None, "--task", help="Keep only this task id."),
    model_version: str | None = typer.Option(None, "--model-version", help="Keep only this served version (e.g. policy-v2)."),
    min_score: float | None = typer.Option(None, "--min-score", help="Keep trajectories with score >= S (a correction counts as 1)."),
    min_reward: float | None = typer.Option(None, "--min-reward", help="Keep trajectories with verifier reward >= R."),
    limit: int | None = typer.Option(None, "--limit", min=0, help="At most N lines in the output file."),
    dedup: bool = typer.Option(False, "--dedup", help="Drop exact and near duplicates (MinHash LSH), keeping the first."),
    balance: str | None = typer.Option(None, "--balance", help="Equalize groups: task (rows per task) or cluster (per diversity "
                                       "cluster from `collector score`)."),
    per_group: int | None = typer.Option(None, "--per-group", min=1, help="With --balance: rows per group (default: fit "
                                         "--limit, else the median group size)."),
    holdout: float | None = typer.Option(None, "--holdout", help="Send this fraction of tasks (0..1, by task-id hash) to "
                                         "FILE.holdout.jsonl."),
    decontaminate: Path | None = typer.Option(None, "--decontaminate", help="Eval JSONL: drop trajectories sharing a word "
                                              "n-gram with it."),
    ngram: int = typer.Option(_defaults.DECONTAM_NGRAM, "--ngram", help="n-gram length for --decontaminate."),
    corrections: bool = typer.Option(True, "--corrections/--no-corrections", help="Use user corrections as SFT targets "
                                     "and DPO pairs."),
    db: str | None = typer.Option(None, "--db", help=_DB_HELP),
    as_json: bool = typer.Option(False, "--json", help="Print the manifest as JSON."),
) -> None:
    """Write curated training data (JSONL) and its manifest (and, with --format langfuse-dataset, a Langfuse dataset)."""
    from ._export import export

    settings = _settings(db)
    to_langfuse = format == LANGFUSE_DATASET
    if to_langfuse:
        if settings.langfuse is None:
            cli_fail("--format langfuse-dataset needs Langfuse's settings: set LANGFUSE_PUBLIC_KEY, LANGFUSE_SECRET_KEY "
                     "and LANGFUSE_HOST", 2)
        format = "sft"  # the dataset is the curated sft export, pushed item by item
    elif dataset is not None:
        cli_fail("--dataset goes with --format langfuse-dataset", 2)
    t_since, t_until = _parse_time(since, "--since"), _parse_time(until, "--until")
    with Progress(
        SpinnerColumn(), TextColumn("{task.description}"), TimeElapsedColumn(), console=_err, transient=True,
        disable=as_json,
    ) as bar:
        bar_task = bar.add_task("exporting: 0 trajectories read", total=None)
        manifest = _guard(
            lambda: export(
                settings.db_url, out, format=format, min_reward=min_reward, min_score=min_score, app=app_name, task=task,
                model_version=model_version, since=t_since, until=t_until, limit=limit, dedup=dedup, balance=balance,
                per_group=per_group, holdout=holdout, decontaminate=decontaminate, ngram=ngram, corrections=corrections,
                progress=lambda n: bar.update(bar_task, description=f"exporting: {n} trajectories read"),
            )
        )
    pushed = None
    if to_langfuse:
        from ._langfuse_dataset import push_dataset

        name = dataset or f"looplift-{app_name or 'all'}-{datetime.now(timezone.utc):%Y%m%d-%H%M%S}"
        pushed = _guard(lambda: push_dataset(manifest.path, name, settings.langfuse))
    if as_json:
        out_json = json.loads(manifest.model_dump_json())
        if pushed is not None:
            out_json["langfuse_dataset"] = {"name": pushed.dataset, "items": pushed.items, "host": pushed.host}
        sys.stdout.write(json.dumps(out_json, indent=2) + "\n")
        return
    if pushed is not None:
        _out.print(f"Langfuse dataset {pushed.dataset!r}: {pushed.items} items ({pushed.host or 'Langfuse Cloud'})",
                   highlight=False)
    _out.print(f"wrote {manifest.count} {manifest.format} lines to {manifest.path} ({manifest.bytes} bytes, "
               f"{manifest.trajectories} trajectories, {manifest.tasks} tasks; {manifest.matched} matched the filters)",
               highlight=False)
    for a, n in sorted(manifest.by_app.items()):
        _out.print(f"  {a}: {n}", highlight=False)
    if manifest.holdout is not None:
        h = manifest.holdout
        _out.print(f"holdout: {h.count} lines, {h.tasks} tasks in {h.path}", highlight=False)
    for reason, n in sorted(manifest.dropped.items()):
        _out.print(f"dropped {n} ({reason})", highlight=False)
    _out.print(f"manifest: {manifest.manifest_path}", highlight=False)


@app.command()
def score(
    retrain: bool = typer.Option(False, "--retrain", help="Refit the quality model and clusters, then rescore every row."),
    clusters: int = typer.Option(_defaults.CLUSTERS, "--clusters", min=1, help="Diversity clusters when (re)fitting."),
    db: str | None = typer.Option(None, "--db", help=_DB_HELP),
    as_json: bool = typer.Option(False, "--json", help="Print the report as JSON."),
) -> None:
    """Score trajectories: learned quality for rows without one, diversity clusters, final scores."""
    from ._curate import score as run_score

    settings = _settings(db)
    with Progress(SpinnerColumn(), TextColumn("{task.description}"), TimeElapsedColumn(), console=_err, transient=True,
                  disable=as_json) as bar:
        bar_task = bar.add_task("fitting" if retrain else "scoring", total=None)
        report = _guard(lambda: run_score(settings.db_url, retrain=retrain, clusters=clusters,
                                          progress=lambda n: bar.update(bar_task, description=f"scored {n} rows")))
    if as_json:
        sys.stdout.write(json.dumps(report.to_dict(), indent=2) + "\n")
        return
    if report.quality_model_id is None:
        _out.print(f"no quality model: {report.quality_note}", highlight=False)
    else:
        auc = "-" if report.auc is None else f"{report.auc:.3f}"
        _out.print(f"quality model #{report.quality_model_id}: held-out AUC {auc} ({report.n_train} train, "
                   f"{report.n_test} held-out trajectories)" + (" (refitted)" if report.retrained else ""), highlight=False)
        if report.quality_note:
            _out.print(f"note: {report.quality_note}", highlight=False)
    _out.print(f"scored {report.rows_scored} rows, clustered {report.rows_clustered} into {report.clusters} clusters",
               highlight=False)
    _out.print("score sources: " + ", ".join(f"{k} {v}" for k, v in report.score_sources.items()), highlight=False)


@app.command()
def stats(
    db: str | None = typer.Option(None, "--db", help=_DB_HELP),
    as_json: bool = typer.Option(False, "--json", help="Print JSON instead of a table."),
) -> None:
    """Counts overall, per app and per served version; score sources and the quality model's AUC."""
    from ._store import open_store

    settings = _settings(db)

    def read() -> Any:
        store = open_store(settings.db_url)
        try:
            return store.stats()
        finally:
            store.close()

    s = _guard(read)
    if as_json:
        sys.stdout.write(json.dumps(s.to_dict(), indent=2, default=str) + "\n")
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
    print_table(_out, table)
    src = ", ".join(f"{k} {v}" for k, v in s.score_sources.items())
    _out.print(f"score from: {src} (quality model applied to {s.quality_scored})", highlight=False)
    qm = s.quality_model
    if qm is None:
        _out.print("quality model: none yet (run `collector score`)", highlight=False)
    else:
        _out.print(f"quality model #{qm['id']}: held-out AUC {fmt(qm['auc'])} ({qm['n_train']} train, {qm['n_test']} "
                   f"held-out), {s.clusters} clusters in use", highlight=False)


_UNITS = {"s": "seconds", "m": "minutes", "h": "hours", "d": "days", "w": "weeks"}


def parse_duration(value: str, flag: str = "--older-than") -> timedelta:
    """`30d` -> 30 days; a whole number followed by s, m, h, d or w (`ConfigError` otherwise)."""
    m = re.fullmatch(r"\s*(\d+)\s*([smhdw])\s*", value)
    if m is None or int(m.group(1)) == 0:
        raise ConfigError(
            f"{flag} {value!r} is not a duration: use a positive whole number and one unit, "
            "s (seconds), m (minutes), h (hours), d (days) or w (weeks), e.g. 30d or 12h"
        )
    return timedelta(**{_UNITS[m.group(2)]: int(m.group(1))})


def _parse_where(items: list[str]) -> dict[str, str]:
    out: dict[str, str] = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key.strip() or not value:
            cli_fail(f"--where {item!r} is not KEY=VALUE (e.g. --where user_id=u-42)", 2)
        out[key.strip()] = value
    return out


@app.command()
def purge(
    older_than: str | None = typer.Option(
        None, "--older-than", metavar="DURATION",
        help="Delete trajectories ingested more than this long ago: a whole number and a unit s, m, h, d or w "
             "(30d, 12h, 2w)."),
    where: list[str] = typer.Option(
        [], "--where", metavar="KEY=VALUE",
        help="Delete trajectories whose metadata[KEY] equals VALUE (repeatable; all must match; combined with "
             "--older-than by AND). Matching is against the stored metadata, which was anonymized before "
             "storage: a VALUE that is personal data (an email, a phone number ...) was replaced by a placeholder "
             "such as <EMAIL_1> and is refused with an explanation, so tag trajectories with a non-personal user "
             "key (e.g. user_id=u-42). Numbers match by their digits. Scans every row's JSON (cost grows with "
             "the table)."),
    dry_run: bool = typer.Option(False, "--dry-run", help="Print what would be deleted; delete nothing."),
    db: str | None = typer.Option(None, "--db", help=_DB_HELP),
    as_json: bool = typer.Option(False, "--json", help="Print the counts as JSON."),
) -> None:
    """Delete trajectories (and their feedback) by age and/or by a metadata key: retention and
    per-user deletion. Prints how many were deleted."""
    from ._store import open_store

    if older_than is None and not where:
        cli_fail("give --older-than DURATION and/or --where KEY=VALUE; purge never deletes everything", 2)
    delta = _guard(lambda: parse_duration(older_than)) if older_than is not None else None
    before = datetime.now(timezone.utc) - delta if delta is not None else None
    match = _parse_where(where)
    settings = _settings(db)

    def run() -> Any:
        store = open_store(settings.db_url)
        try:
            return store.purge(before=before, where=match, dry_run=dry_run)
        finally:
            store.close()

    result = _guard(run)
    if as_json:
        sys.stdout.write(json.dumps(result.to_dict(), indent=2) + "\n")
        return
    conds = []
    if before is not None:
        conds.append(f"ingested before {before.replace(microsecond=0).isoformat()}")
    conds += [f"metadata {k}={v!r}" for k, v in match.items()]
    verb = "would delete" if dry_run else "deleted"
    _out.print(f"{verb} {result.trajectories} trajectories and {result.feedback} feedback rows ({' and '.join(conds)})",
               highlight=False)
    if result.wal_truncated is False:
        _err.print("note: a reader kept the SQLite write-ahead log busy; old copies of deleted pages stay in the -wal "
                   "file until the next checkpoint", highlight=False)


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
            cli_fail(f'stdin line {n}: expected a JSON object with a string "text" field ({type(e).__name__}: {e})', 2)
        out, entities = anonymizer.text(text)
        ents = [{"type": e.kind, "start": e.start, "end": e.end} for e in entities]
        sys.stdout.write(json.dumps({"text": out, "entities": ents}) + "\n")


def main() -> None:
    """Entry point of the `collector` console script."""
    app()


if __name__ == "__main__":
    main()
