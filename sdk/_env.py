"""The protocols an application implements: an `Environment` the loop acts in, a `Verifier` that judges.

An environment is synchronous on purpose: most execute steps (a sandbox, a tool, a subprocess) block,
and the loop runs them in worker threads so many episodes still run concurrently. Environments whose
methods are coroutines are awaited directly.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

from ._types import Outcome, Task, Trajectory


@dataclass
class StepResult:
    """What one `Environment.step` returns: the feedback the model sees next, and the step's reward."""

    observation: str
    reward: float = 0.0
    done: bool = False
    info: dict[str, Any] = field(default_factory=dict)


@runtime_checkable
class Environment(Protocol):
    """reset(task) -> first observation; step(action) -> StepResult. One instance per episode.

    Optional members the loop looks for: `tools` (a list of OpenAI function-tool specs, or a method
    returning one) and `step_tool(call: sdk.ToolCall) -> StepResult`. With them the model is offered the
    tools; each tool call it makes is executed by `step_tool` and answered with a `tool` message, while a
    turn without tool calls still goes to `step`. `close()` is called after the episode when present."""

    def reset(self, task: Task) -> str:
        """Start an episode on `task` and return the first observation (the user message)."""
        ...

    def step(self, action: str) -> StepResult:
        """Execute the model's `action` and return the feedback."""
        ...


@runtime_checkable
class Verifier(Protocol):
    """Judges a finished (or budget-exhausted) episode."""

    def verify(self, task: Task, trajectory: Trajectory) -> Outcome:
        """Return the outcome. Raising is a bug: the loop records it as an `Outcome` with `error`."""
        ...
