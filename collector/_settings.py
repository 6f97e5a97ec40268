"""`CollectorSettings`: the collector's whole stable configuration, and how it is read from the
environment. Nothing else in the package reads environment variables."""

from __future__ import annotations

import os
from collections.abc import Mapping

from typing import TYPE_CHECKING, Literal

from pydantic import BaseModel, ConfigDict, Field, SecretStr, field_validator

from . import _defaults
from ._engine import default_db_url
from .errors import ConfigError

if TYPE_CHECKING:
    from ._anonymize import Anonymizer


class LangfuseSettings(BaseModel):
    """Where the collector exports anonymized trajectories and scores to (Langfuse's own settings)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    public_key: str = Field(min_length=1, description="`LANGFUSE_PUBLIC_KEY`.")
    secret_key: SecretStr = Field(description="`LANGFUSE_SECRET_KEY`.")
    host: str | None = Field(default=None, description="`LANGFUSE_HOST` (or `LANGFUSE_BASE_URL`); the SDK's "
                             "default (Langfuse Cloud) when unset.")
    queue_size: int = Field(default=_defaults.LANGFUSE_QUEUE, gt=0, description="Items waiting for the exporter; "
                            "past this they are dropped and counted, never waited for.")


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

    anonymize_mode: Literal["placeholder", "hmac", "fake"] = Field(
        default="placeholder",
        description="What replaces detected PII before storage: `placeholder` (`<EMAIL_1>`, numbered per "
        "trajectory), `hmac` (`<EMAIL_3f9a1c2b>`, the same in every trajectory for one key) or `fake` "
        "(format-preserving fake values, deterministic for a value and a key). Env: "
        "`LOOPLIFT_COLLECTOR_ANONYMIZE_MODE`.",
    )
    pseudonym_key: SecretStr | None = Field(
        default=None,
        description="Key for `hmac` and `fake` pseudonyms. Env: `LOOPLIFT_COLLECTOR_PSEUDONYM_KEY`; when unset "
        "the key in `$LOOPLIFT_HOME/collector_pseudonym.key` is used, created (random, mode 0600) on first use. "
        "Changing it changes every pseudonym.",
    )

    admin_token: SecretStr | None = Field(
        default=None,
        description="The operators' token (the gateway's admin token): the dashboard's data endpoints need "
        "`Authorization: Bearer TOKEN`. Env: `LOOPLIFT_ADMIN_TOKEN`, else `$LOOPLIFT_HOME/admin.token` when it "
        "exists. Unset: the dashboard answers 503 and says how to set it.",
    )
    gateway_url: str | None = Field(
        default=None,
        description="The gateway whose versions, swaps and health the dashboard shows (its admin API, with "
        "`admin_token`). Env: `LOOPLIFT_GATEWAY_URL`; `looplift up` passes its own.",
    )
    langfuse: LangfuseSettings | None = Field(
        default=None,
        description="Export anonymized trajectories and scores to Langfuse; on when `LANGFUSE_PUBLIC_KEY` and "
        "`LANGFUSE_SECRET_KEY` are set (unless `LOOPLIFT_COLLECTOR_LANGFUSE=off`).",
    )

    def make_anonymizer(self, *, preload: bool = False) -> Anonymizer:
        """The anonymizer ingest uses for these settings (the pseudonym key resolved as documented)."""
        from ._anonymize import Anonymizer

        key = self.pseudonym_key.get_secret_value() if self.pseudonym_key is not None else None
        return Anonymizer(self.anonymize_mode, key, preload=preload)

    @field_validator("api_keys")
    @classmethod
    def _no_empty_keys(cls, v: tuple[str, ...]) -> tuple[str, ...]:
        if any(not k.strip() for k in v):
            raise ValueError("api_keys must not contain empty keys")
        return tuple(k.strip() for k in v)

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None, **overrides: object) -> CollectorSettings:
        """Settings from `LOOPLIFT_COLLECTOR_DB`, `LOOPLIFT_COLLECTOR_KEYS` (comma-separated),
        `LOOPLIFT_COLLECTOR_ANONYMIZE_MODE`, `LOOPLIFT_COLLECTOR_PSEUDONYM_KEY`, `LOOPLIFT_HOME`,
        `LOOPLIFT_ADMIN_TOKEN`, `LOOPLIFT_GATEWAY_URL` and Langfuse's `LANGFUSE_*`;
        keyword `overrides` (non-None ones) win over the environment.

        Args:
            env: the mapping to read (default `os.environ`); tests pass their own.
        """
        env = os.environ if env is None else env
        kw: dict[str, object] = {}
        db = env.get(_defaults.ENV_DB, "").strip()
        kw["db_url"] = db or default_db_url(env.get(_defaults.ENV_HOME) or None)
        keys = env.get(_defaults.ENV_KEYS, "")
        kw["api_keys"] = tuple(k.strip() for k in keys.split(",") if k.strip())
        mode = env.get(_defaults.ENV_ANONYMIZE_MODE, "").strip()
        if mode:
            kw["anonymize_mode"] = mode
        pkey = env.get(_defaults.ENV_PSEUDONYM_KEY, "").strip()
        if pkey:
            kw["pseudonym_key"] = pkey
        elif (overrides.get("anonymize_mode") or mode or "placeholder") != "placeholder" and not overrides.get("pseudonym_key"):
            # The key file lives under this environment's LOOPLIFT_HOME (created 0600 if missing).
            from pathlib import Path

            from sdk.infra import ensure_secret

            from ._anonymize import PSEUDONYM_KEY_FILE

            home = Path(env.get(_defaults.ENV_HOME) or _defaults.DEFAULT_HOME).expanduser()
            try:
                kw["pseudonym_key"] = ensure_secret(_defaults.ENV_PSEUDONYM_KEY, PSEUDONYM_KEY_FILE, home)
            except (OSError, ValueError) as e:
                raise ConfigError(f"cannot read or create the pseudonym key under {home}: {e}") from e
        kw.update(_observe_from_env(env))
        kw.update({k: v for k, v in overrides.items() if v is not None})
        try:
            return cls(**kw)  # type: ignore[arg-type]
        except ValueError as e:
            raise ConfigError(f"invalid collector settings: {e}") from e


def _observe_from_env(env: Mapping[str, str]) -> dict[str, object]:
    """The dashboard's and the Langfuse export's settings from the environment (see the fields)."""
    from pathlib import Path

    kw: dict[str, object] = {}
    token = env.get(_defaults.ENV_ADMIN_TOKEN, "").strip()
    if not token:
        path = Path(env.get(_defaults.ENV_HOME) or _defaults.DEFAULT_HOME).expanduser() / _defaults.ADMIN_TOKEN_FILE
        try:
            token = path.read_text().strip() if path.is_file() else ""
        except OSError:
            token = ""
    if token:
        kw["admin_token"] = token
    gateway = env.get(_defaults.ENV_GATEWAY_URL, "").strip()
    if gateway:
        kw["gateway_url"] = gateway
    pk = env.get(_defaults.ENV_LANGFUSE_PUBLIC_KEY, "").strip()
    sk = env.get(_defaults.ENV_LANGFUSE_SECRET_KEY, "").strip()
    switch = env.get(_defaults.ENV_LANGFUSE_EXPORT, "").strip().lower()
    if switch in ("off", "0", "false", "no") or not (pk or sk):
        return kw
    if not (pk and sk):
        missing = _defaults.ENV_LANGFUSE_SECRET_KEY if pk else _defaults.ENV_LANGFUSE_PUBLIC_KEY
        raise ConfigError(f"{missing} is not set but its pair is: the Langfuse export needs both keys (or set "
                          f"{_defaults.ENV_LANGFUSE_EXPORT}=off to leave it off)")
    host = (env.get(_defaults.ENV_LANGFUSE_HOST) or env.get(_defaults.ENV_LANGFUSE_BASE_URL) or "").strip() or None
    kw["langfuse"] = LangfuseSettings(public_key=pk, secret_key=SecretStr(sk), host=host)
    return kw
