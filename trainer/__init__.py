"""looplift `trainer`: post-train the served model from its own verified work.

The tiny base-model builder (the embedded default), LoRA SFT on exported trajectories with the loss on
the model's own tokens only, the eval gate on held-out tasks, and `run_job` — one idempotent retrain
job (export -> train -> gate -> publish) that `trainer run`, cron and `looplift demo` all call. The demo's
orchestration itself lives in the composition root (`looplift._demo`).
DPO and GRPO come in later issues; multi-GPU (torchrun + FSDP) is not wired yet.
"""

from ._base_model import BaseModelConfig, base_model_dir, build_base_model, write_lora_adapter, write_untrained
from ._eval import EvalResult, evaluate, gate
from ._job import JobConfig, JobResult, run_job
from .errors import PublishError, TrainerError, TrainingDataError
from .sft import SFTConfig, SFTResult, train_sft

__all__ = [
    "BaseModelConfig",
    "EvalResult",
    "JobConfig",
    "JobResult",
    "PublishError",
    "SFTConfig",
    "SFTResult",
    "TrainerError",
    "TrainingDataError",
    "base_model_dir",
    "build_base_model",
    "evaluate",
    "gate",
    "run_job",
    "train_sft",
    "write_lora_adapter",
    "write_untrained",
]
