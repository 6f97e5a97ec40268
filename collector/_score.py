"""Scoring: how a trajectory's final `score` is composed from the evidence the collector has.

Three sources, strongest first:

1. **Verifier reward** (`Outcome.reward`, stored as `reward`), set at ingest. A verifier that
   crashed (`Outcome.error`) is no evidence: success and reward stay None, never 0.
2. **User feedback** (`POST /v1/feedback`, possibly days later): the mean of the trajectory's
   ratings, stored as `feedback_rating` in [-1, 1] and mapped to [0, 1] as `(rating + 1) / 2`.
   A correction does not change the score of the trajectory (it was wrong); it becomes an SFT
   target and a DPO pair at export (`_export.py`).
3. **Learned quality** (`quality`, `_quality.py`): P(success) from a model trained on the
   trajectories whose outcome is known, written by `collector score`.

    reward and rating  -> score = (reward + rating01) / 2     source "reward+feedback"
    reward only        -> score = reward                      source "reward"
    rating only        -> score = rating01                    source "feedback"
    neither            -> score = quality                     source "model"
    nothing            -> score = None                        source None

Direct evidence (reward, feedback) always wins over the model's guess; the model fills in only
where there is none. The same rule exists twice, as Python (`compose`) and as SQL
(`score_sql`, so one UPDATE recomposes a whole table); a test checks they agree. Scores assume
rewards in [0, 1] (what the built-in verifiers give).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import sqlalchemy as sa

from sdk import Trajectory

#: Score sources, as stored in `trajectories.score_source`.
SOURCES = ("reward+feedback", "reward", "feedback", "model")


@dataclass(frozen=True)
class Score:
    """The scored columns of one trajectory at ingest."""

    success: bool | None
    reward: float | None
    score: float | None
    source: str | None = None


def score_trajectory(traj: Trajectory) -> Score:
    """`success`/`reward` from the outcome and `score = reward`; all None without an outcome or
    when the verifier crashed (`Outcome.error`)."""
    if traj.outcome is None or traj.outcome.error:
        return Score(None, None, None)
    return Score(traj.outcome.success, traj.outcome.reward, traj.outcome.reward, "reward")


def compose(reward: float | None, rating: float | None, quality: float | None) -> tuple[float | None, str | None]:
    """The final `(score, source)` from the three sources (see the module docstring)."""
    r01 = None if rating is None else (rating + 1.0) / 2.0
    if reward is not None and r01 is not None:
        return (reward + r01) / 2.0, "reward+feedback"
    if reward is not None:
        return reward, "reward"
    if r01 is not None:
        return r01, "feedback"
    if quality is not None:
        return quality, "model"
    return None, None


def score_sql(reward: Any, rating: Any, quality: Any) -> tuple[Any, Any]:
    """`compose` as two SQL expressions `(score, source)` over the given columns."""
    r01 = (rating + 1.0) / 2.0
    both = sa.and_(reward.is_not(None), rating.is_not(None))
    score = sa.case(
        (both, (reward + r01) / 2.0),
        (reward.is_not(None), reward),
        (rating.is_not(None), r01),
        else_=quality,
    )
    source = sa.case(
        (both, "reward+feedback"),
        (reward.is_not(None), "reward"),
        (rating.is_not(None), "feedback"),
        (quality.is_not(None), "model"),
        else_=sa.null(),
    )
    return score, source
