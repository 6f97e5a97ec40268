"""The promotion gate: a paired significance test on the same tasks and seeds, and no slice regressing.

Both versions answer every task of the eval suite with the same per-task sampling seeds, so each task
gives a pair of outcomes (candidate, serving). Only the *discordant* pairs carry information about
which is better:

    b = tasks the candidate solved and the serving version failed
    c = tasks the serving version solved and the candidate failed

Under "no difference" each discordant pair is a fair coin, so b ~ Binomial(b + c, 1/2). The exact
McNemar test, one-sided (is the candidate *better*?), gives

    p = P(X >= b) = sum_{k=b}^{b+c} C(b+c, k) / 2^(b+c)

and the gate promotes only when b > c and p <= alpha, and no declared slice (task group) loses more
than `slice_tolerance` of success rate. Figures on 100 tasks with alpha 0.05: 39% -> 92% (b=53, c=0)
gives p = 1.1e-16 and promotes; 92% -> 93% (b=1, c=0) gives p = 0.5 and does not; the smallest clean
win that promotes is b=5, c=0 (p = 1/32). The binomial tail is exact integer arithmetic (`sdk.mcnemar_p`,
the one copy the live canary's test shares), so no scipy is needed.

Deliberately left out: two-sided tests (we never promote a worse version, so only one side matters),
multiple-comparison corrections across slices (slices are a guard against regressions, not a second
test), and sequential testing (a run evaluates once; a rejected candidate is simply not promoted).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any, Mapping

from sdk import mcnemar_p

from . import _defaults as D

TEST_NAME = "exact McNemar, one-sided"


@dataclass(frozen=True)
class GateConfig:
    """How sure the gate must be; `[gate]` in `looplift.toml`, `--alpha` / `--slice-tolerance` on the CLI."""

    alpha: float = D.GATE_ALPHA
    """One-sided significance level: promote only when p <= alpha."""
    slice_tolerance: float = D.GATE_SLICE_TOLERANCE
    """A slice may lose at most this much success rate (absolute, 0-1) and the candidate still promotes."""

    def __post_init__(self) -> None:
        if not 0.0 < self.alpha < 1.0:
            raise ValueError(f"gate alpha must be in (0, 1), got {self.alpha}")
        if not 0.0 <= self.slice_tolerance <= 1.0:
            raise ValueError(f"gate slice_tolerance must be in [0, 1], got {self.slice_tolerance}")


@dataclass(frozen=True)
class SliceRow:
    """One slice of the eval suite: both versions' success rate on its tasks."""

    slice: str
    n: int
    candidate: float
    serving: float
    delta: float
    """candidate - serving (negative: the candidate is worse on this slice)."""
    regressed: bool
    """delta < -slice_tolerance."""


@dataclass(frozen=True)
class GateDecision:
    """What the gate decided and every figure it decided on (recorded in the run's result.json)."""

    promote: bool
    reason: str
    test: str
    n: int
    """Paired tasks."""
    b: int
    """Discordant pairs the candidate won (it solved, the serving version did not)."""
    c: int
    """Discordant pairs the serving version won."""
    p_value: float
    alpha: float
    candidate_success: float
    serving_success: float
    slice_tolerance: float
    slices: list[SliceRow] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready dict."""
        return asdict(self)


def _rate(values: list[bool]) -> float:
    return sum(values) / len(values) if values else 0.0


def _slices(candidate: Mapping[str, bool], serving: Mapping[str, bool], slice_of: Mapping[str, str],
            tolerance: float) -> list[SliceRow]:
    groups: dict[str, list[str]] = {}
    for task in candidate:
        groups.setdefault(slice_of.get(task, D.DEFAULT_SLICE), []).append(task)
    rows = []
    for name in sorted(groups):
        ids = groups[name]
        cand, serv = _rate([candidate[t] for t in ids]), _rate([serving[t] for t in ids])
        delta = cand - serv
        # A tiny epsilon so that a drop of exactly the tolerance (e.g. 1 task of 20 at 5%) is allowed.
        rows.append(SliceRow(name, len(ids), cand, serv, delta, regressed=delta < -tolerance - 1e-12))
    return rows


def gate(
    candidate: Mapping[str, bool],
    serving: Mapping[str, bool],
    *,
    slices: Mapping[str, str] | None = None,
    config: GateConfig = GateConfig(),
) -> GateDecision:
    """Decide on per-task outcomes (task id -> solved) of the candidate and the serving version.

    `slices` maps task id -> slice name (tasks without one are in slice "all"). The two outcome maps
    must cover the same tasks: an unpaired comparison is refused (never promoted)."""
    n = len(candidate)
    cand_rate, serv_rate = _rate(list(candidate.values())), _rate(list(serving.values()))
    common: dict[str, Any] = dict(test=TEST_NAME, alpha=config.alpha, slice_tolerance=config.slice_tolerance,
                                  candidate_success=cand_rate, serving_success=serv_rate)
    if set(candidate) != set(serving) or n == 0:
        missing = len(set(candidate) ^ set(serving))
        why = "no tasks were evaluated" if n == 0 else f"{missing} tasks were evaluated for only one version"
        return GateDecision(False, f"not a paired comparison: {why}", n=n, b=0, c=0, p_value=1.0, **common)
    b = sum(1 for t, ok in candidate.items() if ok and not serving[t])
    c = sum(1 for t, ok in candidate.items() if not ok and serving[t])
    p = mcnemar_p(b, c)
    rows = _slices(candidate, serving, slices or {}, config.slice_tolerance)
    figures = (f"{cand_rate:.0%} vs {serv_rate:.0%} on {n} tasks, discordant {b} for / {c} against, "
               f"p={p:.2g} (alpha {config.alpha:g}, {TEST_NAME})")
    regressed = [r for r in rows if r.regressed]
    if b <= c or p > config.alpha:
        return GateDecision(False, f"not better with confidence: {figures}", n=n, b=b, c=c, p_value=p,
                            slices=rows, **common)
    if regressed:
        worst = min(regressed, key=lambda r: r.delta)
        return GateDecision(False, f"slice {worst.slice!r} regressed {worst.serving:.0%} -> {worst.candidate:.0%} "
                                   f"(more than {config.slice_tolerance:.0%}); overall {figures}",
                            n=n, b=b, c=c, p_value=p, slices=rows, **common)
    return GateDecision(True, f"better: {figures}", n=n, b=b, c=c, p_value=p, slices=rows, **common)
