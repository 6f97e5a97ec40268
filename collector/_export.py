"""`collector export`: curated training data as JSONL (`sft`, `dpo`, `grpo`), plus a manifest.

Pipeline, in this order (each step's drops are counted per reason in the manifest):

1. **Filters, in SQL**: ingest time (`since` inclusive, `until` exclusive; `until` defaults to
   the export's start, so the export is a snapshot), app, task, served version, `min_reward`,
   `min_score` (a trajectory with a user correction passes `min_score`: its corrected version
   counts as score 1).
2. **Exact dedup, in SQL** (`dedup`): of the rows sharing a normalized `content_hash`, only the
   earliest ingested one that passes the filters is kept.
3. **Balance** (`balance="task"|"cluster"`): stratified sampling that equalizes groups: each
   task (or diversity cluster, `collector score`) contributes about `per_group` rows. Each row
   is kept with probability `min(1, per_group / group_size)`, decided by a hash of its id, so
   the sample is deterministic and streams (the expected count per group is exactly
   `min(size, per_group)`). `per_group` defaults to the largest cap that fits `limit`, or else
   the median group size.
4. **Decontamination** (`decontaminate=EVAL.jsonl`): rows sharing a word n-gram (13 by
   default) with the eval file are dropped (`_decontam.py`).
5. **Near-dup** (`dedup`): MinHash LSH over word shingles, the first one seen is kept
   (`_dedup.py`).
6. **Format** and **holdout**: `holdout=F` sends every line of a deterministic fraction F of
   tasks (hash of the task id) to `<stem>.holdout.jsonl` beside the output; a task is never in
   both files.

Formats (one JSON object per line):

- `sft`: `{"id", "task_id", "app", "served_version", "reward", "score", "corrected", "messages"}`,
  messages in OpenAI chat format (tool calls included), ordered by (ingest time, id), plus `"tools"` (the
  OpenAI function specs the conversation was given) when the trajectory's metadata records them. With a
  user correction (`corrections=True`, the default) the line is the prompt (the messages
  before the first assistant message) plus the correction as the assistant's answer.
- `dpo`: `{"task_id", "prompt", "chosen", "rejected", "chosen_id", "rejected_id", "chosen_score",
  "rejected_score", "source"}` (TRL's conversational preference format). Pairing rule: within
  one task, trajectories whose prompts (messages before the first assistant message) are equal
  are ranked by score; the best is paired with the worst, the second best with the second
  worst, and so on while the better one's score is strictly higher; each trajectory is used at
  most once. `source: "correction"` pairs put a user's correction (chosen) against the
  trajectory it corrected (rejected).
- `grpo`: `{"task_id", "prompt", "rewards", "completions": [{"id", "reward", "score", "success",
  "messages", "turns"}]}`: one line per (task, prompt) group of at least two scored
  trajectories; `rewards` are the final scores; `turns` carry the token ids and logprobs that
  were ingested, with `message_index` relative to the completion's `messages`.

DPO and GRPO read rows ordered by task and handle one task at a time, at most `MAX_GROUP` rows
at once (a larger task is handled in consecutive chunks). Memory stays flat whatever the table
size: pages of rows, one task group, the near-dup Bloom filter (64 bytes per candidate row),
the eval n-grams and a counter per balance group. Output goes to temporary files renamed into
place at the end: a failed or interrupted export leaves no partial file.
"""

from __future__ import annotations

import hashlib
import json
import os
import statistics
import tempfile
from collections.abc import Callable, Iterator
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import sqlalchemy as sa
from pydantic import BaseModel, ConfigDict, Field
from sqlalchemy.orm import aliased

from sdk.infra import atomic_write

from . import _defaults
from ._db import FeedbackRow, Store, TrajectoryRow, open_store, to_naive_utc, utcnow
from ._decontam import EvalIndex
from ._dedup import NearDupFilter
from ._shingle import trajectory_text, unit_hash, word_hashes
from .errors import ConfigError, ExportError, UnsupportedFormatError

BALANCE_BY = ("task", "cluster")


class ExportFilters(BaseModel):
    """The filters and curation steps an export applied (recorded in its manifest)."""

    model_config = ConfigDict(frozen=True)

    min_reward: float | None = Field(default=None, description="keep trajectories with reward >= this")
    min_score: float | None = Field(default=None, description="keep trajectories with score >= this (or a correction)")
    app: str | None = Field(default=None, description="keep only this app")
    task: str | None = Field(default=None, description="keep only this task id")
    model_version: str | None = Field(default=None, description="keep only this served version")
    since: datetime | None = Field(default=None, description="ingested at or after (UTC)")
    until: datetime | None = Field(default=None, description="ingested before (UTC); the snapshot time when unset")
    limit: int | None = Field(default=None, description="at most this many lines in the output file")
    dedup: bool = Field(default=False, description="exact (content hash) and near-duplicate (MinHash LSH) removal")
    balance: str | None = Field(default=None, description="`task` or `cluster`: equalize groups")
    per_group: int | None = Field(default=None, description="balance: expected rows per group (resolved value)")
    holdout: float | None = Field(default=None, description="fraction of tasks sent to the holdout file")
    decontaminate: str | None = Field(default=None, description="eval JSONL file compared against")
    decontaminate_sha256: str | None = Field(default=None, description="sha256 of that eval file")
    ngram: int | None = Field(default=None, description="decontamination n-gram length")
    corrections: bool = Field(default=True, description="user corrections become SFT targets and DPO pairs")


class HoldoutInfo(BaseModel):
    """The holdout file written beside the output."""

    model_config = ConfigDict(frozen=True)

    path: str
    fraction: float
    count: int = Field(description="lines in the holdout file")
    tasks: int = Field(description="distinct tasks in it")
    sha256: str
    bytes: int


class ExportManifest(BaseModel):
    """What an export wrote; saved as `FILE.manifest.json` next to `FILE.jsonl`."""

    model_config = ConfigDict(frozen=True)

    format: str = Field(description="export format: sft, dpo or grpo")
    path: str = Field(description="the JSONL file written")
    count: int = Field(description="lines written to `path`")
    by_app: dict[str, int] = Field(description="lines per app in `path`")
    trajectories: int = Field(default=0, description="distinct trajectories used in `path`")
    tasks: int = Field(default=0, description="distinct tasks in `path`")
    matched: int = Field(default=0, description="trajectories matching the filters (before curation)")
    dropped: dict[str, int] = Field(default_factory=dict, description="trajectories dropped, per reason")
    holdout: HoldoutInfo | None = None
    filters: ExportFilters
    quality_model: dict[str, Any] | None = Field(default=None, description="id and held-out AUC of the quality model")
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


def holdout_path_for(out_path: str | Path) -> Path:
    """`data.jsonl` -> `data.holdout.jsonl`."""
    p = Path(out_path)
    return p.with_name(p.stem + ".holdout" + (p.suffix or ".jsonl"))


def in_holdout(task_id: str, fraction: float) -> bool:
    """Whether `task_id` goes to the holdout file (deterministic; the same task always the same side)."""
    return unit_hash("holdout:" + task_id) < fraction


# -- lines -------------------------------------------------------------------------------------


def _msgs(ms: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [{k: v for k, v in m.items() if v is not None} for m in ms]


def _prompt_len(ms: list[dict[str, Any]]) -> int:
    """Number of messages before the first assistant message (the prompt)."""
    for i, m in enumerate(ms):
        if m.get("role") == "assistant":
            return i
    return len(ms)


def _prompt_key(ms: list[dict[str, Any]]) -> str:
    norm = [[m.get("role"), " ".join((m.get("content") or "").split())] for m in ms[: _prompt_len(ms)]]
    return hashlib.sha256(json.dumps(norm).encode()).hexdigest()


class _Row:
    """One candidate trajectory: its columns, parsed data and correction."""

    __slots__ = ("id", "task_id", "app", "version", "reward", "score", "success", "data", "correction")

    def __init__(self, r: Any, data: dict[str, Any], correction: str | None) -> None:
        self.id, self.task_id, self.app, self.version = r.id, r.task_id, r.app, r.served_version
        self.reward, self.score, self.success = r.reward, r.score, r.success
        self.data, self.correction = data, correction


def _sft_line(row: _Row) -> dict[str, Any]:
    ms = row.data["messages"]
    corrected = row.correction is not None
    if corrected:
        ms = ms[: _prompt_len(ms)] + [{"role": "assistant", "content": row.correction}]
    line = {"id": row.id, "task_id": row.task_id, "app": row.app, "served_version": row.version,
            "reward": row.reward, "score": row.score, "corrected": corrected, "messages": _msgs(ms)}
    tools = (row.data.get("metadata") or {}).get("tools")
    if tools and not corrected:  # the tools the conversation was given (captured traffic records them)
        line["tools"] = tools
    return line


def _completion(row: _Row) -> list[dict[str, Any]]:
    ms = row.data["messages"]
    return _msgs(ms[_prompt_len(ms):])


#: A line to write, the row that decides its app/task/holdout side, and the trajectory ids it uses.
_Line = tuple[dict[str, Any], _Row, tuple[str, ...]]


def _dpo_lines(rows: list[_Row], drop: Callable[[str, int], None]) -> list[_Line]:
    out: list[_Line] = []

    def pair(ch: _Row | None, rj: _Row, chosen: list[dict[str, Any]], source: str) -> dict[str, Any]:
        ms = rj.data["messages"]
        return {"task_id": rj.task_id, "prompt": _msgs(ms[: _prompt_len(ms)]), "chosen": chosen,
                "rejected": _completion(rj), "chosen_id": ch.id if ch else rj.id, "rejected_id": rj.id,
                "chosen_score": ch.score if ch else 1.0, "rejected_score": rj.score, "source": source}

    for r in rows:
        if r.correction is not None:
            out.append((pair(None, r, [{"role": "assistant", "content": r.correction}], "correction"), r, (r.id,)))
    by_prompt: dict[str, list[_Row]] = {}
    for r in rows:
        if r.score is None:
            drop("no_score", 1)
        else:
            by_prompt.setdefault(_prompt_key(r.data["messages"]), []).append(r)
    for group in by_prompt.values():
        ranked = sorted(group, key=lambda x: (-x.score, x.id))  # type: ignore[operator]
        used = 0
        for i in range(len(ranked) // 2):
            best, worst = ranked[i], ranked[-1 - i]
            if best.score <= worst.score:  # type: ignore[operator]
                break
            out.append((pair(best, worst, _completion(best), "score"), best, (best.id, worst.id)))
            used += 2
        drop("unpaired", len(group) - used)
    return out


def _grpo_lines(rows: list[_Row], drop: Callable[[str, int], None]) -> list[_Line]:
    by_prompt: dict[str, list[_Row]] = {}
    for r in rows:
        if r.score is None:
            drop("no_score", 1)
        else:
            by_prompt.setdefault(_prompt_key(r.data["messages"]), []).append(r)
    out = []
    for group in by_prompt.values():
        if len(group) < 2:
            drop("group_too_small", len(group))
            continue
        ms = group[0].data["messages"]
        k = _prompt_len(ms)
        completions = []
        for r in group:
            kr = _prompt_len(r.data["messages"])
            turns = [{**t, "message_index": t["message_index"] - kr} for t in r.data.get("turns") or []
                     if t.get("message_index", -1) >= kr]
            completions.append({"id": r.id, "reward": r.reward, "score": r.score, "success": r.success,
                                "messages": _completion(r), "turns": turns})
        line = {"task_id": group[0].task_id, "prompt": _msgs(ms[:k]), "rewards": [r.score for r in group],
                "completions": completions}
        out.append((line, group[0], tuple(r.id for r in group)))
    return out


# -- output ------------------------------------------------------------------------------------


class _Sink:
    """A JSONL file being written to a temporary name; `commit` renames it into place."""

    def __init__(self, final: Path) -> None:
        self.final = final
        try:
            fd, self.tmp = tempfile.mkstemp(dir=final.parent, prefix=f".{final.name}.", suffix=".tmp")
        except OSError as e:
            raise ExportError(f"cannot write to {final.parent}: {e}") from e
        self.f = os.fdopen(fd, "wb")
        self.digest = hashlib.sha256()
        self.size = self.count = 0
        self.by_app: dict[str, int] = {}
        self.ids = 0  # distinct trajectories used
        self.tasks: set[str] = set()

    def write(self, obj: dict[str, Any], app: str, task_id: str) -> None:
        line = (json.dumps(obj, ensure_ascii=False, separators=(",", ":")) + "\n").encode("utf-8")
        self.f.write(line)
        self.digest.update(line)
        self.size += len(line)
        self.count += 1
        self.by_app[app] = self.by_app.get(app, 0) + 1
        self.tasks.add(task_id)  # one entry per task, not per row

    def close(self) -> None:
        if not self.f.closed:
            self.f.flush()
            os.fsync(self.f.fileno())
            self.f.close()

    def commit(self) -> None:
        os.replace(self.tmp, self.final)

    def abort(self) -> None:
        if not self.f.closed:
            self.f.close()
        Path(self.tmp).unlink(missing_ok=True)


# -- query -------------------------------------------------------------------------------------


def _conditions(t: Any, f: ExportFilters) -> list[Any]:
    conds = [t.created_at < f.until]
    if f.since is not None:
        conds.append(t.created_at >= f.since)
    if f.app is not None:
        conds.append(t.app == f.app)
    if f.task is not None:
        conds.append(t.task_id == f.task)
    if f.model_version is not None:
        conds.append(t.served_version == f.model_version)
    if f.min_reward is not None:
        conds.append(t.reward >= f.min_reward)
    if f.min_score is not None:
        score_ok = t.score >= f.min_score
        if f.corrections:
            fb = FeedbackRow
            score_ok = sa.or_(score_ok, t.id.in_(sa.select(fb.trajectory_id).where(fb.correction.is_not(None))))
        conds.append(score_ok)
    return conds


def _where(f: ExportFilters, *, exact_dedup: bool) -> Any:
    t = TrajectoryRow
    conds = _conditions(t, f)
    if exact_dedup:
        # Keep the earliest (created_at, id) of each content hash among the rows the filters keep.
        t2 = aliased(TrajectoryRow)
        earlier = sa.or_(t2.created_at < t.created_at, sa.and_(t2.created_at == t.created_at, t2.id < t.id))
        conds.append(~sa.exists().where(t2.content_hash == t.content_hash, earlier, *_conditions(t2, f)))
    return sa.and_(*conds)


def _count(store: Store, where: Any) -> int:
    with store.engine.connect() as conn:
        return int(conn.execute(sa.select(sa.func.count()).select_from(TrajectoryRow).where(where)).scalar_one())


def _pages(store: Store, where: Any, keys: list[Any], batch: int) -> Iterator[list[Any]]:
    """Keyset pagination over `keys` (the last is the unique id): short reads, no long transaction."""
    t = TrajectoryRow
    cols = [t.id, t.task_id, t.app, t.served_version, t.reward, t.score, t.success, t.cluster, t.created_at, t.data]
    base = sa.select(*cols).where(where).order_by(*keys)
    last: tuple[Any, ...] | None = None
    while True:
        q = base
        if last is not None:
            q = q.where(sa.tuple_(*keys) > sa.tuple_(*last))  # a range scan on the matching composite index
        with store.engine.connect() as conn:
            page = conn.execute(q.limit(batch)).all()
        if page:
            yield page
        if len(page) < batch:
            return
        last = tuple(getattr(page[-1], k.key) for k in keys)


def _corrections(store: Store, ids: list[str]) -> dict[str, str]:
    fb = FeedbackRow
    q = sa.select(fb.trajectory_id, fb.correction).where(fb.trajectory_id.in_(ids), fb.correction.is_not(None))
    with store.engine.connect() as conn:
        return {tid: c for tid, c in conn.execute(q.order_by(fb.id)).all()}  # latest correction wins


# -- export ------------------------------------------------------------------------------------


def _check_format(fmt: str) -> None:
    if fmt not in _defaults.EXPORT_FORMATS_SUPPORTED:
        raise UnsupportedFormatError(
            f"unknown export format {fmt!r}: choose one of {', '.join(_defaults.EXPORT_FORMATS_SUPPORTED)}"
        )


def _validate(fmt: str, limit: int | None, since: datetime | None, until: datetime | None, holdout: float | None,
              balance: str | None, per_group: int | None, ngram: int) -> None:
    _check_format(fmt)
    if limit is not None and limit < 0:
        raise ConfigError(f"limit must be >= 0, got {limit}")
    if since is not None and until is not None and to_naive_utc(since) >= to_naive_utc(until):
        raise ConfigError(f"since ({since.isoformat()}) must be before until ({until.isoformat()})")
    if holdout is not None and not 0.0 < holdout < 1.0:
        raise ConfigError(f"holdout fraction must be strictly between 0 and 1 (e.g. 0.1), got {holdout}")
    if balance is not None and balance not in BALANCE_BY:
        raise ConfigError(f"unknown balance {balance!r}: choose task (equal rows per task) or cluster (per diversity cluster)")
    if per_group is not None and (balance is None or per_group < 1):
        raise ConfigError(f"per_group ({per_group}) needs balance=task|cluster and must be >= 1")
    if ngram < 1:
        raise ConfigError(f"ngram must be >= 1, got {ngram}")


def _balance_rates(store: Store, where: Any, by: str, per_group: int | None, limit: int | None) -> tuple[dict[Any, float], int]:
    col = TrajectoryRow.task_id if by == "task" else TrajectoryRow.cluster
    with store.engine.connect() as conn:
        sizes = dict(conn.execute(sa.select(col, sa.func.count()).where(where).group_by(col)).all())
    if not sizes:
        return {}, per_group or 0
    if per_group is None:
        if limit is not None:  # the largest cap K with sum(min(n, K)) <= limit
            lo, hi = 0, max(sizes.values())
            while lo < hi:
                mid = (lo + hi + 1) // 2
                lo, hi = (mid, hi) if sum(min(n, mid) for n in sizes.values()) <= limit else (lo, mid - 1)
            per_group = max(1, lo)
        else:
            per_group = max(1, int(statistics.median(sizes.values())))
    return {k: min(1.0, per_group / n) for k, n in sizes.items()}, per_group


def export(
    db_url: str | Store,
    out_path: str | Path,
    *,
    format: str = "sft",
    min_reward: float | None = None,
    min_score: float | None = None,
    app: str | None = None,
    task: str | None = None,
    model_version: str | None = None,
    since: datetime | None = None,
    until: datetime | None = None,
    limit: int | None = None,
    dedup: bool = False,
    balance: str | None = None,
    per_group: int | None = None,
    holdout: float | None = None,
    decontaminate: str | Path | None = None,
    ngram: int = _defaults.DECONTAM_NGRAM,
    corrections: bool = True,
    batch_size: int = _defaults.EXPORT_BATCH_SIZE,
    progress: Callable[[int], None] | None = None,
) -> ExportManifest:
    """Write curated training data from the collector database to `out_path` (JSONL).

    Args:
        db_url: database URL (or an open `Store`).
        out_path: the JSONL file; `<stem>.manifest.json` (and `<stem>.holdout.jsonl`) go beside it.
        format: `sft`, `dpo` or `grpo` (see the module docstring for each line's shape).
        min_reward, min_score: keep trajectories whose reward / score is at least this.
        app, task, model_version: keep only this app / task id / served version.
        since, until: ingest-time window, `since` inclusive, `until` exclusive (naive = UTC).
        limit: stop after this many lines in the output file.
        dedup: drop exact (content hash) and near (MinHash LSH) duplicates, keeping the first.
        balance, per_group: `task` or `cluster` stratified sampling, about `per_group` per group.
        holdout: fraction of tasks written to the holdout file instead.
        decontaminate, ngram: eval JSONL whose word n-grams must not appear in the output.
        corrections: use user corrections (SFT targets, DPO pairs).
        progress: called with the running count of trajectories read after each page.

    Returns:
        The manifest (also written to disk).

    Raises:
        UnsupportedFormatError, ConfigError: bad arguments (nothing is written); ExportError: the
        output cannot be written.
    """
    _validate(format, limit, since, until, holdout, balance, per_group, ngram)
    out = Path(out_path).expanduser()
    if out.is_dir():
        raise ConfigError(f"--out {out} is a directory: give a file path such as {out / 'sft.jsonl'}")
    index = EvalIndex.from_jsonl(decontaminate, ngram) if decontaminate is not None else None
    try:
        out.parent.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise ExportError(f"cannot create the output directory {out.parent}: {e}") from e

    started = utcnow()
    filters = ExportFilters(
        min_reward=min_reward, min_score=min_score, app=app, task=task, model_version=model_version,
        since=to_naive_utc(since) if since else None, until=to_naive_utc(until) if until is not None else started,
        limit=limit, dedup=dedup, balance=balance, per_group=per_group, holdout=holdout,
        decontaminate=str(Path(decontaminate).expanduser().resolve()) if decontaminate is not None else None,
        decontaminate_sha256=hashlib.sha256(Path(decontaminate).expanduser().read_bytes()).hexdigest() if decontaminate else None,
        ngram=ngram if decontaminate is not None else None, corrections=corrections,
    )
    store = db_url if isinstance(db_url, Store) else open_store(db_url)
    sinks: list[_Sink] = []
    try:
        matched = _count(store, _where(filters, exact_dedup=False))
        where = _where(filters, exact_dedup=dedup)
        dropped: dict[str, int] = {}
        if dedup:
            dropped["exact_duplicate"] = matched - _count(store, where)
        rates: dict[Any, float] = {}
        if balance is not None:
            rates, resolved = _balance_rates(store, where, balance, per_group, limit)
            filters = filters.model_copy(update={"per_group": resolved})
        main = _Sink(out)
        sinks.append(main)
        side = _Sink(holdout_path_for(out)) if holdout is not None else None
        if side is not None:
            sinks.append(side)
        _run(store, filters, where, format, main, side, index, rates, matched, dropped, batch_size, progress)
        qm = store.score_model("quality")
        for s in sinks:
            s.close()
        for s in sinks:
            s.commit()
    except BaseException:
        for s in sinks:
            s.abort()
        raise
    finally:
        if not isinstance(db_url, Store):
            store.close()

    manifest = ExportManifest(
        format=format, path=str(out), count=main.count, by_app=main.by_app, trajectories=main.ids, tasks=len(main.tasks),
        matched=matched, dropped={k: v for k, v in dropped.items() if v}, filters=filters,
        holdout=None if side is None else HoldoutInfo(path=str(side.final), fraction=holdout or 0.0, count=side.count,
                                                      tasks=len(side.tasks), sha256=side.digest.hexdigest(), bytes=side.size),
        quality_model=None if qm is None else {"id": qm.id, "auc": qm.auc},
        created_at=datetime.now(timezone.utc), sha256=main.digest.hexdigest(), bytes=main.size,
        db=store.engine.url.render_as_string(hide_password=True),
    )
    atomic_write(manifest_path_for(out), manifest.model_dump_json(indent=2) + "\n")
    from ._events import record_export

    record_export(db_url, manifest)
    return manifest


def _run(store: Store, f: ExportFilters, where: Any, fmt: str, main: _Sink, side: _Sink | None, index: EvalIndex | None,
         rates: dict[Any, float], matched: int, dropped: dict[str, int], batch: int,
         progress: Callable[[int], None] | None) -> None:
    t = TrajectoryRow

    def drop(reason: str, n: int = 1) -> None:
        dropped[reason] = dropped.get(reason, 0) + n

    near = NearDupFilter(matched) if f.dedup else None
    grouped = fmt != "sft"
    keys = [t.task_id, t.created_at, t.id] if grouped else [t.created_at, t.id]
    group: list[_Row] = []
    read = 0

    def emit(lines: list[_Line]) -> bool:
        """Write lines (all of one task); True once the output file holds `limit` lines."""
        used: dict[int, set[str]] = {}
        full = False
        for line, r, ids in lines:
            sink = side if side is not None and in_holdout(r.task_id, f.holdout or 0.0) else main
            if sink is main and f.limit is not None and main.count >= f.limit:
                full = True
                break
            sink.write(line, r.app, r.task_id)
            used.setdefault(id(sink), set()).update(ids)
        for sink in (main, side):
            if sink is not None:
                sink.ids += len(used.get(id(sink), ()))
        return full or (f.limit is not None and main.count >= f.limit)

    def flush() -> bool:
        rows, group[:] = list(group), []
        return bool(rows) and emit(_dpo_lines(rows, drop) if fmt == "dpo" else _grpo_lines(rows, drop))

    if f.limit == 0:
        return
    for page in _pages(store, where, keys, batch):
        corr = _corrections(store, [r.id for r in page]) if f.corrections else {}
        for r in page:
            read += 1
            if rates and unit_hash("balance:" + r.id) >= rates.get(r.task_id if f.balance == "task" else r.cluster, 1.0):
                drop("balance")
                continue
            data = json.loads(r.data)
            c = corr.get(r.id)
            if index is not None or near is not None:
                words = word_hashes(trajectory_text(data) + ("\n" + c if c else ""))
                if index is not None and index.contaminated_words(words):
                    drop("contaminated")
                    continue
                if near is not None and near.seen_words(words):
                    drop("near_duplicate")
                    continue
            row = _Row(r, data, c)
            if not grouped:
                if emit([(_sft_line(row), row, (row.id,))]):
                    return
                continue
            if group and (group[0].task_id != row.task_id or len(group) >= _defaults.MAX_GROUP):
                if flush():
                    return
            group.append(row)
        if progress is not None:
            progress(read)
    if grouped:
        flush()
