"""RL benchmark: our online GRPO (vLLM CPU + gateway + sandboxes + collector) against TRL's GRPOTrainer,
in one run on one machine, plus where our loop's wall time goes, what the pass-rate sampler saves,
sync vs async, and SFT vs GRPO on a hard split.

Run: `.venv/bin/python bench/rl.py [--parts async,hard,trl,ours,uniform] [--quick] [--json-out bench/results/rl.json]`
(under `flock /tmp/looplift-heavy.lock` on a shared machine).

Parts, all from the same cached tiny base model (`trainer build-base` defaults):

  trl      TRL `GRPOTrainer` on the demo task's decisive first turn (write the code that computes the
           expression; reward 1 iff the code prints the exact value), CPU, in-process HF generation, LoRA r=8,
           groups of 8, 32 rollouts per update, lr = ours. Adapters are saved every `--trl-every` updates and
           evaluated afterwards through the same gateway and eval code as ours (held-out first-turn and
           whole-episode success), so both are measured the same way.
  ours     `trainer.run_cycle`: cycles of online GRPO updates (pass-rate sampler, 8 tasks x 8 rollouts per update,
           a new adapter version per update) then the retrain job's gate and publish. Every update's version is
           evaluated afterwards on the held-out set; the cycle wall time is split into generation / environment /
           training / adapter / other / gate by `trainer.Timeline`.
  uniform  the same with uniform task sampling: rollouts and seconds the pass-rate sampler saved at the same
           final success.
  async    sync vs async (update k+1 generated while update k trains, max_staleness 1): wall time per update and
           the fraction of wall time vLLM had no request in flight.
  hard     a hard split (a 2-digit and a 3-digit operand; the base model solves <= 10%): SFT (the demo's
           rejection-sampling cycle) vs GRPO at the same rollout budget.

Held-out sets are never trained on. Targets (from the issue): our GRPO reaches 90% whole-episode held-out
success with fewer rollouts than TRL needs in the same run; non-generation overhead (everything but
generation and training) <= 25% of a cycle. Other people's work shares this 2-core machine; the load
average at start and end is recorded.
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import json
import os
import platform
import random
import re
import secrets
import shutil
import sys
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Optional

# Run as a script: the repository root holds the packages, and bench/ itself must not be on the path
# (bench/collector.py would shadow the `collector` package).
_ROOT = Path(__file__).resolve().parent.parent
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != _ROOT / "bench"]
sys.path.insert(0, str(_ROOT))

import sdk  # noqa: E402
from collector import CollectorSettings, serve_in_thread  # noqa: E402
from envs import ArithmeticEnv, ArithmeticVerifier, arithmetic_suite, held_out_tasks, training_tasks  # noqa: E402
from sandboxes import detect_backend, make_pool  # noqa: E402
from sdk import EvalSuite, Task, Trajectory  # noqa: E402
from sdk.infra import atomic_write  # noqa: E402
from server import AdminClient, GatewaySettings, VLLMConfig, start_gateway_in_thread, start_vllm  # noqa: E402
from trainer import (  # noqa: E402
    BaseModelConfig,
    GRPOConfig,
    GRPOLearner,
    JobConfig,
    OnlineConfig,
    OnlineGRPO,
    PassRateSampler,
    Timeline,
    UniformSampler,
    build_base_model,
    evaluate,
    run_cycle,
    run_job,
)

LORA_TARGETS = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]
TARGET = 0.90
OVERHEAD_MAX = 0.25
_SAFE = re.compile(r"^\s*print\(([0-9+\-* ()]+)\)\s*$")
_CODE = re.compile(r"```(?:python)?\s*\n(.*?)```", re.DOTALL)


@dataclass(frozen=True)
class Sizes:
    cycles: int = 3
    updates_per_cycle: int = 6
    tasks_per_update: int = 8
    group: int = 8
    held_out: int = 100
    pool: int = 2000
    trl_updates: int = 100
    trl_every: int = 10
    async_updates: int = 6
    hard_cycles: int = 3
    hard_episodes: int = 256
    eval_every: int = 2
    """Ours/uniform: evaluate every n-th update's version on the held-out set (and each cycle's last)."""


QUICK = Sizes(cycles=2, updates_per_cycle=2, tasks_per_update=4, group=4, held_out=20, pool=32, trl_updates=4,
              trl_every=2, async_updates=2, hard_cycles=1, hard_episodes=32)


def digits(task: Task) -> str:
    """The pass-rate sampler's kind of an arithmetic task (as in the demo): how many digits it must copy."""
    return str(sum(c.isdigit() for c in str(task.data.get("expression", ""))))


def first_turn_ok(text: str, answer: int) -> bool:
    """The first turn's code prints the exact value (arithmetic-only `print(...)`, evaluated without exec)."""
    m = _CODE.search(text)
    s = _SAFE.match(m.group(1).strip()) if m else None
    if s is None:
        return False
    try:
        return bool(eval(s.group(1), {"__builtins__": {}}) == answer)
    except (SyntaxError, ArithmeticError, ValueError):
        return False


def hard_tasks(n: int, seed: int, *, exclude: frozenset[str] = frozenset()) -> list[Task]:
    """The hard split: two operands, one of them three digits (the base model only ever copied 1-99), in either
    order. Measured here: the base model solves 7.5% of them (pass@1, temperature 1)."""
    rng = random.Random(seed)
    out: dict[str, Task] = {}
    while len(out) < n:
        a, b = str(rng.randint(10, 99)), str(rng.randint(100, 999))
        x, y = (a, b) if rng.random() < 0.5 else (b, a)
        expr = f"{x}{rng.choice('+-*')}{y}"
        tid = f"arith-hard:{expr}"
        if tid not in exclude:
            out.setdefault(expr, Task(id=tid, prompt=f"Compute: {expr}", data={"expression": expr, "answer": eval(expr)}))
    return list(out.values())


# ---- the stack ------------------------------------------------------------------------------------


class Bench:
    """One vLLM and one collector for the whole run; a fresh gateway (own registry) per part."""

    def __init__(self, model_dir: Path, state: Path, sizes: Sizes) -> None:
        self.model_dir, self.state, self.sizes = model_dir, state, sizes
        self.token = secrets.token_urlsafe(16)
        self.db = f"sqlite:///{state / 'collector.db'}"
        self.verifier = ArithmeticVerifier()
        self.vllm = self.collector = self.client = self.pool = self.gw = None
        try:
            self.vllm = start_vllm(VLLMConfig(model_dir=model_dir, log_path=state / "vllm.log"))
            self.collector = serve_in_thread(CollectorSettings(db_url=self.db), port=0)
            self.client = sdk.CollectorClient(self.collector.url, spool_dir=state / "spool")
            self.pool = make_pool(detect_backend(), size=4)
        except BaseException:
            self.close()
            raise

    def env(self) -> ArithmeticEnv:
        return ArithmeticEnv(pool=self.pool)

    def gateway(self, name: str) -> Any:
        if self.gw is not None:
            self.gw.stop()
        self.gw = start_gateway_in_thread(GatewaySettings(admin_token=self.token, state_dir=self.state / f"gw-{name}"),
                                          self.vllm.url, port=0)
        return self.gw

    def admin(self) -> AdminClient:
        return AdminClient(self.gw.url, self.token)

    def close(self) -> None:
        """Stop whatever was started, last first; a failure to stop one part does not keep the rest running."""
        for part, stop in ((self.gw, "stop"), (self.client, "close"), (self.collector, "stop"), (self.pool, "close"),
                           (self.vllm, "stop")):
            try:
                if part is not None:
                    getattr(part, stop)()
            except Exception as e:
                print(f"warning: {stop} failed: {e}", file=sys.stderr)

    def suite(self, name: str, tasks: list[Task]) -> EvalSuite:
        """`tasks` with the demo suite's budget and sampling (4 turns, 64 tokens, seeded per task)."""
        demo = arithmetic_suite(1, pool=self.pool)
        return dataclasses.replace(demo, name=name, tasks=tasks, env_factory=self.env)

    def eval_version(self, version: str, suite: EvalSuite) -> dict[str, float]:
        """Held-out whole-episode and first-turn success of `version` (pass@1, temperature 1, seeded)."""
        trajs: list[Trajectory] = []
        res = asyncio.run(evaluate(version, suite, base_url=self.gw.url + "/v1", on_episode=trajs.append))
        answers = {t.id: int(t.data["answer"]) for t in suite.tasks}
        first = [next((m.content or "" for m in t.messages if m.role == "assistant"), "") for t in trajs]
        ft = sum(first_turn_ok(f, answers[t.task_id]) for f, t in zip(first, trajs))
        return {"whole_episode": res.success, "first_turn": round(ft / len(trajs), 4)}

    def job(self, name: str, algo: str, **kw: Any) -> JobConfig:
        return JobConfig(base_model_dir=self.model_dir, collector_db=self.db, gateway_url=self.gw.url,
                         admin_token=self.token, app=name, algo=algo, min_examples=1,
                         runs_dir=self.state / "runs" / name, **kw)


# ---- ours ------------------------------------------------------------------------------------------


def run_online(b: Bench, name: str, pool: list[Task], held: EvalSuite, cycles: int, *, sampler: Any,
               grpo: GRPOConfig, evaluate_each: bool = True) -> dict[str, Any]:
    """Cycles of online GRPO + gate on a fresh gateway; then every update's version evaluated on `held`."""
    s = b.sizes
    b.gateway(name)
    base = b.eval_version("policy-v0", held)
    timeline = Timeline()
    online = OnlineGRPO(GRPOLearner(b.model_dir, grpo), pool=pool, env_factory=b.env, verifier=b.verifier,
                        gateway_url=b.gw.url, admin=b.admin(), adapters_dir=b.state / f"adapters-{name}", sampler=sampler,
                        version="policy-v0", config=OnlineConfig(group_size=s.group, tasks_per_update=s.tasks_per_update,
                                                                 app=name),
                        collector=b.client, timeline=timeline)
    t0 = time.monotonic()
    eval_s = 0.0  # measurement, not part of the loop: subtracted from the loop's clock
    points: list[dict[str, Any]] = []  # one per update: rollouts so far, loop seconds so far, the version it made
    cycles_out = []
    spent = 0

    def mark(r: Any) -> None:
        nonlocal spent
        spent += r.rollouts
        points.append({"update": len(points) + 1, "rollouts": spent, "loop_s": round(time.monotonic() - t0 - eval_s, 1),
                       "version": r.published, "dropped": r.dropped_uniform + r.dropped_stale})

    for c in range(1, cycles + 1):
        first = len(points)
        res = run_cycle(online, b.job(name, "grpo", grpo=grpo), s.updates_per_cycle, suite=held, on_update=mark)
        points[-1]["version"] = res.job.candidate
        points[-1]["loop_s"] = round(time.monotonic() - t0 - eval_s, 1)  # the gate is part of the loop
        wall = sum(res.split_s.values())
        cycles_out.append({"cycle": c, "status": res.job.status, "reason": res.job.reason, "candidate": res.job.candidate,
                           "candidate_success": res.job.candidate_success, "serving_success": res.job.serving_success,
                           "rollouts_spent": res.rollouts_spent, "rollouts_dropped": res.rollouts_dropped,
                           "rollout_success": res.rollout_success, "wall_s": round(wall, 1), "split_s": res.split_s,
                           "non_generation_overhead": round(1 - (res.split_s["generation"] + res.split_s["training"]) / wall, 3),
                           # the same without the sandboxes' time: what the loop itself (adapters, gate, glue) adds
                           "loop_overhead_excl_environment": round(
                               1 - (res.split_s["generation"] + res.split_s["training"] + res.split_s["environment"])
                               / wall, 3)})
        print(f"  {name} cycle {c}: {res.job.status} {res.job.reason}  rollouts {spent}  split {res.split_s}", flush=True)
        if evaluate_each:  # every version this cycle made, while each is still loaded
            te = time.monotonic()
            for p in points[first:]:
                if p["version"] and (p["update"] % s.eval_every == 0 or p is points[-1]):
                    p.update(b.eval_version(p["version"], held))
            eval_s += time.monotonic() - te
            print(f"  {name} curve: {[(p['rollouts'], p.get('whole_episode')) for p in points[first:]]}", flush=True)
    return {"base": base, "cycles": cycles_out, "updates": points, "reach": _reach(points),
            "dropped_total": sum(p["dropped"] for p in points)}


def _reach(points: list[dict[str, Any]], key: str = "whole_episode") -> Optional[dict[str, Any]]:
    """The first point at or above TARGET on `key`."""
    hit = next((p for p in points if (p.get(key) or 0) >= TARGET), None)
    return None if hit is None else {"rollouts": hit["rollouts"], "seconds": hit.get("loop_s"), "at": hit.get(key)}


def run_async_table(b: Bench, pool: list[Task], grpo: GRPOConfig) -> dict[str, Any]:
    """The same number of updates in sync and async mode (no gate), from the base each time."""
    out = {}
    for mode in ("sync", "async"):
        b.gateway(f"async-{mode}")
        tl = Timeline()
        online = OnlineGRPO(GRPOLearner(b.model_dir, grpo), pool=pool, env_factory=b.env, verifier=b.verifier,
                            gateway_url=b.gw.url, admin=b.admin(), adapters_dir=b.state / f"adapters-{mode}",
                            sampler=PassRateSampler(seed=0, kind_of=digits), version="policy-v0",
                            config=OnlineConfig(group_size=b.sizes.group, tasks_per_update=b.sizes.tasks_per_update,
                                                mode=mode, app=f"async-{mode}"),
                            collector=b.client, timeline=tl)
        recs = asyncio.run(online.run(b.sizes.async_updates))
        snap = tl.snapshot()
        out[mode] = {"updates": len(recs), "wall_s": snap["wall_s"], "wall_per_update_s": round(snap["wall_s"] / len(recs), 2),
                     "vllm_idle_fraction": round(tl.idle_fraction("generation"), 3), "busy_s": snap["busy_s"],
                     "split_s": snap["split_s"], "staleness": _staleness(recs),
                     "dropped_stale": sum(r.dropped_stale for r in recs),
                     "rollout_success": [r.rollout_success for r in recs]}
        print(f"  {mode}: {out[mode]['wall_per_update_s']} s/update, vLLM idle {out[mode]['vllm_idle_fraction']:.0%}",
              flush=True)
    out["speedup"] = round(out["sync"]["wall_per_update_s"] / out["async"]["wall_per_update_s"], 3)
    return out


def _staleness(recs: list[Any]) -> list[int]:
    """Per update: how many updates older than the policy being trained the policy that sampled its rollouts was."""
    versions = ["policy-v0"] + [r.published for r in recs]
    return [k - versions.index(r.sampled_by) for k, r in enumerate(recs)]


def run_hard(b: Bench, grpo: GRPOConfig) -> dict[str, Any]:
    """SFT (the demo's cycle: rollouts of the serving alias -> collector -> export successes -> SFT -> gate) vs
    GRPO (online updates -> gate), the same number of rollouts per cycle, on the hard split."""
    s = b.sizes
    held_tasks = hard_tasks(s.held_out, seed=1_000_003)
    held = b.suite("arith-hard-held-out", held_tasks)
    banned = frozenset(t.id for t in held_tasks)
    out: dict[str, Any] = {"held_out": len(held_tasks), "rollouts_per_cycle": s.hard_episodes}
    b.gateway("hard-sft")
    out["base"] = b.eval_version("policy-v0", held)
    sft_cycles = []
    for c in range(1, s.hard_cycles + 1):
        tasks = hard_tasks(s.hard_episodes, seed=50 + c, exclude=banned)
        trajs = sdk.run(tasks, b.env, model="policy", verifier=b.verifier, collector=b.client, app="hard-sft",
                        base_url=b.gw.url + "/v1", budget=held.budget, concurrency=16,
                        sampling=dataclasses.replace(held.sampling, seed=c))
        b.client.flush()
        job = run_job(b.job("hard-sft", "sft"), suite=held, trigger=f"bench hard sft {c}")
        served = job.candidate_success if job.promoted else job.serving_success
        sft_cycles.append({"cycle": c, "rollouts": c * len(tasks), "rollout_success": sum(bool(t.outcome and t.outcome.success)
                                                                                          for t in trajs) / len(trajs),
                           "exported": job.exported, "status": job.status, "reason": job.reason,
                           "candidate_success": job.candidate_success, "serving_success": served})
        print(f"  hard sft cycle {c}: {job.status} {job.reason}", flush=True)
    out["sft"] = sft_cycles
    per_update = s.tasks_per_update * s.group
    pool = hard_tasks(s.pool, seed=77, exclude=banned)
    b.gateway("hard-grpo")
    grpo_cycles = []
    online = OnlineGRPO(GRPOLearner(b.model_dir, grpo), pool=pool, env_factory=b.env, verifier=b.verifier,
                        gateway_url=b.gw.url, admin=b.admin(), adapters_dir=b.state / "adapters-hard", sampler=PassRateSampler(seed=0),
                        version="policy-v0", config=OnlineConfig(group_size=s.group, tasks_per_update=s.tasks_per_update,
                                                                 app="hard-grpo"), collector=b.client)
    for c in range(1, s.hard_cycles + 1):
        res = run_cycle(online, b.job("hard-grpo", "grpo", grpo=grpo), max(1, s.hard_episodes // per_update),
                        suite=held, trigger=f"bench hard grpo {c}")
        served = res.job.candidate_success if res.job.promoted else res.job.serving_success
        grpo_cycles.append({"cycle": c, "rollouts": c * res.rollouts_spent, "rollout_success": res.rollout_success,
                            "dropped": res.rollouts_dropped, "status": res.job.status, "reason": res.job.reason,
                            "serving_success": served,
                            "candidate_success": res.job.candidate_success})
        print(f"  hard grpo cycle {c}: {res.job.status} {res.job.reason} dropped {res.rollouts_dropped}", flush=True)
    out["grpo"] = grpo_cycles
    return out


# ---- TRL -------------------------------------------------------------------------------------------


def run_trl(model_dir: Path, out_dir: Path, sizes: Sizes, lr: float, seed: int = 0) -> dict[str, Any]:
    """TRL GRPOTrainer on the first turn; saves the adapter every `trl_every` updates; returns timings."""
    import torch
    from datasets import Dataset
    from peft import LoraConfig
    from transformers import AutoModelForCausalLM, AutoTokenizer, TrainerCallback
    from trl import GRPOConfig as TRLConfig
    from trl import GRPOTrainer

    def reward(prompts: Any, completions: Any, answer: Any, **_: Any) -> list[float]:
        return [float(first_turn_ok(c[0]["content"] if isinstance(c, list) else c, a)) for c, a in zip(completions, answer)]

    tasks = training_tasks(5000, seed=11)
    ds = Dataset.from_list([{"prompt": [{"role": "user", "content": t.prompt}], "answer": t.data["answer"]} for t in tasks])
    tok = AutoTokenizer.from_pretrained(model_dir)
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32)
    batch = sizes.tasks_per_update * sizes.group // 2  # the anchor: 32 rollouts per update in groups of 8
    args = TRLConfig(output_dir=str(out_dir / "trl"), per_device_train_batch_size=batch, num_generations=sizes.group,
                     max_completion_length=32, learning_rate=lr, lr_scheduler_type="constant", warmup_steps=0, beta=0.0,
                     max_steps=sizes.trl_updates, logging_steps=5, report_to=[], use_cpu=True, temperature=1.0, top_k=0,
                     save_strategy="no", seed=seed, bf16=False, disable_tqdm=True)
    marks: list[dict[str, Any]] = []

    class Checkpoints(TrainerCallback):  # type: ignore[misc]
        def __init__(self) -> None:
            self.paused = 0.0
            self.t0 = time.monotonic()

        def on_step_end(self, a: Any, state: Any, control: Any, model: Any = None, **kw: Any) -> None:
            if state.global_step % sizes.trl_every == 0 or state.global_step == sizes.trl_updates:
                t = time.monotonic()
                path = out_dir / f"trl-step{state.global_step:04d}"
                model.save_pretrained(path)
                marks.append({"update": state.global_step, "rollouts": state.global_step * batch,
                              "train_s": round(t - self.t0 - self.paused, 1), "adapter": str(path)})
                self.paused += time.monotonic() - t

    cb = Checkpoints()
    trainer = GRPOTrainer(model=model, reward_funcs=reward, args=args, train_dataset=ds, processing_class=tok,
                          callbacks=[cb], peft_config=LoraConfig(r=8, lora_alpha=16, target_modules=LORA_TARGETS,
                                                                  task_type="CAUSAL_LM"))
    cb.t0 = time.monotonic()
    trainer.train()
    rewards = [h["reward"] for h in trainer.state.log_history if "reward" in h]
    return {"lr": lr, "rollouts_per_update": batch, "group": sizes.group, "checkpoints": marks,
            "train_reward_first_last": [rewards[0], rewards[-1]] if rewards else None}


# ---- main ------------------------------------------------------------------------------------------


def main(argv: Optional[list[str]] = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--parts", default="async,hard,trl,ours,uniform", help="which parts, in the order they run")
    ap.add_argument("--quick", action="store_true", help="tiny sizes: a smoke run of the whole pipeline")
    ap.add_argument("--json-out", type=Path, default=Path("bench/results/rl.json"))
    ap.add_argument("--lr", type=float, default=GRPOConfig().lr, help="learning rate for ours and TRL")
    ap.add_argument("--trl-lrs", default="", help="comma-separated extra TRL learning rates to also try")
    args = ap.parse_args(argv)
    parts = [p for p in args.parts.split(",") if p]
    if unknown := set(parts) - {"trl", "ours", "hard", "async", "uniform"}:
        ap.error(f"unknown part(s) {sorted(unknown)}")
    sizes = QUICK if args.quick else Sizes()
    grpo = GRPOConfig(lr=args.lr)
    out: dict[str, Any] = {"machine": {"cpus": os.cpu_count(), "platform": platform.platform(),
                                       "loadavg_start": os.getloadavg()}, "sizes": asdict(sizes), "grpo": asdict(grpo),
                           "started": time.strftime("%Y-%m-%dT%H:%M:%S")}
    model_dir = build_base_model(BaseModelConfig())

    def save() -> None:  # after every part, so a later part's failure (or a timeout) keeps the earlier figures
        out["summary"] = summarize(out)
        args.json_out.parent.mkdir(parents=True, exist_ok=True)
        atomic_write(args.json_out, json.dumps(out, indent=2, default=str) + "\n")

    state = Path(tempfile.mkdtemp(prefix="looplift-bench-rl-"))
    t_all = time.monotonic()
    try:
        b = Bench(model_dir, state, sizes)
        try:
            held = b.suite(f"arithmetic-held-out-{sizes.held_out}", held_out_tasks(sizes.held_out))
            pool = training_tasks(sizes.pool, seed=1001)
            for part in parts:  # in the order given: a run cut short by its time limit keeps the parts done
                t_part = time.monotonic()
                if part == "trl":
                    out["trl"] = [run_trl(model_dir, state, sizes, lr) for lr in
                                  [args.lr, *[float(x) for x in args.trl_lrs.split(",") if x]]]
                    b.gateway("trl")
                    for run in out["trl"]:
                        for m in run["checkpoints"]:
                            m.update(b.eval_version(b.admin().load(m["adapter"]).name, held))
                        run["reach_first_turn"] = _reach(run["checkpoints"], "first_turn")
                        run["reach_whole_episode"] = _reach(run["checkpoints"], "whole_episode")
                        print(f"trl lr={run['lr']}: {[(m['rollouts'], m['first_turn'], m['whole_episode']) for m in run['checkpoints']]}",
                              flush=True)
                elif part == "ours":
                    out["ours"] = run_online(b, "ours", pool, held, sizes.cycles,
                                             sampler=PassRateSampler(seed=0, kind_of=digits), grpo=grpo)
                elif part == "hard":
                    out["hard"] = run_hard(b, grpo)
                elif part == "async":
                    out["async"] = run_async_table(b, pool, grpo)
                elif part == "uniform":
                    out["uniform"] = run_online(b, "uniform", pool, held, sizes.cycles, sampler=UniformSampler(0),
                                                grpo=grpo)
                out.setdefault("part_s", {})[part] = round(time.monotonic() - t_part, 1)
                save()
        finally:
            b.close()
    finally:
        shutil.rmtree(state, ignore_errors=True)
    out["machine"]["loadavg_end"] = os.getloadavg()
    out["total_s"] = round(time.monotonic() - t_all, 1)
    save()
    print(json.dumps(out["summary"], indent=2))
    print(f"wrote {args.json_out}")
    return 0


def summarize(out: dict[str, Any]) -> dict[str, Any]:
    """The headline figures and the targets, met or not."""
    s: dict[str, Any] = {}
    ours = (out.get("ours") or {}).get("reach")
    trls = [r.get("reach_whole_episode") for r in out.get("trl") or []]
    trl_best = min((r["rollouts"] for r in trls if r), default=None)
    trl_ft = min((r["reach_first_turn"]["rollouts"] for r in out.get("trl") or [] if r.get("reach_first_turn")), default=None)
    s["rollouts_to_90_whole_episode"] = {"ours": ours and ours["rollouts"], "trl": trl_best, "trl_first_turn": trl_ft}
    s["target_fewer_rollouts_than_trl"] = bool(ours and (trl_best is None or ours["rollouts"] < trl_best))
    if out.get("ours"):
        overheads = [c["non_generation_overhead"] for c in out["ours"]["cycles"]]
        s["non_generation_overhead_per_cycle"] = overheads
        s["target_overhead_le_25pct"] = all(o <= OVERHEAD_MAX for o in overheads)
        s["loop_overhead_excl_environment_per_cycle"] = [c["loop_overhead_excl_environment"] for c in out["ours"]["cycles"]]
    if out.get("ours") and out.get("uniform"):
        a, u = out["ours"]["reach"], out["uniform"]["reach"]
        s["sampler_vs_uniform"] = {"pass_rate": a, "uniform": u, "dropped": [out["ours"]["dropped_total"],
                                                                           out["uniform"]["dropped_total"]]}
    if out.get("async"):
        s["async_speedup"] = out["async"]["speedup"]
    if out.get("hard"):
        h = out["hard"]
        s["hard"] = {"base": h["base"], "sft": [c["serving_success"] for c in h["sft"]],
                     "grpo": [c["serving_success"] for c in h["grpo"]]}
    return s


if __name__ == "__main__":
    raise SystemExit(main())
