"""The modeling family's tasks: 17 kinds x seeds, a fixed held-out split, the prompt every task carries.

Catalogue: every kind of `_kinds.KINDS` with seeds 0..19 (340 instructions). Held-out: seeds 0..3 of
every kind (68 tasks, fixed: membership never depends on the `seed` argument). Train: seeds 4..19
(272), then seeds 20, 21, … when more are asked for — the generator is unbounded, the held-out set is
not. `tasks(split, n, seed)` interleaves the kinds (their order shuffled by `seed`), so the first n
tasks of a split cover min(n, 17) different kinds; `seed` also shuffles the seeds within each kind.
"""

from __future__ import annotations

import random
from typing import Optional

from sdk import Task

from ._kinds import KINDS, Part, make_part

__all__ = ["ACTION_HELP", "CATALOGUE_SEEDS", "HELD_OUT_SEEDS", "prompt", "task", "tasks"]

#: Seeds per kind in the fixed catalogue, and those of them that are held out.
CATALOGUE_SEEDS = 20
HELD_OUT_SEEDS = range(0, 4)

ACTION_HELP = (
    "How to work: drive Blender through its Python API (bpy), one step at a time. Call the `blender` tool with a "
    "Python snippet (or reply with a ```python block). Each snippet runs in a fresh Blender process against the model "
    "saved by the previous steps, with bpy, bmesh, mathutils and math available; look objects up by name "
    "(bpy.data.objects['Plate']), since Python variables do not survive between steps. After each step you get "
    "what it printed, the scene, and every check of the model against this instruction. A snippet that raises "
    "changes nothing. Conventions: 1 Blender unit = 1 mm, z is up. The model is every visible object with its "
    "modifiers applied; hide helper objects such as boolean cutters (obj.hide_set(True)) or delete them. Round "
    "features need at least 32 segments (a multiple of 4), fillets at least 8; a model of more than 200,000 triangles is "
    "not checked (these parts need a few thousand). Steps may import only bpy, bmesh, "
    "mathutils, math, random, itertools, functools, collections, statistics; no file access and no importing or "
    "linking geometry from files. The episode ends when every check passes; reply without code to stop earlier.")


def prompt(part: Part) -> str:
    """The user message of a task: the instruction, its tolerances (as rules, not the expected volume), how to act."""
    spec = part.spec
    return (f"{part.text}\n\nTolerances: every face of the model's bounding box within ±{spec['bounds_tol']:g} mm; "
            "the volume within 0.3% of the exact part's, plus 1% of every round feature's and 5% of every fillet's. "
            "The grade also compares the model's shape with the exact part everywhere: build the part itself."
            f"\n\n{ACTION_HELP}")


def task(kind: str, seed: int) -> Task:
    """The task of `kind` drawn with `seed`."""
    part = make_part(kind, seed)
    return Task(id=f"modeling-{kind}-{seed:03d}", prompt=prompt(part),
                data={"kind": kind, "seed": seed, "slice": part.level, "spec": part.spec})


def _seeds(split: str, per_kind: int) -> list[int]:
    if split == "held_out":
        return list(HELD_OUT_SEEDS)
    if split == "train":
        first = max(HELD_OUT_SEEDS) + 1
        return list(range(first, first + max(per_kind, CATALOGUE_SEEDS - first)))
    raise ValueError(f"unknown split {split!r}; use 'train' or 'held_out'")


def tasks(split: str = "held_out", n: Optional[int] = None, seed: int = 0) -> list[Task]:
    """`n` tasks of `split` (None: the whole fixed catalogue part of it), kinds interleaved (see module doc)."""
    kinds = sorted(KINDS)
    per_kind = len(HELD_OUT_SEEDS) if split == "held_out" else -(-(n or 0) // len(kinds))
    seeds = _seeds(split, per_kind)
    rng = random.Random(seed)
    rng.shuffle(kinds)
    columns = {k: rng.sample(seeds, len(seeds)) for k in kinds}
    order = [(k, columns[k][i]) for i in range(len(seeds)) for k in kinds]
    if n is not None:
        if split == "held_out" and n > len(order):
            raise ValueError(f"the held-out split has {len(order)} tasks; asked for {n}")
        order = order[:n]
    return [task(k, s) for k, s in order]
