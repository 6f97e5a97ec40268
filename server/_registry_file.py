"""`registry.json`: what the registry keeps across restarts (versions, the alias's serving stack, history,
the running canary).

Read once at start, written atomically (`sdk.infra.atomic_write_json`) after every change, so a reader or
a crash sees the old file or the new one, never half. A file with another schema or alias is ignored; an
unreadable one is moved aside to `registry.corrupt` and the gateway starts fresh rather than staying down.

Deliberately not here: in-flight counts and load states (runtime facts, re-learned from vLLM at start) and
any decision about what to serve (`_registry`).
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Optional

from sdk.infra import atomic_write_json

from ._models import CanaryInfo, HistoryEvent

log = logging.getLogger("looplift.server.registry")

SCHEMA = 1


@dataclass(frozen=True)
class StoredVersion:
    """The persisted part of a version."""

    name: str
    #: None for the base model (version 0).
    adapter_path: Optional[str]
    created_at: datetime
    #: Load state when written (informative only: the registry re-learns it from vLLM at start).
    state: str = "unloaded"
    #: A full-weight version's checkpoint directory.
    model_dir: Optional[str] = None
    #: An adapter's base version.
    base: Optional[str] = None


@dataclass(frozen=True)
class Snapshot:
    """Everything `registry.json` holds."""

    versions: list[StoredVersion]
    #: Serving history, oldest first; the last entry is what the alias serves.
    stack: list[str]
    history: list[HistoryEvent]
    #: The running canary when written (its routed counts as of that write: they are not saved per request).
    canary: Optional[CanaryInfo] = None


class RegistryFile:
    """Reads and writes one alias's `registry.json`."""

    def __init__(self, path: Path, alias: str) -> None:
        self.path = path
        self.alias = alias

    def read(self) -> Optional[Snapshot]:
        """The stored snapshot, or None when there is none usable (missing, other schema/alias, corrupt)."""
        if not self.path.is_file():
            return None
        try:
            data = json.loads(self.path.read_text())
            if data.get("schema") != SCHEMA or data.get("alias") != self.alias:
                log.warning("ignoring %s: other schema or alias", self.path)
                return None
            versions = [
                StoredVersion(name=d["name"], adapter_path=d.get("adapter_path"),
                              created_at=datetime.fromisoformat(d["created_at"]), state=d.get("state", "unloaded"),
                              model_dir=d.get("model_dir"), base=d.get("base"))
                for d in data["versions"]
            ]
            stack = [str(n) for n in data["stack"]]
            history = [HistoryEvent.model_validate(h) for h in data.get("history", [])]
            canary = None if data.get("canary") is None else CanaryInfo.model_validate(data["canary"])
        except (ValueError, KeyError, TypeError, AttributeError) as e:
            # A corrupt file must not keep the gateway down; start fresh and keep the bad file aside.
            log.error("registry file %s unreadable (%s); starting fresh", self.path, e)
            self.path.rename(self.path.with_suffix(".corrupt"))
            return None
        return Snapshot(versions=versions, stack=stack, history=history, canary=canary)

    def write(self, serving: str, snapshot: Snapshot) -> None:
        """Replace the file with `snapshot` (atomically)."""
        atomic_write_json(self.path, {
            "schema": SCHEMA,
            "alias": self.alias,
            "serving": serving,
            "versions": [
                {"name": v.name, "adapter_path": v.adapter_path, "created_at": v.created_at.isoformat(),
                 "state": v.state, "model_dir": v.model_dir, "base": v.base}
                for v in snapshot.versions
            ],
            "stack": snapshot.stack,
            "history": [h.model_dump(mode="json") for h in snapshot.history],
            "canary": None if snapshot.canary is None else snapshot.canary.model_dump(mode="json"),
        })
