"""The retrain job's pluggable train step: what data to export and how to train an adapter on it.

The job (`_job.run_job`) is a fixed pipeline — lock, export, idempotence check, train, load the
candidate, gate, promote — and the only part that changes with the algorithm is a `TrainStep`:

    export(ctx) -> TrainData          cheap; its sha256 decides whether the run has anything new
    train(ctx, data) -> Trained       the adapter directory vLLM will load

This module holds the step's types and SFT's step; DPO's and GRPO's are in `_rl_steps`, and the names
`--algo` accepts (`TRAIN_STEPS`, `resolve_train_step`) in `_train_steps`, which imports both. A step
must call `ctx.check_stop()` now and then (e.g. every optimizer step) so that SIGTERM or a stopping
scheduler interrupts it promptly.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Optional

if TYPE_CHECKING:
    from ._job import JobConfig

Status = Callable[[str], None]


@dataclass(frozen=True)
class JobContext:
    """What a train step sees of the running job."""

    config: "JobConfig"
    run_id: str
    run_dir: Path
    say: Status
    """Report progress (one line)."""
    check_stop: Callable[[], None]
    """Raises `JobInterrupted` when the job was asked to stop; call it often."""


@dataclass(frozen=True)
class TrainData:
    """What a step exported for this run."""

    path: Path
    count: int
    """Examples; the job skips the run below `JobConfig.min_examples`."""
    sha256: str
    """Of the data as trained on: the same sha256 (and step config) as a decided run -> nothing new."""


@dataclass(frozen=True)
class Trained:
    """What a step trained."""

    adapter_dir: Path
    train_loss: Optional[float]
    examples: int
    metrics: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class TrainStep:
    """One training algorithm: an export and a train function (see the module docstring)."""

    name: str
    export: Callable[[JobContext], TrainData]
    train: Callable[[JobContext, TrainData], Trained]
    config: Callable[["JobConfig"], Any] = lambda cfg: None
    """The part of the job config this step trains with (hashed into the idempotence key)."""


def _sft_export(ctx: JobContext) -> TrainData:
    from collector import export

    cfg = ctx.config
    # Verified by the app's verifier (min_reward), or, for apps judged by their users, by the final score.
    by_score = cfg.min_score is not None
    manifest = export(cfg.collector_db, ctx.run_dir / "data.jsonl", format="sft",
                      min_reward=None if by_score else cfg.min_reward, min_score=cfg.min_score,
                      app=cfg.app, holdout=cfg.holdout)
    return TrainData(Path(manifest.path), manifest.count, manifest.sha256)


def _sft_train(ctx: JobContext, data: TrainData) -> Trained:
    cfg, out = ctx.config, ctx.run_dir / "adapter"
    if cfg.dist.nproc > 1:
        return _sft_train_torchrun(ctx, data)
    from .sft import train_sft

    def progress(step: int, total: int, loss: float) -> None:
        ctx.check_stop()

    res = train_sft(cfg.base_model_dir, data.path, out, cfg.sft, progress=progress)
    return Trained(res.adapter_dir, res.train_loss, res.examples, {"seconds": round(res.seconds, 2)})


def _sft_train_torchrun(ctx: JobContext, data: TrainData) -> Trained:
    """`trainer sft --nproc N` under torchrun; the job waits, checking for a stop request meanwhile."""
    import json
    import time

    from ._dist import launch_or_raise
    from .sft import sft_module_args

    cfg, out, t0 = ctx.config, ctx.run_dir / "adapter", time.monotonic()
    d = cfg.dist
    ctx.say(f"training on {d.nproc} processes ({d.strategy}, torchrun); log: {ctx.run_dir / 'train.log'}")
    launch_or_raise(d.nproc, sft_module_args(data.path, cfg.base_model_dir, out, cfg.sft, d.strategy),
                    what="SFT", log=ctx.run_dir / "train.log", check_stop=ctx.check_stop)
    meta = json.loads((out / "looplift_sft.json").read_text())
    return Trained(out, meta["train_loss"], meta["examples"],
                   {"seconds": round(time.monotonic() - t0, 2), "processes": d.nproc, "strategy": d.strategy})


SFT_STEP = TrainStep("sft", _sft_export, _sft_train, config=lambda cfg: cfg.sft)
