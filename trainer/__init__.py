"""looplift `trainer`: post-train the served model from its own verified work, and gate what it trained.

- The retrain job (`run_job`, `trainer run`): lock -> export -> train (a pluggable `TrainStep`; SFT
  here) -> load the candidate -> gate -> promote, recorded under `$LOOPLIFT_HOME/trainer/runs`
  (`list_runs`, `trainer runs`). Idempotent, one at a time per collector database (`JobLock`), stoppable
  (`StopToken`, SIGTERM) without touching the serving version.
- The gate: an app's own `sdk.EvalSuite` (`load_suite`: `PKG.MODULE:ATTR` or a prompt-suite JSONL;
  `prompt_suite` / `suite_from_holdout` for black-box apps), both versions on the same tasks and
  seeds (`evaluate`), an exact one-sided McNemar test and a per-slice guard (`gate`, `GateConfig`).
- The scheduler (`Scheduler`, `trainer schedule`, `looplift up --retrain`): cron, new-data and drift
  triggers. Settings from `looplift.toml` (`load_config`, `job_config`, `schedule_config`).
- The canary watch (`CanaryWatch`, `trainer canary`, `looplift up --retrain`): promote or drop a canary from
  live outcomes (always-valid sequential tests), roll back a promotion whose live signal falls.
- The tiny base-model builder (the embedded default) and LoRA SFT (`train_sft`).
- RL (`--algo dpo|grpo`): DPO on preference pairs and user corrections (`train_dpo`); GRPO on the exact
  tokens vLLM sampled, off-policy corrected with its logprobs (`GRPOLearner`, `train_grpo`, data as
  `Group`s of `Episode`s, rows by `episode_rows`), and the online loop through the gateway (`OnlineGRPO`,
  `run_cycle`: a new adapter version per update, sync or async, a pass-rate task sampler, a `Timeline` of
  where the wall time goes).

The demo's orchestration lives in the composition root (`looplift._demo`). DPO and GRPO register
their train steps in `TRAIN_STEPS`. `JobConfig.dist` (`DistConfig`: nproc, ddp|fsdp) runs the SFT train stage
on several processes under torchrun (`trainer run --nproc N`); DPO and GRPO run in one process.

`import trainer` is cheap: each public name is imported from its module on first use (PEP 562), so the
`looplift` command can list the `trainer` group — and `looplift up --model DIR` can run — without
importing torch. Add a public name to `_EXPORTS` (name -> module) and to the TYPE_CHECKING block.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from ._quiet import quiet_progress_bars as _quiet_progress_bars

_quiet_progress_bars()  # transformers' and huggingface_hub's bars off, before any module here imports them

_EXPORTS = {
    "BaseModelConfig": "._base_model",
    "base_model_dir": "._base_model",
    "build_base_model": "._base_model",
    "write_lora_adapter": "._base_model",
    "write_untrained": "._base_model",
    "ExtractionModelConfig": "._extraction_model",
    "build_extraction_model": "._extraction_model",
    "extraction_model_dir": "._extraction_model",
    "DEFAULT_STEPS": "._families",
    "FAMILIES": "._families",
    "SIZES": "._families",
    "check_build": "._families",
    "ModelFamily": "._families",
    "build_family_model": "._families",
    "family_tokenizer": "._families",
    "model_family": "._families",
    "NoLoraTargets": "._lora",
    "lora_model": "._lora",
    "lora_targets": "._lora",
    "save_adapter": "._lora",
    "calc_demo": "._tool_demos",
    "lookup_demo": "._tool_demos",
    "CanaryConfig": "._canary",
    "CanaryWatch": "._canary",
    "WatchConfig": "._canary",
    "canary_config": "._config",
    "LoopliftConfig": "._config",
    "DistConfig": "._dist",
    "job_config": "._config",
    "load_config": "._config",
    "schedule_config": "._config",
    "EvalResult": "._eval",
    "evaluate": "._eval",
    "HoldoutSuite": "._from_holdout",
    "suite_from_holdout": "._from_holdout",
    "GateConfig": "._gate",
    "GateDecision": "._gate",
    "SliceRow": "._gate",
    "gate": "._gate",
    "mcnemar_p": "._gate",
    "StopToken": "._interrupt",
    "JobConfig": "._job",
    "JobResult": "._job",
    "run_job": "._job",
    "JobLock": "._lock",
    "CheckerVerifier": "._prompt_suite",
    "ScriptedPromptEnv": "._prompt_suite",
    "prompt_suite": "._prompt_suite",
    "list_runs": "._runs",
    "ScheduleConfig": "._schedule",
    "Scheduler": "._schedule",
    "TRAIN_STEPS": "._train_steps",
    "JobContext": "._steps",
    "TrainData": "._steps",
    "TrainStep": "._steps",
    "Trained": "._steps",
    "load_suite": "._suites",
    "ConfigError": ".errors",
    "DiskSpaceError": ".errors",
    "JobInterrupted": ".errors",
    "PublishError": ".errors",
    "SuiteError": ".errors",
    "TrainerError": ".errors",
    "TrainingDataError": ".errors",
    "CycleResult": "._online",
    "OnlineConfig": "._online",
    "OnlineGRPO": "._online",
    "UpdateRecord": "._online",
    "run_cycle": "._online",
    "Episode": "._rollouts",
    "Group": "._rollouts",
    "Turn": "._rollouts",
    "groups_from_trajectories": "._rollouts",
    "load_grpo_jsonl": "._rollouts",
    "PassRateSampler": "._sampler",
    "UniformSampler": "._sampler",
    "Timeline": "._timeline",
    "TokenRow": "._tokens",
    "episode_rows": "._tokens",
    "DPOConfig": ".dpo",
    "DPOResult": ".dpo",
    "train_dpo": ".dpo",
    "TokenDataError": ".errors",
    "GRPOConfig": ".grpo",
    "GRPOLearner": ".grpo",
    "GRPOResult": ".grpo",
    "UpdateStats": ".grpo",
    "train_grpo": ".grpo",
    "SFTConfig": ".sft",
    "SFTResult": ".sft",
    "train_sft": ".sft",
}

__all__ = [  # a literal, so linters see the TYPE_CHECKING imports below as re-exports; equals _EXPORTS' keys
    "CanaryConfig", "CanaryWatch", "WatchConfig", "canary_config",
    "ExtractionModelConfig", "build_extraction_model", "extraction_model_dir",
    "DEFAULT_STEPS", "FAMILIES", "SIZES", "ModelFamily", "NoLoraTargets", "build_family_model", "calc_demo",
    "check_build", "family_tokenizer", "lookup_demo",
    "lora_model", "lora_targets", "model_family", "save_adapter",
    "BaseModelConfig", "CheckerVerifier", "ConfigError", "CycleResult", "DiskSpaceError", "DistConfig", "DPOConfig", "DPOResult", "Episode",
    "EvalResult", "GRPOConfig", "GRPOLearner", "GRPOResult", "GateConfig", "GateDecision", "Group", "HoldoutSuite",
    "JobConfig", "JobContext", "JobInterrupted", "JobLock", "JobResult", "LoopliftConfig", "OnlineConfig",
    "OnlineGRPO", "PassRateSampler", "PublishError", "SFTConfig", "SFTResult", "ScheduleConfig", "Scheduler",
    "ScriptedPromptEnv", "SliceRow", "StopToken", "SuiteError", "TRAIN_STEPS", "Timeline", "TokenDataError",
    "TokenRow", "TrainData", "TrainStep", "Trained", "TrainerError", "TrainingDataError", "Turn", "UniformSampler",
    "UpdateRecord", "UpdateStats", "base_model_dir", "build_base_model", "episode_rows", "evaluate", "gate",
    "groups_from_trajectories", "job_config", "list_runs", "load_config", "load_grpo_jsonl", "load_suite",
    "mcnemar_p", "prompt_suite", "run_cycle", "run_job", "schedule_config", "suite_from_holdout", "train_dpo",
    "train_grpo", "train_sft", "write_lora_adapter", "write_untrained",
]

if TYPE_CHECKING:
    from ._base_model import BaseModelConfig, base_model_dir, build_base_model, write_lora_adapter, write_untrained
    from ._canary import CanaryConfig, CanaryWatch, WatchConfig
    from ._config import LoopliftConfig, canary_config, job_config, load_config, schedule_config
    from ._dist import DistConfig
    from ._extraction_model import ExtractionModelConfig, build_extraction_model, extraction_model_dir
    from ._families import (
        DEFAULT_STEPS,
        FAMILIES,
        SIZES,
        ModelFamily,
        build_family_model,
        check_build,
        family_tokenizer,
        model_family,
    )
    from ._lora import NoLoraTargets, lora_model, lora_targets, save_adapter
    from ._tool_demos import calc_demo, lookup_demo
    from ._eval import EvalResult, evaluate
    from ._from_holdout import HoldoutSuite, suite_from_holdout
    from sdk import mcnemar_p

    from ._gate import GateConfig, GateDecision, SliceRow, gate
    from ._interrupt import StopToken
    from ._job import JobConfig, JobResult, run_job
    from ._lock import JobLock
    from ._online import CycleResult, OnlineConfig, OnlineGRPO, UpdateRecord, run_cycle
    from ._prompt_suite import CheckerVerifier, ScriptedPromptEnv, prompt_suite
    from ._rollouts import Episode, Group, Turn, groups_from_trajectories, load_grpo_jsonl
    from ._runs import list_runs
    from ._sampler import PassRateSampler, UniformSampler
    from ._schedule import ScheduleConfig, Scheduler
    from ._steps import JobContext, TrainData, Trained, TrainStep
    from ._suites import load_suite
    from ._timeline import Timeline
    from ._tokens import TokenRow, episode_rows
    from ._train_steps import TRAIN_STEPS
    from .dpo import DPOConfig, DPOResult, train_dpo
    from .errors import (
        ConfigError,
        DiskSpaceError,
        JobInterrupted,
        PublishError,
        SuiteError,
        TokenDataError,
        TrainerError,
        TrainingDataError,
    )
    from .grpo import GRPOConfig, GRPOLearner, GRPOResult, UpdateStats, train_grpo
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
