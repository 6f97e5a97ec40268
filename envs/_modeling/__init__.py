"""The `modeling` task family: drive Blender step by step to build a 3D part that meets an instruction.

THE TASK
    An instruction of one of 17 kinds (`_kinds`): primitives (cylinder, hexagonal prism, cone, sphere),
    features (a tube, a plate with a hole, a pocket, a row of separate cubes, an L-bracket, filleted
    edges, stacked steps) and parts of 5-8 dependent operations (hole grids, a flange with a bolt
    circle, a filleted mounting plate, a plate with a boss and bore, pegs, a frame), each with sizes,
    positions, counts and tolerances drawn from a seed. 340 instructions in the fixed catalogue (17 kinds x
    20 seeds), 68 of them held out (`_tasks`); training draws more seeds on demand.

THE ACTIONS (exact format; `_env.ModelingEnv`)
    tool call  blender(code: str)     one step: Python using bpy (Blender 4.5), bmesh, mathutils, math
    text       ```python …```          the same, for models without tool calling (blocks joined)
    text       no python block         ends the episode
    Each step runs in a fresh Blender process against state.blend saved by the previous steps (objects
    are looked up by name); a step that raises is rolled back. Units: mm, z up. The model is every
    visible object with modifiers applied. Steps may not touch files or import geometry (`_rules`).

FEEDBACK AND REWARD
    After every step: what it printed, the scene, and every check (`_mesh`: loads, watertight — with the
    open boundaries located —, bodies, extent along x/y/z, volume, through-holes from the Euler
    characteristic, feature points for holes, pockets and fillets), each said in the task's terms ("too
    tall", "too much material", "hole (column 2, row 1): blocked") with the model's own measurements and
    never the grader's expected values, tolerances or points; and where the model broke: the step after
    which a check stopped passing, and the modifier after which an object's mesh opened. Step reward =
    fraction of checks passing; the episode ends when all pass. Feedback is not the grader: the verifier
    (`_verify`) replays the steps in a clean sandbox, exports the model in one holding only state.blend
    with no agent code running, and grades it (`_mesh.grade_model`): the structural checks plus `shape`,
    the worst regional IoU against the exact part (`_similarity`), sampled at points drawn when it grades,
    at least the kind's tolerance (0.95; 0.94 for boss_plate). Reward 1 when every check passes, else 0.

POLICIES (`_policies`): oracle, noop, cheat-bbox, cheat-handmade-mesh, cheat-import-file, cheat-tamper,
    cheat-claim, cheat-oversize, cheat-fit-feedback.

WHY BLENDER (`bpy`) AND NOT A CAD KERNEL — measured on this machine (2 cores, shared; Docker, cpus=1)
    image      `looplift-sandbox-3d:py311` = debootstrap minbase + python3 + the X11/GL client libraries
               bpy links against + the bpy 4.5.15 wheel and numpy 1.26.4 installed by the host's pip:
               1.29 GB, built in 63 s (debootstrap ~45 s, wheels 8 s from the machine's package cache,
               import 7 s; CI downloads the 373 MB wheel once more). `looplift sandbox build-image --3d`.
    bpy        import 0.68 s cold, 0.37 s warm in the sandbox; a container starts in 0.22 s, so a cold
               start to a first import is ~1.0 s.
    a step     0.46-0.49 s for a typical step (open state.blend, a boolean, save, describe, export),
               0.43 s for the grader's export; cgroup peak ~475 MB (the family allows 1 GiB).
    So a 5-step oracle episode costs ~2.5 s of Blender plus ~3 s to grade (replay + export), within
    CI's budget for a handful of episodes; the image adds ~1-2 minutes to CI's setup. A CAD kernel would
    also install without a compiler (`pip install --dry-run build123d` resolves to wheels: build123d 0.13,
    cadquery-ocp-novtk 8.0.1) and give exact B-rep fillets and booleans, but the issue prefers the real
    application and Blender fits the time and the image, so the kernel was not built or measured.

Sandboxes: Docker only by default (the agent's code is untrusted); `$LOOPLIFT_SANDBOX=local` with
`$LOOPLIFT_BPY_PYTHON` naming a python that imports bpy runs on the host for development.

Not done: curves/NURBS-specific tasks, chamfers, threads, assemblies of several parts with fits,
non-axis-aligned holes in the held-out kinds, grading surface quality; an obfuscated call to an
importer that `_rules` cannot see would be caught only if its geometry were wrong (see `_rules`).
"""

from __future__ import annotations

from typing import Optional

from sdk import Budget, EnvFamily

from sandboxes import defaults as _defaults
from sandboxes import SandboxConfig
from .._pools import FamilyPools, family_backend, family_pool_size
from ._blender import blender_python
from ._env import TOOLS, ModelingEnv
from ._kinds import KINDS, make_part
from ._policies import POLICIES
from ._tasks import tasks
from ._verify import ModelingVerifier

__all__ = ["CONFIG", "KINDS", "POLICIES", "TOOLS", "ModelingEnv", "ModelingVerifier", "family", "make_part", "tasks"]

SYSTEM_PROMPT = ("You are a CAD engineer working in Blender through its Python API. Build the part step by step, read "
                 "the checks after each step, and fix what they report.")
#: Sandbox limits for Blender: it needs ~0.5 GB, more threads than a python3 command, and room for .blend files.
CONFIG = SandboxConfig(image=_defaults.IMAGE_3D, memory_mb=1024, pids=256, timeout_s=60, workdir_mb=128)
_LOCAL_MEMORY_MB = 4096  # RLIMIT_AS counts address space, and Blender maps far more than it uses
_DESCRIPTION = ("3D parts in Blender: build a model from an instruction (sizes, holes, counts, placement) with bpy "
                "snippets, step by step; checked with trimesh (watertight, bounds, volume, holes).")


def family(*, backend: Optional[str] = None, pool_size: Optional[int] = None,
           config: SandboxConfig = CONFIG) -> EnvFamily:
    """The modeling family. `backend`: "docker" (default; `$LOOPLIFT_SANDBOX` when not given) or "local" (needs
    `$LOOPLIFT_BPY_PYTHON`). `pool_size`: sandboxes for episodes running at once (`$LOOPLIFT_SANDBOX_POOL`, else 2)."""
    try:
        import trimesh  # noqa: F401 - the validator's library; fail here, with the fix, not mid-episode
    except ImportError as e:
        raise ImportError(f"the modeling family needs trimesh and rtree ({e}); pip install 'looplift[envs]'") from e
    # Docker unless told otherwise: unlike the other families, no fallback is detected (Blender is in the image).
    name = family_backend(backend) or "docker"
    if name not in ("docker", "local"):
        raise ValueError(f"unknown sandbox backend {name!r}; use docker or local")
    python = blender_python(name)
    if name == "local":
        config = SandboxConfig(**{**config.to_dict(), "memory_mb": max(config.memory_mb, _LOCAL_MEMORY_MB)})  # type: ignore[arg-type]
    pools = FamilyPools(name, family_pool_size(pool_size), config)
    return EnvFamily(
        "modeling", _DESCRIPTION, tasks, lambda: ModelingEnv(pools.get()[0], python=python, timeout_s=config.timeout_s),
        ModelingVerifier(lambda: pools.get()[1], python=python, timeout_s=config.timeout_s), dict(POLICIES),
        budget=Budget(max_steps=12, max_seconds=900), system_prompt=SYSTEM_PROMPT, close=pools.close)
