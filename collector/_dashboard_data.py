"""The dashboard's figures that the collector's own database holds: one function per panel.

- `live`: success and feedback per served version, app and task group over a window, and success per
  version per 5 minutes, hour or day (by the window's length) as a time series. A task's group is the part of its id before the first
  `:` (`arith:3+4` -> `arith`, `extraction:17` -> `extraction`), else the whole id; the 12 largest
  groups are listed, the rest summed as `other`.
- `data`: trajectories per app per day, score sources, PII replaced per type (from `trajectories.pii`,
  written at ingest), exports (from `events`).
- `runs`: the trainer's retrain runs (from `events`), each with the gate's figures and a 95% Wilson
  interval around both success rates.
- `latency`: model (generate) and environment/sandbox (execute) seconds per step, p50/p95 per app,
  and episodes that ended in an environment error, over the newest `LATENCY_SAMPLE` trajectories; and
  per app the newest sandbox pool snapshot (size, in use, idle, starting, start failures, replaced) that
  the app's environments put into `Step.info["sandbox_pool"]` (`sandboxes.PoolStats.snapshot()`): the
  pool lives in the app's process, so this is how its size and load reach the collector.

Every query is one aggregate over indexed columns (`created_at`, `app`, `served_version`) except
`latency`, which parses a bounded sample of rows. Deliberately not here: anything the gateway or the
trainer owns live (versions, swaps, health: `_dashboard.py` asks the gateway).
"""

from __future__ import annotations

import json
import math
from datetime import datetime, timedelta, timezone
from typing import Any

import sqlalchemy as sa
from sqlmodel import col

from . import _defaults
from ._schema import TrajectoryRow, utcnow
from ._store import Store
from ._events import list_events

#: Groups listed per breakdown before the rest is summed as "other".
TOP_GROUPS = 12


def wilson(successes: int, n: int, z: float = 1.96) -> tuple[float, float] | None:
    """The 95% Wilson score interval of a success rate (None without trials)."""
    if n <= 0:
        return None
    p = successes / n
    denom = 1 + z * z / n
    centre = (p + z * z / (2 * n)) / denom
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / denom
    return max(0.0, centre - half), min(1.0, centre + half)


def _task_group(store: Store) -> sa.ColumnElement[Any]:
    t = col(TrajectoryRow.task_id)
    if store.dialect == "postgresql":
        return sa.func.split_part(t, ":", 1)
    pos = sa.func.instr(t, ":")
    return sa.case((pos > 0, sa.func.substr(t, 1, pos - 1)), else_=t)


def _bucket(store: Store, seconds: int) -> sa.ColumnElement[Any]:
    """`created_at` floored to a multiple of `seconds`, as Unix seconds (naive UTC on both dialects)."""
    c = col(TrajectoryRow.created_at)
    if store.dialect == "postgresql":
        return sa.cast(sa.func.floor(sa.extract("epoch", c) / seconds) * seconds, sa.BigInteger)
    return sa.cast(sa.func.strftime("%s", c), sa.Integer) // seconds * seconds  # `//`: SQL integer division


def _label(epoch: Any, seconds: int) -> str:
    dt = datetime.fromtimestamp(int(epoch), timezone.utc)
    return dt.strftime("%Y-%m-%d") if seconds >= 86400 else dt.strftime("%Y-%m-%dT%H:%M")


def bucket_seconds(window: timedelta) -> int:
    """5 minutes up to a 2-hour window, hours up to 2 days, days beyond."""
    return 300 if window <= timedelta(hours=2) else 3600 if window <= timedelta(hours=48) else 86400


def _group_row(key: Any, r: Any) -> dict[str, Any]:
    n, outcome, ok, fb, mean_fb = int(r[0]), int(r[1]), int(r[2]), int(r[3]), r[4]
    ci = wilson(ok, outcome)
    return {"key": "unknown" if key is None else str(key), "n": n, "with_outcome": outcome, "successes": ok,
            "success_rate": ok / outcome if outcome else None, "ci": list(ci) if ci else None,
            "with_feedback": fb, "mean_feedback": float(mean_fb) if mean_fb is not None else None}


def _aggregates() -> list[sa.ColumnElement[Any]]:
    t = TrajectoryRow
    return [sa.func.count(), sa.func.count(col(t.success)),
            sa.func.coalesce(sa.func.sum(sa.case((col(t.success).is_(True), 1), else_=0)), 0),
            sa.func.count(col(t.feedback_rating)), sa.func.avg(t.feedback_rating)]


def _breakdown(store: Store, key: sa.SQLColumnExpression[Any], since: datetime) -> list[dict[str, Any]]:
    q = sa.select(key, *_aggregates()).where(col(TrajectoryRow.created_at) >= since).group_by(key)
    with store.engine.connect() as conn:
        rows = sorted(conn.execute(q).all(), key=lambda r: -int(r[1]))
    out = [_group_row(r[0], r[1:]) for r in rows[:TOP_GROUPS]]
    rest = rows[TOP_GROUPS:]
    if rest:
        n = sum(int(r[1]) for r in rest)
        fb_n = sum(int(r[4]) for r in rest)
        fb_sum = sum(float(r[5]) * int(r[4]) for r in rest if r[5] is not None)
        out.append(_group_row("other", (n, sum(int(r[2]) for r in rest), sum(int(r[3]) for r in rest), fb_n,
                                        fb_sum / fb_n if fb_n else None)))
    return out


def live(store: Store, window: timedelta) -> dict[str, Any]:
    """Success and feedback per version, app and task group over `window`, and the version time series."""
    since = utcnow() - window
    t = TrajectoryRow
    step = bucket_seconds(window)
    bucket = _bucket(store, step)
    q = (sa.select(bucket, col(t.served_version), *_aggregates()).where(col(t.created_at) >= since)
         .group_by(bucket, col(t.served_version)).order_by(bucket))
    with store.engine.connect() as conn:
        series = [{"bucket": _label(r[0], step), "t": int(r[0]), **_group_row(r[1], r[2:])} for r in conn.execute(q).all()]
    total = _breakdown(store, sa.literal("all"), since)
    return {"window_s": int(window.total_seconds()), "since": since.isoformat() + "Z", "bucket_s": step,
            "total": total[0] if total else _group_row("all", (0, 0, 0, 0, None)),
            "by_version": _breakdown(store, col(t.served_version), since), "by_app": _breakdown(store, col(t.app), since),
            "by_task_group": _breakdown(store, _task_group(store), since), "series": series}


def data(store: Store, days: int = 30) -> dict[str, Any]:
    """Trajectories per app per day, score sources, PII replaced per type, exports."""
    since = utcnow().replace(hour=0, minute=0, second=0, microsecond=0) - timedelta(days=days - 1)
    t = TrajectoryRow
    day = _bucket(store, 86400)
    with store.engine.connect() as conn:
        per_day = [{"day": _label(r[0], 86400), "app": r[1], "n": int(r[2])} for r in conn.execute(
            sa.select(day, col(t.app), sa.func.count()).where(col(t.created_at) >= since).group_by(day, t.app).order_by(day))]
        pii: dict[str, int] = {}
        rows_with_pii = 0
        for (blob,) in conn.execute(sa.select(col(t.pii)).where(col(t.created_at) >= since, col(t.pii).is_not(None))):
            assert blob is not None  # the WHERE excludes NULL
            rows_with_pii += 1
            for kind, n in json.loads(blob).items():
                pii[kind] = pii.get(kind, 0) + int(n)
    stats = store.stats()
    exports = list_events(store, "export", limit=50)
    return {"days": days, "per_app_day": per_day, "score_sources": stats.score_sources, "total": stats.total,
            "with_outcome": stats.with_outcome, "feedback": stats.feedback, "quality_model": stats.quality_model,
            "pii": dict(sorted(pii.items(), key=lambda kv: -kv[1])), "trajectories_with_pii": rows_with_pii,
            "exports": exports}


def runs(store: Store, limit: int = 100) -> list[dict[str, Any]]:
    """The newest retrain runs, oldest first, with Wilson intervals for the gate's success rates."""
    out = []
    for rec in list_events(store, "retrain_run", limit=limit):
        gate = rec.get("gate") or {}
        n = gate.get("n")
        for side in ("candidate", "serving"):
            rate = rec.get(f"{side}_success")
            ci = wilson(round(rate * n), n) if isinstance(rate, (int, float)) and isinstance(n, int) else None
            rec[f"{side}_ci"] = list(ci) if ci else None
        out.append(rec)
    return out


def _pct(values: list[float], q: float) -> float | None:
    if not values:
        return None
    s = sorted(values)
    return s[min(len(s) - 1, int(q * len(s)))]


def latency(store: Store, window: timedelta, sample: int = _defaults.LATENCY_SAMPLE) -> dict[str, Any]:
    """Per app: p50/p95 of model seconds and environment seconds per step, steps, env errors (sampled)."""
    t = TrajectoryRow
    q = (sa.select(col(t.app), col(t.data)).where(col(t.created_at) >= utcnow() - window)
         .order_by(col(t.created_at).desc()).limit(sample))
    per_app: dict[str, dict[str, Any]] = {}
    with store.engine.connect() as conn:
        for app, blob in conn.execute(q):
            d = json.loads(blob)
            a = per_app.setdefault(app, {"episodes": 0, "env_errors": 0, "gen": [], "exec": [], "pool": None})
            a["episodes"] += 1
            a["env_errors"] += d.get("end_reason") == "env_error"
            last_pool = None
            for s in d.get("steps") or []:
                if s.get("generate_seconds"):
                    a["gen"].append(float(s["generate_seconds"]))
                a["exec"].append(float(s.get("execute_seconds") or 0.0))
                last_pool = _pool_snapshot((s.get("info") or {}).get("sandbox_pool")) or last_pool
            if a["pool"] is None:  # rows come newest first: the newest episode's last snapshot
                a["pool"] = last_pool
    return {"sample": sample, "by_app": [
        {"app": app, "episodes": a["episodes"], "steps": len(a["exec"]), "env_errors": a["env_errors"],
         "generate_p50": _pct(a["gen"], 0.5), "generate_p95": _pct(a["gen"], 0.95),
         "execute_p50": _pct(a["exec"], 0.5), "execute_p95": _pct(a["exec"], 0.95), "pool": a["pool"]}
        for app, a in sorted(per_app.items())]}


def _pool_snapshot(value: Any) -> dict[str, int] | None:
    """A step's `sandbox_pool` info as {name: int}, or None when absent or not that shape (apps write info)."""
    if not isinstance(value, dict) or not isinstance(value.get("size"), int):
        return None
    return {k: int(v) for k, v in value.items() if isinstance(k, str) and isinstance(v, int) and not isinstance(v, bool)}


def now_iso() -> str:
    """Now in UTC, ISO 8601 with a Z."""
    return datetime.now(timezone.utc).replace(tzinfo=None).isoformat() + "Z"
