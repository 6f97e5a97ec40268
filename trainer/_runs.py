"""The retrain history: one directory per run under the runs dir, read by `trainer runs` and the scheduler.

    <runs>/<run_id>/run.json      written first: run id, start time, trigger, host, pid
    <runs>/<run_id>/config.json   the resolved job config
    <runs>/<run_id>/result.json   written last (atomically): status, reason, gate figures, ...

A run without `result.json` is one of three, and `trainer runs` shows which:

    running       its job still holds the run's lock (`_lock.RunLock`) in its process, alive on this host
    failed        its process is alive but the job has ended: it could not write its result (the disk was
                  full even after the room set aside for it; the process's log says why the run failed)
    interrupted   its process is gone without a result: killed (SIGKILL, the OOM killer, power loss), or a
                  `trainer run` that could not write its result either

Runs recorded before the run lock existed (no "run_lock" in run.json) are running while their process is.
Failed and interrupted runs are redone by the next trigger. Statuses: promoted, canary, rejected (the gate
said no), skipped (nothing new, too little data, another job running), interrupted, failed.

The history is files, not a table, so that it needs no database of its own; for schedulers on several
hosts put the runs dir on storage they share (the job lock already serializes them). Each recorded result
is also handed to the collector (`publish_run`: its `events` table, which the dashboard reads); a
collector that cannot take it costs a log line, never the run.
"""

from __future__ import annotations

import json
import logging
import os
import socket
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any, Optional

from sdk import looplift_home

from ._eval_cache import DIR as EVAL_CACHE_DIR
from ._gate_ledger import DIR as GATE_LEDGER_DIR
from ._lock import RunLock

if TYPE_CHECKING:
    from server import VersionsView

#: Runs that decided on their data: the same inputs again are "nothing new".
DECIDED = ("promoted", "canary", "rejected")


def default_runs_dir(runs_dir: Optional[Path] = None) -> Path:
    """`runs_dir`, else `$LOOPLIFT_HOME/trainer/runs`."""
    return Path(runs_dir) if runs_dir is not None else looplift_home() / "trainer" / "runs"


def _read(path: Path) -> Optional[dict[str, Any]]:
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def _alive(start: dict[str, Any]) -> bool:
    """Whether the process that started a run still runs (only knowable on its own host)."""
    if start.get("host") != socket.gethostname() or not isinstance(start.get("pid"), int):
        return False
    try:
        os.kill(start["pid"], 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _unrecorded(run_dir: Path, start: dict[str, Any]) -> dict[str, str]:
    """The status and reason of a run without a result (see the module docstring)."""
    if not _alive(start):
        return {"status": "interrupted", "reason": "no result recorded: the process was killed (or its disk was "
                                                   "full) before it could record one; the next trigger redoes it"}
    if not start.get("run_lock") or RunLock.in_progress(run_dir):
        return {"status": "running", "reason": "in progress"}
    return {"status": "failed", "reason": f"died without a result: the job ended in process {start.get('pid')}, "
                                          "which could not write its result (most likely a full disk; its log says "
                                          "why the run failed); the next trigger redoes it"}


def list_runs(runs: Path) -> list[dict[str, Any]]:
    """Every run, oldest first: its result, or for a run without one its start record with status "running",
    "failed" (the job ended without writing its result) or "interrupted" (its process is gone)."""
    if not runs.is_dir():
        return []
    out: list[dict[str, Any]] = []
    for d in sorted(p for p in runs.iterdir() if p.is_dir() and p.name not in (EVAL_CACHE_DIR, GATE_LEDGER_DIR)):
        result = _read(d / "result.json")
        if result is not None:
            out.append(result)
            continue
        start = _read(d / "run.json") or {"run_id": d.name}
        out.append(start | _unrecorded(d, start))
    return out


#: Runs that ended keeping nothing of theirs in the gateway: a candidate they loaded may be unloaded.
ENDED_WITHOUT_KEEPING = ("rejected", "interrupted", "failed")
#: Registry history actions that make a version one that served (or may serve again: a rollback target).
_SERVED_ACTIONS = ("promote", "rollback", "canary", "restore")


def left_loaded(runs: Path, view: "VersionsView") -> list[tuple[str, str, str]]:
    """(version, run id, run status) for each candidate an earlier run of `runs` loaded into the gateway and left
    there: the run was killed or stopped between loading and deciding, its gate could not decide, or its unload
    failed. Only adapters under `runs` whose run ended without keeping them (`ENDED_WITHOUT_KEEPING`), that are
    loaded, serve nothing and never did (no promote, rollback, canary or restore names them)."""
    served = {name for ev in view.history if ev.action in _SERVED_ACTIONS for name in (ev.version, ev.previous) if name}
    status = {str(r.get("run_id")): str(r.get("status")) for r in list_runs(runs)}
    root = runs.resolve()
    out = []
    for v in view.versions:
        if v.state != "loaded" or v.serving or v.name in served or v.adapter_path is None:
            continue
        try:
            run_id = Path(v.adapter_path).resolve().relative_to(root).parts[0]
        except (ValueError, IndexError):
            continue  # not one of ours
        if status.get(run_id) in ENDED_WITHOUT_KEEPING:  # not the run calling this: it is running
            out.append((v.name, run_id, status[run_id]))
    return out


def last_decided(runs: Path, input_key: str) -> Optional[dict[str, Any]]:
    """The newest promoted/rejected run whose inputs (data + algorithm + its config) had `input_key`."""
    rec: dict[str, Any]
    for rec in reversed(list_runs(runs)):
        if rec.get("status") in DECIDED and rec.get("input_key") == input_key:
            return rec
    return None


def _last_export(runs: Path) -> Optional[dict[str, Any]]:
    """The newest run that exported data and was not interrupted (interrupted runs are redone)."""
    return next((rec for rec in reversed(list_runs(runs))
                 if rec.get("status") != "interrupted" and rec.get("exported_at")), None)


def last_export_time(runs: Path) -> Optional[datetime]:
    """When the newest run that exported data (and was not interrupted) took its snapshot, by the trainer's
    clock; the drift trigger's window starts there at the earliest."""
    rec = _last_export(runs)
    return datetime.fromisoformat(rec["exported_at"]) if rec is not None else None


def last_export_mark(runs: Path) -> tuple[Optional[int], Optional[datetime]]:
    """Where the newest run's export snapshot stands, for the new-data trigger: the collector's ingest mark
    (`Store.ingest_mark`, clock-free) when the run recorded one, else (runs from before it) its time."""
    rec = _last_export(runs)
    if rec is None:
        return None, None
    mark = rec.get("exported_mark")
    if isinstance(mark, int) and not isinstance(mark, bool):
        return mark, None
    return None, datetime.fromisoformat(rec["exported_at"])


def measured_success(runs: Path, version: str) -> Optional[tuple[float, str]]:
    """What the newest gate measured for `version` (as candidate or as serving version), and the run id: its
    report-split figure (the one no gate selected on), else (runs recorded before the split, a suite with no
    report task) `*_success`.
    A gate whose episodes kept erroring measured nothing whole and is passed over."""
    for rec in reversed(list_runs(runs)):
        if (rec.get("gate") or {}).get("errored"):
            continue
        for side in ("candidate", "serving"):
            if rec.get(side) != version:
                continue
            figure = rec.get(f"{side}_report_success")
            figure = rec.get(f"{side}_success") if figure is None else figure
            if figure is not None:
                return float(figure), str(rec["run_id"])
    return None


def publish_run(db_url: str, record: dict[str, Any]) -> bool:
    """Hand a run's record to the collector database `db_url` (the dashboard's retrain runs); False, with a
    warning logged, when the collector cannot take it (the run itself is recorded in its directory anyway)."""
    try:
        from collector import record_event

        record_event(db_url, "retrain_run", record, key=str(record["run_id"]))
    except Exception as e:  # noqa: BLE001 - the dashboard's copy must never fail or hide the run's outcome
        logging.getLogger("looplift.trainer").warning("could not publish run %s to the collector (%s): %s",
                                                      record.get("run_id"), db_url, e)
        return False
    return True
