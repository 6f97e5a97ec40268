"""The DPO and GRPO train steps of the retrain job (`trainer run --algo dpo|grpo`), beside SFT's.

    dpo   export --format dpo  (every scored trajectory; user corrections as chosen)
          -> `train_dpo`: continues the serving version's adapter, which produced the pairs and is DPO's
          reference (`DPOConfig.reference = "serving"`, the default); a fresh adapter over the base, the base
          as reference, with `reference = "base"` or when the serving version is the base model itself
    grpo  export --format grpo (every scored trajectory, grouped by task and prompt, with vLLM's ids)
          -> `train_grpo`: continues the serving version's adapter, because the importance ratio compares
          the policy being trained with the one that sampled; an episode's staleness is counted in gateway
          versions between the one that served it and the serving one (`GRPOConfig.max_staleness`)

Both keep the job's pipeline (export -> nothing new? -> train -> load -> gate -> promote) unchanged;
the online loop's step (rollouts during training) is `OnlineGRPO.job_step`.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Callable, Optional

from ._steps import JobContext, TrainData, Trained, TrainStep


def _export(fmt: str) -> Callable[[JobContext], TrainData]:
    def export_step(ctx: JobContext) -> TrainData:
        from collector import export

        cfg = ctx.config
        manifest = export(cfg.collector_db, ctx.run_dir / "data.jsonl", format=fmt, app=cfg.app, holdout=cfg.holdout)
        return TrainData(Path(manifest.path), manifest.count, manifest.sha256)

    return export_step


def _dpo_train(ctx: JobContext, data: TrainData) -> Trained:
    from .dpo import train_dpo

    cfg = ctx.config
    serving, init = _serving_adapter(ctx) if cfg.dpo.reference == "serving" else (None, None)
    res = train_dpo(cfg.base_model_dir, data.path, ctx.run_dir / "adapter", cfg.dpo, init_adapter=init,
                    progress=lambda *_: ctx.check_stop())
    return Trained(res.adapter_dir, res.train_loss, res.pairs, {"accuracy": res.accuracy, "seconds": res.seconds,
                                                                "init": serving if init is not None else None})


def _serving_adapter(ctx: JobContext) -> tuple[str, Optional[Path]]:
    """The serving version's name and its adapter directory (None: it is the base model)."""
    from server import AdminClient

    with AdminClient(ctx.config.gateway_url, ctx.config.admin_token) as admin:
        view = admin.versions()
    serving = next(v for v in view.versions if v.name == view.serving)
    return serving.name, Path(serving.adapter_path) if serving.adapter_path else None


def _grpo_train(ctx: JobContext, data: TrainData) -> Trained:
    from server import AdminClient

    from .grpo import train_grpo

    cfg = ctx.config
    with AdminClient(cfg.gateway_url, cfg.admin_token) as admin:
        view = admin.versions()
    order = sorted(view.versions, key=lambda v: v.created_at)
    steps = {v.name: i for i, v in enumerate(order)}
    serving = next(v for v in order if v.name == view.serving)
    init = Path(serving.adapter_path) if serving.adapter_path else None
    res = train_grpo(cfg.base_model_dir, data.path, ctx.run_dir / "adapter", cfg.grpo, init_adapter=init,
                     version_steps=steps, step=steps[serving.name], on_step=ctx.check_stop)
    s = res.stats
    return Trained(res.adapter_dir, s.loss, s.rollouts, {"init": serving.name, "dropped_uniform": s.dropped_uniform,
                                                         "dropped_stale": s.dropped_stale, "seconds": res.seconds})


def _config(name: str) -> Callable[[Any], Any]:
    return lambda cfg: getattr(cfg, name)


DPO_STEP = TrainStep("dpo", _export("dpo"), _dpo_train, config=_config("dpo"))
GRPO_STEP = TrainStep("grpo", _export("grpo"), _grpo_train, config=_config("grpo"))
