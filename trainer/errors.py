"""The trainer's exception tree. A gate that refuses a candidate is a result, not an error.

    TrainerError
    ├── TrainingDataError   the exported data cannot be trained on (names the file and line)
    │   └── TokenDataError  a turn lacks the ids/logprobs vLLM returned, or they do not line up (names the
    │                       trajectory and the turn; RL never answers it by re-tokenizing the text)
    ├── PublishError        the gateway refused to load or promote a version (names the run)
    ├── SuiteError          an eval suite cannot be loaded or is unusable (names the spec and the fix)
    ├── DiskSpaceError      the output's disk cannot hold what the job would write: refused before training
    └── ConfigError         bad `looplift.toml`, bad cron expression, bad option (names the key and the fix)

    JobInterrupted (a BaseException, like KeyboardInterrupt): a running job was asked to stop
    (SIGTERM, the scheduler stopping). It is not a TrainerError on purpose: `except Exception` blocks
    on the way (the agent loop records crashing environments as data) must not swallow it.
"""

from __future__ import annotations

from typing import Optional


class TrainerError(Exception):
    """Base of every trainer error."""


class TrainingDataError(TrainerError):
    """The exported data cannot be trained on (empty, malformed); the message names the file and line."""


class TokenDataError(TrainingDataError):
    """A turn's token ids or logprobs are missing or inconsistent. RL trains on exactly what vLLM returned,
    so this is an error, never a reason to re-tokenize the text."""

    def __init__(self, trajectory_id: str, turn: Optional[int], problem: str) -> None:
        where = f"trajectory {trajectory_id}" + (f", turn {turn}" if turn is not None else "")
        super().__init__(f"{where}: {problem}")
        self.trajectory_id = trajectory_id
        self.turn = turn


class PublishError(TrainerError):
    """The gateway refused to load or promote a version; the old version keeps serving."""


class SuiteError(TrainerError):
    """An eval suite cannot be loaded (bad import path, no tasks, bad checker); the message says what to fix."""


class DiskSpaceError(TrainerError):
    """The disk where a job writes its adapter has less free space than the adapter needs; nothing was trained."""


class ConfigError(TrainerError):
    """A `looplift.toml` key, a cron expression or an option is wrong; the message names it and the fix."""


class JobInterrupted(BaseException):
    """A retrain job was asked to stop; the run is recorded as interrupted and the serving version is untouched."""
