"""RL training data: groups of episodes with rewards and the exact tokens vLLM sampled.

Two sources give the same `Group`s: `sdk.Trajectory` objects straight from `sdk.arun` (the online
loop) and `collector export --format grpo` lines (`trainer run --algo grpo`). Each episode keeps, per
assistant turn, the prompt ids vLLM saw, the completion ids it sampled and their logprobs. A turn
without them is a `TokenDataError` naming the trajectory and the turn: the text is never re-tokenized
to fill the gap (that is the drift RL on agents must not have). Bad files (no group of two or more,
no rewards at all) are `TrainingDataError`s naming the file and line.

Sampling: GRPO's importance ratio divides by the behaviour logprobs, which must be those of the distribution
the tokens were drawn from. vLLM 0.32 returns `raw_logprobs` by default (`ModelConfig.logprobs_mode`;
`vllm/v1/sample/sampler.py` computes them from the logits before penalties, temperature, min_p, top-k and
top-p): the model's own log-softmax, whatever the request's sampling. So a token sampled at temperature 0.7
(or top_p 0.9, top_k 20, a penalty, a logit bias, a forced tool call's JSON schema, ...) carries the logprob
of a distribution it was not drawn from, and the ratio silently trains a different objective. Only turns
sampled plainly (temperature 1, top_p 1, no top_k / min_p / penalties / constraints: `sdk.SamplingRecord`)
are trained:

- a turn whose record departs from that is skipped; its tokens stay in the episode's rows as context
  (loss 0) and the episode trains on its other turns; an episode left with no turn is dropped. One warning
  per load names each such trajectory, turn and parameter (`temperature=0.7`, `tool_choice=required`,
  `generation_config=auto` when a parameter the request left out was filled from the model's
  generation_config.json). Skipping, not refusing: captured traffic mixes requests (one app's summarizer at
  temperature 0.3 beside the agent at 1), and one of them must neither block training on the rest nor be
  trained on wrongly; a demanding user gets both the correct estimator and the names of what was left out,
  and nothing is silent. When nothing trainable remains it is a `TrainingDataError` naming the parameters.
- a turn without a record (stored before trajectory schema 3), or whose record cannot tell (the SDK against
  a server that does not name its generation config, so the defaults of what it left out are unknown), is
  trained as before, with one warning per load that those turns are unverified.

Reweighting instead (a ratio against the tempered distribution) would need vLLM's `--logprobs-mode
processed_logprobs` and the same processing in the trainer's forward pass; it is not done.

Deliberately not here: advantages, filtering and batching (`grpo.py`, `_tokens.py`).
"""

from __future__ import annotations

import logging
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Iterable, Mapping, Optional, Sequence

from ._data import jsonl_fields
from .errors import TokenDataError, TrainingDataError

if TYPE_CHECKING:  # only read here; importing the SDK is left to callers (the GPU bench has no HTTP stack)
    from sdk import Trajectory

log = logging.getLogger("looplift.trainer")

# `sdk.NEUTRAL_SAMPLING`, restated: this module does not import the SDK at run time (see above). A parameter
# at this value leaves the distribution as the model's own (top_k 0: none).
_NEUTRAL = {"temperature": 1.0, "top_p": 1.0, "top_k": 0.0, "min_p": 0.0, "repetition_penalty": 1.0,
            "presence_penalty": 0.0, "frequency_penalty": 0.0}
_FIX_SAMPLING = ("GRPO trains only turns sampled from the model's own distribution: sample at temperature 1 and "
                 "top_p 1 with no top_k, min_p, penalties, logit_bias or forced tool_choice, from a vLLM serving "
                 "with --generation-config vllm (the default of `looplift up` and `looplift server start`)")
_EXAMPLES = 5

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


def off_policy_parameter(sampling: Optional[Mapping[str, Any]]) -> tuple[Optional[str], Optional[str]]:
    """Whether a turn's logprobs are those of the distribution it was sampled from, by its `TurnTokens.sampling`
    (a dict): `(parameter, None)` when they are not (`parameter` names it with its value, e.g.
    `temperature=0.7`), `(None, why)` when the record cannot tell, `(None, None)` when they are."""
    if not isinstance(sampling, Mapping):
        return None, "no sampling record"
    constraints = sampling.get("constraints") or []
    if constraints:
        return str(constraints[0]), None
    left_out = []
    for name, neutral in _NEUTRAL.items():
        value = sampling.get(name)
        if value is None:
            left_out.append(name)
            continue
        try:
            v = float(value)
        except (TypeError, ValueError):
            return None, f"{name} is not a number ({value!r})"
        if (v > neutral if name in ("top_k", "min_p") else v < neutral if name == "top_p"
                else not math.isclose(v, neutral, abs_tol=1e-6)):
            return f"{name}={v:g}", None
    if left_out:
        config = sampling.get("generation_config")
        if config is not None and config != "vllm":
            return f"generation_config={config} ({', '.join(left_out)} from the model's defaults)", None
        return None, f"the server's default for {', '.join(left_out)} is unknown"
    return None, None


@dataclass
class _Audit:
    """Turns set aside (off-policy) and turns trained unverified, reported once per load."""

    skipped: list[tuple[str, int, str]] = field(default_factory=list)
    unverified: list[tuple[str, int, str]] = field(default_factory=list)

    def why_nothing(self) -> str:
        names = sorted({why.split("=")[0].split(" ")[0] for _, _, why in self.skipped})
        return (f"{len(self.skipped)} assistant turn(s) were sampled off the model's own distribution "
                f"({', '.join(names)}; e.g. {_examples(self.skipped)}); {_FIX_SAMPLING}")

    def report(self, where: str) -> None:
        if self.skipped:
            trajs = len({t for t, _, _ in self.skipped})
            log.warning("%s: skipped %d assistant turn(s) in %d trajectories whose logprobs are not those of the "
                        "distribution they were sampled from (they stay as context, untrained): %s. %s", where,
                        len(self.skipped), trajs, _examples(self.skipped), _FIX_SAMPLING)
        if self.unverified:
            trajs = len({t for t, _, _ in self.unverified})
            log.warning("%s: %d assistant turn(s) in %d trajectories are trained unverified: their sampling is not "
                        "known to be the model's own distribution (%s)", where, len(self.unverified), trajs,
                        _examples(self.unverified))


def _examples(turns: list[tuple[str, int, str]]) -> str:
    shown = "; ".join(f"trajectory {t} turn {k}: {why}" for t, k, why in turns[:_EXAMPLES])
    return shown + (f"; and {len(turns) - _EXAMPLES} more" if len(turns) > _EXAMPLES else "")


def _episode(traj_id: str, reward: float, turns: Sequence[Mapping[str, Any]], audit: _Audit, *,
             version: Optional[str] = None, policy_step: Optional[int] = None) -> Optional[Episode]:
    """An `Episode` from turn dicts shaped like `sdk.TurnTokens`, without its off-policy turns (None when none is
    left); raises `TokenDataError` for a bad turn."""
    if not turns:
        raise TokenDataError(traj_id, None, f"no assistant turn carries token ids; {_FIX_IDS}")
    kept = []
    for k, t in enumerate(turns):
        parameter, unverified = off_policy_parameter(t.get("sampling"))
        if parameter is not None:
            audit.skipped.append((traj_id, k, parameter))
            continue
        if unverified is not None:
            audit.unverified.append((traj_id, k, unverified))
        kept.append(_turn(traj_id, k, t))
    return Episode(traj_id, float(reward), tuple(kept), version, policy_step) if kept else None


def groups_from_trajectories(trajs: Iterable[Trajectory], *, policy_step: Optional[int] = None) -> list[Group]:
    """Group the SDK's trajectories by task (one group per task, in first-seen order). A trajectory
    without an outcome has no reward: a `TrainingDataError` (run the loop with a verifier). Off-policy turns
    are skipped with a warning (see the module docstring); a `TrainingDataError` when that leaves nothing."""
    by_task: dict[str, list[Episode]] = {}
    audit = _Audit()
    seen = False
    for t in trajs:
        seen = True
        if t.outcome is None:
            raise TrainingDataError(f"trajectory {t.id} has no outcome, so no reward; run episodes with a verifier")
        ep = _episode(t.id, t.outcome.reward, [x.model_dump() for x in t.turns], audit, version=t.served_version,
                      policy_step=policy_step)
        if ep is not None:
            by_task.setdefault(t.task_id, []).append(ep)
    if seen and not by_task:
        raise TrainingDataError(f"no trajectory has a turn to train on: {audit.why_nothing()}")
    audit.report("rollouts")
    return [Group(task, tuple(eps)) for task, eps in by_task.items()]


def load_grpo_jsonl(path: Path, *, version_steps: Optional[Mapping[str, int]] = None) -> list[Group]:
    """The groups of a `collector export --format grpo` file. `version_steps` maps a served version to its
    policy step (for `max_staleness`); versions not in it get None. Off-policy turns are skipped with a warning
    naming each trajectory and parameter (see the module docstring)."""
    path = Path(path)
    groups: list[Group] = []
    lines = rewards_seen = 0
    audit = _Audit()
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
            ep = _episode(str(c.get("id")), float(reward), c.get("turns") or [], audit, version=version, policy_step=step)
            if ep is not None:
                eps.append(ep)
        if len(eps) >= 2:
            groups.append(Group(str(task), tuple(eps)))
    if not groups:
        if lines and not rewards_seen:
            why = "no completion has a reward: score the trajectories (`collector score`) or run episodes with a verifier"
        elif audit.skipped:
            why = f"no group of 2 or more rewarded completions with a turn to train on: {audit.why_nothing()}"
        else:
            why = ("no group of 2 or more rewarded completions of one prompt (GRPO compares rollouts of the same "
                   "prompt: run each task several times)")
        raise TrainingDataError(f"{path}: {why}; the export's manifest beside it says what was dropped and why")
    audit.report(str(path))
    return groups

