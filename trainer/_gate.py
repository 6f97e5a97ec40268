"""The promotion gate: a paired exact test on a selection split of the eval suite, at a level that an
app's retrains spend from one budget, with the reported figure taken from the other split.

The rule, in four parts.

1. **Errors are not outcomes.** An eval episode whose environment, verifier or generation crashed is
   re-run (`GateConfig.retries` times, same seed: `_eval.evaluate`). A task that still errors is recorded
   with its error, never as a failure, and the gate *refuses to decide* ("failed", naming the tasks and
   errors): a broken environment must not make a candidate look worse or better.

2. **Two splits.** Each task is in the *report* split when sha256("looplift-gate-split:" + task id), read as
   a 64-bit fraction, is below `report_fraction` (default 0.3), else in the *selection* split. Only
   selection tasks decide (the test and the slice guard). The held-out success reported for a version
   (`candidate_report_success`, `serving_report_success`) comes from the report tasks, which never decided
   any promotion, so it carries no selection bias (the promoted candidate is the one whose selection figure
   came out high; its report figure is an independent measurement). A task's split depends on its id
   alone: growing a suite moves no task between splits. Raising `report_fraction` later would move
   selection tasks into the report split; keep it fixed for an app.

3. **The paired test**, on the selection split. Both versions answer every task with the same per-task
   sampling seeds, so each task is a pair (candidate, serving). Only the discordant pairs carry information:

       b = tasks the candidate solved and the serving version failed
       c = tasks the serving version solved and the candidate failed

   Under "no difference" each discordant pair is a fair coin, b ~ Binomial(b + c, 1/2), and the exact
   one-sided McNemar p-value is p = P(X >= b) = sum_{k=b}^{b+c} C(b+c, k) / 2^(b+c) (`sdk.mcnemar_p`,
   exact integers, the copy the live canary shares).

4. **Alpha spending per app.** Every retrain is another test on the same tasks and seeds: at a fixed
   alpha, K retrains of candidates no better than the serving version promote one with probability up to
   K x alpha (`bench/gate_sim.py` measures 28% for K = 20 at 0.05). Instead the k-th gate of an app (the
   count is kept in `<runs>/gate-ledger/`, `_gate_ledger`, and survives restarts) tests at

       alpha_k = alpha * 6 / (pi^2 k^2),      sum_{k >= 1} alpha_k = alpha      (sum 1/k^2 = pi^2/6)

   and promotes only when b > c, p <= alpha_k, and no declared slice (task group) loses more than
   `slice_tolerance` of success rate on the selection split. Guarantee: if each gate's test is valid at its
   level (the exact test is, when the candidate is no better than the serving version task by task), then
   by the union bound the app's gates *together*, over its whole life, promote a candidate that is not
   better with probability <= sum alpha_k <= alpha, however the gates depend on each other (the same tasks,
   the cached serving evaluation). `tests/test_gate_sim.py` checks it by simulation with the cache's
   dependence built in. Only a gate that ran the test spends: one refused before testing (errors, unpaired
   outcomes) cannot promote. The price is power at late gates: alpha_1 = 0.030, alpha_5 = 0.0012,
   alpha_20 = 7.6e-5 at alpha 0.05. A big win still promotes (39% -> 93% on the demo's 74 selection tasks:
   b = 37, c = 0, p = 7e-12, below alpha_k up to k ~ 65,000); a +20-point candidate on 100 tasks promotes
   67% of the time at the first gate and 6% at the 20th (`bench/gate_sim.py`): a suite that must keep
   catching small gains over many retrains needs more tasks.

Figures at alpha 0.05, first gate (alpha_1 = 0.0304): a clean win of 6 discordant pairs (p = 1/64) promotes,
5 (p = 1/32) does not; 92% -> 93% (b = 1, c = 0, p = 0.5) never does.

Deliberately left out: two-sided tests (we never promote a worse version, so only one side matters),
multiple-comparison corrections across slices (slices guard against regressions, they are not a second
test), resetting the spending on a promotion (the same held-out tasks keep being reused, so the lifetime
error would grow with every promotion), and spending per suite (renaming a suite must not buy alpha back;
to restart an app's count deliberately, delete its ledger file — the guarantee restarts with it).
"""

from __future__ import annotations

import hashlib
import math
from dataclasses import asdict, dataclass, field
from typing import Any, Mapping, Optional

from sdk import mcnemar_p

from . import _defaults as D

TEST_NAME = "exact McNemar, one-sided"
SPENDING = "alpha * 6 / (pi^2 k^2) per app"
SPLIT_SALT = "looplift-gate-split:"
#: Tasks named per version in a refusal for errors (the rest are counted).
_NAMED_ERRORS = 5


def spending_level(alpha: float, k: int) -> float:
    """The level of an app's k-th gate (k = 1, 2, ...): alpha * 6 / (pi^2 k^2); these sum to alpha over all k."""
    if k < 1:
        raise ValueError(f"gate number k counts from 1, got {k}")
    return alpha * 6.0 / (math.pi ** 2 * k * k)


def in_report_split(task_id: str, fraction: float) -> bool:
    """Whether `task_id` is in the report split: sha256(SPLIT_SALT + task id) as a 64-bit fraction < `fraction`."""
    h = int.from_bytes(hashlib.sha256(f"{SPLIT_SALT}{task_id}".encode()).digest()[:8], "big")
    return h < fraction * 2.0 ** 64


def split(outcomes: Mapping[str, bool], fraction: float) -> tuple[dict[str, bool], dict[str, bool]]:
    """(selection, report): `outcomes` divided by `in_report_split`."""
    selection: dict[str, bool] = {}
    report: dict[str, bool] = {}
    for task, ok in outcomes.items():
        (report if in_report_split(task, fraction) else selection)[task] = ok
    return selection, report


@dataclass(frozen=True)
class GateConfig:
    """How sure the gate must be; `[gate]` in `looplift.toml`, `--alpha` / `--slice-tolerance` on the CLI."""

    alpha: float = D.GATE_ALPHA
    """Family-wise one-sided level per app: the k-th gate tests at alpha * 6 / (pi^2 k^2)."""
    slice_tolerance: float = D.GATE_SLICE_TOLERANCE
    """A slice may lose at most this much success rate (absolute, 0-1) and the candidate still promotes."""
    report_fraction: float = D.GATE_REPORT_FRACTION
    """Share of tasks (by task-id hash) that never decide and give the reported held-out success."""
    retries: int = D.GATE_EVAL_RETRIES
    """Re-runs of an eval episode that errored, before the gate refuses to decide."""

    def __post_init__(self) -> None:
        if not 0.0 < self.alpha < 1.0:
            raise ValueError(f"gate alpha must be in (0, 1), got {self.alpha}")
        if not 0.0 <= self.slice_tolerance <= 1.0:
            raise ValueError(f"gate slice_tolerance must be in [0, 1], got {self.slice_tolerance}")
        if not 0.0 < self.report_fraction < 1.0:
            raise ValueError(f"gate report_fraction must be in (0, 1) (a share of the suite's tasks that only reports; "
                             f"default {D.GATE_REPORT_FRACTION}), got {self.report_fraction}")
        if isinstance(self.retries, bool) or not isinstance(self.retries, int) or self.retries < 0:
            raise ValueError(f"gate retries must be a whole number >= 0 (re-runs of an errored eval episode), "
                             f"got {self.retries!r}")


@dataclass(frozen=True)
class SliceRow:
    """One slice of the selection split: both versions' success rate on its tasks."""

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
    """Paired tasks of the selection split (the test's n)."""
    b: int
    """Discordant pairs the candidate won (it solved, the serving version did not)."""
    c: int
    """Discordant pairs the serving version won."""
    p_value: float
    alpha: float
    """The app's family-wise level (configured); this gate tested at `alpha_k`."""
    candidate_success: float
    """On the selection split (the figure that selected; biased upward for a promoted candidate)."""
    serving_success: float
    """On the selection split."""
    slice_tolerance: float
    slices: list[SliceRow] = field(default_factory=list)
    k: int = 1
    """This gate's number in its app's series (1 = the app's first gate)."""
    alpha_k: float = 0.0
    """The level this gate tested at: alpha * 6 / (pi^2 k^2)."""
    spending: str = SPENDING
    tested: bool = False
    """Whether the test ran and spent alpha_k (False: refused before testing, for errors or unpaired outcomes)."""
    report_fraction: float = D.GATE_REPORT_FRACTION
    n_report: int = 0
    """Tasks of the report split (never decide)."""
    candidate_report_success: Optional[float] = None
    """The candidate's held-out success on the report split: the figure to report (None: no report task)."""
    serving_report_success: Optional[float] = None
    retries: int = 0
    """Re-runs an errored episode got before it counted as errored."""
    errored: dict[str, dict[str, str]] = field(default_factory=dict)
    """"candidate" / "serving" -> task id -> the error of its last attempt (only when some errored)."""

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready dict."""
        return asdict(self)


def _rate(values: list[bool]) -> float:
    return sum(values) / len(values) if values else 0.0


def _report_rate(values: list[bool]) -> Optional[float]:
    return sum(values) / len(values) if values else None


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


def _errors_reason(errored: Mapping[str, Mapping[str, str]], retries: int) -> str:
    parts = []
    for side in ("candidate", "serving"):
        errs = errored.get(side) or {}
        if not errs:
            continue
        named = "; ".join(f"{task}: {err}" for task, err in sorted(errs.items())[:_NAMED_ERRORS])
        more = f"; and {len(errs) - _NAMED_ERRORS} more" if len(errs) > _NAMED_ERRORS else ""
        parts.append(f"{side} {len(errs)} task(s) ({named}{more})")
    return (f"eval episodes still errored after {retries} retr{'y' if retries == 1 else 'ies'}, so the gate does not "
            f"decide (an error is not a failure): {', '.join(parts)}. Fix the environment, verifier or gateway these "
            f"errors name and run the job again (`[gate] retries` sets the re-runs)")


def gate(
    candidate: Mapping[str, bool],
    serving: Mapping[str, bool],
    *,
    slices: Optional[Mapping[str, str]] = None,
    config: GateConfig = GateConfig(),
    k: int = 1,
    candidate_errors: Optional[Mapping[str, str]] = None,
    serving_errors: Optional[Mapping[str, str]] = None,
) -> GateDecision:
    """Decide on per-task outcomes (task id -> solved) of the candidate and the serving version, as the
    app's `k`-th gate (the module docstring has the rule).

    `slices` maps task id -> slice name (tasks without one are in slice "all"). `candidate_errors` and
    `serving_errors` map task id -> error for tasks whose episode kept erroring (not in the outcome maps):
    any of them and the gate refuses to decide. The outcome maps must cover the same tasks: an unpaired
    comparison is refused (never promoted)."""
    alpha_k = spending_level(config.alpha, k)
    errored = {side: dict(errs) for side, errs in (("candidate", candidate_errors), ("serving", serving_errors)) if errs}
    cand_sel, cand_rep = split(candidate, config.report_fraction)
    serv_sel, serv_rep = split(serving, config.report_fraction)
    n = len(cand_sel)
    common: dict[str, Any] = dict(
        test=TEST_NAME, alpha=config.alpha, slice_tolerance=config.slice_tolerance, k=k, alpha_k=alpha_k,
        report_fraction=config.report_fraction, retries=config.retries, errored=errored,
        candidate_success=_rate(list(cand_sel.values())), serving_success=_rate(list(serv_sel.values())),
        n_report=len(cand_rep), candidate_report_success=_report_rate(list(cand_rep.values())),
        serving_report_success=_report_rate(list(serv_rep.values())))
    if errored:
        return GateDecision(False, _errors_reason(errored, config.retries), n=n, b=0, c=0, p_value=1.0, **common)
    if set(candidate) != set(serving) or not candidate:
        missing = len(set(candidate) ^ set(serving))
        why = "no tasks were evaluated" if not candidate else f"{missing} tasks were evaluated for only one version"
        return GateDecision(False, f"not a paired comparison: {why}", n=n, b=0, c=0, p_value=1.0, **common)
    if n == 0:
        return GateDecision(False, f"not a paired comparison: none of the suite's {len(candidate)} tasks is in the "
                                   f"selection split (report_fraction {config.report_fraction:g}); use a suite with "
                                   "more tasks", n=0, b=0, c=0, p_value=1.0, **common)
    b = sum(1 for t, ok in cand_sel.items() if ok and not serv_sel[t])
    c = sum(1 for t, ok in cand_sel.items() if not ok and serv_sel[t])
    p = mcnemar_p(b, c)
    rows = _slices(cand_sel, serv_sel, slices or {}, config.slice_tolerance)
    report = ("no report tasks" if common["candidate_report_success"] is None else
              f"{common['candidate_report_success']:.0%} vs {common['serving_report_success']:.0%} on "
              f"{len(cand_rep)} report tasks")
    figures = (f"{common['candidate_success']:.0%} vs {common['serving_success']:.0%} on {n} selection tasks, "
               f"discordant {b} for / {c} against, p={p:.2g} (gate {k} of this app: alpha_k {alpha_k:.2g} of "
               f"alpha {config.alpha:g}, {TEST_NAME}); held out: {report}")
    decided: dict[str, Any] = dict(n=n, b=b, c=c, p_value=p, slices=rows, tested=True, **common)
    regressed = [r for r in rows if r.regressed]
    if b <= c or p > alpha_k:
        return GateDecision(False, f"not better with confidence: {figures}", **decided)
    if regressed:
        worst = min(regressed, key=lambda r: r.delta)
        return GateDecision(False, f"slice {worst.slice!r} regressed {worst.serving:.0%} -> {worst.candidate:.0%} "
                                   f"(more than {config.slice_tolerance:.0%}); overall {figures}", **decided)
    return GateDecision(True, f"better: {figures}", **decided)
