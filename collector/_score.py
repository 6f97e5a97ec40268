"""Scoring: turn a trajectory's verified outcome into the numbers queries filter on.

For now the score is the verifier's reward, and a trajectory without an outcome has no score
(None, never 0: an unverified episode is not a failed one). Learned or rubric scorers come later;
they will plug in here and keep this signature.
"""

from __future__ import annotations

from dataclasses import dataclass

from sdk._types import Trajectory


@dataclass(frozen=True)
class Score:
    """The scored columns of one trajectory."""

    success: bool | None
    reward: float | None
    score: float | None


def score_trajectory(traj: Trajectory) -> Score:
    """`success`/`reward` from the outcome and `score = reward`; all None without an outcome."""
    if traj.outcome is None:
        return Score(None, None, None)
    return Score(traj.outcome.success, traj.outcome.reward, traj.outcome.reward)
