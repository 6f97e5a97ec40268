"""Task families on top of sandboxes: tasks, tools, verifiers and oracle/no-op/cheat policies.

Each family is an `sdk.EnvFamily` (`env_families()`: name -> a lazy loader, so listing the families
imports none of them and a family whose optional dependencies are missing fails alone):

    arithmetic   the demo task: write Python for an expression, read the output, answer
    coding       fix a bug in a HumanEval solution with tools, graded on hidden tests
    extraction   read fields from generated financial reports (PDF) through tools
    modeling     build a 3D part with Blender, graded by mesh checks

`CodeEnv` and `ShellEnv` are two general environments (a repository to fix, a terminal) for an
application's own tasks. Everything runs its code in `sandboxes`; this package isolates nothing itself.
`looplift env list` / `looplift env try NAME --policy ...` drive the families from the command line.
"""

from __future__ import annotations

from ._arithmetic import ArithmeticEnv, ArithmeticVerifier, demonstration, held_out_tasks, training_tasks
from ._arithmetic_suite import arithmetic_suite
from ._envs import CodeEnv, ShellEnv, with_pool_stats
from ._families import build_coding_tasks, careless_extraction, env_families, extraction_family, family_sources
from ._pools import BACKEND_ENV, HOST_FIX, HOST_WARNING, POOL_SIZE_ENV, UNSAFE_ENV

__all__ = [
    "ArithmeticEnv",
    "ArithmeticVerifier",
    "BACKEND_ENV",
    "CodeEnv",
    "HOST_FIX",
    "HOST_WARNING",
    "POOL_SIZE_ENV",
    "ShellEnv",
    "UNSAFE_ENV",
    "arithmetic_suite",
    "build_coding_tasks",
    "careless_extraction",
    "demonstration",
    "env_families",
    "extraction_family",
    "family_sources",
    "held_out_tasks",
    "training_tasks",
    "with_pool_stats",
]
