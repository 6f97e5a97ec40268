"""The trainer's exception tree. A gate that refuses a candidate is a result, not an error.

    TrainerError
    ├── TrainingDataError        the data cannot be trained on (names the file and line, or the trajectory)
    │   └── TokenDataError       a turn lacks the ids/logprobs vLLM returned, or they do not line up
    │                            (names the trajectory and the turn; never answered by re-tokenizing)
    ├── PublishError             the gateway refused to load or promote a version (old version keeps serving)
    └── ConfigError              a setting that cannot work (names the setting and the fix)
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


class ConfigError(TrainerError):
    """A trainer setting that cannot work; the message names it and says what would."""
