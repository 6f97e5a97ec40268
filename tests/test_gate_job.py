"""The gate's bookkeeping without vLLM: errored eval episodes re-run with their seed and, still erroring,
recorded (never failures) and never cached; the per-app alpha-spending ledger across runs and restarts;
and the retrain job recording the report split's figures. The gateway is faked at its HTTP transport.

Each test's docstring names the broken variant ("mutant") it fails on."""

from __future__ import annotations

import asyncio
import json
import re
from pathlib import Path
from typing import Any

import httpx
import pytest
from _jobsteps import FakeGateway, add_trajectories, plus_one_suite, quick_step

from sdk import Message, Outcome, Trajectory, wire
from trainer import GateConfig, JobConfig, TrainerError, evaluate, gate, list_runs, run_job
from trainer import _eval_cache as eval_cache
from trainer._eval import EvalResult, episode_error
from trainer._gate import spending_level
from trainer._gate_ledger import GateLedger, ledger_path
from trainer._runs import measured_success


class FlakyGateway(FakeGateway):
    """A FakeGateway whose chat answers 503 for (version, task index) the next `fail[...]` times, and that
    records the sampling seed of every request; its client does not retry (the eval's retries are tested)."""

    def __init__(self, skill: dict[str, set[int]], **kw: Any) -> None:
        super().__init__(skill, **kw)
        self.fail: dict[tuple[str, int], int] = {}
        self.seeds: dict[tuple[str, int], list[int]] = {}
        self.asked: list[str] = []

    def _chat(self, request: httpx.Request) -> httpx.Response:
        body = json.loads(request.content)
        model = self.serving if body["model"] == "policy" else body["model"]
        m = re.search(r"What is (\d+)\+1\?", body["messages"][-1]["content"])
        i = int(m.group(1)) if m else -1
        self.asked.append(model)
        self.seeds.setdefault((model, i), []).append(body.get("seed"))
        if self.fail.get((model, i), 0) > 0:
            self.fail[(model, i)] -= 1
            return httpx.Response(503, json=wire.error_body(503, "the replica is restarting"))
        return super()._chat(request)

    def chat(self) -> Any:
        import openai

        return openai.AsyncOpenAI(base_url="http://gateway.test/v1", api_key="x", max_retries=0,
                                  http_client=httpx.AsyncClient(transport=httpx.MockTransport(self._chat)))


def _evaluate(gw: FlakyGateway, n: int = 10, retries: int = 2) -> EvalResult:
    return asyncio.run(evaluate("policy-v0", plus_one_suite(n), base_url="http://gateway.test/v1", client=gw.chat(),
                                retries=retries))


# ---- retries and errors in the evaluation -----------------------------------------------------------

def test_an_errored_episode_is_run_again_with_the_same_seed() -> None:
    """Mutants: no retry (a transient 503 blocks the gate), a retry with another seed (the pair with the other
    version's episode is no longer paired)."""
    gw = FlakyGateway({"policy-v0": set(range(10))})
    gw.fail = {("policy-v0", 3): 1, ("policy-v0", 5): 2}
    res = _evaluate(gw)
    assert res.errored == {} and res.outcomes == {f"q{i}": True for i in range(10)} and res.retried == 3
    assert len(gw.seeds[("policy-v0", 5)]) == 3 and len(set(gw.seeds[("policy-v0", 5)])) == 1
    assert gw.seeds[("policy-v0", 5)][0] is not None and gw.seeds[("policy-v0", 3)][0] != gw.seeds[("policy-v0", 5)][0]


def test_an_episode_that_keeps_erroring_is_recorded_not_failed() -> None:
    """Mutant: errors counted as failures (q3 would be a failed task and the success 90%)."""
    gw = FlakyGateway({"policy-v0": set(range(10))})
    gw.fail = {("policy-v0", 3): 99}
    res = _evaluate(gw, retries=2)
    assert "q3" not in res.outcomes and res.n == 9 and res.success == 1.0
    assert res.errors == 1 and res.errored["q3"].startswith("generation_error: ") and "restarting" in res.errored["q3"]
    assert len(gw.seeds[("policy-v0", 3)]) == 3  # 1 + 2 retries
    gw.seeds.clear()
    assert _evaluate(gw, retries=0).errored.keys() == {"q3"} and len(gw.seeds[("policy-v0", 3)]) == 1


def _traj(**kw: Any) -> Trajectory:
    return Trajectory(task_id="t", model="m", messages=[Message(role="user", content="hi")], **kw)


def test_what_counts_as_an_error_and_what_is_a_failure() -> None:
    """Mutant: a budget end or a wrong answer (the model's failure) treated as an error, which would let a bad
    candidate block every gate instead of being rejected."""
    tb = "Traceback (most recent call last):\n  File \"env.py\", line 3, in step\nRuntimeError: sandbox died\n"
    assert episode_error(_traj(end_reason="env_error", metadata={"env_error": tb})) == "env_error: RuntimeError: sandbox died"
    assert episode_error(_traj(end_reason="generation_error")) == "generation_error: no detail recorded"
    crashed = Outcome(success=False, reward=0.0, error="KeyError: 'answer'")
    assert episode_error(_traj(end_reason="done", outcome=crashed)) == "verifier: KeyError: 'answer'"
    for end in ("done", "max_steps", "max_tokens", "max_seconds"):
        assert episode_error(_traj(end_reason=end, outcome=Outcome(success=False, reward=0.0))) is None


def test_an_evaluation_with_errors_is_never_cached_nor_reused(tmp_path: Path) -> None:
    """Mutant: a cached serving evaluation with errors reused (its errors would block, or its crashes count
    in, every later gate against that version)."""
    suite = plus_one_suite(4)
    key = eval_cache.cache_key("policy-v0", "base:/m", suite, 0)
    bad = EvalResult("policy-v0", suite.name, {"q0": True}, errored={"q1": "env_error: boom"})
    assert eval_cache.save(tmp_path, key, bad) is False and eval_cache.load(tmp_path, key) is None
    assert not (tmp_path / eval_cache.DIR).exists()
    # An entry written before the rule (an error count, outcomes holding the crashes as failures): not reused.
    (tmp_path / eval_cache.DIR).mkdir()
    (tmp_path / eval_cache.DIR / f"{key}.json").write_text(json.dumps(
        {"version": "policy-v0", "suite": suite.name, "outcomes": {"q0": True, "q1": False}, "slices": {},
         "errors": 1, "seed": 0}))
    assert eval_cache.load(tmp_path, key) is None
    good = EvalResult("policy-v0", suite.name, {"q0": True, "q1": False})
    assert eval_cache.save(tmp_path, key, good) and eval_cache.load(tmp_path, key) == good


# ---- the ledger -----------------------------------------------------------------------------------

def _tested(k: int) -> Any:
    """A decision that ran its test, as the app's k-th gate."""
    return gate({"t0": True}, {"t0": False}, k=k)


def test_the_ledger_counts_an_apps_gates_across_restarts(tmp_path: Path) -> None:
    """Mutants: the count kept in memory (a restarted scheduler would test at alpha_1 again), one count for
    every app, a gate recorded out of order."""
    runs = tmp_path / "runs"
    led = GateLedger(runs, "shop")
    with led.locked() as k:
        assert k == 1
        led.record(_tested(k), "run-1")
    again = GateLedger(runs, "shop")  # a new process
    with again.locked() as k:
        assert k == 2
        with pytest.raises(ValueError, match="recorded after gate 1"):
            again.record(_tested(3), "run-x")
        again.record(_tested(k), "run-2")
    data = json.loads(ledger_path(runs, "shop").read_text())
    assert data["gates"] == 2 and [h["run_id"] for h in data["history"]] == ["run-1", "run-2"]
    assert data["spent"] == pytest.approx(spending_level(0.05, 1) + spending_level(0.05, 2))
    assert GateLedger(runs, "other").gates() == 0 and GateLedger(runs, None).gates() == 0
    assert ledger_path(runs, "a/b") != ledger_path(runs, "a_b")  # names a file cannot hold apart stay apart
    assert list_runs(runs) == []  # the ledger is not a run


def test_a_gate_refused_before_testing_cannot_be_recorded(tmp_path: Path) -> None:
    """Mutant: alpha spent by a gate that never tested (errors), which would starve the app for nothing."""
    refused = gate({"t0": True}, {"t0": True}, serving_errors={"t1": "env_error: x"})
    with pytest.raises(ValueError, match="refused before testing"):
        GateLedger(tmp_path, "shop").record(refused, "run-1")


def test_an_unreadable_ledger_is_an_error_never_a_fresh_count(tmp_path: Path) -> None:
    """Mutant: an unreadable ledger read as zero gates (the app's alpha spent again from the start)."""
    path = ledger_path(tmp_path, "shop")
    path.parent.mkdir(parents=True)
    for text in ("{not json", json.dumps({"gates": -1, "history": []}), json.dumps([1])):
        path.write_text(text)
        with pytest.raises(TrainerError, match="cannot be read.*Restore it from a backup.*deleting it restarts"):
            GateLedger(tmp_path, "shop").gates()


# ---- the job ---------------------------------------------------------------------------------------

@pytest.fixture
def job(tmp_path: Path, db_url: str) -> JobConfig:
    add_trajectories(db_url, 12)
    return JobConfig(base_model_dir=tmp_path / "base", collector_db=db_url, app="shop", runs_dir=tmp_path / "runs")


def _run(job: JobConfig, gw: FakeGateway, n: int = 40) -> Any:
    return run_job(job, suite=plus_one_suite(n), train_step=quick_step, admin=gw.admin(), chat_client=gw.chat())


def test_each_retrain_of_an_app_is_its_next_gate(job: JobConfig, db_url: str) -> None:
    """Mutant: alpha not spent across runs (every run's gate at k = 1, so K retrains of equal candidates
    promote one with probability up to K x alpha)."""
    gw = FakeGateway({"policy-v0": set(range(20))})
    gw.next_skill = set(range(20))  # every candidate equals the serving version
    decided = []
    for r in range(3):
        if r:
            add_trajectories(db_url, 4, start=100 * r)  # new data: a new run
        decided.append(_run(job, gw))
    assert [d.status for d in decided] == ["rejected"] * 3
    assert [d.gate["k"] for d in decided] == [1, 2, 3]
    assert [d.gate["alpha_k"] for d in decided] == [spending_level(0.05, k) for k in (1, 2, 3)]
    assert GateLedger(Path(job.runs_dir), "shop").gates() == 3  # type: ignore[arg-type]
    assert [r["run_id"] for r in list_runs(Path(job.runs_dir))] == [d.run_id for d in decided]  # type: ignore[arg-type]


def test_a_promotion_records_the_report_split_as_its_held_out_figure(job: JobConfig) -> None:
    """Mutant: the held-out figure reported for the promoted version taken from the split that selected it.
    The candidate solves every task; the serving version exactly the report tasks (q6-q9, q13, ...)."""
    from trainer._gate import in_report_split

    report = {i for i in range(40) if in_report_split(f"q{i}", GateConfig().report_fraction)}
    gw = FakeGateway({"policy-v0": report})
    gw.next_skill = set(range(40))
    res = _run(job, gw)
    assert res.status == "promoted" and res.gate["n"] + res.gate["n_report"] == 40
    assert (res.candidate_success, res.serving_success) == (1.0, 0.0)  # selection split: 27 wins, no loss
    assert (res.candidate_report_success, res.serving_report_success) == (1.0, 1.0)  # the report split: equal
    recorded = json.loads((Path(job.runs_dir) / res.run_id / "result.json").read_text())  # type: ignore[arg-type]
    assert recorded["candidate_report_success"] == 1.0 and recorded["gate"]["n_report"] == len(report)
    # What the canary watch and the drift trigger compare live success with: the report figure.
    assert measured_success(Path(job.runs_dir), "policy-v1") == (1.0, res.run_id)  # type: ignore[arg-type]
    assert measured_success(Path(job.runs_dir), "policy-v0") == (1.0, res.run_id)  # type: ignore[arg-type]


def test_serving_errors_fail_the_run_uncached_and_the_next_run_measures_again(job: JobConfig) -> None:
    """Mutants: errors counted as failures (the candidate would promote on the serving version's crashes),
    the refusal recorded as "rejected" (the same data would then be skipped forever), the serving
    evaluation with errors cached (every later gate would reuse it), alpha spent on a refusal."""
    gw = FlakyGateway({"policy-v0": set(range(10))})
    gw.next_skill = set(range(10))
    gw.fail = {("policy-v0", i): 99 for i in (0, 1, 2, 3, 4, 5)}  # q0-q5: the serving version's crashes
    first = _run(job, gw, n=10)
    assert first.status == "failed" and first.reason.startswith("gate could not decide: eval episodes still errored")
    assert "serving 6 task(s)" in first.reason and "q0: generation_error" in first.reason
    assert first.gate["errors"] == {"candidate": 0, "serving": 6} and first.gate["retried"]["serving"] == 12
    assert not first.gate["tested"] and GateLedger(Path(job.runs_dir), "shop").gates() == 0  # type: ignore[arg-type]
    assert gw.promoted == [] and gw.serving == "policy-v0"
    cached = list((Path(job.runs_dir) / eval_cache.DIR).glob("*.json"))  # type: ignore[arg-type]
    assert len(cached) == 1 and json.loads(cached[0].read_text())["version"] == "policy-v1"  # the clean one only
    # The replica is back; the same data is not "nothing new": the run is redone and measures policy-v0 again.
    gw.fail.clear()
    gw.asked.clear()
    second = _run(job, gw, n=10)
    assert second.status == "rejected" and second.gate["k"] == 1 and gw.asked.count("policy-v0") == 10
    assert (second.gate["b"], second.gate["c"]) == (0, 0)  # equal versions: the crashes were not failures


# ---- where the figure is read and configured ----------------------------------------------------------

def test_looplift_status_prints_the_report_split_figure() -> None:
    """Mutant: `looplift status` printing the selection split's figure (the one that promoted the version) as
    its held-out success. Old records (no report split) still show their only figure."""
    from looplift._status import StatusOptions, _Status, render

    st = _Status(StatusOptions("http://gw", "http://col", None, None, None, None))
    st.out["gateway"] = {"serving": "policy-v1"}
    new = {"run_id": "r2", "status": "promoted", "candidate": "policy-v1", "candidate_success": 1.0,
           "candidate_report_success": 0.9, "gate": {"n": 70, "n_report": 30, "b": 40, "c": 0, "p_value": 1e-12}}
    st.gate([new])
    assert st.out["gate"]["success"] == 0.9 and st.out["gate"]["n"] == 100 and st.out["gate"]["split"] == "report"
    assert any("90% held-out success on 30 report-split tasks (of 100)" in line for line in render(st.out))
    old = {k: v for k, v in new.items() if k != "candidate_report_success"} | {"gate": {"n": 100, "b": 54, "c": 0}}
    st.gate([old])
    assert st.out["gate"]["success"] == 1.0 and any("100% held-out success on 100 tasks" in ln for ln in render(st.out))


def test_looplift_toml_sets_the_split_and_the_retries(tmp_path: Path) -> None:
    from trainer import ConfigError, job_config, load_config

    path = tmp_path / "looplift.toml"
    path.write_text("[gate]\nreport_fraction = 0.5\nretries = 0\n")
    cfg = job_config(load_config(path), base_model=str(tmp_path))
    assert (cfg.gate.report_fraction, cfg.gate.retries, cfg.gate.alpha) == (0.5, 0, 0.05)
    path.write_text("[gate]\nreport_fraction = 1.0\n")
    with pytest.raises(ConfigError, match="report_fraction must be in"):
        job_config(load_config(path), base_model=str(tmp_path))
    path.write_text("[gate]\nretries = 1.5\n")
    with pytest.raises(ConfigError, match=r"\[gate\].retries must be int"):
        load_config(path)


def test_gateway_wait_comes_from_the_flag_then_the_file(tmp_path: Path) -> None:
    from trainer import ConfigError, job_config, load_config

    path = tmp_path / "looplift.toml"
    path.write_text("[trainer]\ngateway_wait = \"2m\"\n")
    assert job_config(load_config(path), base_model=str(tmp_path)).gateway_wait_s == 120.0
    assert job_config(load_config(path), base_model=str(tmp_path), gateway_wait="0").gateway_wait_s == 0.0
    path.write_text("")
    assert job_config(load_config(path), base_model=str(tmp_path)).gateway_wait_s == 180.0
    with pytest.raises(ConfigError, match="gateway_wait 'soon' is not a duration"):
        job_config(load_config(path), base_model=str(tmp_path), gateway_wait="soon")
