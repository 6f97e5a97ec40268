"""Sandboxes on several Docker engines: which engine each new sandbox starts on, and what a dead engine takes out.

An engine is named the way `DOCKER_HOST` names one — `unix:///var/run/docker.sock`, `tcp://10.0.0.7:2376`
(TLS from `DOCKER_TLS_VERIFY`/`DOCKER_CERT_PATH`, as the docker CLI reads them), `ssh://sbx@host` (through
the system `ssh` client and its ~/.ssh/config, as the docker CLI does) — optionally followed by `#N`, its
capacity: how many sandboxes it may hold at once. Without `#N` the capacity is what the engine reports
(`docker info`): min(cores x SANDBOXES_PER_CORE, MEMORY_SHARE of its memory / the sandbox memory limit).
`LOOPLIFT_SANDBOX_ENGINES="unix:///var/run/docker.sock#4 ssh://sbx@gpu-node-2#32"` (spaces or commas)
gives `make_pool` the list.

`EnginePlacer` is the factory a `SandboxPool` calls to start one sandbox. It starts it on the engine with
the least load per unit of capacity among the engines that are up and below their capacity, so a pool
spreads over the engines in proportion to their capacities. A start that fails (the engine does not
answer, the image is missing, a container cannot be created) marks that engine down for a back-off
(ENGINE_RETRY_S, doubling to ENGINE_RETRY_MAX_S) and the same call tries the next engine: the caller
gets a sandbox as long as any engine can take one. A sandbox on an engine that died is found dead by
the pool the next time it would be handed out (its attach stream has ended; no engine round trip) and
replaced through this placer on an engine that answers; sandboxes on other engines never notice. An
engine that comes back is used again once its back-off has passed.

Not here: moving a running sandbox (its workdir dies with its engine; the episode using it gets the
error), copying the image to an engine (it must be there: `looplift sandbox build-image` with
DOCKER_HOST pointing at it, or `docker save | docker load`), a health-check thread (the pool's own
liveness check finds dead sandboxes), and Kubernetes as a backend: a sandbox host there is a Docker
engine on a node, named by its URL like any other (deploy/README.md).
"""

from __future__ import annotations

import math
import os
import re
import threading
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from . import _defaults
from ._config import SandboxConfig
from ._engine import docker_client, require_image
from .errors import EngineUnavailableError, SandboxError, SandboxStartError

__all__ = ["EnginePlacer", "EngineSpec", "engines_from_env"]

_SCHEMES = ("unix://", "tcp://", "ssh://", "npipe://", "http://", "https://")


@dataclass(frozen=True)
class EngineSpec:
    """One Docker engine: its URL and, optionally, how many sandboxes it may hold (None: ask the engine)."""

    url: str
    capacity: int | None = None

    def __post_init__(self) -> None:
        if not self.url.startswith(_SCHEMES):
            raise ValueError(f"engine {self.url!r} is not a Docker engine URL; write it like "
                             "unix:///var/run/docker.sock, tcp://HOST:2376 or ssh://USER@HOST (DOCKER_HOST syntax)")
        if self.capacity is not None and self.capacity < 1:
            raise ValueError(f"engine {self.url}: capacity must be >= 1, got {self.capacity}")

    @classmethod
    def parse(cls, text: str) -> "EngineSpec":
        """`URL` or `URL#N` (N sandboxes at most on that engine)."""
        m = re.fullmatch(r"\s*(\S+?)(?:#(\d+))?\s*", text)
        if m is None:
            raise ValueError(f"engine {text!r}: write it as URL or URL#CAPACITY, e.g. tcp://10.0.0.7:2376#16")
        return cls(m.group(1), int(m.group(2)) if m.group(2) else None)

    def __str__(self) -> str:
        return self.url if self.capacity is None else f"{self.url}#{self.capacity}"


def engines_from_env() -> list[EngineSpec]:
    """The engines `$LOOPLIFT_SANDBOX_ENGINES` names (spaces or commas between them), or [] when unset."""
    raw = os.environ.get(_defaults.ENGINES_ENV, "")
    return [EngineSpec.parse(part) for part in re.split(r"[\s,]+", raw) if part]


def reported_capacity(info: dict[str, Any], config: SandboxConfig) -> int:
    """Sandboxes an engine can hold by what `docker info` reports (see the module docstring)."""
    cores = int(info.get("NCPU") or 1)
    memory = int(info.get("MemTotal") or 0)
    by_cpu = cores * _defaults.SANDBOXES_PER_CORE
    by_memory = math.floor(memory * _defaults.MEMORY_SHARE / (config.memory_mb * 1024 * 1024)) if memory else by_cpu
    return max(1, min(by_cpu, by_memory))


@dataclass
class _Engine:
    spec: EngineSpec
    client: Any = None
    capacity: int = 0
    sandboxes: set[Any] = field(default_factory=set)  # started here and not closed (pruned as they close)
    starting: int = 0
    down_until: float = 0.0
    backoff_s: float = 0.0
    error: str | None = None
    started: int = 0

    def load(self) -> int:
        self.sandboxes = {sb for sb in self.sandboxes if not sb.closed}
        return len(self.sandboxes) + self.starting

    def mark_down(self, error: BaseException) -> None:
        self.backoff_s = min(max(self.backoff_s * 2, _defaults.ENGINE_RETRY_S), _defaults.ENGINE_RETRY_MAX_S)
        self.down_until = time.monotonic() + self.backoff_s
        self.error = f"{type(error).__name__}: {error}"

    def mark_up(self) -> None:
        self.backoff_s, self.down_until, self.error = 0.0, 0.0, None


class EnginePlacer:
    """Starts `DockerSandbox`es spread over `engines` by capacity; a `SandboxPool` factory (call it for one).

    The constructor connects to every engine and checks the image there; an engine that fails is kept
    and marked down (it is retried later). Raises `EngineUnavailableError` naming each engine's problem
    when none can be used at all. `close()` closes the engine clients (after the pool closed its sandboxes).
    """

    def __init__(self, engines: Iterable[EngineSpec | str], config: SandboxConfig | None = None) -> None:
        self.config = config or SandboxConfig()
        specs = [e if isinstance(e, EngineSpec) else EngineSpec.parse(e) for e in engines]
        if not specs:
            raise ValueError("EnginePlacer needs at least one engine URL")
        if len({s.url for s in specs}) != len(specs):
            raise ValueError(f"an engine is named twice in {[str(s) for s in specs]}")
        self._lock = threading.Lock()
        self._engines = [_Engine(s) for s in specs]
        for e in self._engines:
            try:
                self._connect(e)
            except SandboxError as err:
                e.mark_down(err)
        if all(e.client is None for e in self._engines):
            raise EngineUnavailableError("no sandbox engine can be used: " + "; ".join(
                f"{e.spec.url}: {e.error}" for e in self._engines))

    def _connect(self, e: _Engine) -> None:
        client = docker_client(url=e.spec.url)
        try:
            require_image(client, self.config.image)
            e.capacity = e.spec.capacity or reported_capacity(client.info(), self.config)
        except BaseException:
            client.close()
            raise
        e.client = client

    # -- placing --------------------------------------------------------------------------------------

    def __call__(self) -> Any:
        """Start one sandbox on the least-loaded engine (per unit of capacity) that works."""
        from ._docker import DockerSandbox

        while True:
            e = self._reserve()
            if e is None:  # every engine is down (each failed just now or earlier) or full
                raise SandboxStartError("no sandbox engine can take another sandbox: " + "; ".join(
                    self._describe(x) for x in self._engines))
            try:
                if e.client is None:
                    self._connect(e)
                sandbox = DockerSandbox(self.config, client=e.client, engine=e.spec.url)
            except Exception as err:  # noqa: BLE001 - this engine failed; the loop tries the next one
                with self._lock:
                    e.starting -= 1
                    e.mark_down(err)
                continue
            with self._lock:
                e.starting -= 1
                e.sandboxes.add(sandbox)
                e.started += 1
                e.mark_up()
            return sandbox

    def _reserve(self) -> _Engine | None:
        now = time.monotonic()
        with self._lock:
            ready = [e for e in self._engines if e.down_until <= now and e.load() < max(e.capacity, 1)]
            if not ready:
                return None
            # Least loaded per unit of capacity after this start; ties go to the bigger engine.
            best = min(ready, key=lambda e: ((e.load() + 1) / max(e.capacity, 1), -e.capacity))
            best.starting += 1
            return best

    # -- what it knows ----------------------------------------------------------------------------------

    def status(self) -> list[dict[str, Any]]:
        """Per engine: url, capacity, sandboxes (live ones started here), up (its last start or connect worked),
        error (the last failure), retry_in_s (back-off left before it is tried again), started (ever)."""
        now = time.monotonic()
        with self._lock:
            return [{"url": e.spec.url, "capacity": e.capacity, "sandboxes": e.load(),
                     "up": e.error is None and e.client is not None, "error": e.error,
                     "retry_in_s": round(max(0.0, e.down_until - now), 1), "started": e.started} for e in self._engines]

    def _describe(self, e: _Engine) -> str:
        if e.error and e.down_until > time.monotonic():
            return f"{e.spec.url}: down ({e.error})"
        return f"{e.spec.url}: full ({e.load()}/{e.capacity})"

    def close(self) -> None:
        """Close every engine client (call after the sandboxes are closed). Idempotent."""
        for e in self._engines:
            if e.client is not None:
                try:
                    e.client.close()
                except Exception:  # noqa: BLE001, S110 - closing is best effort
                    pass
                e.client = None

