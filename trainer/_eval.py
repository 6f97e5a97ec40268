"""The eval gate: run held-out tasks through the gateway against a version, compare, decide.

Both versions are evaluated in the same run with the same per-task sampling seeds, so the comparison
is paired: a candidate is promoted only if it solves strictly more held-out tasks than the version
serving now (plus an optional margin). Eval episodes are never sent to the collector: held-out tasks
must never become training data.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Optional, Sequence

import sdk
from sdk import Environment, Task, Trajectory, Verifier


@dataclass(frozen=True)
class EvalResult:
    version: str
    success: float
    """Fraction of held-out tasks solved (0–1)."""
    n: int
    errors: int
    """Episodes whose verifier or environment crashed (counted as failures, reported separately)."""


async def evaluate(
    version: str,
    tasks: Sequence[Task],
    env_factory: Callable[[], Environment],
    verifier: Verifier,
    *,
    base_url: str,
    api_key: Optional[str] = None,
    seed: int = 0,
    concurrency: int = 16,
    max_steps: int = 4,
    max_tokens: int = 64,
    on_episode: Optional[Callable[[Trajectory], object]] = None,
) -> EvalResult:
    """Held-out success of `version` (pass@1 at temperature 1, seeded per task)."""
    trajs = await sdk.arun(
        tasks, env_factory, model=version, verifier=verifier, base_url=base_url, api_key=api_key,
        max_steps=max_steps, concurrency=concurrency, sampling=sdk.Sampling(max_tokens=max_tokens, seed=seed),
        on_episode=on_episode, app="eval",
    )
    ok = sum(1 for t in trajs if t.outcome is not None and t.outcome.success)
    errors = sum(1 for t in trajs if (t.outcome is not None and t.outcome.error) or "env_error" in t.metadata)
    return EvalResult(version=version, success=ok / max(1, len(trajs)), n=len(trajs), errors=errors)


def gate(candidate: EvalResult, serving: EvalResult, *, margin: float = 0.0) -> bool:
    """Promote only if the candidate beats the serving version by more than `margin` on the same tasks."""
    return candidate.n == serving.n and candidate.success > serving.success + margin
