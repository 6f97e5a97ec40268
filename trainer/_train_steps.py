"""The training algorithms `--algo` names: `TRAIN_STEPS` and `resolve_train_step`.

A module of its own because it needs every built-in step: SFT's (`_steps`) and DPO's and GRPO's
(`_rl_steps`, which builds on `_steps`' types). Here, importing both, it closes no cycle.
`--algo PKG.MODULE:ATTR` names any other step by import path (a `TrainStep`, or a zero-argument
callable returning one).
"""

from __future__ import annotations

from sdk.infra import import_object

from ._rl_steps import DPO_STEP, GRPO_STEP
from ._steps import SFT_STEP, TrainStep
from .errors import ConfigError

#: The algorithms `--algo` names (the job's offline steps; the demo's online GRPO is `OnlineGRPO.job_step`).
TRAIN_STEPS: dict[str, TrainStep] = {"sft": SFT_STEP, "dpo": DPO_STEP, "grpo": GRPO_STEP}


def resolve_train_step(algo: str) -> TrainStep:
    """The step `algo` names: a key of `TRAIN_STEPS` or `PKG.MODULE:ATTR`."""
    if algo in TRAIN_STEPS:
        return TRAIN_STEPS[algo]
    if ":" not in algo:
        raise ConfigError(f"unknown training algorithm {algo!r}; use one of {', '.join(sorted(TRAIN_STEPS))} "
                          "or PKG.MODULE:ATTR naming a trainer TrainStep")
    obj = import_object(algo, what="--algo", error=ConfigError)
    if not isinstance(obj, TrainStep) and callable(obj):
        obj = obj()
    if not isinstance(obj, TrainStep):
        raise ConfigError(f"--algo {algo} is a {type(obj).__name__}, not a TrainStep (or a function returning one)")
    return obj
