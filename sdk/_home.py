"""Where a run's state lives: everything under `LOOPLIFT_HOME` (default `~/.looplift`)."""

from __future__ import annotations

import os
import secrets
from pathlib import Path
from typing import Optional


def looplift_home() -> Path:
    """`$LOOPLIFT_HOME`, or `~/.looplift`; created on first use."""
    home = Path(os.environ.get("LOOPLIFT_HOME") or Path.home() / ".looplift").expanduser()
    home.mkdir(parents=True, exist_ok=True)
    return home


def read_secret(env_var: str, filename: str, home: Optional[Path] = None) -> Optional[str]:
    """A secret from `$env_var`, else from `home/filename` (home defaults to `$LOOPLIFT_HOME`), else None."""
    value = os.environ.get(env_var)
    if value:
        return value.strip()
    path = (home or looplift_home()) / filename
    return (path.read_text().strip() or None) if path.is_file() else None


def ensure_secret(env_var: str, filename: str, home: Optional[Path] = None) -> str:
    """`read_secret`, or a new random secret stored at `home/filename` with mode 0600.
    Raises ValueError when the file exists but is empty (someone else's half-written or wiped secret)."""
    found = read_secret(env_var, filename, home)
    if found:
        return found
    home = home or looplift_home()
    home.mkdir(parents=True, exist_ok=True)
    path = home / filename
    # O_EXCL: if two processes race, one wins and the other re-reads the winner's secret.
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:
        existing = read_secret(env_var, filename, home)
        if not existing:
            raise ValueError(f"{path} exists but is empty; delete it or set {env_var}.") from None
        return existing
    value = secrets.token_urlsafe(32)
    with os.fdopen(fd, "w") as f:
        f.write(value + "\n")
    return value
