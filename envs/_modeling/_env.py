"""`ModelingEnv`: build a 3D part in Blender, one `bpy` snippet per step, with checks after every step.

Actions (the exact format; `TOOLS` below):
    tool call  blender(code: str)        run `code` as the next step
    text       a reply with ```python fenced blocks: their code, joined, is the next step
    text       a reply without a python block: the episode ends (the model is what the steps built)

Each step runs in a fresh Blender process in the episode's sandbox (`_blender.run_step`): it opens
state.blend, runs the code, saves state.blend (or, when the code raises, saves nothing: the step is
rolled back). Code that `_rules.refusal` rejects (file access, importing geometry) is not run.

Feedback (the observation of every step): what the step did (ran / raised, with the traceback / refused
/ stopped), what it printed, the scene (each object, whether it is part of the model, its size and
modifiers), every check of `_mesh.check_model` against the task's spec, and where the model broke:
the checks tracked across steps — a check that passed after step j and fails since step k names step
k and its first line — and, inside a step, the first modifier after which an object's mesh is open.
A failing check says what is wrong in the task's terms (open boundaries located on the model, "too
tall", "too much material", "2 separate bodies; the instruction asks for 1", "hole (column 2, row 1):
blocked"), quoting the model's own measurements only: never an expected bound, volume, tolerance or
probe point, so the feedback cannot be read back as a grader to fit. The step's reward is the fraction
of checks passing; `done` when all pass. The grade is not this: the verifier replays the steps and adds
a comparison with the exact part that the agent never sees (`_verify.py`, `_similarity.py`).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any, Optional

from sdk import StepResult, Task, ToolCall

from .._envs import SandboxSource, _clip, _Lease
from ._blender import StepRun, run_step
from ._mesh import UNMEASURABLE, Check, Spec, check_model, first_break, score
from ._rules import refusal

__all__ = ["MAX_CODE_CHARS", "TOOLS", "ModelingEnv", "code_of_action", "code_of_call"]

MAX_CODE_CHARS = 20_000
TOOLS: list[dict[str, Any]] = [{"type": "function", "function": {
    "name": "blender",
    "description": "Run one step: a Python snippet using bpy (Blender 4.5), bmesh, mathutils and math, against the "
                   "model saved by the previous steps. The result is saved unless the snippet raises. Returns what "
                   "it printed, the scene, and the checks of the model against the instruction.",
    "parameters": {"type": "object", "properties": {"code": {"type": "string", "description": "Python source"}},
                   "required": ["code"]}}}]
_PYTHON_BLOCK = re.compile(r"^```(?:python|py)[ \t]*\n(.*?)^```[ \t]*$", re.MULTILINE | re.DOTALL)


def code_of_action(action: str) -> Optional[str]:
    """The code of a text action (its ```python blocks, joined), or None: the reply ends the episode."""
    blocks = _PYTHON_BLOCK.findall(action or "")
    return "\n".join(blocks) if blocks else None


def code_of_call(call: ToolCall) -> tuple[Optional[str], Optional[str]]:
    """(code, None) for a well-formed `blender` call, else (None, what is wrong with it)."""
    if call.function.name != "blender":
        return None, f"unknown tool {call.function.name!r}; the one tool is `blender(code)`"
    try:
        args = json.loads(call.function.arguments or "{}")
    except json.JSONDecodeError as e:
        return None, f"the arguments are not JSON ({e.msg}); send {{\"code\": \"...\"}}"
    code = args.get("code") if isinstance(args, dict) else None
    if not isinstance(code, str) or not code.strip():
        return None, "`blender` needs a non-empty string argument `code`"
    return code, None


def _first_line(code: str) -> str:
    lines = [ln.strip() for ln in code.splitlines() if ln.strip() and not ln.strip().startswith("#")]
    head = lines[0] if lines else ""
    return head if len(head) <= 80 else head[:77] + "..."


@dataclass
class _Record:
    """One executed step, as the localization needs it."""

    index: int
    head: str
    checks: Optional[dict[str, bool]]  # None: the step did not change the model (refused, raised, stopped)


def _scene_lines(report: dict[str, Any]) -> list[str]:
    objects = report.get("objects") or []
    lines = [f"Scene: {report.get('object_count', len(objects))} object(s); the model is "
             f"{', '.join(report.get('model_parts') or []) or 'empty (no visible object with geometry)'}"
             f" ({report.get('triangles', 0):,} triangles)."]
    for o in objects:
        role = "in the model" if o.get("in_model") else "hidden" if o.get("type") in ("MESH", "CURVE") else "helper"
        size = " x ".join(f"{v:g}" for v in o.get("dimensions", []))
        mods = "; ".join(
            f"{m['name']} ({m['type']}{' ' + m['operation'] if m.get('operation') else ''}"
            f"{' with ' + m['object'] if m.get('object') else ''}{', count ' + str(m['count']) if 'count' in m else ''}"
            f"{'' if m.get('enabled', True) else ', disabled'})" for m in o.get("modifiers", []))
        line = f"  - {o['name']} ({o['type']}, {role}): location ({', '.join(f'{v:g}' for v in o.get('location', []))})"
        line += f", size {size}" if size else ""
        line += f", {o['triangles']:,} triangles" if "triangles" in o else ""
        line += f", {o['open_edges']} open or non-manifold edges" if o.get("open_edges") else ""
        lines.append(line + (f"; modifiers: {mods}" if mods else ""))
    return lines


def _names(names: list[str], limit: int = 4) -> str:
    shown = ", ".join(f'"{n}"' for n in names[:limit])
    return shown + (f" and {len(names) - limit} more" if len(names) > limit else "")


def _localize(history: list[_Record], now: list[Check], report: Optional[dict[str, Any]]) -> list[str]:
    heads = {rec.index: rec.head for rec in history}
    steps = [(rec.index, rec.checks) for rec in history]
    broken: dict[tuple[int, int], list[str]] = {}
    for c in now:
        found = None if c.passed else first_break(steps, c.name)
        if found is not None:
            broken.setdefault(found, []).append(c.name)
    out = []
    for (passed_at, broke), names in sorted(broken.items()):
        this = " (this step)" if broke == history[-1].index else ""
        out.append(f"  - {_names(names)} passed after step {passed_at} and fail{'s' if len(names) == 1 else ''} since "
                   f"step {broke}{this}: {heads[broke]}")
    for o in (report or {}).get("objects") or []:
        if not o.get("in_model") or not o.get("open_edges"):
            continue
        if o.get("broken_by_modifier"):
            out.append(f"  - object {o['name']!r}: its mesh is closed before modifier {o['broken_by_modifier']!r} and "
                       f"has {o['open_edges']} open or non-manifold edges after it")
        else:
            out.append(f"  - object {o['name']!r}: its own mesh (before any modifier) has {o['open_edges']} open or "
                       "non-manifold edges")
    return out


class ModelingEnv:
    """`sdk.Environment` for the modeling family (see the module docstring for actions and feedback)."""

    def __init__(self, source: SandboxSource, *, python: str = "python3", timeout_s: float = 60.0,
                 output_chars: int = 1500) -> None:
        self._lease = _Lease(source, "ModelingEnv")
        self._python, self._timeout, self._output_chars = python, timeout_s, output_chars
        self._task: Optional[Task] = None
        self._spec: Optional[Spec] = None
        self._history: list[_Record] = []
        self._score = 0.0  # of the model as it stands (a step that changes nothing keeps it)
        #: False hides the tool from the model (text actions only, for models without tool calling).
        self.offer_tools = True

    @property
    def tools(self) -> list[dict[str, Any]]:
        """The one tool, `blender(code)` (none when `offer_tools` is False)."""
        return TOOLS if self.offer_tools else []

    def reset(self, task: Task) -> str:
        """Start on `task` in a clean sandbox (an empty scene); returns the instruction."""
        self._spec = Spec.from_data(task.data["spec"])
        self._lease.acquire()
        self._task, self._history, self._score = task, [], 0.0
        return task.prompt

    def step(self, action: str) -> StepResult:
        """A text action: its ```python blocks are the next step; without one the episode ends."""
        code = code_of_action(action)
        if code is None:
            return self._lease.annotate(StepResult(
                observation="No ```python block: the episode ends with the model as it is.", done=True,
                info={"ended": True}))
        return self._lease.annotate(self._run(code))

    def step_tool(self, call: ToolCall) -> StepResult:
        """A `blender(code)` tool call; a malformed call is answered with what is wrong, and nothing runs."""
        code, problem = code_of_call(call)
        if code is None:
            return self._lease.annotate(StepResult(observation=f"Not run: {problem}.", info={"format_error": True}))
        return self._lease.annotate(self._run(code))

    def _run(self, code: str) -> StepResult:
        sb = self._lease.sandbox
        if self._spec is None or sb is None:
            raise RuntimeError("call ModelingEnv.reset(task) before step()")
        index = len(self._history) + 1
        if len(code) > MAX_CODE_CHARS:
            why: Optional[str] = f"the code is {len(code):,} characters (limit {MAX_CODE_CHARS:,})"
        else:
            why = refusal(code)
        if why is not None:
            self._history.append(_Record(index, _first_line(code), None))
            return StepResult(observation=f"Step {index}: refused, not run ({why}). The model is unchanged.",
                              reward=self._score, info={"step": index, "refused": why})
        run = run_step(sb, code, index, python=self._python, timeout=self._timeout)
        return self._feedback(index, code, run)

    def _feedback(self, index: int, code: str, run: StepRun) -> StepResult:
        assert self._spec is not None
        info: dict[str, Any] = {"step": index, "duration_s": round(run.duration_s, 3), "timed_out": run.timed_out}
        if run.report is None:
            self._history.append(_Record(index, _first_line(code), None))
            info["error"] = run.problem
            return StepResult(observation=f"Step {index}: not completed: {run.problem}. The model is as before this "
                                          "step.", reward=self._score, info=info)
        rep = run.report
        lines = [f"Step {index}: ran in {run.duration_s:.2f} s; the model is saved." if run.ok else
                 f"Step {index}: raised an error, so it was rolled back (the model is as before this step):\n"
                 + str(rep.get("error") or "").rstrip()]
        if rep.get("output"):
            lines.append("Output:\n" + _clip(str(rep["output"]), self._output_chars).rstrip())
        lines += _scene_lines(rep)
        checks = check_model(run.mesh, self._spec, run.problem)
        self._history.append(_Record(index, _first_line(code), {c.name: c.passed for c in checks} if run.ok else None))
        passed = sum(c.passed for c in checks)
        lines.append(f"Checks: {passed} of {len(checks)} pass.")
        unmeasurable = [c.name for c in checks if not c.passed and c.detail.endswith(UNMEASURABLE)]
        lines += [f"  FAIL {c.detail}" for c in checks if not c.passed and c.name not in unmeasurable]
        if unmeasurable:
            lines.append(f"  FAIL not measurable until the surface is closed: {_names(unmeasurable, 6)}")
        ok_names = [c.name for c in checks if c.passed]
        if ok_names:
            lines.append(f"  pass: {', '.join(ok_names)}")
        where = _localize(self._history, checks, rep) if passed < len(checks) else []
        if where:
            lines += ["Where it broke:", *where]
        done = passed == len(checks)
        if done:
            lines.append("All checks pass. The episode ends; the grade also compares the model's shape with the exact "
                         "part.")
        self._score = score(checks)
        info.update(ok=run.ok, checks={c.name: c.passed for c in checks}, score=round(self._score, 4))
        return StepResult(observation="\n".join(lines), reward=self._score, done=done, info=info)

    def close(self) -> None:
        """Give the sandbox back (to its pool, or close it)."""
        self._lease.release()
        self._task = None
