"""The trajectory contract: defined once here, stored by `collector`, read by `trainer`.

A trajectory is one finished episode of the generate -> execute -> feedback loop. Messages use the
OpenAI chat format; each assistant turn may carry the token ids and logprobs vLLM returned
(`return_token_ids`, `logprobs`) so that RL trainers need not re-tokenize. Bump
`TRAJECTORY_SCHEMA_VERSION` when a field changes meaning.

Versions: 1 — the first contract; 2 — `Step.tool_call` (the tool call a step executed) and
`Trajectory.end_reason` (which budget or event ended the episode); 3 — `TurnTokens.sampling` (the sampling
parameters a turn was generated with, `SamplingRecord`). Each is optional, so older trajectories still
validate (a turn without `sampling` was recorded before it existed: its sampling is unknown).
"""

from __future__ import annotations

import math
import uuid
from datetime import datetime, timezone
from typing import Any, Literal, Mapping, Optional

from pydantic import BaseModel, ConfigDict, Field, model_validator

TRAJECTORY_SCHEMA_VERSION = 3

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


#: vLLM's neutral sampling defaults (what a request that leaves a parameter out gets from a vLLM started with
#: `--generation-config vllm`): under exactly these the sampled tokens come from the model's own distribution.
#: `top_k` 0 is "no top-k" (vLLM reads -1 the same way).
NEUTRAL_SAMPLING: dict[str, float] = {"temperature": 1.0, "top_p": 1.0, "top_k": 0, "min_p": 0.0,
                                      "repetition_penalty": 1.0, "presence_penalty": 0.0, "frequency_penalty": 0.0}
GENERATION_CONFIG_VLLM = "vllm"
"""The `--generation-config` value under which vLLM fills a left-out parameter with `NEUTRAL_SAMPLING`."""
# Request fields besides the seven that reshape the distribution tokens are sampled from (vLLM 0.32's chat
# completion request; `guided_*` are older vLLMs' names of `structured_outputs`).
_CONSTRAINT_FIELDS = ("logit_bias", "allowed_token_ids", "bad_words", "structured_outputs", "guided_json",
                      "guided_regex", "guided_choice", "guided_grammar", "thinking_token_budget")


def _number(value: Any) -> Optional[float]:
    """A request's number (vLLM also reads numeric strings); None for anything else, NaN and infinities."""
    if isinstance(value, bool) or not isinstance(value, (int, float, str)):
        return None
    try:
        number = float(value)
    except ValueError:
        return None
    return number if math.isfinite(number) else None


class SamplingRecord(BaseModel):
    """The sampling parameters one assistant turn was generated with, so a trainer can tell whether the
    logprobs it carries are those of the distribution its tokens were sampled from.

    Each parameter is what the request asked; where the request left it out, the value the server applied:
    vLLM's neutral default (`NEUTRAL_SAMPLING`) when the server ran with `--generation-config vllm`, else None
    (the server filled it from the model's `generation_config.json`, or which config it used is unknown).
    `generation_config` is the server's `--generation-config` ("vllm", "auto" (the model's), or a directory),
    None when the recorder could not tell (the SDK talking to a server that does not send
    `X-Looplift-Generation-Config`). `constraints` names the request's other fields that reshape the sampled
    distribution: `logit_bias`, `min_tokens`, `allowed_token_ids`, `bad_words`, structured outputs, a JSON
    `response_format`, `tool_choice=required` or a named tool (vLLM forces those with a JSON schema), beam search.
    """

    model_config = ConfigDict(extra="forbid")

    temperature: Optional[float] = None
    top_p: Optional[float] = None
    top_k: Optional[int] = Field(default=None, description="0: no top-k (a request's -1 is recorded as 0)")
    min_p: Optional[float] = None
    repetition_penalty: Optional[float] = None
    presence_penalty: Optional[float] = None
    frequency_penalty: Optional[float] = None
    generation_config: Optional[str] = None
    constraints: list[str] = Field(default_factory=list)

    @classmethod
    def from_request(cls, body: Mapping[str, Any], generation_config: Optional[str]) -> "SamplingRecord":
        """The record of a chat completion request `body` (its JSON fields, `extra_body` merged in) served by a
        vLLM whose `--generation-config` is `generation_config` (None: unknown)."""
        values: dict[str, Any] = {}
        for name, neutral in NEUTRAL_SAMPLING.items():
            raw = body.get(name)
            if raw is None:
                values[name] = neutral if generation_config == GENERATION_CONFIG_VLLM else None
                continue
            number = _number(raw)
            if name == "top_k" and number is not None:
                values[name] = max(int(number), 0)  # -1 and 0 both mean no top-k
            else:
                values[name] = number
        return cls(**values, generation_config=generation_config, constraints=_constraints(body))


def _constraints(body: Mapping[str, Any]) -> list[str]:
    found = [name for name in _CONSTRAINT_FIELDS if body.get(name) not in (None, {}, [], "")]
    min_tokens = _number(body.get("min_tokens"))
    if min_tokens is not None and min_tokens > 0:
        found.append("min_tokens")
    fmt = body.get("response_format")
    kind = fmt.get("type") if isinstance(fmt, dict) else None
    if kind not in (None, "text"):
        found.append(f"response_format={kind}")
    choice = body.get("tool_choice")
    if body.get("tools") and (choice == "required" or isinstance(choice, dict)):
        found.append("tool_choice=required" if choice == "required" else "tool_choice=named")
    if body.get("use_beam_search"):
        found.append("use_beam_search")
    return found


class TurnTokens(BaseModel):
    """What the server returned for one assistant turn, when it returned it."""

    model_config = ConfigDict(extra="forbid")

    message_index: int = Field(ge=0, description="index of the assistant message in `messages`")
    prompt_token_ids: Optional[list[int]] = None
    completion_token_ids: Optional[list[int]] = None
    completion_logprobs: Optional[list[float]] = None
    finish_reason: Optional[str] = None
    sampling: Optional[SamplingRecord] = Field(
        default=None, description="the sampling parameters of the request (None: recorded before schema 3)")


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
