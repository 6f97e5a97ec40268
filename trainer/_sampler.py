"""Which tasks to roll out next: compute follows difficulty.

A group whose G rollouts all succeed (or all fail) has zero advantage everywhere and is dropped before
the backward pass, so its rollouts were generated for nothing. `PassRateSampler` keeps a pass-rate
estimate per task (a Beta posterior) and draws tasks with weight p(1 - p): most where the current
policy sometimes succeeds, least on tasks it always solves or never does. A task's prior is the pass
rate of its kind (`kind_of(task)`, e.g. how many digits an arithmetic task has; default: one kind for
the whole pool), so an unseen task of a kind the policy has mastered is skipped too — with a pool much
larger than what one run samples, that is where the savings come from. Old evidence is decayed on
each new observation of the same task or kind (the policy moves), and the estimates are saved to a
JSON file so they persist across cycles and restarts. `UniformSampler` is the baseline.

Deliberately not here: learned difficulty models, and curriculum schedules.
"""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Callable, Iterable, Optional, Protocol, Sequence

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
                 floor: float = 0.01, kind_of: Optional[Callable[[Task], str]] = None) -> None:
        self.path = Path(path) if path is not None else None
        self.decay, self.prior, self.floor = decay, prior, floor
        self.kind_of = kind_of or (lambda task: "")
        self._rng = random.Random(seed)
        self.counts: dict[str, list[float]] = {}
        """task id -> [decayed successes, decayed trials]."""
        self.kinds: dict[str, list[float]] = {}
        """kind -> [decayed successes, decayed trials] over all its tasks."""
        self._kind: dict[str, str] = {}
        if self.path is not None and self.path.exists():
            saved = json.loads(self.path.read_text())
            self.counts = {k: [float(v[0]), float(v[1])] for k, v in saved["tasks"].items()}
            self.kinds = {k: [float(v[0]), float(v[1])] for k, v in saved.get("kinds", {}).items()}

    def kind_rate(self, kind: str) -> float:
        """The pass rate of a kind of task so far (0.5 before any evidence)."""
        s, t = self.kinds.get(kind, (0.0, 0.0))
        return s / t if t else 0.5

    def pass_rate(self, task: Task) -> float:
        """Posterior mean pass rate of a task; its kind's rate is the prior (all there is for an unseen task)."""
        p0 = self.kind_rate(self.kind_of(task))
        s, t = self.counts.get(task.id, (0.0, 0.0))
        return (s + self.prior * p0) / (t + self.prior)

    def pick(self, pool: Sequence[Task], n: int) -> list[Task]:
        def key(task: Task) -> float:
            self._kind[task.id] = self.kind_of(task)
            p = self.pass_rate(task)
            w = max(self.floor, p * (1 - p))
            return float(self._rng.random() ** (1.0 / w))  # weighted sampling without replacement (Efraimidis-Spirakis)

        return sorted(pool, key=key, reverse=True)[:n]

    def observe(self, trajectories: Iterable[Trajectory]) -> None:
        fresh: dict[str, list[float]] = {}
        for t in trajectories:
            c = fresh.setdefault(t.task_id, [0.0, 0.0])
            c[0] += float(bool(t.outcome and t.outcome.success))
            c[1] += 1
        for table, key in ((self.counts, lambda task: task), (self.kinds, lambda task: self._kind.get(task, ""))):
            batch: dict[str, list[float]] = {}
            for task, (s, n) in fresh.items():
                b = batch.setdefault(key(task), [0.0, 0.0])
                b[0], b[1] = b[0] + s, b[1] + n
            for k, (s, n) in batch.items():
                old = table.get(k, [0.0, 0.0])
                table[k] = [old[0] * self.decay + s, old[1] * self.decay + n]
        if self.path is not None:
            atomic_write_json(self.path, {"kinds": self.kinds, "tasks": self.counts}, indent=None)
