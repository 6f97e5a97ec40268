"""Run an app's eval suite through the gateway against one version and keep every task's outcome.

The suite (`sdk.EvalSuite`) says everything an episode needs: tasks, a fresh environment per episode,
the verifier, the budget (steps, tokens, time), the sampling, the system prompt and tool choice. The
gate needs per-task outcomes, not just a rate, because it compares versions pair by pair
(`_gate.gate`). Sampling is seeded per task (the suite's seed, else `EVAL_SEED`), so evaluating two
versions with the same seed is a paired comparison.

Eval episodes are never sent to the collector: held-out tasks must never become training data. An
episode whose verifier or environment crashed counts as a failure and is counted in `errors`.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping, Optional

import sdk
from sdk import EvalSuite, Trajectory, task_slice, wire

from . import _defaults as D


@dataclass(frozen=True)
class EvalResult:
    """One version's outcomes on one suite."""

    version: str
    suite: str
    outcomes: Mapping[str, bool]
    """Task id -> solved."""
    slices: Mapping[str, str] = field(default_factory=dict)
    """Task id -> slice (the task's `data[suite.slice_key]`, "all" when it has none)."""
    errors: int = 0
    """Episodes whose verifier or environment crashed (counted as failures, reported separately)."""
    seed: int = D.EVAL_SEED

    @property
    def n(self) -> int:
        """Tasks evaluated."""
        return len(self.outcomes)

    @property
    def successes(self) -> int:
        """Tasks solved."""
        return sum(self.outcomes.values())

    @property
    def success(self) -> float:
        """Fraction of tasks solved (0-1)."""
        return self.successes / self.n if self.n else 0.0


def suite_seed(suite: EvalSuite, seed: Optional[int] = None) -> int:
    """The sampling seed the gate uses for `suite`: `seed`, else the suite's, else `EVAL_SEED`."""
    if seed is not None:
        return seed
    return suite.sampling.seed if suite.sampling.seed is not None else D.EVAL_SEED


async def evaluate(
    version: str,
    suite: EvalSuite,
    *,
    base_url: str,
    api_key: Optional[str] = None,
    seed: Optional[int] = None,
    concurrency: int = D.EVAL_CONCURRENCY,
    on_episode: Optional[Callable[[Trajectory], object]] = None,
    client: Optional[Any] = None,
) -> EvalResult:
    """Run every task of `suite` once against `version` (pass@1 with the suite's sampling, seeded per task).

    `client` is an `openai.AsyncOpenAI` to use instead of one made from `base_url` (tests pass one
    whose transport is faked)."""
    s = suite_seed(suite, seed)
    trajs = await sdk.arun(
        list(suite.tasks), suite.env_factory, model=version, verifier=suite.verifier, base_url=base_url,
        api_key=api_key, concurrency=concurrency, sampling=dataclasses.replace(suite.sampling, seed=s),
        budget=suite.budget, system_prompt=suite.system_prompt, tool_choice=suite.tool_choice, on_episode=on_episode,
        app="eval", client=client, headers={wire.CAPTURE_HEADER: wire.CAPTURE_OFF},  # eval traffic is never training data
    )
    outcomes: dict[str, bool] = {}
    slices: dict[str, str] = {}
    errors = 0
    for task, t in zip(suite.tasks, trajs):
        outcomes[task.id] = bool(t.outcome is not None and t.outcome.success)
        slices[task.id] = task_slice(task, suite.slice_key)
        errors += bool((t.outcome is not None and t.outcome.error) or t.end_reason in ("env_error", "generation_error"))
    return EvalResult(version=version, suite=suite.name, outcomes=outcomes, slices=slices, errors=errors, seed=s)
