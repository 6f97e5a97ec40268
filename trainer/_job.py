"""`trainer run`: one idempotent retrain job — export -> train -> gate -> publish.

`JobConfig.algo` picks what is exported and trained (`sft`, `dpo`, `grpo`; see `_algos`); a caller with
its own train step (the demo's online GRPO, which rolls out as it trains) passes it as `train` and keeps
the same gate and publish.

Cron, a Kubernetes CronJob or the demo call the same function. Idempotent: the job hashes the exported
data; if the last completed run trained on exactly that data it does nothing (and says so). A run's
state lives in `$LOOPLIFT_HOME/trainer/runs/<run_id>/`: the resolved config, the data, the adapter and
`result.json`, written last — a run without `result.json` crashed and is simply redone.

The gate compares the candidate with the serving version on the held-out tasks, in the same run and
with the same seeds; only a strictly better candidate is promoted. A refused candidate stays
registered (not serving) so it can be inspected; the serving version is untouched.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import json
import time
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Callable, ContextManager, Optional

from sdk import looplift_home
from sdk.infra import atomic_write_json

from ._algos import Trained, check_algo, export_for, train_for
from ._eval import EvalResult, evaluate, gate
from ._lora import jsonable
from .dpo import DPOConfig
from .errors import PublishError
from .grpo import GRPOConfig
from .sft import SFTConfig

Status = Callable[[str], None]


@dataclass(frozen=True)
class JobConfig:
    """Everything one retrain job needs; written as `config.json` in the run directory."""

    base_model_dir: Path
    """The HF directory vLLM serves as the base (the adapter is trained on top of it)."""
    collector_db: str
    """SQLAlchemy URL of the collector's database (the job reads the curated export from it)."""
    gateway_url: str = "http://127.0.0.1:8000"
    admin_token: Optional[str] = None
    """Gateway admin token; default `$LOOPLIFT_ADMIN_TOKEN`, then `$LOOPLIFT_HOME/admin.token`."""
    alias: str = "policy"
    app: Optional[str] = None
    """Only train on trajectories of this app (None: all apps)."""
    min_reward: float = 1.0
    """Rejection sampling: only trajectories with at least this reward are trained on."""
    min_examples: int = 8
    """Skip the run when fewer examples are exported."""
    eval_tasks: int = 100
    eval_seed: int = 0
    margin: float = 0.0
    algo: str = "sft"
    """What to train: "sft" (verified successes), "dpo" (preference pairs), "grpo" (groups of rollouts)."""
    sft: SFTConfig = field(default_factory=SFTConfig)
    dpo: DPOConfig = field(default_factory=DPOConfig)
    grpo: GRPOConfig = field(default_factory=GRPOConfig)
    runs_dir: Optional[Path] = None
    """Default `$LOOPLIFT_HOME/trainer/runs`."""


@dataclass(frozen=True)
class JobResult:
    run_id: str
    status: str
    """"promoted", "rejected" (gate said no) or "skipped" (nothing new / too little data)."""
    reason: str
    exported: int
    train_loss: Optional[float] = None
    candidate: Optional[str] = None
    candidate_success: Optional[float] = None
    serving: Optional[str] = None
    serving_success: Optional[float] = None
    seconds: float = 0.0

    @property
    def promoted(self) -> bool:
        return self.status == "promoted"


def _last_completed(runs: Path) -> Optional[dict[str, Any]]:
    done = sorted(p for p in runs.glob("*/result.json"))
    return json.loads(done[-1].read_text()) if done else None


def run_job(
    config: JobConfig,
    *,
    status: Optional[Status] = None,
    eval_env: Optional[Any] = None,
    around_promote: Optional[Callable[[], ContextManager[Any]]] = None,
    train: Optional[Callable[[Path], Trained]] = None,
) -> JobResult:
    """Run one retrain job. `eval_env` is `(tasks, env_factory, verifier)` for the gate; default: the
    demo task's held-out set with a sandbox pool picked like `looplift up` picks one.
    `around_promote` wraps the alias flip (the demo uses it to keep traffic flowing through the swap).
    `train(run_dir)` replaces export + train (no idempotency check: it brings its own data)."""
    from server import AdminClient

    check_algo(config.algo)
    say = status or (lambda msg: None)
    t0 = time.monotonic()
    runs = Path(config.runs_dir) if config.runs_dir else looplift_home() / "trainer" / "runs"
    run_id = datetime.now(timezone.utc).strftime("%Y%m%dT%H%M%S%fZ")
    run_dir = runs / run_id
    run_dir.mkdir(parents=True)
    atomic_write_json(run_dir / "config.json", jsonable(config))

    def finish(result: JobResult, data_sha: Optional[str] = None) -> JobResult:
        result = dataclasses.replace(result, seconds=round(time.monotonic() - t0, 2))
        atomic_write_json(run_dir / "result.json", jsonable(result) | {"data_sha256": data_sha})
        return result

    admin = AdminClient(config.gateway_url, config.admin_token)
    data_sha: Optional[str] = None
    if train is not None:
        trained = train(run_dir)
        exported = trained.examples
    else:
        say(f"exporting {config.algo} data")
        data = run_dir / "data.jsonl"
        manifest = export_for(config, data)
        exported = manifest.count
        data_sha = manifest.sha256
        last = _last_completed(runs)
        if last is not None and last.get("data_sha256") == data_sha:
            return finish(JobResult(run_id, "skipped", f"no new data since run {last['run_id']}", exported), data_sha)
        if exported < config.min_examples:
            return finish(JobResult(run_id, "skipped", f"only {exported} examples (< {config.min_examples})", exported),
                          data_sha)
        say(f"training LoRA ({config.algo}) on {exported} examples")
        trained = train_for(config, data, run_dir / "adapter", admin, manifest)

    try:
        candidate = admin.load(str(trained.adapter_dir)).name
    except Exception as e:
        raise PublishError(f"the gateway refused the adapter from run {run_id}: {e}") from e
    serving = admin.versions().serving

    tasks, env_factory, verifier = eval_env if eval_env is not None else _default_eval_env(config.eval_tasks)
    say(f"gate: evaluating {candidate} vs {serving} on {len(tasks)} held-out tasks")
    base_url = config.gateway_url.rstrip("/") + "/v1"

    async def both() -> tuple[EvalResult, EvalResult]:
        c = await evaluate(candidate, tasks, env_factory, verifier, base_url=base_url, seed=config.eval_seed)
        s = await evaluate(serving, tasks, env_factory, verifier, base_url=base_url, seed=config.eval_seed)
        return c, s

    cand, serv = asyncio.run(both())
    common = dict(exported=exported, train_loss=trained.train_loss, candidate=candidate, candidate_success=cand.success,
                  serving=serving, serving_success=serv.success)
    if gate(cand, serv, margin=config.margin):
        with around_promote() if around_promote is not None else contextlib.nullcontext():
            admin.promote(candidate)
        return finish(JobResult(run_id, "promoted", f"{cand.success:.0%} > {serv.success:.0%}", **common), data_sha)
    return finish(JobResult(run_id, "rejected", f"{cand.success:.0%} <= {serv.success:.0%}", **common), data_sha)


def _default_eval_env(n: int) -> tuple[Any, Any, Any]:
    from sandboxes import make_pool
    from sandboxes import ArithmeticEnv, ArithmeticVerifier, held_out_tasks

    pool = make_pool()
    return held_out_tasks(n), (lambda: ArithmeticEnv(pool=pool)), ArithmeticVerifier()
