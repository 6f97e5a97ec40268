"""The promotion gate on given per-task outcomes (no server): the exact McNemar tail, alpha spending per
app, the selection/report split, refusal on errored episodes, slices, and unpaired comparisons.

Each test's docstring names the broken variant of the gate ("mutant") it fails on."""

from __future__ import annotations

import json
import math
from itertools import count
from typing import Optional

import pytest

from trainer import GateConfig, gate, mcnemar_p
from trainer._gate import in_report_split, spending_level, split

FRACTION = GateConfig().report_fraction


def ids(n: int, *, report: bool = False, prefix: str = "t") -> list[str]:
    """The first `n` ids prefix0, prefix1, ... that fall in the selection split (or, `report`, the report split)."""
    out: list[str] = []
    for i in count():
        if len(out) == n:
            return out
        if in_report_split(f"{prefix}{i}", FRACTION) == report:
            out.append(f"{prefix}{i}")
    raise AssertionError("unreachable")


def outcomes(tasks: list[str], solved: set[int]) -> dict[str, bool]:
    return {t: i in solved for i, t in enumerate(tasks)}


@pytest.mark.parametrize(("b", "c", "p"), [(0, 0, 1.0), (1, 0, 0.5), (5, 0, 1 / 32), (3, 2, 0.5),
                                           (10, 2, (66 + 12 + 1) / 4096), (0, 4, 1.0), (53, 0, 2.0**-53)])
def test_mcnemar_tail_is_the_exact_binomial(b: int, c: int, p: float) -> None:
    """Mutant: a two-sided or approximate (normal) tail."""
    assert mcnemar_p(b, c) == pytest.approx(p, rel=1e-12)


def test_mcnemar_agrees_with_scipy_where_installed() -> None:
    stats = pytest.importorskip("scipy.stats")
    for b, c in [(7, 3), (20, 11), (1, 9), (60, 40), (250, 200)]:
        ref = stats.binomtest(b, b + c, 0.5, alternative="greater").pvalue
        assert mcnemar_p(b, c) == pytest.approx(ref, rel=1e-9)


@pytest.mark.parametrize(("b", "c"), [(2, -1), (-1, 2)])
def test_mcnemar_rejects_one_negative_count(b: int, c: int) -> None:
    """Mutant (mutmut sdk._stats.x_mcnemar_p__mutmut_1): `b < 0 and c < 0`, which let mcnemar_p(2, -1)
    return p = 0.0, a certain "better", from a negative count."""
    with pytest.raises(ValueError, match="must be >= 0"):
        mcnemar_p(b, c)


# ---- alpha spending ------------------------------------------------------------------------------

def test_the_levels_sum_to_at_most_alpha_and_shrink() -> None:
    """Mutants: no spending (every gate at alpha), a spending series that sums above alpha (alpha / k,
    whose partial sums pass alpha at k = 3), a series that does not shrink."""
    levels = [spending_level(0.05, k) for k in range(1, 100_001)]
    assert levels[0] == pytest.approx(0.05 * 6 / math.pi**2) and levels[0] == pytest.approx(0.0304, abs=1e-4)
    assert all(a > b for a, b in zip(levels, levels[1:]))
    assert math.fsum(levels) <= 0.05
    assert math.fsum(levels) == pytest.approx(0.05, rel=1e-4)  # not needlessly conservative either
    with pytest.raises(ValueError, match="counts from 1"):
        spending_level(0.05, 0)


def test_the_k_th_gate_tests_at_alpha_k() -> None:
    """Mutant: alpha not spent (the k-th gate still tests at alpha, or at alpha_1). A clean win of 6 discordant
    pairs (p = 1/64) passes the first gate (alpha_1 = 0.0304) but not the second (alpha_2 = 0.0076)."""
    tasks = ids(20)
    serving, candidate = outcomes(tasks, set()), outcomes(tasks, set(range(6)))
    first, second = gate(candidate, serving, k=1), gate(candidate, serving, k=2)
    assert (first.b, first.c, first.p_value) == (6, 0, 1 / 64)
    assert first.promote and first.tested and first.k == 1 and first.alpha_k == spending_level(0.05, 1)
    assert not second.promote and second.tested and second.alpha_k == pytest.approx(0.05 * 6 / math.pi**2 / 4)
    assert second.alpha == 0.05 and "gate 2 of this app" in second.reason
    # Five pairs (p = 1/32) are not enough even for the first gate: 1/32 > 0.0304.
    assert not gate(outcomes(tasks, set(range(5))), serving, k=1).promote


# ---- the split -----------------------------------------------------------------------------------

def test_the_split_is_by_task_id_alone_and_about_the_fraction() -> None:
    """Mutants: a split that depends on the suite's order or size (growing a suite would move tasks between
    splits), a split that ignores the fraction."""
    tasks = [f"x{i}" for i in range(10_000)]
    share = sum(in_report_split(t, FRACTION) for t in tasks) / len(tasks)
    assert abs(share - FRACTION) < 4 * math.sqrt(FRACTION * (1 - FRACTION) / len(tasks))
    small_sel, small_rep = split({t: True for t in tasks[:100]}, FRACTION)
    big_sel, big_rep = split({t: True for t in reversed(tasks)}, FRACTION)
    assert set(small_sel) <= set(big_sel) and set(small_rep) <= set(big_rep)
    assert set(big_sel).isdisjoint(big_rep) and len(big_sel) + len(big_rep) == len(tasks)
    assert sum(in_report_split(t, 0.5) for t in tasks) > sum(in_report_split(t, FRACTION) for t in tasks)


def test_the_reported_figure_comes_from_the_report_split_only() -> None:
    """Mutant: the report split equal to the selection split (the figure reported for the promoted
    candidate is the one that selected it). Selection: 0% -> 100%; report: both 50%."""
    sel, rep = ids(30), ids(10, report=True)
    serving = outcomes(sel, set()) | outcomes(rep, set(range(5)))
    candidate = outcomes(sel, set(range(30))) | outcomes(rep, set(range(5, 10)))
    d = gate(candidate, serving)
    assert d.promote and (d.n, d.n_report) == (30, 10) and (d.b, d.c) == (30, 0)
    assert (d.candidate_success, d.serving_success) == (1.0, 0.0)
    assert (d.candidate_report_success, d.serving_report_success) == (0.5, 0.5)
    assert "held out: 50% vs 50% on 10 report tasks" in d.reason


def test_report_tasks_never_decide() -> None:
    """Mutant: the test runs on every task (the report tasks select too, so their figure is biased again).
    The candidate wins all 40 report tasks and is equal on the selection split: not promoted."""
    sel, rep = ids(30), ids(40, report=True)
    serving = outcomes(sel, set(range(15))) | outcomes(rep, set())
    candidate = outcomes(sel, set(range(15))) | outcomes(rep, set(range(40)))
    d = gate(candidate, serving)
    assert not d.promote and (d.b, d.c, d.p_value) == (0, 0, 1.0) and d.candidate_report_success == 1.0


def test_slices_are_judged_on_the_selection_split() -> None:
    """Mutant: slices computed over all tasks (a report task could then veto, conditioning the report figure)."""
    sel, rep = ids(20), ids(10, report=True)
    slices = {t: "s" for t in sel + rep}
    serving = outcomes(sel, set()) | outcomes(rep, set(range(10)))
    candidate = outcomes(sel, set(range(20))) | outcomes(rep, set())  # report split: 100% -> 0%
    d = gate(candidate, serving, slices=slices)
    assert d.promote and [(r.slice, r.n, r.delta) for r in d.slices] == [("s", 20, 1.0)]


def test_the_demos_jump_still_promotes_on_its_selection_split() -> None:
    """The demo's suite (100 held-out arithmetic tasks) with 39% -> 93%: promoted at the first gate and still at
    the 100th, with a report figure from the other tasks. Mutant: a report fraction so large (or a split so
    wrong) that the demo's gate loses its selection tasks."""
    from envs import held_out_tasks

    tasks = [t.id for t in held_out_tasks(100)]
    serving, candidate = outcomes(tasks, set(range(39))), outcomes(tasks, set(range(93)))
    first, late = gate(candidate, serving, k=1), gate(candidate, serving, k=100)
    assert first.promote and late.promote and first.c == 0 and first.b >= 30
    assert first.n + first.n_report == 100 and 20 <= first.n_report <= 40
    sel, rep = split(candidate, FRACTION)
    assert first.b == sum(1 for i, t in enumerate(tasks) if 39 <= i < 93 and t in sel)
    assert first.candidate_report_success == sum(rep.values()) / len(rep)


# ---- errors ---------------------------------------------------------------------------------------

@pytest.mark.parametrize("side", ["candidate", "serving"])
def test_errored_tasks_block_the_decision_and_are_named(side: str) -> None:
    """Mutants: errors counted as failures (the serving version's 10 crashed tasks would hand the candidate
    10 wins and a promotion), errors ignored (decided on the rest), errors spending alpha."""
    tasks = ids(30)
    crashed = {t: "env_error: RuntimeError: sandbox died" for t in tasks[:10]}
    good = outcomes(tasks[10:], set(range(20)))
    other = outcomes(tasks, set(range(10, 30)))
    cand, serv = (good, other) if side == "candidate" else (other, good)
    errs: dict[str, Optional[dict[str, str]]] = {"candidate_errors": None, "serving_errors": None}
    errs[f"{side}_errors"] = crashed
    d = gate(cand, serv, config=GateConfig(retries=3), **errs)  # type: ignore[arg-type]
    assert not d.promote and not d.tested and d.errored == {side: crashed}
    assert "still errored after 3 retries" in d.reason and "not a failure" in d.reason
    assert f"{side} 10 task(s)" in d.reason and "sandbox died" in d.reason and tasks[0] in d.reason
    assert "and 5 more" in d.reason and "Fix the environment" in d.reason
    assert "not better" not in d.reason


def test_without_errors_nothing_is_recorded_as_errored() -> None:
    tasks = ids(10)
    d = gate(outcomes(tasks, set(range(10))), outcomes(tasks, set()), candidate_errors={}, serving_errors={})
    assert d.promote and d.errored == {}


# ---- the decision itself ---------------------------------------------------------------------------

@pytest.mark.parametrize(("serving_solved", "candidate_solved"), [
    (set(range(92)), set(range(93))),                        # 92% -> 93%: b=1, c=0
    (set(range(92)), set(range(3, 95))),                     # 92% -> 92%, b=3, c=3
    (set(range(90)) | {95, 96}, set(range(88)) | {91, 92, 93, 94, 97}),  # 92% -> 93%: b=5, c=4
])
def test_a_one_point_wobble_does_not_promote(serving_solved: set[int], candidate_solved: set[int]) -> None:
    """Mutant: promoting on b > c alone (no test)."""
    tasks = ids(100)
    d = gate(outcomes(tasks, candidate_solved), outcomes(tasks, serving_solved))
    assert not d.promote and d.tested
    assert d.p_value >= 0.2 and "not better with confidence" in d.reason


def test_an_identical_candidate_is_refused() -> None:
    same = outcomes(ids(100), set(range(0, 100, 2)))
    d = gate(dict(same), dict(same))
    assert not d.promote and (d.b, d.c, d.p_value) == (0, 0, 1.0)


def test_a_worse_candidate_is_refused_even_at_a_lax_alpha() -> None:
    """Mutant: b and c swapped (the serving version's wins counted for the candidate)."""
    tasks = ids(100)
    d = gate(outcomes(tasks, set(range(30))), outcomes(tasks, set(range(60))), config=GateConfig(alpha=0.9))
    assert not d.promote and d.b == 0 and d.c == 30


def test_a_regressing_slice_blocks_an_overall_win() -> None:
    """Mutant: the slice guard ignored (or comparing the wrong sign of delta)."""
    tasks = ids(100)
    # 80 "easy" tasks improve a lot; 20 "hard" ones drop from 50% to 30%.
    slices = {t: ("easy" if i < 80 else "hard") for i, t in enumerate(tasks)}
    serving = outcomes(tasks, set(range(40)) | set(range(80, 90)))
    candidate = outcomes(tasks, set(range(80)) | set(range(80, 86)))
    d = gate(candidate, serving, slices=slices)
    assert d.p_value < d.alpha_k and not d.promote
    assert "slice 'hard' regressed 50% -> 30%" in d.reason
    rows = {r.slice: r for r in d.slices}
    assert rows["hard"].regressed and rows["hard"].delta == pytest.approx(-0.2)
    assert not rows["easy"].regressed and rows["easy"].n == 80
    # With a tolerance above the drop the same outcomes promote.
    assert gate(candidate, serving, slices=slices, config=GateConfig(slice_tolerance=0.25)).promote


def test_a_drop_of_exactly_the_tolerance_is_allowed() -> None:
    tasks = ids(100)
    slices = {t: ("a" if i < 80 else "b") for i, t in enumerate(tasks)}
    serving = outcomes(tasks, set(range(20)) | set(range(80, 100)))
    candidate = outcomes(tasks, set(range(80)) | set(range(80, 99)))  # slice b: 100% -> 95%
    d = gate(candidate, serving, slices=slices)
    assert d.promote, d.reason


def test_unpaired_outcomes_are_never_promoted_and_spend_nothing() -> None:
    """Mutant: an unpaired comparison decided on the common tasks (or spending alpha)."""
    d = gate(outcomes(ids(50), set(range(50))), outcomes(ids(100), set()))
    assert not d.promote and not d.tested and "not a paired comparison" in d.reason
    assert not gate({}, {}).promote
    only_report = outcomes(ids(5, report=True), set(range(5)))
    d = gate(only_report, outcomes(ids(5, report=True), set()))
    assert not d.promote and not d.tested and "selection split" in d.reason


def test_decision_is_json_ready() -> None:
    tasks = ids(10) + ids(3, report=True)
    d = gate(outcomes(tasks, set(range(13))), outcomes(tasks, set()), slices={tasks[0]: "x"})
    data = json.loads(json.dumps(d.to_dict()))
    assert data["test"] == "exact McNemar, one-sided" and data["b"] == 10 and data["n"] == 10
    assert {r["slice"] for r in data["slices"]} == {"x", "all"}
    assert math.isclose(data["p_value"], 2.0**-10)
    assert data["k"] == 1 and data["tested"] and data["n_report"] == 3 and data["candidate_report_success"] == 1.0
    assert data["report_fraction"] == FRACTION and data["spending"].startswith("alpha * 6")


@pytest.mark.parametrize("kwargs", [{"alpha": 0}, {"alpha": 1.5}, {"slice_tolerance": -0.1}, {"report_fraction": 0.0},
                                    {"report_fraction": 1.0}, {"retries": -1}, {"retries": True}, {"retries": 1.5}])
def test_gate_config_refuses_nonsense(kwargs: dict[str, object]) -> None:
    with pytest.raises(ValueError, match="gate"):
        GateConfig(**kwargs)  # type: ignore[arg-type]  # deliberately wrong values


# ---- edges found by mutation testing (scripts/mutation.sh gate) ---------------------------------------------
@pytest.mark.parametrize("kwargs", [{"alpha": 1.0}, {"slice_tolerance": 1.5}])
def test_gate_config_refuses_its_bounds(kwargs: dict[str, object]) -> None:
    """Mutants (mutmut trainer._gate.xǁGateConfigǁ__post_init____mutmut_4/10): `alpha <= 1.0`,
    `slice_tolerance <= 2.0`."""
    with pytest.raises(ValueError, match="gate"):
        GateConfig(**kwargs)  # type: ignore[arg-type]


def test_gate_config_accepts_its_edges() -> None:
    """Mutants (mutmut trainer._gate.xǁGateConfigǁ__post_init____mutmut_8/9): `0.0 < slice_tolerance`, `< 1.0`:
    a tolerance of 0 (no slice may lose anything) or 1 (slices ignored) refused although valid."""
    GateConfig(slice_tolerance=0.0)
    GateConfig(slice_tolerance=1.0)


def test_a_tie_never_promotes_even_at_a_lax_alpha() -> None:
    """Mutant (mutmut trainer._gate.x_gate__mutmut_199, `b < c` for `b <= c`): at alpha 0.99 the first gate tests at
    alpha_k = 0.60, and b = c = 50 has p = 0.54, so only the `b <= c` guard refuses a candidate that won as
    many discordant pairs as it lost."""
    tasks = ids(100)
    d = gate(outcomes(tasks, set(range(50))), outcomes(tasks, set(range(50, 100))), config=GateConfig(alpha=0.99))
    assert (d.b, d.c) == (50, 50) and d.p_value < d.alpha_k
    assert not d.promote


def test_a_refusal_records_no_test() -> None:
    """Mutants (mutmut trainer._gate.x_gate__mutmut_72..139, the three refusals: errors, unpaired, no selection
    task): promote recorded as None, n/b/c/p_value other than n, 0, 0, 1.0, the reason's count or wording lost;
    (x_gate__mutmut_40/44/56/57/66) slice_tolerance, retries or serving_success not recorded; (x__rate__mutmut_5)
    an empty selection's success recorded as 100%."""
    tasks = ids(20)
    cand, serv = outcomes(tasks, set(range(10))), outcomes(tasks, set())
    errored = gate(cand, serv, candidate_errors={"x": "boom"}, config=GateConfig(retries=2, slice_tolerance=0.2))
    unpaired = gate(cand, outcomes(ids(30), set()))
    only_report = gate(outcomes(ids(5, report=True), set(range(5))), outcomes(ids(5, report=True), set()))
    for d, n in [(errored, 20), (unpaired, 20), (only_report, 0)]:
        assert d.promote is False and (d.n, d.b, d.c, d.p_value) == (n, 0, 0, 1.0)
    assert (errored.retries, errored.slice_tolerance) == (2, 0.2)
    assert only_report.candidate_success == 0.0 and only_report.serving_success == 0.0
    assert gate(cand, outcomes(tasks, set(range(5)))).serving_success == 0.25
    assert "no tasks were evaluated" in gate({}, {}).reason and "10 tasks" in unpaired.reason
