"""Gateway settings and the state-directory / admin-token helpers.

`GatewaySettings` is the gateway's whole stable configuration;
`from_env()` builds it from `LOOPLIFT_HOME`, `LOOPLIFT_ADMIN_TOKEN`, `LOOPLIFT_API_KEYS` and the capture and
collector variables. This module does not start anything
and does not talk to vLLM.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional

from sdk import looplift_home
from sdk.infra import ensure_secret, read_secret

from . import _defaults as D
from .errors import AdminTokenMissingError

_NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$")


def read_admin_token(home: Optional[Path] = None) -> Optional[str]:
    """The admin token from `$LOOPLIFT_ADMIN_TOKEN` or `$LOOPLIFT_HOME/admin.token`, else None."""
    return read_secret(D.ADMIN_TOKEN_ENV, D.ADMIN_TOKEN_FILE, home)


def ensure_admin_token(home: Optional[Path] = None) -> str:
    """Return the admin token, generating one into `$LOOPLIFT_HOME/admin.token` (mode 0600) if none exists."""
    try:
        return ensure_secret(D.ADMIN_TOKEN_ENV, D.ADMIN_TOKEN_FILE, home)
    except ValueError as e:
        raise AdminTokenMissingError(str(e)) from None


def require_admin_token(token: Optional[str] = None) -> str:
    """The token an admin client should send: the argument, else env, else the token file; raises if none."""
    found = token or read_admin_token()
    if not found:
        raise AdminTokenMissingError(
            f"no admin token: pass --token, set {D.ADMIN_TOKEN_ENV}, or point {D.HOME_ENV} at the "
            f"gateway's state directory (it keeps the token in {D.ADMIN_TOKEN_FILE})."
        )
    return found


def valid_name(name: str) -> bool:
    """Whether `name` can be a version name (letters, digits, `.`, `_`, `-`; at most 64 chars)."""
    return bool(_NAME_RE.match(name))


@dataclass(frozen=True)
class GatewaySettings:
    """Stable configuration of the gateway. Build it with `GatewaySettings.from_env()` in applications."""

    #: Admin bearer token; every `/admin/*` request must send `Authorization: Bearer <admin_token>`.
    admin_token: str
    #: Alias clients request; it always names the serving version. Versions are `<alias>-v<N>`.
    alias: str = D.ALIAS
    #: Client API keys for `/v1/*`; empty means no key is required.
    api_keys: tuple[str, ...] = ()
    #: Directory holding `registry.json` (versions, alias, history); survives restarts.
    state_dir: Path = field(default_factory=lambda: looplift_home() / D.STATE_SUBDIR)
    #: Seconds to wait for vLLM's next bytes (per read, not per request): a stream may run longer
    #: as long as tokens keep coming; a stalled upstream fails with 504 after this long.
    request_timeout_s: float = D.REQUEST_TIMEOUT_S
    #: With several vLLM replicas: seconds between `/health` checks of each (how soon an idle dead replica is
    #: noticed and a recovered one rejoins; a replica that fails a request is taken out at once regardless).
    replica_health_interval_s: float = D.REPLICA_HEALTH_INTERVAL_S
    #: Largest LoRA rank vLLM was started with (`--max-lora-rank`); bigger adapters are refused up front.
    max_lora_rank: int = D.MAX_LORA_RANK
    #: The `--generation-config` of the vLLMs behind the gateway ("vllm", "auto", or a directory): local ones are
    #: started with it (`looplift server start` / `up`), ones started elsewhere (`--upstream`) must have been, since
    #: vLLM does not say. Captured turns record it, and answers carry it (`X-Looplift-Generation-Config`) so the
    #: SDK's turns do too: it says which defaults vLLM sampled the parameters a request left out with.
    generation_config: str = D.GENERATION_CONFIG
    #: Capture every `/v1/chat/completions` exchange as collector data (`_capture`); needs a collector.
    capture: bool = False
    #: Ids (`_auth.key_id`, `k-...`) of API keys whose traffic is captured even when `capture` is off.
    capture_key_ids: frozenset[str] = frozenset()
    #: App name of captured trajectories whose request has no `X-Looplift-App` header.
    capture_app: str = D.CAPTURE_APP
    #: Captured exchanges waiting for the capture worker; beyond it they are dropped (and counted), not waited for.
    capture_queue: int = D.CAPTURE_QUEUE
    #: The collector's base URL (capture, feedback by response id); None: none.
    collector_url: Optional[str] = None
    #: The collector's ingest key (default `$LOOPLIFT_COLLECTOR_KEY` / `$LOOPLIFT_HOME/collector.key` in `from_env`).
    collector_key: Optional[str] = field(default=None, repr=False)
    #: A collector will be connected after the gateway starts (`Gateway.connect_collector`; `looplift up` starts
    #: its collector second): until then `/health` says "degraded", collector "not connected yet", not "ok".
    await_collector: bool = False

    def __post_init__(self) -> None:
        if not self.admin_token:
            raise ValueError(f"admin_token must be non-empty; set {D.ADMIN_TOKEN_ENV} or use from_env().")
        if not valid_name(self.alias):
            raise ValueError(f"alias {self.alias!r} must match {_NAME_RE.pattern}")

    @property
    def base_version(self) -> str:
        """The version name vLLM serves the base model under (`--served-model-name`)."""
        return version_name(self.alias, 0)

    @property
    def capture_spool_dir(self) -> Path:
        """Where captured trajectories wait while the collector is unreachable."""
        return self.state_dir / D.CAPTURE_SPOOL_SUBDIR

    @property
    def registry_path(self) -> Path:
        """Where the registry is persisted."""
        return self.state_dir / D.REGISTRY_FILE

    @classmethod
    def from_env(cls, **overrides: Any) -> "GatewaySettings":
        """Settings from `LOOPLIFT_HOME`, `LOOPLIFT_ADMIN_TOKEN` (generated and stored if unset),
        `LOOPLIFT_API_KEYS` (comma-separated), `LOOPLIFT_CAPTURE` (1/true), `LOOPLIFT_CAPTURE_KEYS` (key ids,
        comma-separated), `LOOPLIFT_COLLECTOR_URL` and `LOOPLIFT_COLLECTOR_KEY` (else `$LOOPLIFT_HOME/collector.key`);
        keyword arguments override any field."""
        home = looplift_home()
        values: dict[str, Any] = {
            "state_dir": home / D.STATE_SUBDIR,
            "api_keys": _csv(os.environ.get(D.API_KEYS_ENV, "")),
            "capture": os.environ.get(D.CAPTURE_ENV, "").strip().lower() in ("1", "true", "yes", "on"),
            "capture_key_ids": frozenset(_csv(os.environ.get(D.CAPTURE_KEYS_ENV, ""))),
            "collector_url": os.environ.get(D.COLLECTOR_URL_ENV) or None,
            "collector_key": read_secret(D.COLLECTOR_KEY_ENV, D.COLLECTOR_KEY_FILE, home),
        }
        if "admin_token" not in overrides:
            values["admin_token"] = ensure_admin_token(home)
        values.update(overrides)
        return cls(**values)


def _csv(value: str) -> tuple[str, ...]:
    return tuple(k.strip() for k in value.split(",") if k.strip())


def version_name(alias: str, n: int) -> str:
    """The name of version `n` under `alias` (`policy`, 2 -> `policy-v2`)."""
    return f"{alias}{D.VERSION_SUFFIX}{n}"
