"""looplift `trainer`: post-train the served model from its own verified work.

The tiny base-model builder (the embedded default), LoRA SFT on exported trajectories with the loss on
the model's own tokens only, the eval gate on held-out tasks, and `run_job` — one idempotent retrain
job (export -> train -> gate -> publish) that `trainer run`, cron and `looplift demo` all call. The demo's
orchestration itself lives in the composition root (`looplift._demo`).

`import trainer` is cheap: each public name is imported from its module on first use (PEP 562), so the
`looplift` command can list the `trainer` group — and `looplift up --model DIR` can run — without
importing torch. Add a public name to `_EXPORTS` (name -> module) and to the TYPE_CHECKING block.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

_EXPORTS = {
    "BaseModelConfig": "._base_model",
    "base_model_dir": "._base_model",
    "build_base_model": "._base_model",
    "write_lora_adapter": "._base_model",
    "write_untrained": "._base_model",
    "EvalResult": "._eval",
    "evaluate": "._eval",
    "gate": "._eval",
    "JobConfig": "._job",
    "JobResult": "._job",
    "run_job": "._job",
    "PublishError": ".errors",
    "TrainerError": ".errors",
    "TrainingDataError": ".errors",
    "SFTConfig": ".sft",
    "SFTResult": ".sft",
    "train_sft": ".sft",
}

__all__ = sorted(_EXPORTS)

if TYPE_CHECKING:
    from ._base_model import BaseModelConfig, base_model_dir, build_base_model, write_lora_adapter, write_untrained
    from ._eval import EvalResult, evaluate, gate
    from ._job import JobConfig, JobResult, run_job
    from .errors import PublishError, TrainerError, TrainingDataError
    from .sft import SFTConfig, SFTResult, train_sft


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'trainer' has no attribute {name!r}")
    value = getattr(importlib.import_module(module, __name__), name)
    globals()[name] = value  # later lookups skip this function
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_EXPORTS))
