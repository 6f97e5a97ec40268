"""Which tasks to roll out next: compute follows difficulty.

A group whose G rollouts all succeed (or all fail) has zero advantage everywhere and is dropped before
the backward pass, so its rollouts were generated for nothing. `PassRateSampler` keeps a pass-rate
estimate per task (a Beta posterior whose prior is the pool's overall pass rate) and draws tasks with
weight p(1 - p): most where the current policy sometimes succeeds, least on tasks it always solves or
never does. Old evidence is decayed on each new observation (the policy moves), and the estimates are
saved to a JSON file so they persist across cycles and restarts. `UniformSampler` is the baseline.

Deliberately not here: features that generalize a pass rate to unseen tasks (an unseen task gets the
pool's overall rate), and curriculum schedules.
"""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Iterable, Optional, Protocol, Sequence

from sdk import Task, Trajectory
from sdk.infra import atomic_write_json


class Sampler(Protocol):
    def pick(self, pool: Sequence[Task], n: int) -> list[Task]:
        """`n` distinct tasks from `pool`."""
        ...

    def observe(self, trajectories: Iterable[Trajectory]) -> None:
        """Record the outcomes of finished rollouts."""
        ...


class UniformSampler:
    """Every task equally likely (the baseline the pass-rate sampler is measured against)."""

    def __init__(self, seed: int = 0) -> None:
        self._rng = random.Random(seed)

    def pick(self, pool: Sequence[Task], n: int) -> list[Task]:
        return self._rng.sample(list(pool), min(n, len(pool)))

    def observe(self, trajectories: Iterable[Trajectory]) -> None:
        pass


class PassRateSampler:
    """Draws tasks with weight p(1-p) from per-task pass-rate estimates kept in `path` (JSON)."""

    def __init__(self, path: Optional[Path] = None, *, seed: int = 0, decay: float = 0.5, prior: float = 2.0,
                 floor: float = 0.01) -> None:
        self.path = Path(path) if path is not None else None
        self.decay, self.prior, self.floor = decay, prior, floor
        self._rng = random.Random(seed)
        self.counts: dict[str, list[float]] = {}
        """task id -> [decayed successes, decayed trials]."""
        if self.path is not None and self.path.exists():
            self.counts = {k: [float(v[0]), float(v[1])] for k, v in json.loads(self.path.read_text())["tasks"].items()}

    def overall(self) -> float:
        """The pool's pass rate so far (0.5 before any evidence)."""
        s = sum(c[0] for c in self.counts.values())
        t = sum(c[1] for c in self.counts.values())
        return s / t if t else 0.5

    def pass_rate(self, task_id: str, overall: Optional[float] = None) -> float:
        """Posterior mean pass rate of a task (the overall rate for an unseen one)."""
        p0 = self.overall() if overall is None else overall
        s, t = self.counts.get(task_id, (0.0, 0.0))
        return (s + self.prior * p0) / (t + self.prior)

    def pick(self, pool: Sequence[Task], n: int) -> list[Task]:
        p0 = self.overall()

        def key(task: Task) -> float:
            p = self.pass_rate(task.id, p0)
            w = max(self.floor, p * (1 - p))
            return float(self._rng.random() ** (1.0 / w))  # weighted sampling without replacement (Efraimidis-Spirakis)

        return sorted(pool, key=key, reverse=True)[:n]

    def observe(self, trajectories: Iterable[Trajectory]) -> None:
        fresh: dict[str, list[float]] = {}
        for t in trajectories:
            c = fresh.setdefault(t.task_id, [0.0, 0.0])
            c[0] += float(bool(t.outcome and t.outcome.success))
            c[1] += 1
        for task, (s, n) in fresh.items():
            old = self.counts.get(task, [0.0, 0.0])
            self.counts[task] = [old[0] * self.decay + s, old[1] * self.decay + n]
        if self.path is not None:
            atomic_write_json(self.path, {"overall": self.overall(), "tasks": self.counts}, indent=None)
