"""Gateway settings and the state-directory / admin-token helpers.

`GatewaySettings` is the gateway's whole stable configuration; `from_env()` builds it from
`LOOPLIFT_HOME`, `LOOPLIFT_ADMIN_TOKEN` and `LOOPLIFT_API_KEYS`. This module does not start anything
and does not talk to vLLM.
"""

from __future__ import annotations

import os
import re
import secrets
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional

from . import _defaults as D
from .errors import AdminTokenMissingError

_NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$")


def looplift_home() -> Path:
    """The state directory: `$LOOPLIFT_HOME`, or `~/.looplift` when unset."""
    return Path(os.environ.get(D.HOME_ENV) or D.HOME_FALLBACK).expanduser()


def read_admin_token(home: Optional[Path] = None) -> Optional[str]:
    """The admin token from `$LOOPLIFT_ADMIN_TOKEN` or `$LOOPLIFT_HOME/admin.token`, else None."""
    env = os.environ.get(D.ADMIN_TOKEN_ENV)
    if env:
        return env.strip()
    path = (home or looplift_home()) / D.ADMIN_TOKEN_FILE
    if path.is_file():
        token = path.read_text().strip()
        return token or None
    return None


def ensure_admin_token(home: Optional[Path] = None) -> str:
    """Return the admin token, generating one into `$LOOPLIFT_HOME/admin.token` (mode 0600) if none exists."""
    token = read_admin_token(home)
    if token:
        return token
    home = home or looplift_home()
    home.mkdir(parents=True, exist_ok=True)
    path = home / D.ADMIN_TOKEN_FILE
    token = secrets.token_urlsafe(32)
    # O_EXCL: if two processes race, one wins and the other re-reads the winner's token.
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:
        existing = read_admin_token(home)
        if not existing:
            raise AdminTokenMissingError(f"{path} exists but is empty; delete it or set {D.ADMIN_TOKEN_ENV}.") from None
        return existing
    with os.fdopen(fd, "w") as f:
        f.write(token + "\n")
    return token


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
    #: Largest LoRA rank vLLM was started with (`--max-lora-rank`); bigger adapters are refused up front.
    max_lora_rank: int = D.MAX_LORA_RANK

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
    def registry_path(self) -> Path:
        """Where the registry is persisted."""
        return self.state_dir / D.REGISTRY_FILE

    @classmethod
    def from_env(cls, **overrides: Any) -> "GatewaySettings":
        """Settings from `LOOPLIFT_HOME`, `LOOPLIFT_ADMIN_TOKEN` (generated and stored if unset) and
        `LOOPLIFT_API_KEYS` (comma-separated); keyword arguments override any field."""
        home = looplift_home()
        values: dict[str, Any] = {
            "state_dir": home / D.STATE_SUBDIR,
            "api_keys": tuple(k.strip() for k in os.environ.get(D.API_KEYS_ENV, "").split(",") if k.strip()),
        }
        if "admin_token" not in overrides:
            values["admin_token"] = ensure_admin_token(home)
        values.update(overrides)
        return cls(**values)


def version_name(alias: str, n: int) -> str:
    """The name of version `n` under `alias` (`policy`, 2 -> `policy-v2`)."""
    return f"{alias}{D.VERSION_SUFFIX}{n}"
