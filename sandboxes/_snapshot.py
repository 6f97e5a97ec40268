"""`EnvSnapshot`: an episode's environment state, saved so the episode can resume after a crash or branch.

A snapshot is the sandbox's workdir (a tar stream from `Sandbox.snapshot()`) plus the small state the
environment object keeps outside the sandbox (the shell's working directory, the task, the files'
original hashes, ...), as JSON. `save` writes both into one tar file atomically (`sdk.infra`), so a
crash while checkpointing leaves the previous checkpoint, never half of a new one.

An environment that supports it has `snapshot() -> EnvSnapshot` and `restore(snapshot)` (which takes
a fresh sandbox from its source, unpacks the workdir and sets the state). Resuming an *episode* also
needs the conversation so far; the caller keeps it next to the snapshot (see tests/test_coding.py).

Deliberately not captured: processes (none outlive a command in either backend), Docker's /tmp, and
the sandbox's limits (the restoring environment's own config applies).
"""

from __future__ import annotations

import io
import json
import os
import tarfile
from dataclasses import dataclass, field
from typing import Any

from sdk import Task
from sdk.infra import atomic_write

__all__ = ["EnvSnapshot"]

_STATE = "state.json"
_WORKDIR = "workdir.tar"


@dataclass(frozen=True)
class EnvSnapshot:
    """The state of one environment between two steps."""

    #: The task the episode runs on.
    task: Task
    #: The workdir as a tar stream (`Sandbox.snapshot()`).
    workdir: bytes
    #: The environment's own JSON-able state (what it needs besides the workdir).
    state: dict[str, Any] = field(default_factory=dict)

    def to_bytes(self) -> bytes:
        """One uncompressed tar holding `state.json` (task + state) and `workdir.tar`."""
        meta = json.dumps({"task": self.task.model_dump(mode="json"), "state": self.state}).encode()
        buf = io.BytesIO()
        with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as tar:
            for name, data in ((_STATE, meta), (_WORKDIR, self.workdir)):
                info = tarfile.TarInfo(name)
                info.size = len(data)
                tar.addfile(info, io.BytesIO(data))
        return buf.getvalue()

    @classmethod
    def from_bytes(cls, data: bytes) -> "EnvSnapshot":
        """The snapshot `to_bytes` wrote; ValueError when `data` is not one."""
        try:
            with tarfile.open(fileobj=io.BytesIO(data), mode="r:") as tar:
                parts = {}
                for name in (_STATE, _WORKDIR):
                    f = tar.extractfile(name)
                    if f is None:
                        raise KeyError(name)
                    parts[name] = f.read()
        except (tarfile.TarError, KeyError) as e:
            raise ValueError(f"not an environment snapshot ({e})") from None
        meta = json.loads(parts[_STATE])
        return cls(task=Task.model_validate(meta["task"]), workdir=parts[_WORKDIR], state=dict(meta["state"]))

    def save(self, path: str | os.PathLike[str]) -> None:
        """Write the snapshot to `path` atomically (the old file stays whole until the new one is)."""
        atomic_write(path, self.to_bytes())

    @classmethod
    def load(cls, path: str | os.PathLike[str]) -> "EnvSnapshot":
        """Read a snapshot `save` wrote."""
        with open(path, "rb") as f:
            return cls.from_bytes(f.read())
