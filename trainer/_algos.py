"""The train step of the retrain job, per algorithm: which export it reads, and how it trains on it.

    sft   export --format sft  (reward >= min_reward)  -> train_sft   (fresh adapter over the base)
    dpo   export --format dpo  (all scored)            -> train_dpo   (fresh adapter, base as reference)
    grpo  export --format grpo (all scored)            -> train_grpo  (continues the serving adapter: the
          importance ratio needs the policy that sampled; each episode's staleness is counted in gateway
          versions between the one that served it and the serving one)

`_job.run_job` calls `export_for` and `train_for` between its idempotency check and its gate, so all
three share the same export -> train -> gate -> publish path.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional

from .dpo import train_dpo
from .errors import ConfigError
from .grpo import train_grpo
from .sft import train_sft

ALGOS = ("sft", "dpo", "grpo")


@dataclass(frozen=True)
class Trained:
    """What the train step produced for the gate."""

    adapter_dir: Path
    train_loss: Optional[float]
    examples: int
    stats: dict[str, Any] = field(default_factory=dict)


def check_algo(algo: str) -> None:
    if algo not in ALGOS:
        raise ConfigError(f"unknown algorithm {algo!r}: choose one of {', '.join(ALGOS)}")


def export_for(config: Any, out: Path) -> Any:
    """Export the data `config.algo` trains on to `out`; returns the export's manifest."""
    from collector import export

    check_algo(config.algo)
    min_reward = config.min_reward if config.algo == "sft" else None  # preferences and groups need the failures too
    return export(config.collector_db, out, format=config.algo, min_reward=min_reward, app=config.app)


def train_for(config: Any, data: Path, out: Path, admin: Any, manifest: Any) -> Trained:
    """Train `config.algo` on `data`; GRPO reads the serving version and the version order from `admin`."""
    if config.algo == "sft":
        sft = train_sft(config.base_model_dir, data, out, config.sft)
        return Trained(sft.adapter_dir, sft.train_loss, sft.examples)
    if config.algo == "dpo":
        dpo = train_dpo(config.base_model_dir, data, out, config.dpo)
        return Trained(dpo.adapter_dir, dpo.train_loss, dpo.pairs, {"accuracy": dpo.accuracy})
    view = admin.versions()
    steps = {v.name: i for i, v in enumerate(sorted(view.versions, key=lambda v: v.created_at))}
    serving = next(v for v in view.versions if v.name == view.serving)
    init = Path(serving.adapter_path) if serving.adapter_path else None
    dropped = f"; the export dropped {manifest.dropped}" if manifest.dropped else ""
    grpo = train_grpo(config.base_model_dir, data, out, config.grpo, init_adapter=init, version_steps=steps,
                      step=steps[serving.name], hint=dropped)
    s = grpo.stats
    return Trained(grpo.adapter_dir, s.loss, s.rollouts,
                   {"init": serving.name, "dropped_uniform": s.dropped_uniform, "dropped_stale": s.dropped_stale})
