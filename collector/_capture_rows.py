"""What ingest does for trajectories the gateway captured: grown sessions replace, response ids link.

The gateway turns its traffic into trajectories (`server._capture`). Two things differ from an SDK
episode, and both are driven by the trajectory's metadata, so any client may use them:

- **Revisable sessions.** Requests that share an `X-Looplift-Session` header are one conversation, and
  the gateway re-sends its trajectory under the same id after every exchange, each time with the
  whole conversation so far (`metadata.looplift_revision` marks it revisable). A revisable trajectory
  with more messages than the stored one replaces it; one with as many or fewer (a replay, a spooled
  batch that arrives after a newer one) is a duplicate, as ingest always was, unless it lists completions
  the stored one lacks (it was journaled before a gateway restart and arrives after the restarted
  gateway's longer revision): then those are merged into the stored row. Replacing, not
  appending, keeps one row per conversation, so export, dedup and scores see the conversation once.
  The row's feedback stays joined (the id is the same); its ingest time becomes the replacement's. A
  revision may not carry the exchanges before it: a gateway restarted mid-conversation knows only those
  since (the id is the same, derived from the session and its first prompt); `keep_earlier` adds the
  earlier revision's response ids, exchanges and turns it lacks, so no completion loses its place.
- **Response ids.** `metadata.response_ids` lists the ids of the chat completions the trajectory
  holds (the `id` the client received). Each is linked to the trajectory in `response_ids`, so
  feedback can name the completion instead of a trajectory id the client never saw.

Deliberately not here: the anonymizer, scoring and the insert itself (`_ingest.add_trajectories`).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import sqlalchemy as sa
from sqlmodel import col

from sdk import Trajectory, TurnTokens, wire

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


def keep_earlier(t: Trajectory, earlier: dict[str, Any]) -> Trajectory:
    """`t` (a longer revision of `earlier`, a trajectory's JSON object) with the response ids, exchanges and turns
    of `earlier` that `t` lacks, earlier ones first (see the module docstring); `t` itself when it lacks none."""
    md = earlier.get("metadata") or {}
    have = set(response_ids(t))
    ids = [r for r in md.get(wire.RESPONSE_IDS_KEY) or [] if isinstance(r, str) and r not in have]
    if not ids:
        return t
    missing = set(ids)
    exchanges = [e for e in md.get(wire.EXCHANGES_KEY) or [] if isinstance(e, dict) and e.get("response_id") in missing]
    exchanges += [e for e in t.metadata.get(wire.EXCHANGES_KEY) or [] if isinstance(e, dict)]
    at = {turn.message_index for turn in t.turns}
    old_turns = [x for x in earlier.get("turns") or [] if isinstance(x, dict) and x.get("message_index") not in at]
    turns = sorted([*(TurnTokens.model_validate(x) for x in old_turns), *t.turns], key=lambda x: x.message_index)
    metadata = {**t.metadata, wire.RESPONSE_IDS_KEY: ids + response_ids(t), wire.EXCHANGES_KEY: exchanges,
                wire.USAGE_KEY: wire.total_usage(exchanges)}
    return t.model_copy(update={"metadata": metadata, "turns": turns})


def stored_objects(conn: sa.Connection, ids: Sequence[str]) -> dict[str, dict[str, Any]]:
    """The stored trajectories' JSON objects by id."""
    t = TrajectoryRow
    rows = conn.execute(sa.select(col(t.id), col(t.data)).where(col(t.id).in_(list(ids)))).tuples().all()
    return {tid: json.loads(data) for tid, data in rows}


def replace_grown(conn: sa.Connection, rows: Sequence[dict[str, Any]], *, same_length: bool = False) -> list[str]:
    """Overwrite each stored row whose id is in `rows` and which has fewer messages (`same_length`: as many,
    for a row merged with a lagging revision's completions); the ids replaced.

    The message-count condition is in the UPDATE itself, so of two revisions of one session ingested
    concurrently the longer one wins whatever the commit order."""
    t = TrajectoryRow
    done = []
    for row in rows:
        values = {k: v for k, v in row.items() if k != "id"}
        fits = t.n_messages == row["n_messages"] if same_length else t.n_messages < row["n_messages"]
        stmt = sa.update(t).where(t.id == row["id"], fits).values(**values)
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
