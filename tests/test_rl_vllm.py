"""RL against the real vLLM CPU server (the session fixture, an untrained tiny model) behind a real gateway:
GRPO trains on exactly the ids vLLM returned over multi-turn episodes, the online loop publishes a new
version per update (sync and async), a rank the server refuses is a clear error, and `trainer run`
trains GRPO and DPO from the collector's export through the same gate and publish as SFT."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest
from transformers import AutoTokenizer

import sdk
from sdk import Budget, EvalSuite, Outcome, Sampling, StepResult, Task, Trajectory
from server import AdminClient, GatewayHandle
from trainer import (
    GRPOConfig,
    GRPOLearner,
    JobConfig,
    OnlineConfig,
    OnlineGRPO,
    PublishError,
    UniformSampler,
    episode_rows,
    groups_from_trajectories,
    list_runs,
    run_job,
)
from trainer.dpo import DPOConfig

pytestmark = [pytest.mark.vllm, pytest.mark.slow]
ADMIN = "rl-admin-token"


class EchoEnv:
    """Never done: every step answers `obs k`, so an episode has `max_steps` assistant turns."""

    def reset(self, task: Task) -> str:
        self.k = 0
        return task.prompt

    def step(self, action: str) -> StepResult:
        self.k += 1
        return StepResult(observation=f"obs {self.k}")


class HalfVerifier:
    """Rewards alternate per task (1, 0, 1, 0, ...), so every group of two or more carries signal."""

    def __init__(self) -> None:
        self.seen: dict[str, int] = {}

    def verify(self, task: Task, trajectory: Trajectory) -> Outcome:
        n = self.seen[task.id] = self.seen.get(task.id, 0) + 1
        return Outcome(success=n % 2 == 1, reward=float(n % 2 == 1))


class Keep(list):  # type: ignore[type-arg]
    """A collector stand-in that keeps what it is given (the loop only calls `submit`)."""

    def submit(self, t: Trajectory) -> None:
        self.append(t)


def _tasks(n: int) -> list[Task]:
    return [Task(id=f"echo-{i}", prompt=f"Say something about {i}") for i in range(n)]


def _suite(n: int) -> EvalSuite:
    return EvalSuite(name="echo", tasks=_tasks(n), env_factory=EchoEnv, verifier=HalfVerifier(),
                     budget=Budget(max_steps=2), sampling=Sampling(max_tokens=8, seed=0))


def _rollouts(gateway: GatewayHandle, n_tasks: int, group: int, max_steps: int) -> list[Trajectory]:
    tasks = [t for t in _tasks(n_tasks) for _ in range(group)]
    return sdk.run(tasks, EchoEnv, verifier=HalfVerifier(), base_url=gateway.url + "/v1", max_steps=max_steps,
                   sampling=sdk.Sampling(max_tokens=8), app="rl-test")


def test_grpo_trains_on_exactly_the_ids_vllm_returned(gateway: GatewayHandle, looplift_model_dir: Path) -> None:
    trajs = _rollouts(gateway, n_tasks=2, group=4, max_steps=3)
    tok = AutoTokenizer.from_pretrained(looplift_model_dir)
    retokenized_differs = 0
    for t in trajs:
        assert len(t.turns) == 3
        (ep,) = [e for g in groups_from_trajectories([t]) for e in g.episodes]
        rows = episode_rows(ep)
        # Every loss token is a token vLLM sampled, in order, and nothing else carries loss.
        sampled = [i for turn in t.turns for i in turn.completion_token_ids or []]
        assert [i for r in rows for i, m in zip(r.ids, r.loss) if m] == sampled
        # Each turn's exact prompt + completion is inside a row, at its start.
        for turn in t.turns:
            exact = (turn.prompt_token_ids or []) + (turn.completion_token_ids or [])
            assert any(r.ids[: len(exact)] == exact for r in rows)
        for turn, msg in zip(t.turns, [m for m in t.messages if m.role == "assistant"]):
            ids = [i for i in turn.completion_token_ids or [] if i != tok.eos_token_id]
            retokenized_differs += tok.encode(msg.content or "", add_special_tokens=False) != ids
    assert retokenized_differs > 0  # re-tokenizing the text would have trained on other ids
    # The trainer's logprobs of those ids agree with the ones vLLM sampled them with: same tokens, same model.
    learner = GRPOLearner(looplift_model_dir, GRPOConfig(minibatch=32))
    stats = learner.update(groups_from_trajectories(trajs, policy_step=0))
    assert stats.trained and stats.dropped_uniform == 0
    assert stats.behaviour_gap is not None and stats.behaviour_gap < 1e-3, stats


def _online(gateway: GatewayHandle, model_dir: Path, tmp_path: Path, mode: str, keep: Keep, **grpo: Any) -> OnlineGRPO:
    return OnlineGRPO(
        GRPOLearner(model_dir, GRPOConfig(minibatch=16, epochs=1, **grpo)), pool=_tasks(4), env_factory=EchoEnv,
        verifier=HalfVerifier(), gateway_url=gateway.url, admin=AdminClient(gateway.url, ADMIN),
        adapters_dir=tmp_path / "adapters", sampler=UniformSampler(0), version="policy-v0",
        config=OnlineConfig(group_size=4, tasks_per_update=2, mode=mode, max_steps=2, max_tokens=6), collector=keep)


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_online_grpo_publishes_a_new_version_per_update_and_samples_with_it(
        gateway: GatewayHandle, looplift_model_dir: Path, tmp_path: Path, mode: str) -> None:
    keep = Keep()
    online = _online(gateway, looplift_model_dir, tmp_path, mode, keep)
    recs = asyncio.run(online.run(3))
    assert [r.published for r in recs] == ["policy-v1", "policy-v2", "policy-v3"]
    # sync: each update samples with the version the previous one published; async: update 2's rollouts were
    # sampled while update 1 trained, so by policy-v0, one update stale (max_staleness=1 allows it).
    expected = ["policy-v0", "policy-v1", "policy-v2"] if mode == "sync" else ["policy-v0", "policy-v0", "policy-v1"]
    assert [r.sampled_by for r in recs] == expected
    assert all(r.trained and r.dropped_stale == 0 and r.rollouts == 8 for r in recs)
    assert [t.served_version for t in keep] == [v for v in expected for _ in range(8)]  # what vLLM said answered
    view = AdminClient(gateway.url, ADMIN).versions()
    assert view.serving == "policy-v0"  # the loop publishes candidates; only a gate promotes
    assert {"policy-v1", "policy-v2", "policy-v3"} <= {v.name for v in view.versions if v.state == "loaded"}
    snap = online.timeline.snapshot()
    assert snap["busy_s"]["generation"] > 0 and snap["busy_s"]["training"] > 0 and snap["busy_s"]["adapter"] > 0


def test_a_rank_the_server_refuses_is_a_clear_publish_error(gateway: GatewayHandle, looplift_model_dir: Path,
                                                            tmp_path: Path) -> None:
    online = _online(gateway, looplift_model_dir, tmp_path, "sync", Keep(), rank=16, alpha=32)
    with pytest.raises(PublishError, match=r"step 1 .*rank r=16 exceeds the server's --max-lora-rank 8"):
        asyncio.run(online.run(1))
    assert AdminClient(gateway.url, ADMIN).versions().serving == "policy-v0"


@pytest.mark.parametrize("algo", ["grpo", "dpo"])
def test_trainer_run_trains_from_the_collector_export_and_gates(gateway: GatewayHandle, looplift_model_dir: Path,
                                                                tmp_path: Path, algo: str) -> None:
    from collector import open_store

    db = f"sqlite:///{tmp_path / 'collector.db'}"
    store = open_store(db)
    store.add_trajectories(_rollouts(gateway, n_tasks=3, group=4, max_steps=2), anonymize=False)
    store.close()
    cfg = JobConfig(base_model_dir=looplift_model_dir, collector_db=db, gateway_url=gateway.url, admin_token=ADMIN,
                    app="rl-test", min_examples=1, algo=algo, grpo=GRPOConfig(minibatch=16, epochs=1),
                    dpo=DPOConfig(steps=4, batch_size=4), runs_dir=tmp_path / "runs")
    res = run_job(cfg, suite=_suite(3))
    assert res.status in ("promoted", "rejected") and res.candidate == "policy-v1" and res.serving == "policy-v0"
    assert res.exported == (3 if algo == "grpo" else 6)  # 3 groups of 4, or 2 best-vs-worst pairs per task
    run_dir = tmp_path / "runs" / list_runs(tmp_path / "runs")[-1]["run_id"]
    assert json.loads((run_dir / "config.json").read_text())["algo"] == algo
    meta = json.loads((run_dir / "adapter" / f"looplift_{algo}.json").read_text())
    if algo == "grpo":
        assert meta["step"] == 1 and meta["stats"]["rollouts"] == 12 and meta["stats"]["dropped_stale"] == 0
    else:
        assert meta["pairs"] == 6


def test_run_cycle_trains_online_then_gates_and_points_the_next_rollouts_at_the_candidate(
        gateway: GatewayHandle, looplift_model_dir: Path, tmp_path: Path) -> None:
    from trainer import run_cycle

    online = _online(gateway, looplift_model_dir, tmp_path, "sync", Keep())
    job = JobConfig(base_model_dir=looplift_model_dir, collector_db=f"sqlite:///{tmp_path / 'unused.db'}",
                    gateway_url=gateway.url, admin_token=ADMIN, algo="grpo", runs_dir=tmp_path / "runs")
    res = run_cycle(online, job, 2, suite=_suite(2))
    assert [u.published for u in res.updates] == ["policy-v1", None]  # the last update is the job's to load and gate
    assert res.job.candidate == "policy-v2" and res.job.status in ("promoted", "rejected")
    assert online.version == "policy-v2" and res.rollouts_spent == 16 and res.job.exported == 16
    assert set(res.split_s) == {"adapter", "generation", "training", "environment", "other", "gate"}
    assert res.split_s["gate"] > 0 and res.split_s["generation"] > 0 and res.split_s["training"] > 0
    (run,) = list_runs(tmp_path / "runs")  # one run; the gate's eval cache beside it is not one
    meta = json.loads((tmp_path / "runs" / run["run_id"] / "adapter" / "looplift_grpo.json").read_text())
    assert meta["step"] == 2 and [u["published"] for u in meta["updates"]] == ["policy-v1", None]
