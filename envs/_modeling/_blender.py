"""Running Blender in a sandbox from the host: one step of the agent's code, or the grader's trusted export.

Both run `_driver.py` (see its docstring for what happens inside) as
`env -i PATH=… HOME=/nonexistent BLENDER_USER_*=/nonexistent python3 -I -c <driver> MODE`: a cleared
environment, isolated mode (no script directory or cwd on sys.path, no PYTHON* variables, no user
site), and Blender's user config, scripts and extensions pointing at a directory that does not exist,
so nothing the agent wrote into the workdir (a startup script, a userpref.blend, a sitecustomize.py)
is ever loaded by Blender or Python. The image's root filesystem is read-only.

`run_step` returns the driver's report and the model it exported (validated on the host by `_mesh`);
`trusted_export` is the grader's: it assumes the caller put nothing but state.blend in a clean
sandbox. `build_models` builds the family's own parts (the oracle's steps) in one Blender process, for
the offline checks and the similarity figures; it never runs an agent's code. Everything that can go
wrong in the sandbox (a timeout, an OOM kill, a crash, a malformed file) comes back as data in
`StepRun`/`Export`; only the sandbox machinery raises.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional

from sandboxes import defaults as _defaults
from sandboxes import ExecResult, Sandbox, SandboxFileError
from ._mesh import MeshError, load_ply

__all__ = ["Export", "StepRun", "blender_python", "build_models", "read_state", "run_step", "trusted_export"]

DRIVER = (Path(__file__).resolve().parent / "_driver.py").read_text(encoding="utf-8")
STATE = "state.blend"
#: Largest state.blend the grader carries from the replay sandbox to the export sandbox.
MAX_STATE_BYTES = 48 * 1024 * 1024
_NOWHERE = "/nonexistent"
_ENV = [f"PATH={_defaults.PATH}", "LANG=C.UTF-8", f"HOME={_NOWHERE}", "TMPDIR=/tmp",
        *(f"BLENDER_USER_{d}={_NOWHERE}" for d in ("RESOURCES", "CONFIG", "SCRIPTS", "DATAFILES", "EXTENSIONS"))]
#: Environment variable naming a python3 with `bpy` for the local backend (development only; the Docker
#: backend always runs the 3D image's python3).
PYTHON_ENV = "LOOPLIFT_BPY_PYTHON"


def blender_python(backend: str) -> str:
    """The interpreter that imports `bpy` in a sandbox of `backend`."""
    if backend == "docker":
        return "python3"
    python = os.environ.get(PYTHON_ENV)
    if not python:
        raise ValueError(f"the modeling family runs Blender in the 3D Docker image; for the local backend set "
                         f"${PYTHON_ENV} to a python3 that can `import bpy` (pip install bpy==4.5.15 in a venv)")
    return python


def _argv(python: str, mode: str) -> list[str]:
    return ["env", "-i", *_ENV, python, "-I", "-c", DRIVER, mode]


def _failure(r: ExecResult, timeout: float) -> str:
    if r.timed_out:
        return f"the step ran past {timeout:g} s and was stopped"
    if r.oom_killed:
        return "the step was killed for using more memory than the sandbox allows"
    tail = (r.stderr or r.stdout).strip()[-800:]
    return f"Blender exited with code {r.exit_code}" + (f": {tail}" if tail else "")


@dataclass
class StepRun:
    """What one step did: the driver's report (None when the step never finished) and the model after it."""

    report: Optional[dict[str, Any]]
    mesh: Optional[Any] = None
    #: Why there is no mesh (empty scene, too large, malformed), or why there is no report.
    problem: Optional[str] = None
    duration_s: float = 0.0
    timed_out: bool = False

    @property
    def ok(self) -> bool:
        """The agent's code ran to the end (and the state was saved)."""
        return bool(self.report and self.report.get("ok"))


@dataclass
class Export:
    """The grader's view of the final model."""

    mesh: Optional[Any]
    problem: Optional[str] = None
    report: dict[str, Any] = field(default_factory=dict)


def _load_mesh(sb: Sandbox, path: str, report: dict[str, Any]) -> tuple[Optional[Any], Optional[str]]:
    if report.get("too_large"):
        return None, (f"the model is too large to check: {report.get('triangles', 0):,} triangles (limit "
                      "200,000); these parts need far fewer")
    try:
        return load_ply(sb.read_file(path)), None
    except SandboxFileError:
        return None, "no model was exported"
    except MeshError as e:
        return None, str(e)
    except Exception as e:  # noqa: BLE001 - a hostile file that trips the parser is a failed load, not a crash
        return None, f"the exported model does not load ({type(e).__name__}: {str(e)[:200]})"


def run_step(sb: Sandbox, code: str, index: int, *, python: str, timeout: float) -> StepRun:
    """Run `code` as step `index` against the sandbox's state.blend and read back what it did."""
    r = sb.exec(_argv(python, "step"), stdin=json.dumps({"code": code, "index": index}), timeout=timeout)
    if not r.ok:
        return StepRun(report=None, problem=_failure(r, timeout), duration_s=r.duration_s, timed_out=r.timed_out)
    try:
        report = json.loads(sb.read_file(".looplift/report.json"))
        if not isinstance(report, dict):
            raise ValueError("not an object")
    except (SandboxFileError, ValueError) as e:
        return StepRun(report=None, problem=f"the step left no readable report ({e})", duration_s=r.duration_s)
    mesh, problem = _load_mesh(sb, ".looplift/step.ply", report)
    return StepRun(report=report, mesh=mesh, problem=problem, duration_s=r.duration_s)


def read_state(sb: Sandbox) -> Optional[bytes]:
    """The sandbox's state.blend, or None when there is none (nothing was ever saved: an empty scene)."""
    try:
        data = sb.read_file(STATE)
    except SandboxFileError:
        return None
    if len(data) > MAX_STATE_BYTES:
        raise ValueError(f"state.blend is {len(data):,} bytes (limit {MAX_STATE_BYTES:,})")
    return data


def trusted_export(sb: Sandbox, *, python: str, timeout: float) -> Export:
    """Export the model from the sandbox's state.blend with no agent code in the process."""
    r = sb.exec(_argv(python, "export"), timeout=timeout)
    if not r.ok:
        return Export(mesh=None, problem=f"the model could not be exported: {_failure(r, timeout)}")
    marks = [line for line in r.stdout.splitlines() if line.startswith("LOOPLIFT-EXPORT ")]
    name = marks[-1].split(" ", 1)[1].strip() if marks else ""
    if not name.startswith("export-") or "/" in name:
        return Export(mesh=None, problem="the model could not be exported: the exporter printed no result")
    try:
        report = json.loads(sb.read_file(f"{name}/report.json"))
    except (SandboxFileError, ValueError) as e:
        return Export(mesh=None, problem=f"the model could not be exported: {e}")
    mesh, problem = _load_mesh(sb, f"{name}/model.ply", report)
    return Export(mesh=mesh, problem=problem, report=report)


def build_models(sb: Sandbox, models: dict[str, list[str]], *, python: str, timeout: float) -> dict[str, Export]:
    """Build each of `models` (name -> the family's own steps, e.g. an oracle's) in one Blender process in `sb`
    and read back its mesh. Trusted code only: the steps share a process and are not checked by `_rules`."""
    request = {"models": [{"name": name, "steps": steps} for name, steps in models.items()]}
    r = sb.exec(_argv(python, "build"), stdin=json.dumps(request), timeout=timeout)
    marks = [line for line in r.stdout.splitlines() if line.startswith("LOOPLIFT-EXPORT ")]
    if not r.ok or not marks:
        raise RuntimeError(f"the reference build failed: {_failure(r, timeout)}")
    directory = marks[-1].split(" ", 1)[1].strip()
    reports = json.loads(sb.read_file(f"{directory}/report.json"))
    out = {}
    for name in models:
        report = reports.get(name) or {"error": "not built"}
        if report.get("error"):
            out[name] = Export(mesh=None, problem=str(report["error"]), report=report)
        else:
            mesh, problem = _load_mesh(sb, f"{directory}/{name}.ply", report)
            out[name] = Export(mesh=mesh, problem=problem, report=report)
    return out
