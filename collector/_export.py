"""`collector export`: curated training data as JSONL, plus a manifest beside it.

Format `sft` writes one line per stored trajectory, `{"id", "task_id", "app", "served_version",
"reward", "messages"}` with the messages in OpenAI chat format (tool calls included), ordered by
(ingest time, id) so the same database and filters always give the same file. Rows are read in
pages (keyset pagination) and written as they arrive, into a temporary file that is atomically
renamed over the output: a reader never sees half a file, whatever the table size.

The export is a snapshot: rows ingested after it started are left out (`until` defaults to the
start time), so the manifest's count matches the file.

Deliberately not yet: `dpo` (success/failure pairs) and `grpo` (groups per task) come with the
curation issue; they raise `UnsupportedFormatError` now rather than writing something half-right.
"""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
from collections.abc import Callable
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from sdk._types import Trajectory

from . import _defaults
from ._db import Store, open_store, to_naive_utc, utcnow
from .errors import ConfigError, ExportError, UnsupportedFormatError


class ExportFilters(BaseModel):
    """The filters an export applied (recorded in its manifest)."""

    model_config = ConfigDict(frozen=True)

    min_reward: float | None = Field(default=None, description="keep trajectories with reward >= this")
    app: str | None = Field(default=None, description="keep only this app")
    since: datetime | None = Field(default=None, description="ingested at or after (UTC)")
    until: datetime | None = Field(default=None, description="ingested before (UTC); the snapshot time when unset")
    limit: int | None = Field(default=None, description="at most this many lines")


class ExportManifest(BaseModel):
    """What an export wrote; saved as `FILE.manifest.json` next to `FILE.jsonl`."""

    model_config = ConfigDict(frozen=True)

    format: str = Field(description="export format (`sft`)")
    path: str = Field(description="the JSONL file written")
    count: int = Field(description="lines written (one per trajectory)")
    by_app: dict[str, int] = Field(description="lines per app")
    filters: ExportFilters
    created_at: datetime = Field(description="when the export ran (UTC)")
    sha256: str = Field(description="sha256 of the JSONL file")
    bytes: int = Field(description="size of the JSONL file")
    db: str = Field(description="database URL, password hidden")

    @property
    def manifest_path(self) -> Path:
        """Where this manifest is written."""
        return manifest_path_for(self.path)


def manifest_path_for(out_path: str | Path) -> Path:
    """`data.jsonl` -> `data.manifest.json`."""
    p = Path(out_path)
    return p.with_name(p.stem + ".manifest.json") if p.suffix else p.with_name(p.name + ".manifest.json")


def _sft_line(traj: Trajectory) -> dict[str, Any]:
    return {
        "id": traj.id,
        "task_id": traj.task_id,
        "app": traj.app,
        "served_version": traj.served_version,
        "reward": traj.outcome.reward if traj.outcome else None,
        "messages": [m.model_dump(exclude_none=True, mode="json") for m in traj.messages],
    }


def _check_format(fmt: str) -> None:
    if fmt in _defaults.EXPORT_FORMATS_SUPPORTED:
        return
    if fmt in _defaults.EXPORT_FORMATS:
        raise UnsupportedFormatError(
            f"export format {fmt!r} is not yet supported; supported now: {', '.join(_defaults.EXPORT_FORMATS_SUPPORTED)}"
        )
    raise UnsupportedFormatError(
        f"unknown export format {fmt!r}: choose one of {', '.join(_defaults.EXPORT_FORMATS_SUPPORTED)}"
    )


def _atomic_write_text(path: Path, text: str) -> None:
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def export(
    db_url: str | Store,
    out_path: str | Path,
    *,
    format: str = "sft",
    min_reward: float | None = None,
    app: str | None = None,
    since: datetime | None = None,
    until: datetime | None = None,
    limit: int | None = None,
    batch_size: int = _defaults.EXPORT_BATCH_SIZE,
    progress: Callable[[int], None] | None = None,
) -> ExportManifest:
    """Write curated training data from the collector database to `out_path` (JSONL).

    Args:
        db_url: database URL (or an open `Store`).
        out_path: the JSONL file; `<stem>.manifest.json` is written beside it.
        format: `sft` (`dpo`, `grpo` are planned and raise `UnsupportedFormatError`).
        min_reward: keep trajectories whose reward is at least this (ones without outcome drop out).
        app: keep only this app.
        since, until: ingest-time window, `since` inclusive, `until` exclusive (naive = UTC).
        limit: stop after this many lines.
        progress: called with the running line count after each page.

    Returns:
        The manifest (also written to disk).

    Raises:
        UnsupportedFormatError, ConfigError: bad arguments; ExportError: the output cannot be written.
    """
    _check_format(format)
    if limit is not None and limit < 0:
        raise ConfigError(f"limit must be >= 0, got {limit}")
    if since is not None and until is not None and to_naive_utc(since) >= to_naive_utc(until):
        raise ConfigError(f"since ({since.isoformat()}) must be before until ({until.isoformat()})")
    out = Path(out_path).expanduser()
    if out.is_dir():
        raise ConfigError(f"--out {out} is a directory: give a file path such as {out / 'sft.jsonl'}")
    try:
        out.parent.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise ExportError(f"cannot create the output directory {out.parent}: {e}") from e

    started = utcnow()
    snapshot_until = to_naive_utc(until) if until is not None else started
    filters = ExportFilters(
        min_reward=min_reward, app=app, since=to_naive_utc(since) if since else None, until=snapshot_until, limit=limit
    )
    store = db_url if isinstance(db_url, Store) else open_store(db_url)
    count = 0
    by_app: dict[str, int] = {}
    digest = hashlib.sha256()
    size = 0
    try:
        fd, tmp = tempfile.mkstemp(dir=out.parent, prefix=f".{out.name}.", suffix=".tmp")
    except OSError as e:
        raise ExportError(f"cannot write to {out.parent}: {e}") from e
    try:
        with os.fdopen(fd, "wb") as f:
            rows = store.iter_rows(
                min_reward=min_reward, app=app, since=filters.since, until=snapshot_until, limit=limit, batch_size=batch_size
            )
            for _id, _created, data in rows:
                traj = Trajectory.model_validate_json(data)
                line = (json.dumps(_sft_line(traj), ensure_ascii=False, separators=(",", ":")) + "\n").encode("utf-8")
                f.write(line)
                digest.update(line)
                size += len(line)
                count += 1
                by_app[traj.app] = by_app.get(traj.app, 0) + 1
                if progress is not None and count % batch_size == 0:
                    progress(count)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, out)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    finally:
        if not isinstance(db_url, Store):
            store.close()
    if progress is not None:
        progress(count)

    manifest = ExportManifest(
        format=format,
        path=str(out),
        count=count,
        by_app=by_app,
        filters=filters,
        created_at=datetime.now(timezone.utc),
        sha256=digest.hexdigest(),
        bytes=size,
        db=store.engine.url.render_as_string(hide_password=True),
    )
    _atomic_write_text(manifest_path_for(out), manifest.model_dump_json(indent=2) + "\n")
    return manifest
