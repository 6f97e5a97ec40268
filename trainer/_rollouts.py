"""RL training data: groups of episodes with rewards and the exact tokens vLLM sampled.

Two sources give the same `Group`s: `sdk.Trajectory` objects straight from `sdk.arun` (the online
loop) and `collector export --format grpo` lines (`trainer run --algo grpo`). Each episode keeps, per
assistant turn, the prompt ids vLLM saw, the completion ids it sampled and their logprobs. A turn
without them is a `TokenDataError` naming the trajectory and the turn: the text is never re-tokenized
to fill the gap (that is the drift RL on agents must not have). Bad files (no group of two or more,
no rewards at all) are `TrainingDataError`s naming the file and line.

Deliberately not here: advantages, filtering and batching (`grpo.py`, `_tokens.py`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Iterable, Mapping, Optional, Sequence

from ._data import jsonl_fields
from .errors import TokenDataError, TrainingDataError

if TYPE_CHECKING:  # only read here; importing the SDK is left to callers (the GPU bench has no HTTP stack)
    from sdk import Trajectory

_FIX_IDS = ("serve with vLLM's `return_token_ids` and `logprobs` (the SDK asks for both); trajectories "
            "captured from a server that does not return them, or anonymized by the collector (it drops the ids "
            "of anything it rewrote), cannot be trained on token-exactly")


@dataclass(frozen=True)
class Turn:
    """One assistant turn as vLLM served it."""

    prompt_ids: tuple[int, ...]
    completion_ids: tuple[int, ...]
    logprobs: tuple[float, ...]
    """Behaviour logprobs of `completion_ids`, one each, as the sampling server computed them."""


@dataclass(frozen=True)
class Episode:
    id: str
    reward: float
    turns: tuple[Turn, ...]
    version: Optional[str] = None
    """The version that answered (served_version)."""
    policy_step: Optional[int] = None
    """Which policy update generated it (for `max_staleness`); None when unknown."""


@dataclass(frozen=True)
class Group:
    """Episodes on one task and prompt; advantages are normalized within it."""

    task_id: str
    episodes: tuple[Episode, ...]

    @property
    def rewards(self) -> list[float]:
        return [e.reward for e in self.episodes]


def _turn(traj_id: str, k: int, turn: Mapping[str, Any]) -> Turn:
    prompt, comp, lps = turn.get("prompt_token_ids"), turn.get("completion_token_ids"), turn.get("completion_logprobs")
    if not prompt:
        raise TokenDataError(traj_id, k, f"no prompt_token_ids; {_FIX_IDS}")
    if not comp:
        raise TokenDataError(traj_id, k, f"no completion_token_ids; {_FIX_IDS}")
    if lps is None:
        raise TokenDataError(traj_id, k, "no completion_logprobs (behaviour logprobs for the importance ratio); "
                                         "sample with logprobs=True")
    if len(lps) != len(comp):
        raise TokenDataError(traj_id, k, f"{len(comp)} completion ids but {len(lps)} logprobs")
    if any(not math.isfinite(x) for x in lps):
        raise TokenDataError(traj_id, k, "a behaviour logprob is not finite")
    return Turn(tuple(int(i) for i in prompt), tuple(int(i) for i in comp), tuple(float(x) for x in lps))


def episode(traj_id: str, reward: float, turns: Sequence[Mapping[str, Any]], *, version: Optional[str] = None,
            policy_step: Optional[int] = None) -> Episode:
    """An `Episode` from turn dicts shaped like `sdk.TurnTokens`; raises `TokenDataError` for a bad turn."""
    if not turns:
        raise TokenDataError(traj_id, None, f"no assistant turn carries token ids; {_FIX_IDS}")
    return Episode(traj_id, float(reward), tuple(_turn(traj_id, k, t) for k, t in enumerate(turns)), version,
                   policy_step)


def groups_from_trajectories(trajs: Iterable[Trajectory], *, policy_step: Optional[int] = None) -> list[Group]:
    """Group the SDK's trajectories by task (one group per task, in first-seen order). A trajectory
    without an outcome has no reward: a `TrainingDataError` (run the loop with a verifier)."""
    by_task: dict[str, list[Episode]] = {}
    for t in trajs:
        if t.outcome is None:
            raise TrainingDataError(f"trajectory {t.id} has no outcome, so no reward; run episodes with a verifier")
        ep = episode(t.id, t.outcome.reward, [x.model_dump() for x in t.turns], version=t.served_version,
                     policy_step=policy_step)
        by_task.setdefault(t.task_id, []).append(ep)
    return [Group(task, tuple(eps)) for task, eps in by_task.items()]


def load_grpo_jsonl(path: Path, *, version_steps: Optional[Mapping[str, int]] = None) -> list[Group]:
    """The groups of a `collector export --format grpo` file. `version_steps` maps a served version to its
    policy step (for `max_staleness`); versions not in it get None."""
    path = Path(path)
    groups: list[Group] = []
    lines = rewards_seen = 0
    for _, (task, comps) in jsonl_fields(path, "a GRPO group with task_id and completions", ["task_id", "completions"]):
        lines += 1
        eps = []
        for c in comps:
            reward = c.get("score", c.get("reward"))
            if reward is None:
                continue
            rewards_seen += 1
            version = c.get("served_version")
            step = None if version_steps is None or version is None else version_steps.get(version)
            eps.append(episode(str(c.get("id")), float(reward), c.get("turns") or [], version=version, policy_step=step))
        if len(eps) >= 2:
            groups.append(Group(str(task), tuple(eps)))
    if not groups:
        if lines and not rewards_seen:
            why = "no completion has a reward: score the trajectories (`collector score`) or run episodes with a verifier"
        else:
            why = ("no group of 2 or more rewarded completions of one prompt (GRPO compares rollouts of the same "
                   "prompt: run each task several times)")
        raise TrainingDataError(f"{path}: {why}; the export's manifest beside it says what was dropped and why")
    return groups

