"""looplift SDK: run the generate -> execute -> feedback loop and send every episode to the collector.

Imports only httpx, openai and pydantic: no torch, vllm, docker or sqlmodel.
"""

from ._collector_client import ClientStats, CollectorClient
from ._env import Environment, StepResult, Verifier
from ._home import looplift_home
from ._judge import LLMJudge
from ._loop import Sampling, arun, run
from ._stats import fisher_p, mcnemar_p
from ._suite import Budget, EnvFamily, EvalSuite, Policy, task_slice
from ._types import (
    TRAJECTORY_SCHEMA_VERSION,
    Feedback,
    IngestResult,
    Message,
    Outcome,
    SamplingRecord,
    Step,
    Task,
    ToolCall,
    ToolCallFunction,
    Trajectory,
    TrajectoryBatch,
    TurnTokens,
)
from ._verifiers import AllOf, Gated, Weighted

__all__ = [
    "AllOf",
    "Budget",
    "ClientStats",
    "EnvFamily",
    "EvalSuite",
    "Policy",
    "ToolCall",
    "ToolCallFunction",
    "task_slice",
    "CollectorClient",
    "Sampling",
    "SamplingRecord",
    "arun",
    "fisher_p",
    "mcnemar_p",
    "looplift_home",
    "run",
    "TRAJECTORY_SCHEMA_VERSION",
    "Environment",
    "Feedback",
    "Gated",
    "IngestResult",
    "LLMJudge",
    "Message",
    "Outcome",
    "Step",
    "StepResult",
    "Task",
    "Trajectory",
    "TrajectoryBatch",
    "TurnTokens",
    "Verifier",
    "Weighted",
]
