"""Run an app's eval suite through the gateway against one version and keep every task's outcome.

The suite (`sdk.EvalSuite`) says everything an episode needs: tasks, a fresh environment per episode,
the verifier, the budget (steps, tokens, time), the sampling, the system prompt and tool choice. The
gate needs per-task outcomes, not just a rate, because it compares versions pair by pair
(`_gate.gate`). Sampling is seeded per task (the suite's seed, else `EVAL_SEED`), so evaluating two
versions with the same seed is a paired comparison.

Eval episodes are never sent to the collector: held-out tasks must never become training data. An
episode whose environment, verifier or generation crashed is not an outcome: it is run again (`retries`
times, with the same per-task seed, so the pair stays paired), and a task that still errors is kept out
of `outcomes` and recorded in `errored` with its error, for the gate to refuse on (`_gate`, part 1). A
model that answers wrongly or runs out of budget is an outcome (a failure), never an error.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping, Optional

import sdk
from sdk import EvalSuite, Task, Trajectory, task_slice, wire

from . import _defaults as D
from ._gate import in_report_split


@dataclass(frozen=True)
class EvalResult:
    """One version's outcomes on one suite."""

    version: str
    suite: str
    outcomes: Mapping[str, bool]
    """Task id -> solved, for every task whose episode did not error."""
    slices: Mapping[str, str] = field(default_factory=dict)
    """Task id -> slice (the task's `data[suite.slice_key]`, "all" when it has none)."""
    seed: int = D.EVAL_SEED
    errored: Mapping[str, str] = field(default_factory=dict)
    """Task id -> the error of its last attempt, for tasks whose every attempt errored (not in `outcomes`)."""
    retried: int = 0
    """Episodes run again because they errored."""

    @property
    def errors(self) -> int:
        """Tasks whose every attempt errored (the gate refuses to decide on a result with any)."""
        return len(self.errored)

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

    def report_success(self, fraction: float = D.GATE_REPORT_FRACTION) -> Optional[float]:
        """Fraction solved of the tasks in the gate's report split (`GateConfig.report_fraction`): the held-out
        figure to report for a version the gate selected; None when no task falls in that split."""
        report = [ok for task, ok in self.outcomes.items() if in_report_split(task, fraction)]
        return sum(report) / len(report) if report else None


#: End reasons that are a crash of the machinery (environment, model server), not an answer of the model.
_ERROR_ENDS = ("env_error", "generation_error")
_ERROR_CHARS = 300


def episode_error(t: Trajectory) -> Optional[str]:
    """Why an eval episode is not an outcome (its environment, verifier or generation crashed), or None."""
    if t.end_reason in _ERROR_ENDS:
        lines = [ln for ln in str(t.metadata.get(t.end_reason) or "").strip().splitlines() if ln.strip()]
        return f"{t.end_reason}: {lines[-1].strip() if lines else 'no detail recorded'}"[:_ERROR_CHARS]
    if t.outcome is not None and t.outcome.error:
        return f"verifier: {t.outcome.error}"[:_ERROR_CHARS]
    return None


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
    retries: int = D.GATE_EVAL_RETRIES,
) -> EvalResult:
    """Run every task of `suite` once against `version` (pass@1 with the suite's sampling, seeded per task),
    and each task whose episode errored up to `retries` more times (same seed).

    `client` is an `openai.AsyncOpenAI` to use instead of one made from `base_url` (tests pass one
    whose transport is faked)."""
    s = suite_seed(suite, seed)

    async def run(tasks: list[Task]) -> list[Trajectory]:
        return await sdk.arun(
            tasks, suite.env_factory, model=version, verifier=suite.verifier, base_url=base_url,
            api_key=api_key, concurrency=concurrency, sampling=dataclasses.replace(suite.sampling, seed=s),
            budget=suite.budget, system_prompt=suite.system_prompt, tool_choice=suite.tool_choice,
            on_episode=on_episode, app="eval", client=client,
            headers={wire.CAPTURE_HEADER: wire.CAPTURE_OFF},  # eval traffic is never training data
        )

    tasks = list(suite.tasks)
    last = dict(zip((t.id for t in tasks), await run(tasks)))
    pending = [t for t in tasks if episode_error(last[t.id]) is not None]
    retried = 0
    for _ in range(retries):
        if not pending:
            break
        retried += len(pending)
        last.update(zip((t.id for t in pending), await run(pending)))
        pending = [t for t in pending if episode_error(last[t.id]) is not None]
    outcomes: dict[str, bool] = {}
    errored: dict[str, str] = {}
    for task in tasks:
        t = last[task.id]
        err = episode_error(t)
        if err is not None:
            errored[task.id] = err
        else:
            outcomes[task.id] = bool(t.outcome is not None and t.outcome.success)
    slices = {task.id: task_slice(task, suite.slice_key) for task in tasks}
    return EvalResult(version=version, suite=suite.name, outcomes=outcomes, slices=slices, seed=s, errored=errored,
                      retried=retried)
