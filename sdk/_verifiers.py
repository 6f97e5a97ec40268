"""Composable verifiers: build one verifier out of several, cheap checks before expensive ones.

    AllOf({"format": a, "tests": b})          success iff every part succeeds; reward = the lowest reward
    Weighted({"tests": (3, a), "style": (1, b)})
                                              reward = weighted mean of the parts' rewards; success iff
                                              reward >= threshold (default: iff every part succeeds)
    Gated(cheap, expensive)                   run `cheap` first; only when it succeeds run `expensive`,
                                              whose success and reward are the result; a failed gate is
                                              failure with reward 0, and `expensive` is skipped

They live in the SDK because applications compose them (a format check gating a sandboxed test run or
an LLM judge), and they need nothing beyond the `Verifier` protocol. Every part's outcome is kept in
`Outcome.details["parts"][name]` (success, reward, details, error) and skipped parts are listed in
`details["skipped"]`, so a trajectory records why it scored what it scored.

A part that raises is a crash, not a failure (STYLE 5): the combined outcome then has `error` naming
the part, success False and reward 0, and the traceback is in that part's details. A part whose
outcome already has `error` propagates it the same way. `AllOf` and `Weighted` evaluate every part
(so the record is complete); use `Gated` to skip work. Parts run one after another, in order.
"""

from __future__ import annotations

import traceback
from collections.abc import Mapping
from typing import Any, Optional, Union

from ._env import Verifier
from ._types import Outcome, Task, Trajectory

__all__ = ["AllOf", "Gated", "Weighted"]


def _run_part(name: str, verifier: Verifier, task: Task, trajectory: Trajectory) -> Outcome:
    try:
        return verifier.verify(task, trajectory)
    except Exception as e:  # a crashing part is recorded as a crash of that part
        return Outcome(success=False, reward=0.0, error=f"{type(e).__name__}: {e}",
                       details={"traceback": traceback.format_exc(limit=8)})


def _record(o: Outcome) -> dict[str, Any]:
    return {"success": o.success, "reward": o.reward, "details": o.details, "error": o.error}


def _combine(parts: dict[str, Outcome], skipped: list[str], success: bool, reward: float) -> Outcome:
    details: dict[str, Any] = {"parts": {n: _record(o) for n, o in parts.items()}, "skipped": skipped}
    errors = [f"{n}: {o.error}" for n, o in parts.items() if o.error]
    if errors:
        return Outcome(success=False, reward=0.0, error="; ".join(errors), details=details)
    return Outcome(success=success, reward=reward, details=details)


def _named(parts: Union[Mapping[str, Verifier], Mapping[str, tuple[float, Verifier]]], kind: str) -> None:
    if not parts:
        raise ValueError(f"{kind} needs at least one verifier")
    for name in parts:
        if not isinstance(name, str) or not name:
            raise ValueError(f"{kind}: every part needs a non-empty name, got {name!r}")


class AllOf:
    """Success iff every part succeeds; reward = the lowest part reward. Every part runs."""

    def __init__(self, parts: Mapping[str, Verifier]) -> None:
        _named(parts, "AllOf")
        self.parts = dict(parts)

    def verify(self, task: Task, trajectory: Trajectory) -> Outcome:
        """Run every part and combine (see the class docstring)."""
        got = {n: _run_part(n, v, task, trajectory) for n, v in self.parts.items()}
        return _combine(got, [], all(o.success for o in got.values()), min(o.reward for o in got.values()))


class Weighted:
    """Reward = the weighted mean of the parts' rewards (weights > 0). Success iff the reward reaches
    `threshold`, or, with no threshold, iff every part succeeds. Every part runs."""

    def __init__(self, parts: Mapping[str, tuple[float, Verifier]], *, threshold: Optional[float] = None) -> None:
        _named(parts, "Weighted")
        for name, (w, _) in parts.items():
            if not w > 0:
                raise ValueError(f"Weighted: the weight of {name!r} must be > 0, got {w!r}")
        self.parts = dict(parts)
        self.threshold = threshold

    def verify(self, task: Task, trajectory: Trajectory) -> Outcome:
        """Run every part and combine (see the class docstring)."""
        got = {n: _run_part(n, v, task, trajectory) for n, (_, v) in self.parts.items()}
        total = sum(w for w, _ in self.parts.values())
        reward = sum(w * got[n].reward for n, (w, _) in self.parts.items()) / total
        success = all(o.success for o in got.values()) if self.threshold is None else reward >= self.threshold
        out = _combine(got, [], success, reward)
        out.details["weights"] = {n: w for n, (w, _) in self.parts.items()}
        return out


class Gated:
    """Run `gate` first; only when it succeeds run `then`, whose success and reward are the result.
    When the gate fails the result is failure with reward 0 and `then` is listed as skipped."""

    def __init__(self, gate: Verifier, then: Verifier, *, names: tuple[str, str] = ("gate", "then")) -> None:
        if len(names) != 2 or not all(names) or names[0] == names[1]:
            raise ValueError(f"Gated: names must be two different non-empty strings, got {names!r}")
        self.gate, self.then, self.names = gate, then, names

    def verify(self, task: Task, trajectory: Trajectory) -> Outcome:
        """Run the gate, then (if it passed) the expensive verifier."""
        g_name, t_name = self.names
        first = _run_part(g_name, self.gate, task, trajectory)
        if first.error or not first.success:
            return _combine({g_name: first}, [t_name], False, 0.0)
        second = _run_part(t_name, self.then, task, trajectory)
        return _combine({g_name: first, t_name: second}, [], second.success, second.reward)
