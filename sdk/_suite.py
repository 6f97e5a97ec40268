"""What an app declares so looplift can run, judge and gate its work without knowing its code.

- `Budget`: per-episode limits — assistant turns, completion tokens, wall time.
- `Policy`: a function that writes the next assistant message without a model (oracles, no-ops,
  cheats, scripted tests); `sdk.run(..., policy=)` runs the ordinary loop with it.
- `EvalSuite`: held-out tasks + environment factory + verifier + the budget and sampling they need;
  `trainer run --eval PKG.MODULE:ATTR` gates a candidate version on one.
- `EnvFamily`: a task family (a task generator with a fixed held-out split, its environment and
  verifier, and reference policies: an oracle, a no-op and cheats); `looplift env try` exercises one.

Deliberately data only: running a suite is `sdk.arun`'s job, gating is the trainer's.
"""

from __future__ import annotations

from collections.abc import Awaitable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Callable, Literal, Optional, Union

from ._env import Environment, Verifier
from ._loop import Sampling
from ._types import Message, Task
from .errors import ConfigError

Split = Literal["train", "held_out"]
PolicyReply = Union[Message, str]
#: `(task, messages so far) -> the next assistant message` (or its text); sync or async.
Policy = Callable[[Task, list[Message]], Union[PolicyReply, Awaitable[PolicyReply]]]
ToolChoice = Union[str, dict[str, Any], None]


@dataclass(frozen=True)
class Budget:
    """Per-episode limits; whichever runs out first ends the episode and is recorded as its `end_reason`."""

    max_steps: int = 8
    """Assistant turns (each turn executes its text, or all of its tool calls)."""
    max_tokens: Optional[int] = None
    """Completion tokens summed over the episode's turns; each request asks for at most what is left."""
    max_seconds: Optional[float] = None
    """Wall time of the whole episode (generation and environment steps)."""

    def __post_init__(self) -> None:
        if self.max_steps < 1:
            raise ConfigError(f"Budget.max_steps must be >= 1, got {self.max_steps}")
        if self.max_tokens is not None and self.max_tokens < 1:
            raise ConfigError(f"Budget.max_tokens must be >= 1 or None, got {self.max_tokens}")
        if self.max_seconds is not None and self.max_seconds <= 0:
            raise ConfigError(f"Budget.max_seconds must be > 0 or None, got {self.max_seconds}")


def task_slice(task: Task, key: str = "slice") -> str:
    """The slice (task group) a task belongs to: `task.data[key]`, else "all"."""
    value = task.data.get(key)
    return str(value) if value is not None else "all"


@dataclass(frozen=True)
class EvalSuite:
    """Held-out tasks and everything needed to run and judge them; what the eval gate compares versions on."""

    name: str
    tasks: Sequence[Task]
    env_factory: Callable[[], Environment]
    verifier: Verifier
    budget: Budget = field(default_factory=Budget)
    sampling: Sampling = field(default_factory=Sampling)
    system_prompt: Optional[str] = None
    tool_choice: ToolChoice = None
    """`tool_choice` sent when the environment has tools (None: the server's default, "auto")."""
    slice_key: str = "slice"
    """Tasks are grouped into slices by `task.data[slice_key]` (default group "all"); the gate reports
    and guards each slice."""

    def __post_init__(self) -> None:
        if not self.name:
            raise ConfigError("an EvalSuite needs a name")
        if len(self.tasks) == 0:
            raise ConfigError(f"eval suite {self.name!r} has no tasks; give it at least one held-out task")
        ids = [t.id for t in self.tasks]
        if len(set(ids)) != len(ids):
            dup = next(i for i in ids if ids.count(i) > 1)
            raise ConfigError(f"eval suite {self.name!r} has the task id {dup!r} more than once; task ids must be unique")

    def slices(self) -> dict[str, list[Task]]:
        """The suite's tasks by slice, in task order."""
        out: dict[str, list[Task]] = {}
        for t in self.tasks:
            out.setdefault(task_slice(t, self.slice_key), []).append(t)
        return out


REQUIRED_POLICIES = ("oracle", "noop")
CHEAT_PREFIX = "cheat-"


@dataclass(frozen=True)
class EnvFamily:
    """A task family: generator with a fixed held-out split, environment, verifier and reference policies."""

    name: str
    description: str
    tasks: Callable[[Split, Optional[int], int], list[Task]]
    """`tasks(split, n, seed)`: `n` tasks of `split` (None: all of them); the held-out split is fixed
    (seed-independent membership), so a model is never trained on what it is judged on."""
    env_factory: Callable[[], Environment]
    verifier: Verifier
    policies: Mapping[str, Policy]
    """Must hold "oracle" (solves nearly everything), "noop" (nearly nothing) and >= 1 "cheat-<what>"
    (each must score 0)."""
    budget: Budget = field(default_factory=Budget)
    sampling: Sampling = field(default_factory=Sampling)
    system_prompt: Optional[str] = None
    tool_choice: ToolChoice = None
    close: Optional[Callable[[], None]] = None
    """Releases what the family holds (a sandbox pool, caches); called by whoever loaded it."""

    def __post_init__(self) -> None:
        missing = [p for p in REQUIRED_POLICIES if p not in self.policies]
        if missing or not self.cheats():
            need = missing + ([] if self.cheats() else [f"{CHEAT_PREFIX}<what>"])
            raise ConfigError(f"env family {self.name!r} lacks the policies {need}; every family ships an oracle, "
                              "a no-op and at least one cheat")

    def cheats(self) -> list[str]:
        """The names of the family's cheat policies."""
        return sorted(p for p in self.policies if p.startswith(CHEAT_PREFIX))

    def suite(self, split: Split = "held_out", n: Optional[int] = None, seed: int = 0) -> EvalSuite:
        """The family's tasks of `split` as an eval suite."""
        return EvalSuite(name=f"{self.name}:{split}", tasks=self.tasks(split, n, seed), env_factory=self.env_factory,
                         verifier=self.verifier, budget=self.budget, sampling=self.sampling,
                         system_prompt=self.system_prompt, tool_choice=self.tool_choice)
