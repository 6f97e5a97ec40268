"""The trajectory contract: defined once here, stored by `collector`, read by `trainer`.

A trajectory is one finished episode of the generate -> execute -> feedback loop. Messages use the
OpenAI chat format; each assistant turn may carry the token ids and logprobs vLLM returned
(`return_token_ids`, `logprobs`) so that RL trainers need not re-tokenize. Bump
`TRAJECTORY_SCHEMA_VERSION` when a field changes meaning.

Versions: 1 — the first contract; 2 — `Step.tool_call` (the tool call a step executed) and
`Trajectory.end_reason` (which budget or event ended the episode). Both are optional, so version-1
trajectories still validate.
"""

from __future__ import annotations

import uuid
from datetime import datetime, timezone
from typing import Any, Literal, Optional

from pydantic import BaseModel, ConfigDict, Field, model_validator

TRAJECTORY_SCHEMA_VERSION = 2

Role = Literal["system", "user", "assistant", "tool"]
EndReason = Literal["done", "max_steps", "max_tokens", "max_seconds", "env_error", "policy_error", "generation_error"]
"""Why an episode ended: the environment said done, a budget ran out (steps, completion tokens, wall
time), or the environment, the policy or the model server failed."""


def _now() -> datetime:
    return datetime.now(timezone.utc)


def new_id() -> str:
    """A client-generated trajectory id (makes ingest idempotent)."""
    return uuid.uuid4().hex


class Task(BaseModel):
    """One unit of work an environment can be reset to."""

    model_config = ConfigDict(extra="forbid")

    id: str = Field(min_length=1, max_length=256)
    prompt: str
    data: dict[str, Any] = Field(default_factory=dict)


class ToolCallFunction(BaseModel):
    """The function part of an OpenAI tool call; `arguments` is the JSON text the model wrote."""

    name: str
    arguments: str


class ToolCall(BaseModel):
    """An OpenAI tool call of an assistant message (`{"id", "type": "function", "function": {...}}`)."""

    id: str
    type: Literal["function"] = "function"
    function: ToolCallFunction


class Message(BaseModel):
    """An OpenAI chat message (tool calls included)."""

    model_config = ConfigDict(extra="forbid")

    role: Role
    content: Optional[str] = None
    name: Optional[str] = None
    tool_calls: Optional[list[ToolCall]] = None
    tool_call_id: Optional[str] = None


class TurnTokens(BaseModel):
    """What the server returned for one assistant turn, when it returned it."""

    model_config = ConfigDict(extra="forbid")

    message_index: int = Field(ge=0, description="index of the assistant message in `messages`")
    prompt_token_ids: Optional[list[int]] = None
    completion_token_ids: Optional[list[int]] = None
    completion_logprobs: Optional[list[float]] = None
    finish_reason: Optional[str] = None


class Step(BaseModel):
    """One generate -> execute -> feedback step."""

    model_config = ConfigDict(extra="forbid")

    index: int = Field(ge=0)
    action: str
    observation: str
    reward: float = 0.0
    done: bool = False
    info: dict[str, Any] = Field(default_factory=dict)
    tool_call: Optional[ToolCall] = Field(default=None, description="the tool call this step executed, if any")
    generate_seconds: float = Field(default=0.0, ge=0)
    execute_seconds: float = Field(default=0.0, ge=0)


class Outcome(BaseModel):
    """What the verifier decided. A verifier that crashed is `error`, never silently reward 0."""

    model_config = ConfigDict(extra="forbid")

    success: bool
    reward: float
    details: dict[str, Any] = Field(default_factory=dict)
    error: Optional[str] = None


class Trajectory(BaseModel):
    """One finished episode."""

    model_config = ConfigDict(extra="forbid")

    schema_version: int = TRAJECTORY_SCHEMA_VERSION
    id: str = Field(default_factory=new_id, min_length=1, max_length=128)
    app: str = Field(default="default", min_length=1, max_length=128)
    task_id: str = Field(min_length=1, max_length=256)
    model: str = Field(description="the model name the application asked for (e.g. the alias `policy`)")
    served_version: Optional[str] = Field(default=None, description="the version that actually answered")
    messages: list[Message]
    turns: list[TurnTokens] = Field(default_factory=list)
    steps: list[Step] = Field(default_factory=list)
    outcome: Optional[Outcome] = None
    end_reason: Optional[EndReason] = None
    metadata: dict[str, Any] = Field(default_factory=dict)
    started_at: datetime = Field(default_factory=_now)
    finished_at: datetime = Field(default_factory=_now)


class TrajectoryBatch(BaseModel):
    """The body of `POST /v1/trajectories`."""

    model_config = ConfigDict(extra="forbid")

    trajectories: list[Trajectory] = Field(min_length=1, max_length=1000)


class IngestResult(BaseModel):
    accepted: int
    duplicates: int
    ids: list[str]


class Feedback(BaseModel):
    """Late user feedback (`POST /v1/feedback`), joined to a trajectory by its id, or by the id of a completion
    the gateway captured (`response_id`: the `id` of the chat completion the client received). Exactly one of
    the two is given. `key_id` names the gateway API key that sent it (set by the gateway, not by clients)."""

    model_config = ConfigDict(extra="forbid")

    trajectory_id: Optional[str] = Field(default=None, min_length=1, max_length=128)
    response_id: Optional[str] = Field(default=None, min_length=1, max_length=256)
    rating: Optional[float] = Field(default=None, ge=-1.0, le=1.0)
    correction: Optional[str] = None
    text: Optional[str] = None
    key_id: Optional[str] = Field(default=None, max_length=64)

    @model_validator(mode="after")
    def _one_target(self) -> "Feedback":
        if (self.trajectory_id is None) == (self.response_id is None):
            raise ValueError("give exactly one of trajectory_id (the SDK's trajectory id) or response_id "
                             "(the id of a completion the gateway captured)")
        return self
