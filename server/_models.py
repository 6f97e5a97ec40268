"""Wire types of the admin API, shared by the gateway (responses) and `AdminClient` (parsing).

Only pydantic models; no behaviour. The OpenAI-compatible `/v1` routes do not use these: their bodies
are vLLM's and are forwarded as they are.
"""

from __future__ import annotations

from datetime import datetime
from typing import Literal, Optional

from pydantic import BaseModel, ConfigDict, Field

VersionState = Literal["loaded", "unloaded"]


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


class HistoryEvent(BaseModel):
    """One entry of the registry's audit trail."""

    at: datetime
    action: Literal["load", "promote", "rollback", "unload", "restore"]
    version: str
    previous: Optional[str] = None
    detail: Optional[str] = None


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

    #: Adapter directory (peft `save_pretrained` output) readable by the vLLM process.
    path: str = Field(min_length=1)
    #: Version name; default: the next `<alias>-v<N>`.
    name: Optional[str] = None


class PromoteRequest(BaseModel):
    """`POST /admin/promote` body."""

    model_config = ConfigDict(extra="forbid")

    version: str = Field(min_length=1)


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
