"""The gate's guarantee by simulation (bench/gate_sim.py; seeded, no vLLM, a few seconds): K = 20 retrains of
candidates equal to the serving version — same true per-task success probabilities, a fresh draw per
retrain, the serving version's one cached draw reused by every gate — promote at most alpha overall, and
the fixed-alpha gate it replaces does not. Decisions are checked against `trainer.gate()` itself."""

from __future__ import annotations

import math
from typing import Any

import pytest

from _bench import load_bench


@pytest.fixture(scope="module")
def sim() -> Any:
    mod = load_bench("gate_sim")
    return mod.simulate(histories=2000, seed=0, check=10)


def test_twenty_retrains_of_equal_candidates_promote_at_most_alpha(sim: Any) -> None:
    """Mutants: alpha not spent (every gate at alpha: ~28% over 20 retrains), a spending that depends on
    anything but the app's gate count, the simulation's fast rule drifting from `gate()` (checked decisions)."""
    alpha, histories = sim["model"]["alpha"], sim["histories"]
    old, new, new_half = sim["policies"]
    bound = alpha + 3 * math.sqrt(alpha * (1 - alpha) / histories)
    assert new["false_promotion"]["20"] <= bound and new_half["false_promotion"]["20"] <= bound
    assert sim["guarantee"]["holds"] and sim["checked_against_gate"] == 10 * 20 * 2
    # The simulation can see the problem it guards against: the old gate's rate is far above alpha.
    assert old["false_promotion"]["20"] > bound and old["false_promotion"]["1"] <= bound


def test_a_real_improvement_keeps_power_at_the_first_gates(sim: Any) -> None:
    """The price, reported: a +20-point candidate (40% -> 60% on 100 tasks). Mutants: the report split
    swallowing the selection (power at the first gate collapses), power not falling with k (alpha not spent)."""
    old, new, _ = sim["policies"]
    power = new["power_plus20"]
    assert power["1"] >= 0.5 and power["1"] > power["5"] > power["20"]
    assert old["power_plus20"]["20"] > power["20"]
    print({p["policy"]: p["power_plus20"] for p in sim["policies"]})
