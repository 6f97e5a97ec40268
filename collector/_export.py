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
  OpenAI function specs the conversation was given) when the trajectory's metadata records them, corrected
  or not. With a user correction (`corrections=True`, the default) the correction replaces the assistant
  message it corrects: the line is the messages before that message plus the correction, and the
  messages after it are dropped (they followed from the wrong message). Feedback by response id
  corrects the message that completion produced; feedback by trajectory id (or stored before feedback
  kept response ids) corrects the last assistant message. A single-turn conversation becomes its prompt
  plus the correction (`_export_correction.py` has the rule and its fallbacks for older captures).
  In a captured conversation, an assistant message no exchange produced (the client wrote it) carries
  `"weight": 0` (OpenAI's fine-tuning field), which SFT does not train on.
- `dpo`: `{"task_id", "prompt", "chosen", "rejected", "chosen_id", "rejected_id", "chosen_score",
  "rejected_score", "source"}` (TRL's conversational preference format). Pairing rule: within
  one task, trajectories whose prompts (messages before the first assistant message) are equal
  are ranked by score; the best is paired with the worst, the second best with the second
  worst, and so on while the better one's score is strictly higher; each trajectory is used at
  most once. `source: "correction"` pairs put a user's correction (chosen, score 1) against the
  assistant message it corrected (rejected, that one message), with the messages before that
  message as the prompt (the same message the `sft` line replaces).
- `grpo`: `{"task_id", "prompt", "rewards", "completions": [{"id", "served_version", "reward", "score",
  "success", "messages", "turns"}]}`: one line per (task, prompt) group of at least two scored
  trajectories; `rewards` are the final scores; `turns` carry the token ids and logprobs that
  were ingested, with `message_index` relative to the completion's `messages`; `served_version`
  (the version that sampled them) lets a trainer bound how stale they are.

DPO and GRPO read rows ordered by task and handle one task at a time, at most `MAX_GROUP` rows
at once (a larger task is handled in consecutive chunks). Memory stays flat whatever the table
size: pages of rows, one task group, the near-dup Bloom filter (64 bytes per candidate row),
the eval n-grams and a counter per balance group. Output goes through `sdk.infra.atomic_open`
(a temporary file, fsynced, renamed into place at the end, data files mode 0600): a failed or
interrupted export leaves no partial file. The manifest is written last.

This module is the orchestration; the pieces are `_export_query.py` (SQL: filters, exact dedup,
balance rates, keyset pages), `_export_formats.py` (the three line builders),
`_export_correction.py` (which message a correction replaces) and `_export_manifest.py` (what the
manifest records).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable
from contextlib import ExitStack
from datetime import datetime, timezone
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any

from sdk.infra import atomic_open, atomic_write

from . import _defaults
from ._decontam import EvalIndex
from ._dedup import NearDupFilter
from ._export_formats import Line, Row, dpo_lines, grpo_lines, sft_line
from ._export_manifest import ExportFilters, ExportManifest, HoldoutInfo, holdout_path_for, in_holdout, manifest_path_for
from ._export_query import BALANCE_BY, balance_rates, count_rows, latest_corrections, pages, where_clause
from ._schema import TrajectoryRow, to_naive_utc, utcnow
from ._shingle import trajectory_text, unit_hash, word_hashes
from ._store import Store, open_store
from .errors import ConfigError, ExportError, UnsupportedFormatError

if TYPE_CHECKING:
    import sqlalchemy as sa

#: Export files hold users' conversations (anonymized): readable by their owner only.
_DATA_PERMS = 0o600


class _Sink:
    """One JSONL output being written through `atomic_open`: what it wrote, counted and hashed."""

    def __init__(self, final: Path, f: IO[bytes]) -> None:
        self.final, self.f = final, f
        self.digest = hashlib.sha256()
        self.size = self.count = 0
        self.by_app: dict[str, int] = {}
        self.ids = 0  # distinct trajectories used
        self.tasks: set[str] = set()

    @classmethod
    def open(cls, stack: ExitStack, final: Path) -> _Sink:
        """A sink whose file appears under `final` when `stack` closes without an exception."""
        try:
            f = stack.enter_context(atomic_open(final, "wb", perms=_DATA_PERMS))
        except OSError as e:
            raise ExportError(f"cannot write to {final.parent}: {e}") from e
        return cls(final, f)

    def write(self, obj: dict[str, Any], app: str, task_id: str) -> None:
        line = (json.dumps(obj, ensure_ascii=False, separators=(",", ":")) + "\n").encode("utf-8")
        self.f.write(line)
        self.digest.update(line)
        self.size += len(line)
        self.count += 1
        self.by_app[app] = self.by_app.get(app, 0) + 1
        self.tasks.add(task_id)  # one entry per task, not per row


def _check_format(fmt: str) -> None:
    if fmt not in _defaults.EXPORT_FORMATS:
        raise UnsupportedFormatError(
            f"unknown export format {fmt!r}: choose one of {', '.join(_defaults.EXPORT_FORMATS)}"
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


def _output_path(out_path: str | Path) -> Path:
    out = Path(out_path).expanduser()
    if out.is_dir():
        raise ConfigError(f"--out {out} is a directory: give a file path such as {out / 'sft.jsonl'}")
    return out


def _make_dir(out: Path) -> None:
    try:
        out.parent.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise ExportError(f"cannot create the output directory {out.parent}: {e}") from e


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
    out = _output_path(out_path)
    index = EvalIndex.from_jsonl(decontaminate, ngram) if decontaminate is not None else None
    _make_dir(out)
    eval_file = Path(decontaminate).expanduser() if decontaminate is not None else None
    filters = ExportFilters(
        min_reward=min_reward, min_score=min_score, app=app, task=task, model_version=model_version,
        since=to_naive_utc(since) if since else None, until=to_naive_utc(until) if until is not None else utcnow(),
        limit=limit, dedup=dedup, balance=balance, per_group=per_group, holdout=holdout,
        decontaminate=str(eval_file.resolve()) if eval_file is not None else None,
        decontaminate_sha256=hashlib.sha256(eval_file.read_bytes()).hexdigest() if eval_file is not None else None,
        ngram=ngram if decontaminate is not None else None, corrections=corrections,
    )
    store = db_url if isinstance(db_url, Store) else open_store(db_url)
    try:
        return _export(store, out, format, filters, index, batch_size, progress)
    finally:
        if not isinstance(db_url, Store):
            store.close()


def _export(store: Store, out: Path, fmt: str, filters: ExportFilters, index: EvalIndex | None, batch: int,
            progress: Callable[[int], None] | None) -> ExportManifest:
    """Count, resolve the balance, write the files, then the manifest."""
    matched = count_rows(store, where_clause(filters, exact_dedup=False))
    where = where_clause(filters, exact_dedup=filters.dedup)
    dropped: dict[str, int] = {}
    if filters.dedup:
        dropped["exact_duplicate"] = matched - count_rows(store, where)
    rates: dict[Any, float] = {}
    if filters.balance is not None:
        rates, resolved = balance_rates(store, where, filters.balance, filters.per_group, filters.limit)
        filters = filters.model_copy(update={"per_group": resolved})
    with ExitStack() as stack:  # closing it renames both files into place; an exception removes both
        main = _Sink.open(stack, out)
        side = _Sink.open(stack, holdout_path_for(out)) if filters.holdout is not None else None
        _run(store, filters, where, fmt, main, side, index, rates, matched, dropped, batch, progress)
        qm = store.score_model("quality")
    manifest = ExportManifest(
        format=fmt, path=str(out), count=main.count, by_app=main.by_app, trajectories=main.ids, tasks=len(main.tasks),
        matched=matched, dropped={k: v for k, v in dropped.items() if v}, filters=filters,
        holdout=None if side is None else HoldoutInfo(path=str(side.final), fraction=filters.holdout or 0.0,
                                                      count=side.count, tasks=len(side.tasks),
                                                      sha256=side.digest.hexdigest(), bytes=side.size),
        quality_model=None if qm is None else {"id": qm.id, "auc": qm.auc},
        created_at=datetime.now(timezone.utc), sha256=main.digest.hexdigest(), bytes=main.size,
        db=store.engine.url.render_as_string(hide_password=True),
    )
    atomic_write(manifest_path_for(out), manifest.model_dump_json(indent=2) + "\n")
    from ._events import record_export

    record_export(store, manifest)
    return manifest


def _run(store: Store, f: ExportFilters, where: sa.ColumnElement[bool], fmt: str, main: _Sink, side: _Sink | None, index: EvalIndex | None,
         rates: dict[Any, float], matched: int, dropped: dict[str, int], batch: int,
         progress: Callable[[int], None] | None) -> None:
    """Stream the matching rows, page by page, through balance, decontamination, near-dup and the
    format into the sinks, counting every drop; stops once the output holds `limit` lines."""
    t = TrajectoryRow

    def drop(reason: str, n: int = 1) -> None:
        dropped[reason] = dropped.get(reason, 0) + n

    near = NearDupFilter(matched) if f.dedup else None
    grouped = fmt != "sft"
    keys = [t.task_id, t.created_at, t.id] if grouped else [t.created_at, t.id]
    group: list[Row] = []
    read = 0

    def emit(lines: list[Line]) -> bool:
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
        for each in (main, side):
            if each is not None:
                each.ids += len(used.get(id(each), ()))
        return full or (f.limit is not None and main.count >= f.limit)

    def flush() -> bool:
        rows, group[:] = list(group), []
        return bool(rows) and emit(dpo_lines(rows, drop) if fmt == "dpo" else grpo_lines(rows, drop))

    if f.limit == 0:
        return
    for page in pages(store, where, keys, batch):
        corr = latest_corrections(store, [r.id for r in page]) if f.corrections else {}
        for r in page:
            read += 1
            if rates and unit_hash("balance:" + r.id) >= rates.get(r.task_id if f.balance == "task" else r.cluster, 1.0):
                drop("balance")
                continue
            data = json.loads(r.data)
            c = corr.get(r.id)
            if index is not None or near is not None:
                words = word_hashes(trajectory_text(data) + ("\n" + c.text if c else ""))
                if index is not None and index.contaminated_words(words):
                    drop("contaminated")
                    continue
                if near is not None and near.seen_words(words):
                    drop("near_duplicate")
                    continue
            row = Row(r, data, c)
            if not grouped:
                if emit([(sft_line(row), row, (row.id,))]):
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
