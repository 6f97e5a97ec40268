"""`GET /v1/live`: the live signal of one served version over an ingest-time window.

The gateway's canary and its watch after a promotion (`server._canary`) compare versions on what their
real traffic earned: the verifier outcomes apps reported and the ratings users gave. This endpoint is that
comparison's only input, so the gateway reads the collector over HTTP and never imports it. One aggregate
query on indexed columns (`served_version`, `created_at`):

    episodes            trajectories the version served in [since, until) (and of `app`, when given)
    with_outcome        of those, with a verifier outcome; `successes` among them
    with_feedback       with at least one user rating; `positive_feedback` whose mean rating is > 0;
                        `mean_feedback` the mean of those means, in [-1, 1]

Deliberately not here: the decision (the gateway makes it) and any per-slice split.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any, Callable, Optional

import sqlalchemy as sa
from fastapi import APIRouter, Depends
from sqlmodel import Session
from starlette.concurrency import run_in_threadpool

from ._db import Store, TrajectoryRow, to_naive_utc


def live_window(store: Store, version: str, since: Optional[datetime] = None, until: Optional[datetime] = None,
                app: Optional[str] = None) -> dict[str, Any]:
    """The counts above for `version` (see the module docstring)."""
    t = TrajectoryRow
    cond = [t.served_version == version]
    if app is not None:
        cond.append(t.app == app)
    if since is not None:
        cond.append(t.created_at >= to_naive_utc(since))
    if until is not None:
        cond.append(t.created_at < to_naive_utc(until))

    def count_if(c: Any) -> Any:
        return sa.func.coalesce(sa.func.sum(sa.case((c, 1), else_=0)), 0)

    q = sa.select(
        sa.func.count(),
        sa.func.count(t.success),
        count_if(t.success.is_(True)),  # type: ignore[union-attr]
        sa.func.count(t.feedback_rating),
        count_if(t.feedback_rating > 0),  # type: ignore[operator]
        sa.func.avg(t.feedback_rating),
    ).where(*cond)
    with Session(store.engine) as session:
        r = session.execute(q).one()
    return {"version": version, "since": since, "until": until, "app": app, "episodes": int(r[0]),
            "with_outcome": int(r[1]), "successes": int(r[2]), "with_feedback": int(r[3]),
            "positive_feedback": int(r[4]), "mean_feedback": float(r[5]) if r[5] is not None else None}


def live_router(store: Store, require_key: Callable[..., None]) -> APIRouter:
    """The `GET /v1/live` route (behind the collector's API key)."""
    router = APIRouter()

    @router.get("/v1/live", dependencies=[Depends(require_key)])
    async def live(version: str, since: Optional[datetime] = None, until: Optional[datetime] = None,
                   app: Optional[str] = None) -> dict[str, Any]:
        """Outcomes and ratings of the trajectories `version` served in [since, until)."""
        return await run_in_threadpool(live_window, store, version, since, until, app)

    return router
