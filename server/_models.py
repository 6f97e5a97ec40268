"""Wire types of the admin API, shared by the gateway (responses) and `AdminClient` (parsing).

Only pydantic models; no behaviour. The OpenAI-compatible `/v1` routes do not use these: their bodies
are vLLM's and are forwarded as they are.
"""

from __future__ import annotations

from datetime import datetime
from typing import Literal, Optional, Union

from pydantic import BaseModel, ConfigDict, Field

VersionState = Literal["loaded", "unloaded"]
HistoryAction = Literal["load", "promote", "rollback", "unload", "restore", "canary"]
#: Figures a decision was made on (samples, rates, p-values, thresholds): flat, JSON-ready.
Figures = dict[str, Union[float, int, str, bool, None]]
CanaryDecisionKind = Literal["promote", "drop", "rollback"]


class VersionInfo(BaseModel):
    """One registered version as the admin API reports it."""

    name: str
    #: None for the base model (version 0), which vLLM serves itself.
    adapter_path: Optional[str]
    #: Whether vLLM currently has the adapter loaded (the base model is always loaded).
    state: VersionState
    created_at: datetime
    #: Requests currently being answered by this version (streams count until their last byte).
    in_flight: int = 0
    #: Whether the alias points at this version.
    serving: bool = False
    #: A full-weight version's checkpoint directory (served by its own vLLM set; None for adapters and the base).
    model_dir: Optional[str] = None
    #: An adapter's base: the full-weight version (or the base, version 0) it was loaded on.
    base: Optional[str] = None


class HistoryEvent(BaseModel):
    """One entry of the registry's audit trail."""

    at: datetime
    action: HistoryAction
    version: str
    previous: Optional[str] = None
    detail: Optional[str] = None
    #: For `canary` events: what happened (`start`, `resume`, `promote`, `drop`, `rollback`, `end`) and the figures
    #: an automatic decision was made on.
    canary: Optional[str] = None
    figures: Optional[Figures] = None


class VersionsView(BaseModel):
    """`GET /admin/versions`: the whole registry."""

    alias: str
    serving: str
    versions: list[VersionInfo]
    history: list[HistoryEvent] = Field(default_factory=list)


class SwapResult(BaseModel):
    """`POST /admin/promote` and `/admin/rollback`: what the alias points at now."""

    alias: str
    serving: str
    previous: str
    #: Milliseconds from the request to the alias flip (includes re-loading an unloaded adapter).
    swap_ms: float


class LoadRequest(BaseModel):
    """`POST /admin/versions` body."""

    model_config = ConfigDict(extra="forbid")

    #: Adapter directory (peft `save_pretrained` output) or full HF checkpoint directory (config.json + weights,
    #: no adapter_config.json: a full-weight version, served blue/green) readable by the vLLM process. At most
    #: PATH_MAX (4096 on Linux): no longer one can name a directory.
    path: str = Field(min_length=1, max_length=4096)
    #: Version name; default: the next `<alias>-v<N>`.
    name: Optional[str] = None


class PromoteRequest(BaseModel):
    """`POST /admin/promote` body."""

    model_config = ConfigDict(extra="forbid")

    version: str = Field(min_length=1)


class CanaryRequest(BaseModel):
    """`POST /admin/canary` body: send `fraction` of the alias's traffic to `version` (loaded, not serving)."""

    model_config = ConfigDict(extra="forbid")

    version: str = Field(min_length=1)
    #: Share of alias requests the candidate answers, strictly between 0 and 1.
    fraction: float = Field(gt=0.0, lt=1.0)


class CanaryDecisionRequest(BaseModel):
    """`POST /admin/canary/decision` body: an automatic decision (the trainer's canary watch) with its figures.

    `promote` / `drop` act on the running canary of `version`; `rollback` rolls the alias back from `version`
    (the post-promotion watch). The gateway refuses (409) when `version` is no longer the canary / serving
    version, so a stale decision never acts on a newer state."""

    model_config = ConfigDict(extra="forbid")

    version: str = Field(min_length=1)
    decision: CanaryDecisionKind
    reason: str = Field(min_length=1, max_length=2000)
    figures: Figures = Field(default_factory=dict)


class CanaryInfo(BaseModel):
    """The running canary."""

    version: str
    fraction: float
    started_at: datetime
    #: Alias requests routed since the canary started: to the candidate, and to the serving version.
    routed_candidate: int = 0
    routed_serving: int = 0


class CanaryView(BaseModel):
    """`GET /admin/canary`: the running canary (None when there is none) and the recent canary decisions."""

    alias: str
    serving: str
    canary: Optional[CanaryInfo] = None
    #: `canary` history events (starts, decisions with their figures, ends), oldest first.
    decisions: list[HistoryEvent] = Field(default_factory=list)


class ReplicaInfo(BaseModel):
    """One vLLM upstream as `GET /admin/replicas` reports it."""

    url: str
    #: The vLLM API server's pid when this gateway started it (None for `--upstream` servers).
    pid: Optional[int] = None
    #: Whether it receives requests now (it serves every loaded version).
    healthy: bool
    #: Requests it is answering now.
    in_flight: int = 0
    #: What it serves: the base model and the adapters loaded on it.
    versions: list[str] = Field(default_factory=list)
    #: Why it is out of routing (None while healthy).
    detail: Optional[str] = None
    #: Times this gateway restarted it.
    restarts: int = 0
