"""`ModelingVerifier`: grade an episode by rebuilding its model from its actions, never from what it reported.

1. Replay. The steps' code is read from the trajectory's actions (tool calls and ```python blocks,
   parsed exactly as the environment parses them; refused code is skipped again) and run, in order,
   in a clean sandbox from the verifier's own pool. The episode's sandbox, files, printed output and
   step `info` are never read: whatever an episode wrote (a report, a mesh file, a planted script) or
   claimed in text does not exist for the grader.
2. Trusted export. The replayed state.blend is carried (host side, size-capped) into the same sandbox
   after `reset` (every process killed, workdir and /tmp emptied), so the export sees nothing but
   state.blend: no file the steps wrote, so geometry that depends on a file at evaluation time (a
   cache, a linked library, an import node) comes out empty. The exporter runs no agent code, with
   Blender's auto-run of embedded scripts off and its user directories pointing nowhere (`_blender.py`).
3. Checks. `_mesh.grade_model` on the exported mesh, on the host: the structural checks the agent
   saw (closed, bodies, extent, volume, through-holes; not the fixed feature points) and `shape`, the
   worst regional IoU against the exact part (`_similarity`), on sample points drawn now with a fresh
   seed (recorded in `details`), at least the kind's tolerance. The agent never sees `shape`: its
   feedback quotes no expected value, so a part fitted to the feedback (a box or stepped block of the
   right bounds and volume) is still far from the part, and fails here. Success = every check passes;
   reward = 1.0 on success, else 0.0 (binary: a bounding box of the right size passes the size checks,
   and partial credit would pay it for that; the environment's per-step reward is the graded one).

`details` carry every check with its text, the failing ones, the fraction passing (`score`), the steps
replayed and refused, and — from the replay's own per-step exports — the step after which each
failing check last passed and the step that broke it (advisory, like the environment's feedback).
A step that times out in the replay is rolled back as it was in the episode. The verifier raises
only when the sandbox machinery fails (no Docker engine, no 3D image); the loop records that as an
`Outcome` with `error`.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Iterator
from typing import Any, Optional

from sdk import Outcome, Task, Trajectory

from sandboxes import Sandbox, SandboxPool
from ._blender import STATE, Export, read_state, run_step, trusted_export
from ._env import MAX_CODE_CHARS, code_of_action, code_of_call
from ._kinds import make_part
from ._mesh import Check, Spec, check_model, first_break, grade_model, score
from ._rules import refusal

__all__ = ["ModelingVerifier", "step_codes"]


def step_codes(trajectory: Trajectory) -> list[str]:
    """The code of every step the environment would have run, in order (refused code included)."""
    codes = []
    for step in trajectory.steps:
        if step.tool_call is not None:
            code, _ = code_of_call(step.tool_call)
        else:
            code = code_of_action(step.action)
        if code is not None:
            codes.append(code)
    return codes


class ModelingVerifier:
    """Replays an episode's steps in a clean sandbox and checks the model it builds (see the module docstring).

    `pool` is a `SandboxPool` of 3D sandboxes, or a zero-argument callable returning one (made on first
    use, so a family's verifier starts nothing until it grades).
    """

    def __init__(self, pool: SandboxPool | Callable[[], SandboxPool], *, python: str = "python3",
                 timeout_s: float = 60.0) -> None:
        self._pool = pool
        self._python, self._timeout = python, timeout_s

    @contextlib.contextmanager
    def _sandbox(self) -> Iterator[Sandbox]:
        pool = self._pool if isinstance(self._pool, SandboxPool) else self._pool()
        with pool.acquire() as sb:
            yield sb

    def verify(self, task: Task, trajectory: Trajectory) -> Outcome:
        """Rebuild the model from the trajectory's steps and grade it against `task.data["spec"]`."""
        data = task.data["spec"]
        if "solid" not in data and "kind" in task.data:  # a task stored before the exact part was in its spec
            data = make_part(str(task.data["kind"]), int(task.data["seed"])).spec
        spec = Spec.from_data(data)
        t0 = time.monotonic()
        replayed, refused = 0, []
        history: list[tuple[int, Optional[dict[str, bool]]]] = []
        with self._sandbox() as sb:
            for index, code in enumerate(step_codes(trajectory), 1):
                if len(code) > MAX_CODE_CHARS or refusal(code) is not None:
                    refused.append(index)
                    continue
                run = run_step(sb, code, index, python=self._python, timeout=self._timeout)
                replayed += 1
                if run.ok:
                    checks = check_model(run.mesh, spec, run.problem, probes=False)
                    history.append((index, {c.name: c.passed for c in checks}))
            try:
                state = read_state(sb)
            except ValueError as e:
                state, export = None, Export(mesh=None, problem=str(e))
            else:
                sb.reset()  # nothing but state.blend in the sandbox the model is exported from
                if state is not None:
                    sb.write_file(STATE, state)
                export = trusted_export(sb, python=self._python, timeout=self._timeout)
        checks = grade_model(export.mesh, spec, export.problem)
        success = all(c.passed for c in checks)
        details: dict[str, Any] = {
            "score": round(score(checks), 4),
            "checks": {c.name: {"passed": c.passed, "detail": c.detail} for c in checks},
            "failed": [c.detail for c in checks if not c.passed],
            "steps_replayed": replayed, "steps_refused": refused,
            "model_parts": export.report.get("model_parts", []), "triangles": export.report.get("triangles"),
            "broke_at": _broke_at(history, checks), "seconds": round(time.monotonic() - t0, 3),
        }
        return Outcome(success=success, reward=1.0 if success else 0.0, details=details)


def _broke_at(history: list[tuple[int, Optional[dict[str, bool]]]], checks: list[Check]) -> dict[str, int]:
    """For each failing check that passed after some step: the step that broke it."""
    out = {}
    for c in checks:
        found = None if c.passed else first_break(history, c.name)
        if found is not None:
            out[c.name] = found[1]
    return out
