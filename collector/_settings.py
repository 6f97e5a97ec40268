"""`CollectorSettings`: the collector's whole stable configuration, and how it is read from the
environment. Nothing else in the package reads environment variables."""

from __future__ import annotations

import os
from collections.abc import Mapping

from pydantic import BaseModel, ConfigDict, Field, field_validator

from . import _defaults
from ._db import default_db_url
from .errors import ConfigError


class CollectorSettings(BaseModel):
    """How the collector stores data and who may write to it. Frozen; build a new one to change it."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    db_url: str = Field(
        default_factory=default_db_url,
        description="SQLAlchemy URL of the store: `sqlite:///PATH` (default "
        "`sqlite:///$LOOPLIFT_HOME/collector.db`) or `postgresql+psycopg://USER:PASS@HOST/DB`.",
    )
    api_keys: tuple[str, ...] = Field(
        default=(),
        description="Keys accepted on ingest and feedback as `Authorization: Bearer KEY` or `X-API-Key`. "
        "Empty means no authentication (only sensible on loopback).",
    )
    max_body_bytes: int = Field(
        default=_defaults.MAX_BODY_BYTES,
        gt=0,
        description="Largest accepted request body in bytes; bigger ones get 413. Clients split batches.",
    )

    @field_validator("api_keys")
    @classmethod
    def _no_empty_keys(cls, v: tuple[str, ...]) -> tuple[str, ...]:
        if any(not k.strip() for k in v):
            raise ValueError("api_keys must not contain empty keys")
        return tuple(k.strip() for k in v)

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None, **overrides: object) -> CollectorSettings:
        """Settings from `LOOPLIFT_COLLECTOR_DB`, `LOOPLIFT_COLLECTOR_KEYS` (comma-separated) and
        `LOOPLIFT_HOME`; keyword `overrides` (non-None ones) win over the environment.

        Args:
            env: the mapping to read (default `os.environ`); tests pass their own.
        """
        env = os.environ if env is None else env
        kw: dict[str, object] = {}
        db = env.get(_defaults.ENV_DB, "").strip()
        kw["db_url"] = db or default_db_url(env.get(_defaults.ENV_HOME) or None)
        keys = env.get(_defaults.ENV_KEYS, "")
        kw["api_keys"] = tuple(k.strip() for k in keys.split(",") if k.strip())
        kw.update({k: v for k, v in overrides.items() if v is not None})
        try:
            return cls(**kw)  # type: ignore[arg-type]
        except ValueError as e:
            raise ConfigError(f"invalid collector settings: {e}") from e
