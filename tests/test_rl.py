"""RL training without a server: token-exact rows, bad GRPO/DPO input, the GRPO update's properties
(zero-variance groups never reach the forward pass, staleness, the clipped ratio, KL), the pass-rate
sampler, the wall-time attribution, and DPO learning a synthetic preference on held-out prompts."""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path
from typing import Any

import pytest
import torch
from _resources import needs

from envs import held_out_tasks, training_tasks
from sdk import Outcome, StepResult, Task, Trajectory
from trainer import (
    DPOConfig,
    Episode,
    GRPOConfig,
    GRPOLearner,
    Group,
    PassRateSampler,
    Timeline,
    TokenDataError,
    TrainingDataError,
    Turn,
    UniformSampler,
    episode_rows,
    load_grpo_jsonl,
    train_dpo,
    train_grpo,
)
from trainer._tokens import token_logprobs
from trainer.grpo import advantages

# ---- token-exact rows ---------------------------------------------------------------------------


def _turn(prompt: list[int], comp: list[int]) -> Turn:
    return Turn(tuple(prompt), tuple(comp), tuple(-0.1 * (i + 1) for i in range(len(comp))))


def test_turns_that_extend_each_other_pack_into_one_row_with_loss_only_on_sampled_tokens() -> None:
    t1 = _turn([5, 6, 7], [20, 21, 1])
    t2 = _turn([5, 6, 7, 20, 21, 1, 8, 9], [30, 1])  # turn 1's prompt + completion, then the observation 8, 9
    (row,) = episode_rows(Episode("traj-a", 1.0, (t1, t2)))
    assert row.ids == [5, 6, 7, 20, 21, 1, 8, 9, 30, 1] == list(t2.prompt_ids + t2.completion_ids)
    assert [i for i, m in zip(row.ids, row.loss) if m] == [20, 21, 1, 30, 1]
    assert [b for b, m in zip(row.behaviour, row.loss) if m] == list(t1.logprobs + t2.logprobs)
    assert all(b == 0.0 for b, m in zip(row.behaviour, row.loss) if not m)


def test_a_turn_the_server_re_tokenized_trains_as_its_own_exact_row_or_is_an_error_when_required() -> None:
    t1 = _turn([5, 6, 7], [20, 21, 1])
    t2 = _turn([5, 6, 7, 22, 1, 8, 9], [30, 1])  # the server re-rendered [20, 21] as [22]
    rows = episode_rows(Episode("traj-b", 0.0, (t1, t2)))
    assert [r.ids for r in rows] == [[5, 6, 7, 20, 21, 1], [5, 6, 7, 22, 1, 8, 9, 30, 1]]
    assert [sum(r.loss) for r in rows] == [3, 2]
    with pytest.raises(TokenDataError, match=r"trajectory traj-b, turn 1: prompt ids do not start .* token 3 of 6"):
        episode_rows(Episode("traj-b", 0.0, (t1, t2)), require_prefix=True)


# ---- bad input ----------------------------------------------------------------------------------


def _grpo_line(task: str, rewards: list[Any], turns: Any = "ok") -> str:
    comps = []
    for i, r in enumerate(rewards):
        ts = [{"message_index": 0, "prompt_token_ids": [5, 6], "completion_token_ids": [7, 1],
               "completion_logprobs": [-0.5, -0.1]}] if turns == "ok" else turns
        comps.append({"id": f"{task}-{i}", "served_version": "policy-v0", "reward": r, "score": r, "turns": ts})
    return json.dumps({"task_id": task, "prompt": [], "rewards": rewards, "completions": comps})


@pytest.mark.parametrize("lines, error, match", [
    ([_grpo_line("a", [1.0]), _grpo_line("b", [0.0])], TrainingDataError, "no group of 2 or more rewarded completions"),
    ([_grpo_line("a", [None, None]), _grpo_line("b", [None, None])], TrainingDataError, "no completion has a reward"),
    ([_grpo_line("a", [1.0, 0.0], turns=[{"message_index": 0, "prompt_token_ids": None,
                                          "completion_token_ids": None, "completion_logprobs": None}])],
     TokenDataError, r"trajectory a-0, turn 0: no prompt_token_ids; serve with vLLM's `return_token_ids`"),
    ([_grpo_line("a", [1.0, 0.0], turns=[])], TokenDataError, "trajectory a-0: no assistant turn carries token ids"),
    ([_grpo_line("a", [1.0, 0.0], turns=[{"message_index": 0, "prompt_token_ids": [5], "completion_token_ids": [7, 1],
                                          "completion_logprobs": [-0.5]}])],
     TokenDataError, "trajectory a-0, turn 0: 2 completion ids but 1 logprobs"),
    (["{not json"], TrainingDataError, r"g.jsonl:1: not a GRPO group"),
])
def test_bad_grpo_input_is_an_error_naming_the_cause(tmp_path: Path, lines: list[str], error: type, match: str) -> None:
    path = tmp_path / "g.jsonl"
    path.write_text("\n".join(lines) + "\n")
    with pytest.raises(error, match=match):
        load_grpo_jsonl(path)


def test_dpo_refuses_lines_without_a_pair(tmp_path: Path, looplift_model_dir: Path) -> None:
    bad = tmp_path / "d.jsonl"
    bad.write_text(json.dumps({"prompt": [{"role": "user", "content": "hi"}], "chosen": [{"role": "user", "content": "x"}],
                               "rejected": [{"role": "assistant", "content": "y"}]}) + "\n")
    with pytest.raises(TrainingDataError, match="d.jsonl:1: chosen has no assistant message"):
        train_dpo(looplift_model_dir, bad, tmp_path / "a")
    empty = tmp_path / "e.jsonl"
    empty.write_text("")
    with pytest.raises(TrainingDataError, match="no pairs"):
        train_dpo(looplift_model_dir, empty, tmp_path / "a")


# ---- the GRPO update ----------------------------------------------------------------------------


@pytest.fixture(scope="module")
@needs("model_build")
def learner_factory(looplift_model_dir: Path) -> Any:
    def make(**kw: Any) -> GRPOLearner:
        return GRPOLearner(looplift_model_dir, GRPOConfig(**{"minibatch": 8, "epochs": 1, **kw}))
    return make


def _on_policy(learner: GRPOLearner, seed: int, n_comp: int = 6, shift: float = 0.0) -> Turn:
    """A turn whose behaviour logprobs are the learner's own (+ `shift`): ratio exp(-shift) on every token."""
    g = torch.Generator().manual_seed(seed)
    prompt = torch.randint(10, 200, (5,), generator=g).tolist()
    comp = torch.randint(10, 200, (n_comp,), generator=g).tolist()
    ids = torch.tensor([prompt + comp])
    with torch.no_grad():
        lp = token_logprobs(learner.model, ids, torch.ones_like(ids))[0, len(prompt) - 1:]
    return Turn(tuple(prompt), tuple(comp), tuple(float(x) + shift for x in lp))


def _group(learner: GRPOLearner, name: str, rewards: list[float], step: int = 0, shift: float = 0.0) -> Group:
    return Group(name, tuple(Episode(f"{name}-{i}", r, (_on_policy(learner, sum(map(ord, name)) * 10 + i, shift=shift),),
                                     policy_step=step) for i, r in enumerate(rewards)))


def _weights(learner: GRPOLearner) -> torch.Tensor:
    return torch.cat([p.detach().flatten().clone() for p in learner.params])


def test_advantages_are_normalized_within_the_group() -> None:
    a = advantages([1.0, 0.0, 0.0, 1.0])
    assert a == pytest.approx([1.0, -1.0, -1.0, 1.0], abs=1e-3)
    assert advantages([1.0, 1.0]) == [0.0, 0.0]


def test_uniform_groups_are_dropped_before_the_forward_pass(learner_factory: Any) -> None:
    learner = learner_factory()
    seen: list[int] = []
    learner.model.register_forward_hook(lambda m, args, kwargs, out: seen.append(kwargs["input_ids"].shape[0]),
                                        with_kwargs=True)
    solved, failed, mixed = (_group(learner, n, r) for n, r in
                             (("solved", [1.0] * 4), ("failed", [0.0] * 4), ("mixed", [1.0, 0.0, 0.0])))
    seen.clear()
    stats = learner.update([solved, failed, mixed])
    assert (stats.rollouts, stats.dropped_uniform, stats.rows) == (11, 8, 3)
    assert seen == [3] and stats.optimizer_steps == 1 and learner.step == 1
    before = _weights(learner)
    assert not learner.update([solved, failed]).trained  # nothing with signal: no step, no forward pass
    assert seen == [3] and learner.step == 1 and torch.equal(before, _weights(learner))


def test_rollouts_older_than_max_staleness_are_dropped(learner_factory: Any) -> None:
    learner = learner_factory(max_staleness=1)
    learner.step = 3
    stats = learner.update([_group(learner, "old", [1.0, 0.0], step=1), _group(learner, "ok", [1.0, 0.0], step=2)])
    assert (stats.dropped_stale, stats.rows, learner.step) == (2, 2, 4)


def test_on_policy_ratio_is_one_and_far_off_policy_tokens_are_clipped_out(learner_factory: Any) -> None:
    stats = (near := learner_factory()).update([_group(near, "near", [1.0, 0.0])])
    assert stats.behaviour_gap is not None and stats.behaviour_gap < 1e-5 and stats.clip_frac == 0.0
    # Behaviour logprobs 3 nats below the policy's (ratio e^3) for the good episode and 3 above (e^-3) for the
    # bad one: both fall outside [1 - eps_low, 1 + eps_high] on the side PPO clips, so neither moves the weights
    # (a fresh learner: no optimizer momentum from an earlier step).
    learner = learner_factory(lr=1e-2)
    good = Episode("far-0", 1.0, (_on_policy(learner, 7, shift=-3.0),), policy_step=0)
    bad = Episode("far-1", 0.0, (_on_policy(learner, 8, shift=+3.0),), policy_step=0)
    before = _weights(learner)
    stats = learner.update([Group("far", (good, bad))])
    assert stats.trained and stats.clip_frac == 1.0
    assert torch.equal(before, _weights(learner))


def test_kl_to_the_base_is_measured_when_asked(learner_factory: Any) -> None:
    learner = learner_factory(kl_beta=0.1, lr=1e-2)
    first = learner.update([_group(learner, "k1", [1.0, 0.0, 1.0, 0.0])])
    assert first.kl is not None and first.kl < 1e-3  # a fresh adapter is the base model
    later = learner.update([_group(learner, "k2", [1.0, 0.0, 1.0, 0.0])])
    assert later.kl is not None and later.kl > first.kl


def test_train_grpo_continues_the_given_adapter_and_writes_its_config(learner_factory: Any, tmp_path: Path,
                                                                      looplift_model_dir: Path) -> None:
    learner = learner_factory()
    init = learner.save(tmp_path / "init")
    line = {"task_id": "t", "prompt": [], "rewards": [1.0, 0.0], "completions": [
        {"id": f"c{i}", "served_version": "policy-v3", "score": r, "turns": [
            {"message_index": 0, "prompt_token_ids": list(turn.prompt_ids), "completion_token_ids": list(turn.completion_ids),
             "completion_logprobs": list(turn.logprobs)}]}
        for i, (r, turn) in enumerate([(1.0, _on_policy(learner, 1)), (0.0, _on_policy(learner, 2))])]}
    data = tmp_path / "g.jsonl"
    data.write_text(json.dumps(line) + "\n")
    res = train_grpo(looplift_model_dir, data, tmp_path / "out", GRPOConfig(minibatch=8), init_adapter=init,
                     version_steps={"policy-v3": 3}, step=3)
    assert res.stats.trained and res.stats.behaviour_gap is not None and res.stats.behaviour_gap < 1e-5
    meta = json.loads((tmp_path / "out" / "looplift_grpo.json").read_text())
    assert meta["step"] == 4 and meta["init_adapter"] == str(init) and meta["config"]["clip_high"] == 0.28
    with pytest.raises(TrainingDataError, match="more than max_staleness=1 updates old"):
        train_grpo(looplift_model_dir, data, tmp_path / "out2", init_adapter=init, version_steps={"policy-v3": 1}, step=3)


# ---- sampler and timeline -----------------------------------------------------------------------


def _trajs(task: str, wins: int, n: int) -> list[Trajectory]:
    return [Trajectory(task_id=task, model="m", messages=[], outcome=Outcome(success=i < wins, reward=float(i < wins)))
            for i in range(n)]


def test_pass_rate_sampler_prefers_informative_tasks_and_persists(tmp_path: Path) -> None:
    pool = [Task(id=f"t{i}", prompt="p") for i in range(3)]
    s = PassRateSampler(tmp_path / "rates.json", seed=0)
    s.pick(pool, 3)
    s.observe(_trajs("t0", 8, 8) + _trajs("t1", 4, 8) + _trajs("t2", 0, 8))
    picks = [s.pick(pool, 1)[0].id for _ in range(300)]
    assert picks.count("t1") > 2 * max(picks.count("t0"), picks.count("t2"))
    again = PassRateSampler(tmp_path / "rates.json", seed=1)
    rate = {t.id: again.pass_rate(t) for t in pool}
    assert rate["t1"] == pytest.approx(0.5) and rate["t0"] > 0.8 > 0.2 > rate["t2"]
    assert sorted(t.id for t in again.pick(pool, 3)) == ["t0", "t1", "t2"]  # distinct tasks
    assert len(UniformSampler(0).pick(pool, 2)) == 2


def test_pass_rate_sampler_skips_unseen_tasks_of_a_mastered_kind(tmp_path: Path) -> None:
    easy = [Task(id=f"e{i}", prompt="p", data={"kind": "easy"}) for i in range(20)]
    mixed = [Task(id=f"m{i}", prompt="p", data={"kind": "mixed"}) for i in range(20)]
    s = PassRateSampler(seed=0, kind_of=lambda t: t.data["kind"])
    s.pick(easy[:2] + mixed[:2], 4)
    s.observe(_trajs("e0", 8, 8) + _trajs("e1", 8, 8) + _trajs("m0", 4, 8) + _trajs("m1", 3, 8))
    unseen = easy[2:] + mixed[2:]
    picks = [t.data["kind"] for _ in range(50) for t in s.pick(unseen, 4)]
    assert picks.count("mixed") > 3 * picks.count("easy")


def test_timeline_attributes_overlapping_parts_once() -> None:
    tl = Timeline()

    def train() -> None:
        with tl.busy("training"):
            time.sleep(0.3)

    t = threading.Thread(target=train)
    t.start()
    with tl.busy("generation"):
        time.sleep(0.15)
    t.join()
    snap = tl.snapshot()
    split, busy = snap["split_s"], snap["busy_s"]
    assert sum(split.values()) == pytest.approx(snap["wall_s"], abs=5e-3)  # each part rounded to 1 ms
    assert busy["training"] > split["training"] and split["generation"] == pytest.approx(busy["generation"], abs=1e-3)
    assert 0.0 < tl.idle_fraction("generation") < 1.0


def test_timed_env_keeps_the_environments_tools() -> None:
    """The online loop's timing wrapper hands the SDK the environment's tools and tool steps (timed), and no
    `step_tool` for an environment without one."""
    from sdk._loop import _tools_of
    from trainer._timeline import timed_env

    class ToolEnv:
        tools = [{"type": "function", "function": {"name": "calc", "parameters": {"type": "object"}}}]

        def reset(self, task: Task) -> str:
            return task.prompt

        def step(self, action: str) -> StepResult:
            return StepResult(observation="text", done=True)

        def step_tool(self, call: Any) -> StepResult:
            time.sleep(0.05)
            return StepResult(observation=f"called {call}")

    class PlainEnv:
        def reset(self, task: Task) -> str:
            return task.prompt

        def step(self, action: str) -> StepResult:
            return StepResult(observation="text", done=True)

    tl = Timeline()
    env = timed_env(ToolEnv, tl)()
    assert _tools_of(env) == ToolEnv.tools
    assert env.step_tool("c1").observation == "called c1"
    assert tl.snapshot()["busy_s"]["environment"] >= 0.05
    assert getattr(timed_env(PlainEnv, tl)(), "step_tool", None) is None


# ---- DPO learns a preference the base model does not have ---------------------------------------


def _code(expr: str, comment: bool) -> str:
    return "```python\n" + ("# compute\n" if comment else "") + f"print({expr})\n```"


def _greedy_first_turns(model: Any, tok: Any, tasks: list[Task]) -> list[str]:
    out = []
    for t in tasks:
        enc = tok.apply_chat_template([{"role": "user", "content": t.prompt}], add_generation_prompt=True,
                                      return_tensors="pt", return_dict=True)
        ids = model.generate(**enc, max_new_tokens=24, do_sample=False, eos_token_id=tok.eos_token_id,
                             pad_token_id=tok.pad_token_id)
        out.append(tok.decode(ids[0, enc["input_ids"].shape[1]:], skip_special_tokens=True))
    return out


def _pairs_file(path: Path, tasks: list[Task]) -> Path:
    with open(path, "w") as f:
        for t in tasks:
            e = t.data["expression"]
            f.write(json.dumps({"prompt": [{"role": "user", "content": t.prompt}],
                                "chosen": [{"role": "assistant", "content": _code(e, True)}],
                                "rejected": [{"role": "assistant", "content": _code(e, False)}]}) + "\n")
    return path


@pytest.mark.slow
@pytest.mark.model_build
def test_dpo_learns_a_synthetic_preference_measured_on_held_out_prompts(tmp_path: Path) -> None:
    from peft import PeftModel
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from trainer import BaseModelConfig, build_base_model
    from trainer.dpo import _both, load_dpo_jsonl

    # Plain-text demonstrations only: the preference is about the first turn's code, not about tools (with the
    # default 5,000 tool demonstrations next to 300 plain ones, the tiny model would answer with tool calls).
    base = build_base_model(BaseModelConfig(n_demos=300, calc_demos=0, lookup_demos=0, steps=30, batch_size=16),
                            out_dir=tmp_path / "base")
    held = held_out_tasks(20)  # prompts never in the training pairs
    tok = AutoTokenizer.from_pretrained(base)
    before = _greedy_first_turns(AutoModelForCausalLM.from_pretrained(base), tok, held)
    assert sum("# compute" in x for x in before) == 0 and sum("print(" in x for x in before) >= 15
    res = train_dpo(base, _pairs_file(tmp_path / "pairs.jsonl", training_tasks(64, 3)), tmp_path / "adapter",
                    DPOConfig(steps=60, lr=2e-3))
    assert res.pairs == 64 and res.accuracy > 0.9
    tuned = PeftModel.from_pretrained(AutoModelForCausalLM.from_pretrained(base), str(res.adapter_dir))
    # Held out, DPO's own measure: the tuned policy prefers the chosen reply more than the reference does.
    pairs = load_dpo_jsonl(_pairs_file(tmp_path / "held.jsonl", held), tok)
    with torch.no_grad():
        pol_c, pol_r, _ = _both(tuned, pairs, tok.pad_token_id)
        with tuned.disable_adapter():
            ref_c, ref_r, _ = _both(tuned, pairs, tok.pad_token_id)
    assert float((((pol_c - ref_c) - (pol_r - ref_r)) > 0).float().mean()) >= 0.9
    # And what it now writes on held-out prompts, greedily.
    after = _greedy_first_turns(tuned, tok, held)
    assert sum("# compute\nprint(" in x for x in after) >= 16, after


def test_looplift_toml_sets_the_rl_configs_and_names_unknown_keys(tmp_path: Path) -> None:
    from trainer import ConfigError, job_config, load_config

    path = tmp_path / "looplift.toml"
    path.write_text("[trainer]\nalgo = \"grpo\"\n[grpo]\nlr = 5e-4\nmax_staleness = 2\ndual_clip = 4\n"
                    "[dpo]\nbeta = 0.2\nreference = \"base\"\n")
    job = job_config(load_config(path))
    assert (job.algo, job.grpo.lr, job.grpo.max_staleness, job.grpo.dual_clip, job.dpo.beta, job.dpo.reference) == (
        "grpo", 5e-4, 2, 4, 0.2, "base")
    path.write_text("[dpo]\nreference = 1\n")
    with pytest.raises(ConfigError, match=r"\[dpo\].reference must be str, not int"):
        load_config(path)
    path.write_text("[grpo]\ndual_clip = 1.1\n")
    with pytest.raises(ConfigError, match=r"dual_clip\) = 1.1 must exceed 1 \+ clip_high"):
        job_config(load_config(path))
    path.write_text("[grpo]\nclip = 0.3\n")
    with pytest.raises(ConfigError, match=r"unknown key\(s\) \[grpo\].clip"):
        load_config(path)


def test_the_serving_version_is_not_evaluated_again_on_the_same_suite_and_seed(tmp_path: Path, db_url: str) -> None:
    from _jobsteps import FakeGateway, add_trajectories, plus_one_suite, quick_step

    from trainer import JobConfig, run_job

    asked: list[str] = []

    class Counting(FakeGateway):
        def _chat(self, request: Any) -> Any:
            asked.append(json.loads(request.content)["model"])
            return super()._chat(request)

    gw = Counting({"policy-v0": set(range(10))})
    job = JobConfig(base_model_dir=tmp_path / "base", collector_db=db_url, app="shop", runs_dir=tmp_path / "runs")
    add_trajectories(db_url, 12)
    gw.next_skill = set(range(30))
    first = run_job(job, suite=plus_one_suite(40), train_step=quick_step, admin=gw.admin(), chat_client=gw.chat())
    assert first.status == "promoted" and asked.count("policy-v0") == 40 and asked.count("policy-v1") == 40
    add_trajectories(db_url, 4, start=12)  # new data: a second run
    gw.next_skill = set(range(40))
    asked.clear()
    second = run_job(job, suite=plus_one_suite(40), train_step=quick_step, admin=gw.admin(), chat_client=gw.chat())
    # policy-v1 was measured on these 40 tasks and seeds when it was the candidate: only policy-v2 is asked.
    # (Its 6 more selection tasks, p = 1/64, do not pass the app's second gate: alpha_2 = 0.0076.)
    assert second.status == "rejected" and asked == ["policy-v2"] * 40
    assert (second.serving_success, second.candidate_success) == (first.candidate_success, 1.0)
    add_trajectories(db_url, 4, start=16)
    asked.clear()
    third = run_job(job, suite=plus_one_suite(20), train_step=quick_step, admin=gw.admin(), chat_client=gw.chat())
    assert third.serving == "policy-v1" and asked.count("policy-v1") == 20  # another suite: measured again
    # The cache lives beside the runs but is not one: `trainer runs` lists exactly the three runs.
    from trainer import list_runs

    assert [r["status"] for r in list_runs(tmp_path / "runs")] == [first.status, second.status, third.status]


def test_sft_refuses_a_line_with_nothing_to_train_on(tmp_path: Path) -> None:
    """Mutant: the weight ignored by the check (a line whose every assistant message is weight 0 would train on
    no token at all: a loss of 0/0)."""
    from trainer.sft import load_sft_jsonl

    path = tmp_path / "s.jsonl"
    user, answer = {"role": "user", "content": "hi"}, {"role": "assistant", "content": "x"}
    path.write_text(json.dumps({"messages": [user, answer]}) + "\n")
    assert load_sft_jsonl(path) == [([user, answer], None)]
    path.write_text(json.dumps({"messages": [user, {**answer, "weight": 0}]}) + "\n")
    with pytest.raises(TrainingDataError, match=r's.jsonl:1: conversation has no assistant turn to train on \(none, or '
                                                r'every one has "weight": 0\)'):
        load_sft_jsonl(path)
