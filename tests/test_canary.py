"""The canary without vLLM: the split in the registry (`server._registry` + `_canary`, driven through the
in-memory `FakeVLLM` of test_server_swap), the exact one-sided Fisher tail, the always-valid e-value
(`trainer._sequential`) and the decision rules of the trainer's canary watch (`trainer._canary.judge_canary`
/ `judge_watch`, and which windows `CanaryWatch` compares) on given counts. One property per test; each
decision test names in its docstring the broken variant ("mutant") of the decision code it kills. The error
rates by simulation are tests/test_canary_sim.py; the whole loop on a real stack is tests/test_canary_stack.py."""

from __future__ import annotations

import asyncio
import math
import random
from datetime import datetime, timedelta, timezone
from fractions import Fraction
from pathlib import Path
from types import SimpleNamespace
from typing import Any, cast

import pytest
from test_server_swap import FakeVLLM

from _adapters import write_adapter
from collector import WindowStats
from sdk import fisher_p
from server import CanaryError, GatewaySettings, ServerError, VersionNotFoundError
from server._models import CanaryDecisionRequest
from server._registry import Registry
from trainer._canary import CanaryConfig, LiveSignal, judge_canary, judge_watch, live_signals
from trainer._sequential import exact_margin, log_e_greater, log_mixture, log_null_max


@pytest.fixture
def settings(tmp_path: Path) -> GatewaySettings:
    return GatewaySettings(admin_token="t", state_dir=tmp_path / "state")


async def _registry_with_candidate(settings: GatewaySettings, tmp_path: Path) -> tuple[Registry, FakeVLLM]:
    """policy-v1 serving, policy-v2 loaded (the candidate)."""
    fake = FakeVLLM()
    reg = await Registry(settings, fake).ready()
    await reg.load(str(write_adapter(tmp_path / "a1")))
    await reg.promote("policy-v1")
    await reg.load(str(write_adapter(tmp_path / "a2")))
    await reg.wait_drained()
    return reg, fake


def _served(reg: Registry, session: str | None = None, model: str = "policy") -> str:
    lease = reg.acquire(model, session)
    assert lease is not None
    lease.release()
    return lease.version


# ---- the exact test ----------------------------------------------------------------------------------
@pytest.mark.parametrize(("x1", "n1", "x2", "n2", "p"), [
    (9, 10, 1, 10, 101 / 184756),  # [C(10,9)C(10,1) + C(10,10)C(10,0)] / C(20,10)
    (0, 0, 3, 5, 1.0), (3, 5, 0, 0, 1.0),  # an empty side proves nothing
    (0, 10, 10, 10, 1.0),  # the candidate lost everything: certainly not better
])
def test_fisher_tail_is_the_exact_hypergeometric(x1: int, n1: int, x2: int, n2: int, p: float) -> None:
    assert fisher_p(x1, n1, x2, n2) == pytest.approx(p, rel=1e-12)


def test_fisher_agrees_with_scipy_where_installed() -> None:
    stats = pytest.importorskip("scipy.stats")
    for x1, n1, x2, n2 in [(27, 30, 10, 30), (5, 30, 20, 30), (40, 100, 35, 100), (300, 400, 280, 400), (1, 3, 2, 50)]:
        ref = stats.fisher_exact([[x1, n1 - x1], [x2, n2 - x2]], alternative="greater").pvalue
        assert fisher_p(x1, n1, x2, n2) == pytest.approx(ref, rel=1e-9)


def test_fisher_refuses_impossible_counts() -> None:
    with pytest.raises(ValueError, match="within 0..n"):
        fisher_p(11, 10, 0, 10)


# ---- the split ---------------------------------------------------------------------------------------
async def test_a_session_stays_on_one_version(settings: GatewaySettings, tmp_path: Path) -> None:
    reg, _ = await _registry_with_candidate(settings, tmp_path)
    await reg.start_canary("policy-v2", 0.5)
    for s in (f"session-{i}" for i in range(50)):
        assert len({_served(reg, s) for _ in range(8)}) == 1


async def test_sessions_split_in_the_asked_fraction(settings: GatewaySettings, tmp_path: Path) -> None:
    reg, _ = await _registry_with_candidate(settings, tmp_path)
    await reg.start_canary("policy-v2", 0.1)
    share = sum(_served(reg, f"s{i}") == "policy-v2" for i in range(20_000)) / 20_000
    assert 0.09 < share < 0.11  # 10% +- 7 standard errors
    info = reg.canary_view().canary
    assert info is not None and info.routed_candidate + info.routed_serving == 20_000


async def test_requests_without_a_session_are_drawn_at_random(settings: GatewaySettings, tmp_path: Path) -> None:
    reg, _ = await _registry_with_candidate(settings, tmp_path)
    await reg.start_canary("policy-v2", 0.3)
    random.seed(7)
    share = sum(_served(reg) == "policy-v2" for _ in range(5000)) / 5000
    assert 0.26 < share < 0.34


async def test_a_named_version_is_never_split(settings: GatewaySettings, tmp_path: Path) -> None:
    reg, _ = await _registry_with_candidate(settings, tmp_path)
    await reg.start_canary("policy-v2", 0.9)
    assert {_served(reg, f"s{i}", model="policy-v1") for i in range(200)} == {"policy-v1"}


async def test_without_a_canary_the_alias_serves_only_the_serving_version(settings: GatewaySettings,
                                                                          tmp_path: Path) -> None:
    reg, _ = await _registry_with_candidate(settings, tmp_path)
    assert {_served(reg, f"s{i}") for i in range(200)} == {"policy-v1"}


# ---- starting a canary: what is refused --------------------------------------------------------------
@pytest.mark.parametrize(("version", "fraction", "error", "status", "match"), [
    ("policy-v9", 0.1, VersionNotFoundError, 404, "does not exist"),
    ("policy-v1", 0.1, CanaryError, 400, "already serves"),
    ("policy-v2", 0.0, CanaryError, 400, "strictly between 0 and 1"),
    ("policy-v2", 1.0, CanaryError, 400, "strictly between 0 and 1"),
])
async def test_bad_canary_requests_are_refused(settings: GatewaySettings, tmp_path: Path, version: str, fraction: float,
                                               error: type[ServerError], status: int, match: str) -> None:
    reg, _ = await _registry_with_candidate(settings, tmp_path)
    with pytest.raises(error, match=match) as e:
        await reg.start_canary(version, fraction)
    assert e.value.http_status == status and reg.canary is None


async def test_an_unloaded_version_cannot_be_a_canary(settings: GatewaySettings, tmp_path: Path) -> None:
    reg, fake = await _registry_with_candidate(settings, tmp_path)
    await reg.promote("policy-v2")
    await reg.wait_drained()  # policy-v1 is unloaded now
    with pytest.raises(CanaryError, match="not loaded"):
        await reg.start_canary("policy-v1", 0.1)


async def test_a_second_canary_waits_for_the_first(settings: GatewaySettings, tmp_path: Path) -> None:
    reg, _ = await _registry_with_candidate(settings, tmp_path)
    await reg.load(str(write_adapter(tmp_path / "a3")))
    await reg.start_canary("policy-v2", 0.1)
    with pytest.raises(CanaryError, match="DELETE /admin/canary") as e:
        await reg.start_canary("policy-v3", 0.1)
    assert e.value.http_status == 409
    view = await reg.start_canary("policy-v2", 0.25)  # the same candidate: only the fraction changes
    assert view.canary is not None and view.canary.fraction == 0.25


# ---- ending a canary ---------------------------------------------------------------------------------
async def test_a_dropped_candidate_is_unloaded_after_its_last_request(settings: GatewaySettings, tmp_path: Path) -> None:
    reg, fake = await _registry_with_candidate(settings, tmp_path)
    await reg.start_canary("policy-v2", 0.5)
    held = reg.acquire("policy-v2")
    assert held is not None
    view = await reg.stop_canary()
    assert view.canary is None and view.decisions[-1].canary == "drop"
    assert {_served(reg, f"s{i}") for i in range(100)} == {"policy-v1"}
    await asyncio.sleep(0)
    assert "policy-v2" in fake.loaded  # still answering the held request
    held.release()
    await reg.wait_drained()
    assert "policy-v2" not in fake.loaded and reg.versions["policy-v2"].state == "unloaded"


async def test_decisions_are_recorded_with_their_figures_and_acted_on(settings: GatewaySettings, tmp_path: Path) -> None:
    reg, _ = await _registry_with_candidate(settings, tmp_path)
    await reg.start_canary("policy-v2", 0.5)
    for i in range(10):
        _served(reg, f"s{i}")
    view, swap = await reg.decide_canary(CanaryDecisionRequest(
        version="policy-v2", decision="promote", reason="better", figures={"p_better": 0.001, "candidate_n": 40}))
    assert swap is not None and (swap.serving, swap.previous) == ("policy-v2", "policy-v1")
    assert view.canary is None and reg.serving == "policy-v2"
    last = view.decisions[-1]
    assert (last.canary, last.version, last.previous, last.detail) == ("promote", "policy-v2", "policy-v1", "better")
    assert last.figures is not None and last.figures["p_better"] == 0.001
    assert last.figures["routed_candidate"] + last.figures["routed_serving"] == 10  # type: ignore[operator]
    # the watch's rollback: allowed while the promoted version serves, refused once the state moved on
    view, swap = await reg.decide_canary(CanaryDecisionRequest(version="policy-v2", decision="rollback", reason="fell"))
    assert reg.serving == "policy-v1" and view.decisions[-1].canary == "rollback"
    with pytest.raises(CanaryError, match="stale"):
        await reg.decide_canary(CanaryDecisionRequest(version="policy-v2", decision="rollback", reason="again"))


async def test_a_decision_about_another_canary_is_refused(settings: GatewaySettings, tmp_path: Path) -> None:
    reg, _ = await _registry_with_candidate(settings, tmp_path)
    with pytest.raises(CanaryError, match="no canary is running"):
        await reg.decide_canary(CanaryDecisionRequest(version="policy-v2", decision="drop", reason="x"))
    assert reg.serving == "policy-v1"


async def test_a_manual_promotion_ends_the_canary(settings: GatewaySettings, tmp_path: Path) -> None:
    reg, _ = await _registry_with_candidate(settings, tmp_path)
    await reg.load(str(write_adapter(tmp_path / "a3")))
    await reg.start_canary("policy-v2", 0.5)
    await reg.promote("policy-v3")
    assert reg.canary is None
    assert [h.canary for h in reg.canary_view().decisions] == ["start", "end"]


async def test_canary_events_survive_a_restart(settings: GatewaySettings, tmp_path: Path) -> None:
    reg, fake = await _registry_with_candidate(settings, tmp_path)
    await reg.start_canary("policy-v2", 0.2)
    await reg.stop_canary("enough")
    again = await Registry(settings, fake).ready()
    assert [(h.canary, h.detail) for h in again.canary_view().decisions][-1] == ("drop", "enough")
    assert again.canary is None


async def test_a_running_canary_is_resumed_after_a_restart(settings: GatewaySettings, tmp_path: Path) -> None:
    reg, fake = await _registry_with_candidate(settings, tmp_path)
    view = await reg.start_canary("policy-v2", 0.3)
    assert view.canary is not None
    for i in range(40):
        _served(reg, f"s{i}")
    await reg.start_canary("policy-v2", 0.25)  # a change of fraction is saved (with the counts so far)
    fresh = FakeVLLM()  # vLLM restarted too: only the base is loaded
    again = await Registry(settings, fresh).ready()
    assert again.canary is not None and again.canary.version == "policy-v2" and again.canary.fraction == 0.25
    assert again.canary.started_at == view.canary.started_at
    assert again.canary.routed_candidate + again.canary.routed_serving == 40
    assert fresh.loaded.get("policy-v2") is not None  # the candidate was re-loaded
    assert again.canary_view().decisions[-1].canary == "resume"
    assert {_served(again, f"s{i}") for i in range(200)} == {"policy-v1", "policy-v2"}
    assert _served(again, "s7") == _served(reg, "s7")  # a session stays on its version across the restart


async def test_a_canary_that_cannot_be_resumed_ends_with_the_reason(settings: GatewaySettings, tmp_path: Path) -> None:
    reg, _ = await _registry_with_candidate(settings, tmp_path)
    await reg.start_canary("policy-v2", 0.3)
    fresh = FakeVLLM()
    fresh.refuse.add("policy-v2")  # its adapter no longer loads
    again = await Registry(settings, fresh).ready()
    assert again.canary is None and again.serving == "policy-v1"
    last = again.canary_view().decisions[-1]
    assert last.canary == "end" and last.version == "policy-v2" and "could not be re-loaded" in (last.detail or "")
    third = await Registry(settings, FakeVLLM()).ready()  # the end was saved: nothing to resume any more
    assert third.canary is None and third.canary_view().decisions[-1].canary == "end"


# ---- the decision rules ------------------------------------------------------------------------------
def _sig(version: str, x: int, n: int) -> LiveSignal:
    return LiveSignal(version, "success", x, n)


@pytest.mark.parametrize(("cand", "serv", "decision"), [
    ((29, 29), (2, 29), "wait"),  # below min_samples on one side: however clear, wait
    ((27, 30), (10, 30), "promote"),
    ((5, 30), (20, 30), "drop"),
    ((16, 30), (15, 30), "wait"),  # a one-point wobble: keep looking
    ((205, 400), (200, 400), "drop"),  # still undecided at max_samples: not shown better live
    ((205, 399), (2000, 4000), "wait"),  # the smaller side decides when max_samples is reached
])
def test_canary_rule(cand: tuple[int, int], serv: tuple[int, int], decision: str) -> None:
    """Mutants: promote and drop swapped; min_samples ignored; a small difference decides; max_samples
    ignored, or judged on the larger side (a 10% canary would stop when the serving side reaches 400)."""
    v = judge_canary(_sig("policy-v2", *cand), _sig("policy-v1", *serv), CanaryConfig())
    assert v.decision == decision
    if min(cand[1], serv[1]) >= 30:
        assert {"e_better", "e_worse", "p_better", "p_worse", "candidate_n", "serving_n"} <= set(v.figures)


@pytest.mark.parametrize(("alpha", "decision"), [(0.05, "wait"), (0.1, "promote")])
def test_the_canary_decides_when_the_e_value_reaches_one_over_alpha(alpha: float, decision: str) -> None:
    """24/30 vs 12/30 has E(better) = 13.9: below 1/0.05 = 20, above 1/0.1 = 10. Mutants: the threshold is
    alpha (or log alpha) instead of 1/alpha (it would promote at any evidence, even E < 1); the threshold is
    2/alpha (a two-sided correction the one-sided question does not need)."""
    v = judge_canary(_sig("policy-v2", 24, 30), _sig("policy-v1", 12, 30), CanaryConfig(alpha=alpha))
    assert 10 < v.figures["e_better"] < 20
    assert v.decision == decision


def test_canary_figures_are_the_always_valid_e_values() -> None:
    """Mutants: the figures still carry the repeated Fisher p-value; `p_better` is not 1/E (the anytime-valid
    p-value readers compare with alpha, as tests/test_canary_stack.py does); `e_worse` is computed with the
    sides in the same order as `e_better`."""
    v = judge_canary(_sig("policy-v2", 27, 30), _sig("policy-v1", 10, 30))
    better, worse = log_e_greater(27, 30, 10, 30), log_e_greater(10, 30, 27, 30)
    assert v.figures["e_better"] == pytest.approx(math.exp(better), rel=1e-12) and v.figures["e_better"] > 1000
    assert v.figures["p_better"] == pytest.approx(1 / v.figures["e_better"], rel=1e-12)
    assert v.figures["p_better"] != fisher_p(27, 30, 10, 30)
    assert v.figures["e_worse"] == pytest.approx(math.exp(worse), rel=1e-12) and v.figures["e_worse"] < 1
    assert v.figures["p_worse"] == 1.0 and v.figures["threshold"] == pytest.approx(20)
    assert "E(better)=" in v.reason and "always-valid" in v.reason


def _exact_mixture(x1: int, n1: int, x2: int, n2: int) -> Fraction:
    """2 * the integral of a^x1 (1-a)^(n1-x1) b^x2 (1-b)^(n2-x2) over 0 < b < a < 1, by expanding the
    polynomials: an independent check of the closed form (beta functions times a hypergeometric tail)."""
    total = Fraction(0)
    for i in range(n2 - x2 + 1):  # (1-b)^(n2-x2) = sum C(n2-x2, i) (-b)^i; integral of b^(x2+i) over [0, a]
        inner = Fraction(math.comb(n2 - x2, i) * (-1) ** i, x2 + i + 1)  # times a^(x2+i+1)
        for j in range(n1 - x1 + 1):  # (1-a)^(n1-x1) = sum C(n1-x1, j) (-a)^j
            power = x1 + j + x2 + i + 1
            total += inner * math.comb(n1 - x1, j) * (-1) ** j * Fraction(1, power + 1)
    return 2 * total


@pytest.mark.parametrize("counts", [(1, 1, 0, 1), (0, 0, 0, 0), (3, 5, 1, 4), (0, 3, 2, 2), (6, 7, 6, 7)])
def test_the_mixture_is_the_integral_over_the_better_half(counts: tuple[int, int, int, int]) -> None:
    """Mutants: the prior is uniform on the whole square (no factor 2 P(A > B): half the evidence); P(A > B)
    with the sides swapped; the beta functions off by one count."""
    assert log_mixture(*counts) == pytest.approx(math.log(_exact_mixture(*counts)), abs=1e-12)
    assert log_mixture(1, 1, 0, 1) == pytest.approx(math.log(Fraction(5, 12)), abs=1e-15)  # by hand


def test_an_e_value_is_at_most_one_when_the_counts_favour_the_null() -> None:
    """Where the observed rates lie in the null (x1/n1 <= x2/n2 + margin), its likelihood maximum is the
    rates' own, and a prior of mass 1 cannot beat it. Mutant: the factor 2 of the half-square prior applied
    to the whole-square mixture (a prior of mass 2)."""
    for margin in (Fraction(0), Fraction(1, 10)):
        for n1, n2 in ((3, 4), (10, 10), (30, 7)):
            for x1 in range(n1 + 1):
                for x2 in range(n2 + 1):
                    if Fraction(x1, n1) <= Fraction(x2, n2) + margin:
                        assert log_e_greater(x1, n1, x2, n2, margin) <= 1e-12, (x1, n1, x2, n2, margin)


def test_the_null_maximum_on_the_margin_is_the_constrained_optimum() -> None:
    """Mutants: the bisection keeps the wrong half (it finds the minimum of the boundary, or an end of it);
    the margin is ignored (the pooled rate). Checked against a fine grid over the boundary p1 = p2 + 0.1."""
    x1, n1, x2, n2, m = 90, 100, 30, 60, 0.1
    grid = max(x1 * math.log(b + m) + (n1 - x1) * math.log(1 - b - m) + x2 * math.log(b)
               + (n2 - x2) * math.log(1 - b) for b in (k / 20000 * (1 - m) for k in range(1, 20000)))
    got = log_null_max(x1, n1, x2, n2, Fraction(1, 10))
    assert grid <= got <= grid + 1e-6
    assert got > log_null_max(x1, n1, x2, n2)  # a larger null: a larger maximum


def test_the_null_maximum_is_the_rates_own_where_they_lie_in_the_null() -> None:
    """3/10 against 6/10 satisfies p1 <= p2: the null's maximum is each side at its own rate. Mutant: the
    maximum always taken on the boundary p1 = p2 (the pooled rate), a smaller denominator than the composite
    null's supremum, so E is no longer below the martingale that Ville's inequality bounds."""
    own = 3 * math.log(0.3) + 7 * math.log(0.7) + 6 * math.log(0.6) + 4 * math.log(0.4)
    assert log_null_max(3, 10, 6, 10) == pytest.approx(own, abs=1e-12)
    pooled = 9 * math.log(0.45) + 11 * math.log(0.55)  # 6/10 against 3/10: on the boundary, at 9/20
    assert log_null_max(6, 10, 3, 10) == pytest.approx(pooled, abs=1e-12)


@pytest.mark.parametrize(("reference", "live", "decision"), [
    ((80, 100), (0, 10), "wait"),  # below the watch's min_samples (30): however low, wait
    ((80, 100), (15, 40), "rollback"),  # 38% against 80%: fell by far more than the tolerance, E = 27
    ((80, 100), (20, 40), "wait"),  # 50%: below 80% - 10 points, but not yet shown (E = 0.5)
    ((80, 100), (30, 40), "wait"),  # 75%: within the tolerance
    ((4000, 5000), (1500, 2000), "wait"),  # 75% vs 80%, sure to be lower, but by less than the tolerance
    ((0, 0), (0, 40), "wait"),  # nothing to compare with
])
def test_watch_rule(reference: tuple[int, int], live: tuple[int, int], decision: str) -> None:
    """Tolerance 0.10, alpha 0.05. Mutants: min_samples ignored; the old point rule (live rate below
    reference - tolerance rolls back, without evidence); the tolerance ignored (75% of 2000 against 80% of
    5000 is a fall with E = 22, but one within the tolerance); a reference without episodes compared anyway."""
    v = judge_watch(_sig("policy-v2", *live), _sig("policy-v1", *reference), CanaryConfig())
    assert v.decision == decision
    assert v.figures["reference"] == "policy-v1" and v.figures["reference_n"] == reference[1]
    assert ("e_fell" in v.figures) == (reference[1] > 0 and live[1] >= 30)  # judged only with both windows


def test_the_watch_tolerance_is_exact() -> None:
    """21/30 is exactly 10 points below 24/30. Mutant: the floor compared in floats (0.8 - 0.1 is
    0.7000000000000001, so 21/30 = 0.7 counted as below), or the tolerance taken as the binary float
    just above 1/10."""
    assert exact_margin(0.1) == Fraction(1, 10) and exact_margin(0.05) == Fraction(1, 20)
    v = judge_watch(_sig("policy-v2", 21, 30), _sig("policy-v1", 24, 30), CanaryConfig())
    assert v.figures["within_tolerance"] is True and v.figures["e_fell"] <= 1 and v.decision == "wait"
    below = judge_watch(_sig("policy-v2", 20, 30), _sig("policy-v1", 24, 30), CanaryConfig())
    assert below.figures["within_tolerance"] is False


class _History:
    def __init__(self, *events: SimpleNamespace) -> None:
        self.history = list(events)


class _Admin:
    """The admin calls the watch makes, over a fixed state; decisions are recorded."""

    def __init__(self, serving: str, *history: SimpleNamespace) -> None:
        self.view = SimpleNamespace(canary=None, serving=serving)
        self.events = _History(*history)
        self.decided: list[tuple[str, str]] = []

    def canary(self) -> SimpleNamespace:
        return self.view

    def versions(self) -> _History:
        return self.events

    def decide_canary(self, version: str, decision: str, reason: str, figures: dict[str, object]) -> None:
        self.decided.append((version, decision))

    def close(self) -> None:
        pass


class _Store:
    """`window_stats` from a table (version, since, until) -> (successes, episodes); every call recorded."""

    def __init__(self, table: dict[tuple[str, datetime, datetime | None], tuple[int, int]]) -> None:
        self.table = table
        self.calls: list[tuple[str, datetime, datetime | None]] = []

    def window_stats(self, *, app: str | None, served_version: str, since: datetime,
                     until: datetime | None = None) -> WindowStats:
        self.calls.append((served_version, since, until))
        x, n = self.table.get((served_version, since, until), (0, 0))
        return WindowStats(total=n, scored=n, with_outcome=n, successes=x, with_feedback=0, mean_feedback=None)

    def close(self) -> None:
        pass


def test_the_watch_compares_the_promotion_with_the_replaced_version_before_it(tmp_path: Path) -> None:
    """Mutants: the reference is the promoted version itself (its canary, selected for looking good); the
    reference window overlaps the live one (no `until`); the live window starts before the promotion."""
    from trainer._canary import CanaryWatch

    t0 = datetime(2026, 1, 1, 12, tzinfo=timezone.utc)
    flip = SimpleNamespace(action="promote", version="policy-v2", previous="policy-v1", at=t0)
    admin = _Admin("policy-v2", flip)
    store = _Store({("policy-v2", t0, None): (5, 40), ("policy-v1", t0 - timedelta(hours=1), t0): (160, 200),
                    ("policy-v2", t0 - timedelta(hours=1), t0): (40, 40)})
    watch = CanaryWatch("sqlite://", lambda: cast(Any, admin), runs_dir=tmp_path, now=lambda: t0 + timedelta(minutes=10))
    watch._store = cast(Any, store)
    verdict = watch.tick()
    assert verdict is not None and verdict.decision == "rollback" and admin.decided == [("policy-v2", "rollback")]
    assert sorted(store.calls, key=str) == sorted([("policy-v2", t0, None), ("policy-v1", t0 - timedelta(hours=1), t0)],
                                                  key=str)
    assert (verdict.figures["reference"], verdict.figures["reference_n"], verdict.figures["live_n"]) == ("policy-v1", 200, 40)
    assert verdict.figures["gate_success"] is None  # no run measured it: shown when there is one, never decided on


def test_the_watch_ends_with_its_window_and_needs_a_version_to_restore(tmp_path: Path) -> None:
    """Mutants: the watch runs on after `window_s`; a promotion with nothing before it is judged anyway."""
    from trainer._canary import CanaryWatch

    t0 = datetime(2026, 1, 1, 12, tzinfo=timezone.utc)
    late = CanaryWatch("sqlite://", lambda: cast(Any, _Admin("policy-v2", SimpleNamespace(
        action="promote", version="policy-v2", previous="policy-v1", at=t0))), runs_dir=tmp_path,
        now=lambda: t0 + timedelta(hours=2))
    late._store = cast(Any, _Store({}))
    assert late.tick() is None
    first = CanaryWatch("sqlite://", lambda: cast(Any, _Admin("policy-v1", SimpleNamespace(
        action="promote", version="policy-v1", previous=None, at=t0))), runs_dir=tmp_path,
        now=lambda: t0 + timedelta(minutes=1))
    first._store = cast(Any, _Store({}))
    assert first.tick() is None


def test_live_signal_falls_back_to_ratings_on_both_sides() -> None:
    with_outcomes = WindowStats(total=10, scored=10, with_outcome=10, successes=7, with_feedback=0, mean_feedback=None)
    rated_only = WindowStats(total=10, scored=10, with_outcome=0, successes=0, with_feedback=10, mean_feedback=0.5)
    a, b = live_signals(("v2", with_outcomes), ("v1", rated_only))
    assert (a.signal, b.signal) == ("feedback", "feedback")
    assert (a.n, b.successes, b.n) == (0, 8, 10)  # ratings mean 0.5 -> 75% of 10 -> 8 (rounded)
    [c] = live_signals(("v2", with_outcomes))
    assert (c.signal, c.successes, c.n) == ("success", 7, 10)


def test_bad_canary_config_is_one_line() -> None:
    from trainer import ConfigError

    with pytest.raises(ConfigError, match="min_samples <= max_samples"):
        CanaryConfig(min_samples=50, max_samples=10)


# ---- edges found by mutation testing (scripts/mutation.sh canary) --------------------------------------------
@pytest.mark.parametrize("kwargs", [{"alpha": 0.0}, {"alpha": 1.0}, {"poll_s": 0.0}, {"min_samples": 0}])
def test_canary_config_refuses_its_bounds(kwargs: dict[str, Any]) -> None:
    """Mutants (mutmut trainer._canary.xǁCanaryConfigǁ__post_init____mutmut_3/4/5/10): alpha 0 or 1 accepted
    (an e-value threshold of infinity or 1: never decides, or decides on no evidence); poll_s 0 accepted."""
    from trainer import ConfigError

    with pytest.raises(ConfigError):
        CanaryConfig(**kwargs)


@pytest.mark.parametrize("kwargs", [{"window_s": -1.0}, {"tolerance": 1.0}, {"min_samples": 0}])
def test_watch_config_refuses_its_bounds(kwargs: dict[str, Any]) -> None:
    """Mutants (mutmut trainer._canary.xǁWatchConfigǁ__post_init____mutmut_1/2/10/11): `and` for `or` between
    the checks, a tolerance of 1 (or up to 2) accepted: a margin the null never leaves, no rollback ever."""
    from trainer import ConfigError
    from trainer._canary import WatchConfig

    with pytest.raises(ConfigError):
        WatchConfig(**kwargs)


def test_the_configs_accept_their_edges() -> None:
    """Mutants (mutmut trainer._canary.xǁCanaryConfigǁ__post_init____mutmut_7/8/9/11,
    xǁWatchConfigǁ__post_init____mutmut_3/4/5/6/9): min_samples 1, min_samples == max_samples, poll_s below 1,
    window_s 0 and tolerance 0 refused although valid."""
    from trainer._canary import WatchConfig

    CanaryConfig(alpha=0.5, min_samples=1, max_samples=1, poll_s=0.5)
    WatchConfig(window_s=0.0, min_samples=1, tolerance=0.0)
    WatchConfig(window_s=0.5, min_samples=1, tolerance=0.5)


def test_every_verdict_names_its_version_reason_and_figures() -> None:
    """Mutants (mutmut trainer._canary.x_judge_canary__mutmut_10/39/50/61/71, x_judge_watch__mutmut_24/35/58/68):
    a verdict for version None (the gateway would act on no version); (x_judge_canary__mutmut_11/12/15/16/51/62/72,
    x_judge_watch__mutmut_25/36/59/69) a verdict without its reason or its figures (the decision history's record)."""
    for cand, serv in [((29, 29), (2, 29)), ((27, 30), (10, 30)), ((5, 30), (20, 30)), ((16, 30), (15, 30)),
                       ((205, 400), (200, 400))]:
        v = judge_canary(_sig("policy-v2", *cand), _sig("policy-v1", *serv), CanaryConfig())
        assert v.version == "policy-v2" and isinstance(v.reason, str) and "live success" in v.reason
        assert v.figures["candidate_n"] == cand[1] and v.figures["serving_n"] == serv[1]
    for ref, live in [((0, 0), (0, 40)), ((80, 100), (0, 10)), ((80, 100), (15, 40)), ((80, 100), (30, 40))]:
        v = judge_watch(_sig("policy-v2", *live), _sig("policy-v1", *ref), CanaryConfig())
        assert v.version == "policy-v2" and isinstance(v.reason, str) and "since the promotion" in v.reason
        assert v.figures["live_n"] == live[1] and v.figures["reference_n"] == ref[1]


def test_the_watch_waits_without_live_episodes() -> None:
    """Mutant (mutmut trainer._canary.x_judge_watch__mutmut_10): `live.n == 1` for `live.n == 0` in the
    tolerance check, which then divides 0 by 0 right after a promotion."""
    v = judge_watch(_sig("policy-v2", 0, 0), _sig("policy-v1", 24, 30), CanaryConfig())
    assert v.decision == "wait" and v.figures["within_tolerance"] is True


def test_a_side_without_ratings_has_no_episodes_of_its_version() -> None:
    """Mutants (mutmut trainer._canary.x_live_signals__mutmut_23/43): the feedback signal's version dropped,
    a side without ratings counted as 1 success of 0 episodes."""
    no_ratings = WindowStats(total=10, scored=10, with_outcome=10, successes=7, with_feedback=0, mean_feedback=None)
    rated = WindowStats(total=10, scored=10, with_outcome=0, successes=0, with_feedback=10, mean_feedback=0.5)
    a, b = live_signals(("v2", no_ratings), ("v1", rated))
    assert (a.version, a.successes, a.n) == ("v2", 0, 0) and b.version == "v1"


def test_the_sequential_helpers_at_their_edges() -> None:
    """Mutants (mutmut trainer._sequential.): x_log_threshold__mutmut_3/4/5 (alpha 0 or 1 accepted),
    x_log_null_max__mutmut_15/16 (margin 1 accepted), x_log_null_max__mutmut_18/20/22 (`and` for `or`, 1 for 0
    in the empty-side checks), x_log_mixture__mutmut_24/26 (an underflowed tail: log(0) raises, or +inf: certain
    "better" from data that say "worse"), x_e_figure__mutmut_2/8/9/11, x_p_figure__mutmut_5,
    x__loglik_max__mutmut_2/10, x__loglik__mutmut_6/9/11/16/21/22/23 (0 log 0 = 0, -inf for an impossible count)."""
    from trainer._sequential import _loglik, _loglik_max, e_figure, log_threshold, p_figure

    for alpha in (0.0, 1.0):
        with pytest.raises(ValueError, match="alpha"):
            log_threshold(alpha)
    with pytest.raises(ValueError, match="margin"):
        log_null_max(1, 2, 1, 2, margin=1)
    assert log_null_max(0, 0, 3, 5) == pytest.approx(_loglik_max(3, 5))
    assert log_null_max(1, 1, 0, 1) == pytest.approx(2 * math.log(0.5))  # pooled: 1 of 2 at p = 1/2
    assert log_mixture(0, 2000, 2000, 2000) == -math.inf
    assert e_figure(-math.inf) == 0.0 and e_figure(1000.0) == math.exp(690.0)
    assert p_figure(0.5) == math.exp(-0.5) and p_figure(0.0) == 1.0
    assert _loglik_max(0, 0) == 0.0
    assert _loglik(3, 10, 0.3) == pytest.approx(3 * math.log(0.3) + 7 * math.log(0.7))
    assert _loglik(1, 1, 0.0) == -math.inf and _loglik(0, 1, 1.0) == -math.inf and _loglik(1, 2, 1.0) == -math.inf


def test_canary_settings_come_from_looplift_toml_then_flags(tmp_path: Path) -> None:
    from trainer import ConfigError, canary_config, load_config

    path = tmp_path / "looplift.toml"
    path.write_text('[canary]\nalpha = 0.01\nmin_samples = 50\nwatch = "2h"\nwatch_tolerance = 0.05\n')
    cfg = canary_config(load_config(path), min_samples=60)
    assert (cfg.alpha, cfg.min_samples, cfg.max_samples) == (0.01, 60, 400)
    assert (cfg.watch.window_s, cfg.watch.tolerance, cfg.watch.min_samples) == (7200.0, 0.05, 30)
    path.write_text("[canary]\nminimum = 3\n")
    with pytest.raises(ConfigError, match=r"unknown key\(s\) \[canary\].minimum"):
        load_config(path)


@pytest.mark.slow
def test_a_job_with_canary_set_starts_a_canary_instead_of_promoting(tmp_path: Path, db_url: str) -> None:
    from _jobsteps import FakeGateway, add_trajectories, plus_one_suite, quick_step

    from trainer import JobConfig, list_runs, run_job

    add_trajectories(db_url, 12)
    job = JobConfig(base_model_dir=tmp_path / "base", collector_db=db_url, app="shop", runs_dir=tmp_path / "runs",
                    canary=0.2)
    gw = FakeGateway({"policy-v0": set(range(10))})
    gw.next_skill = set(range(40))
    res = run_job(job, suite=plus_one_suite(40), train_step=quick_step, admin=gw.admin(), chat_client=gw.chat())
    assert res.status == "canary" and gw.canaries == [("policy-v1", 0.2)]
    assert gw.serving == "policy-v0" and gw.promoted == []  # the watch decides, not the job
    assert "canary at 20%" in res.reason and res.candidate_success == 1.0
    assert list_runs(tmp_path / "runs")[-1]["status"] == "canary"


async def test_the_sdk_sends_one_session_per_episode() -> None:
    """The gateway's canary keeps an episode on one version only if every turn carries the same session."""
    import json

    import httpx
    import openai

    import sdk
    from sdk import StepResult, Task

    sessions: list[tuple[str, str]] = []

    def handler(request: httpx.Request) -> httpx.Response:
        body = json.loads(request.content)
        sessions.append((body["messages"][0]["content"], request.headers["x-looplift-session"]))
        done = sum(m["role"] == "assistant" for m in body["messages"]) >= 1
        return httpx.Response(200, json={
            "id": "x", "object": "chat.completion", "created": 0, "model": "policy-v2",
            "choices": [{"index": 0, "finish_reason": "stop", "message": {"role": "assistant",
                                                                          "content": "done" if done else "more"}}]})

    class TwoTurns:
        def reset(self, task: Task) -> str:
            return task.prompt

        def step(self, action: str) -> StepResult:
            return StepResult(observation="ok", reward=1.0, done=action == "done")

    client = openai.AsyncOpenAI(base_url="http://127.0.0.1:9/v1", api_key="k",
                                http_client=httpx.AsyncClient(transport=httpx.MockTransport(handler)))
    trajs = await sdk.arun([Task(id="a", prompt="pa"), Task(id="b", prompt="pb")], TwoTurns, client=client)
    by_prompt = {p: {s for q, s in sessions if q == p} for p in ("pa", "pb")}
    assert len(sessions) == 4 and {len(v) for v in by_prompt.values()} == {1}
    assert by_prompt["pa"] == {trajs[0].id} and by_prompt["pb"] == {trajs[1].id}
