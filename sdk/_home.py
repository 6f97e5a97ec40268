"""Where a run's state lives: everything under `LOOPLIFT_HOME` (default `~/.looplift`)."""

from __future__ import annotations

import os
from pathlib import Path


def looplift_home() -> Path:
    """`$LOOPLIFT_HOME`, or `~/.looplift`; created on first use."""
    home = Path(os.environ.get("LOOPLIFT_HOME") or Path.home() / ".looplift").expanduser()
    home.mkdir(parents=True, exist_ok=True)
    return home


def read_secret(env_var: str, filename: str) -> str | None:
    """A secret from `$env_var`, else from `$LOOPLIFT_HOME/filename` (written by `looplift up`), else None."""
    value = os.environ.get(env_var)
    if value:
        return value.strip()
    path = looplift_home() / filename
    return path.read_text().strip() if path.exists() else None
