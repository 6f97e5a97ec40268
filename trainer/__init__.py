"""looplift `trainer`: post-train the served model from its own verified work, and gate what it trained.

- The retrain job (`run_job`, `trainer run`): lock -> export -> train (a pluggable `TrainStep`; SFT
  here) -> load the candidate -> gate -> promote, recorded under `$LOOPLIFT_HOME/trainer/runs`
  (`list_runs`, `trainer runs`). Idempotent, one at a time per collector database (`JobLock`), stoppable
  (`StopToken`, SIGTERM) without touching the serving version.
- The gate: an app's own `sdk.EvalSuite` (`load_suite`: `PKG.MODULE:ATTR` or a prompt-suite JSONL;
  `prompt_suite` / `suite_from_holdout` for black-box apps), both versions on the same tasks and
  seeds (`evaluate`), an exact one-sided McNemar test and a per-slice guard (`gate`, `GateConfig`).
- The scheduler (`Scheduler`, `trainer schedule`, `looplift up --retrain`): cron, new-data and drift
  triggers. Settings from `looplift.toml` (`load_config`).
- The tiny base-model builder (the embedded default) and LoRA SFT (`train_sft`).

The demo's orchestration lives in the composition root (`looplift._demo`). DPO and GRPO register
their train steps in `TRAIN_STEPS`; multi-GPU (torchrun + FSDP) is not wired yet.
"""

from ._base_model import BaseModelConfig, base_model_dir, build_base_model, write_lora_adapter, write_untrained
from ._config import LoopliftConfig, job_config, load_config, schedule_config
from ._eval import EvalResult, evaluate
from ._from_holdout import HoldoutSuite, suite_from_holdout
from ._gate import GateConfig, GateDecision, SliceRow, gate, mcnemar_p
from ._interrupt import StopToken
from ._job import JobConfig, JobResult, run_job
from ._lock import JobLock
from ._prompt_suite import CheckerVerifier, ScriptedPromptEnv, prompt_suite
from ._runs import list_runs
from ._schedule import ScheduleConfig, Scheduler
from ._steps import TRAIN_STEPS, JobContext, TrainData, Trained, TrainStep
from ._suites import load_suite
from .errors import ConfigError, JobInterrupted, PublishError, SuiteError, TrainerError, TrainingDataError
from .sft import SFTConfig, SFTResult, train_sft

__all__ = [
    "BaseModelConfig",
    "CheckerVerifier",
    "ConfigError",
    "EvalResult",
    "GateConfig",
    "GateDecision",
    "HoldoutSuite",
    "JobConfig",
    "JobContext",
    "JobInterrupted",
    "JobLock",
    "JobResult",
    "LoopliftConfig",
    "PublishError",
    "SFTConfig",
    "SFTResult",
    "ScheduleConfig",
    "Scheduler",
    "ScriptedPromptEnv",
    "SliceRow",
    "StopToken",
    "SuiteError",
    "TRAIN_STEPS",
    "TrainData",
    "TrainStep",
    "Trained",
    "TrainerError",
    "TrainingDataError",
    "base_model_dir",
    "build_base_model",
    "evaluate",
    "gate",
    "job_config",
    "list_runs",
    "load_config",
    "load_suite",
    "mcnemar_p",
    "prompt_suite",
    "run_job",
    "schedule_config",
    "suite_from_holdout",
    "train_sft",
    "write_lora_adapter",
    "write_untrained",
]
