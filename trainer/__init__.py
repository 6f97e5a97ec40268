"""looplift `trainer`: post-train the served model from its own work.

The tiny base-model builder (the embedded default); LoRA SFT on verified successes (`sft.py`), DPO on
preference pairs and user corrections (`dpo.py`), GRPO on the exact tokens vLLM sampled with off-policy
correction (`grpo.py`) and its online loop through the gateway (`OnlineGRPO`: pass-rate task sampler,
a new adapter name per update, sync or async); the eval gate on held-out tasks; and `run_job` — one
idempotent retrain job (export -> train -> gate -> publish) that `trainer run --algo sft|dpo|grpo`,
cron and `looplift demo` all call. The demo's orchestration itself lives in the composition root
(`looplift._demo`). Multi-GPU (torchrun + FSDP) is not wired yet.
"""

from ._algos import ALGOS, Trained
from ._base_model import BaseModelConfig, base_model_dir, build_base_model, write_lora_adapter, write_untrained
from ._eval import EvalResult, evaluate, gate
from ._job import JobConfig, JobResult, run_job
from ._online import CycleResult, OnlineConfig, OnlineGRPO, UpdateRecord, run_cycle
from ._rollouts import Episode, Group, Turn, groups_from_trajectories, load_grpo_jsonl
from ._sampler import PassRateSampler, UniformSampler
from ._timeline import Timeline
from ._tokens import TokenRow, episode_rows
from .dpo import DPOConfig, DPOResult, train_dpo
from .errors import ConfigError, PublishError, TokenDataError, TrainerError, TrainingDataError
from .grpo import GRPOConfig, GRPOLearner, GRPOResult, UpdateStats, train_grpo
from .sft import SFTConfig, SFTResult, train_sft

__all__ = [
    "ALGOS",
    "BaseModelConfig",
    "ConfigError",
    "CycleResult",
    "DPOConfig",
    "DPOResult",
    "Episode",
    "EvalResult",
    "GRPOConfig",
    "GRPOLearner",
    "GRPOResult",
    "Group",
    "JobConfig",
    "JobResult",
    "OnlineConfig",
    "OnlineGRPO",
    "PassRateSampler",
    "PublishError",
    "SFTConfig",
    "SFTResult",
    "Timeline",
    "TokenDataError",
    "TokenRow",
    "Trained",
    "TrainerError",
    "TrainingDataError",
    "Turn",
    "UniformSampler",
    "UpdateRecord",
    "UpdateStats",
    "base_model_dir",
    "build_base_model",
    "episode_rows",
    "evaluate",
    "gate",
    "groups_from_trajectories",
    "load_grpo_jsonl",
    "run_cycle",
    "run_job",
    "train_dpo",
    "train_grpo",
    "train_sft",
    "write_lora_adapter",
    "write_untrained",
]
