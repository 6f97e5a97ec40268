"""The promotion gate on given per-task outcomes (no server): the exact McNemar tail, the decisions the
demo needs (a real jump promotes, a one-point wobble does not), slices, and unpaired comparisons."""

from __future__ import annotations

import math

import pytest

from trainer import GateConfig, gate, mcnemar_p


def outcomes(n: int, solved: set[int]) -> dict[str, bool]:
    return {f"t{i}": i in solved for i in range(n)}


@pytest.mark.parametrize(("b", "c", "p"), [(0, 0, 1.0), (1, 0, 0.5), (5, 0, 1 / 32), (3, 2, 0.5),
                                           (10, 2, (66 + 12 + 1) / 4096), (0, 4, 1.0), (53, 0, 2.0**-53)])
def test_mcnemar_tail_is_the_exact_binomial(b: int, c: int, p: float) -> None:
    assert mcnemar_p(b, c) == pytest.approx(p, rel=1e-12)


def test_mcnemar_agrees_with_scipy_where_installed() -> None:
    stats = pytest.importorskip("scipy.stats")
    for b, c in [(7, 3), (20, 11), (1, 9), (60, 40), (250, 200)]:
        ref = stats.binomtest(b, b + c, 0.5, alternative="greater").pvalue
        assert mcnemar_p(b, c) == pytest.approx(ref, rel=1e-9)


def test_a_real_jump_promotes_39_to_92_percent() -> None:
    serving = outcomes(100, set(range(39)))
    candidate = outcomes(100, set(range(92)))
    d = gate(candidate, serving)
    assert d.promote and d.n == 100 and (d.b, d.c) == (53, 0)
    assert d.p_value < 1e-15 and d.alpha == 0.05
    assert (d.candidate_success, d.serving_success) == (0.92, 0.39)
    assert "better" in d.reason and "p=" in d.reason


@pytest.mark.parametrize(("serving_solved", "candidate_solved"), [
    (set(range(92)), set(range(93))),                        # 92% -> 93%: b=1, c=0
    (set(range(92)), set(range(3, 95))),                     # 92% -> 92%, b=3, c=3
    (set(range(90)) | {95, 96}, set(range(88)) | {91, 92, 93, 94, 97}),  # 92% -> 93%: b=5, c=4
])
def test_a_one_point_wobble_does_not_promote(serving_solved: set[int], candidate_solved: set[int]) -> None:
    d = gate(outcomes(100, candidate_solved), outcomes(100, serving_solved))
    assert not d.promote
    assert d.p_value >= 0.2 and "not better with confidence" in d.reason


def test_an_identical_candidate_is_refused() -> None:
    same = outcomes(100, set(range(0, 100, 2)))
    d = gate(dict(same), dict(same))
    assert not d.promote and (d.b, d.c, d.p_value) == (0, 0, 1.0)


def test_a_worse_candidate_is_refused_even_at_a_lax_alpha() -> None:
    d = gate(outcomes(100, set(range(30))), outcomes(100, set(range(60))), config=GateConfig(alpha=0.5))
    assert not d.promote and d.b == 0 and d.c == 30


def test_a_regressing_slice_blocks_an_overall_win() -> None:
    # 80 "easy" tasks improve a lot; 20 "hard" ones drop from 50% to 30%.
    slices = {f"t{i}": ("easy" if i < 80 else "hard") for i in range(100)}
    serving = outcomes(100, set(range(40)) | set(range(80, 90)))
    candidate = outcomes(100, set(range(80)) | set(range(80, 86)))
    d = gate(candidate, serving, slices=slices)
    assert d.p_value < 0.05 and not d.promote
    assert "slice 'hard' regressed 50% -> 30%" in d.reason
    rows = {r.slice: r for r in d.slices}
    assert rows["hard"].regressed and rows["hard"].delta == pytest.approx(-0.2)
    assert not rows["easy"].regressed and rows["easy"].n == 80
    # With a tolerance above the drop the same outcomes promote.
    assert gate(candidate, serving, slices=slices, config=GateConfig(slice_tolerance=0.25)).promote


def test_a_drop_of_exactly_the_tolerance_is_allowed() -> None:
    slices = {f"t{i}": ("a" if i < 80 else "b") for i in range(100)}
    serving = outcomes(100, set(range(20)) | set(range(80, 100)))
    candidate = outcomes(100, set(range(80)) | set(range(80, 99)))  # slice b: 100% -> 95%
    d = gate(candidate, serving, slices=slices)
    assert d.promote, d.reason


def test_unpaired_outcomes_are_never_promoted() -> None:
    d = gate(outcomes(50, set(range(50))), outcomes(100, set()))
    assert not d.promote and "not a paired comparison" in d.reason
    assert not gate({}, {}).promote


def test_decision_is_json_ready() -> None:
    import json

    d = gate(outcomes(10, set(range(10))), outcomes(10, set()), slices={"t0": "x"})
    data = json.loads(json.dumps(d.to_dict()))
    assert data["test"] == "exact McNemar, one-sided" and data["b"] == 10
    assert {r["slice"] for r in data["slices"]} == {"x", "all"}
    assert math.isclose(data["p_value"], 2.0**-10)


@pytest.mark.parametrize("kwargs", [{"alpha": 0}, {"alpha": 1.5}, {"slice_tolerance": -0.1}])
def test_gate_config_refuses_nonsense(kwargs: dict[str, float]) -> None:
    with pytest.raises(ValueError):
        GateConfig(**kwargs)
