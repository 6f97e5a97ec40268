"""What ingest does for trajectories the gateway captured: grown sessions replace, response ids link.

The gateway turns its traffic into trajectories (`server._capture`). Two things differ from an SDK
episode, and both are driven by the trajectory's metadata, so any client may use them:

- **Revisable sessions.** Requests that share an `X-Looplift-Session` header are one conversation, and
  the gateway re-sends its trajectory under the same id after every exchange, each time with the
  whole conversation so far (`metadata.looplift_revision` marks it revisable). A revisable trajectory
  with more messages than the stored one replaces it; one with as many or fewer (a replay, a spooled
  batch that arrives after a newer one) is a duplicate, as ingest always was. Replacing, not
  appending, keeps one row per conversation, so export, dedup and scores see the conversation once.
  The row's feedback stays joined (the id is the same); its ingest time becomes the replacement's.
- **Response ids.** `metadata.response_ids` lists the ids of the chat completions the trajectory
  holds (the `id` the client received). Each is linked to the trajectory in `response_ids`, so
  feedback can name the completion instead of a trajectory id the client never saw.

Deliberately not here: the anonymizer, scoring and the insert itself (`_ingest.add_trajectories`).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import sqlalchemy as sa
from sqlmodel import col

from sdk import Trajectory, wire

from ._schema import ResponseIdRow, TrajectoryRow

if TYPE_CHECKING:
    from sqlalchemy.dialects import postgresql, sqlite

_MAX_RESPONSE_ID = 256


def revisable(t: Trajectory) -> bool:
    """Whether a stored trajectory with `t`'s id may be replaced by `t` when `t` has more messages."""
    return wire.REVISION_KEY in t.metadata


def response_ids(t: Trajectory) -> list[str]:
    """The completion ids `t` declares (non-strings and over-long values are ignored)."""
    value = t.metadata.get(wire.RESPONSE_IDS_KEY)
    if not isinstance(value, list):
        return []
    return [v for v in value if isinstance(v, str) and 0 < len(v) <= _MAX_RESPONSE_ID]


def replace_grown(conn: sa.Connection, rows: Sequence[dict[str, Any]]) -> list[str]:
    """Overwrite each stored row whose id is in `rows` and which has fewer messages; the ids replaced.

    The message-count condition is in the UPDATE itself, so of two revisions of one session ingested
    concurrently the longer one wins whatever the commit order."""
    t = TrajectoryRow
    done = []
    for row in rows:
        values = {k: v for k, v in row.items() if k != "id"}
        stmt = sa.update(t).where(t.id == row["id"], t.n_messages < row["n_messages"]).values(**values)
        if conn.execute(stmt).rowcount:
            done.append(row["id"])
    return done


def link_responses(conn: sa.Connection, insert: sqlite.Insert | postgresql.Insert, trajectories: Sequence[Trajectory]) -> None:
    """Record `response id -> trajectory id` for every id the trajectories declare (first link wins)."""
    values = [{"response_id": rid, "trajectory_id": t.id} for t in trajectories for rid in response_ids(t)]
    if values:
        conn.execute(insert.on_conflict_do_nothing(index_elements=["response_id"]), values)


def resolve(conn: sa.Connection, response_id: str) -> str | None:
    """The trajectory id linked to `response_id`, or None."""
    r = ResponseIdRow
    found = conn.execute(sa.select(col(r.trajectory_id)).where(col(r.response_id) == response_id)).scalar()
    return str(found) if found is not None else None
