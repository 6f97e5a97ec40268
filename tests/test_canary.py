"""The canary without vLLM: the split in the registry (`server._registry` + `_canary`, driven through the
in-memory `FakeVLLM` of test_server_swap), the exact one-sided Fisher test, and the decision rules of the
trainer's canary watch (`trainer._canary.judge_canary` / `judge_watch`) on given counts. One property per
test; the whole loop on a real stack is tests/test_canary_stack.py."""

from __future__ import annotations

import asyncio
import random
from pathlib import Path

import pytest
from test_server_swap import FakeVLLM

from _adapters import write_adapter
from collector import WindowStats
from sdk import fisher_p
from server import CanaryError, GatewaySettings, ServerError, VersionNotFoundError
from server._models import CanaryDecisionRequest
from server._registry import Registry
from trainer._canary import CanaryConfig, LiveSignal, judge_canary, judge_watch, live_signals


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
])
def test_canary_rule(cand: tuple[int, int], serv: tuple[int, int], decision: str) -> None:
    v = judge_canary(_sig("policy-v2", *cand), _sig("policy-v1", *serv), CanaryConfig())
    assert v.decision == decision
    if decision != "wait" or cand[1] >= 30:
        assert {"p_better", "p_worse", "candidate_n", "serving_n"} <= set(v.figures)


def test_canary_promotion_figures_are_the_exact_test() -> None:
    v = judge_canary(_sig("policy-v2", 27, 30), _sig("policy-v1", 10, 30))
    assert v.figures["p_better"] == fisher_p(27, 30, 10, 30) and v.figures["p_better"] < 1e-4
    assert "p(better)=" in v.reason and "exact Fisher" in v.reason


@pytest.mark.parametrize(("x", "n", "decision"), [(10, 40, "rollback"), (29, 40, "wait"), (0, 10, "wait")])
def test_watch_rule(x: int, n: int, decision: str) -> None:
    # baseline 0.8 measured by the gate, tolerance 0.1: below 70% over >= 30 episodes rolls back
    assert judge_watch(_sig("policy-v2", x, n), 0.8, "the gate", CanaryConfig()).decision == decision


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
