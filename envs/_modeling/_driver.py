"""The in-sandbox side of the modeling family: runs one step of the agent's `bpy` code, or exports the model.

Like `sandboxes/_inner.py`, this file is never imported on the host: its source is passed as
`python3 -I -c <source> MODE` to the 3D image's python3 (Blender 4.5 as the `bpy` module, numpy), with
the request as JSON on stdin. It works in the current directory (the sandbox's workdir):

    state.blend                the model between steps (Blender's own file format)
    .looplift/report.json      what the last step did (written by `step`)
    .looplift/step.ply         the model after the last step (written by `step`)

Modes.
  step    open state.blend (an empty scene when there is none), run the request's `code` with the
          names bpy, bmesh, mathutils and math bound, its print() output captured. When the code
          finishes, save state.blend; when it raises (or calls exit()), do not: the step is rolled
          back and the model is as before it. Then describe the scene and export the model.
  export  the grader's trusted export: open state.blend without running any of the agent's code and
          write the model into a fresh directory whose name it prints on its last line
          (`LOOPLIFT-EXPORT <dir>`). The host runs it with `env -i` (HOME and Blender's user
          directories pointing nowhere) after every process the agent started is gone, in a sandbox
          that holds nothing but state.blend.
  build   the family's own reference builds (the oracle's steps, never an agent's): for each request
          model, an empty scene, its steps run one after another in this process, and the model
          written as <name>.ply into a fresh directory named on the last line (`LOOPLIFT-EXPORT <dir>`),
          with a report.json of each model's triangles or error. One process for many parts, so
          the offline checks (`_blender.build_models`) see the oracle's meshes in seconds, not minutes.

The model is every visible object that has geometry (`obj.visible_get()`, types MESH, CURVE, SURFACE,
META, FONT) with its modifiers applied and its world transform, triangulated. It is written as a binary
little-endian PLY (float32 x, y, z; uchar-count int32 faces) with numpy, which the host validates
strictly before trimesh loads it. More than MAX_TRIANGLES triangles are not exported (the report
says so): a model that large is an error in these tasks, and the grader's work stays bounded.

The scene report lists each object (name, type, visible, location, dimensions, modifiers with their
main settings, triangle count and open edges — edges not shared by exactly two faces — of its
evaluated mesh), and for a visible object whose evaluated mesh has open edges but whose base mesh
has none, the first modifier after which it has them (found by re-evaluating the stack with the
modifiers after it switched off): that is the operation that broke the mesh.

Python scripts embedded in .blend files never run (auto-run is off and `open_mainfile` is called with
`use_scripts=False`). Standard library, numpy and bpy only.
"""

from __future__ import annotations

import contextlib
import io
import json
import math
import os
import sys
import tempfile
import time
import traceback
from types import ModuleType
from typing import Any

# bpy, its objects and the numpy arrays built from them are typed Any: bpy exists only inside Blender.
STATE = "state.blend"
OUT = ".looplift"
MAX_TRIANGLES = 200000
MAX_OUTPUT = 6000
MAX_OBJECTS = 40
GEOMETRY = ("MESH", "CURVE", "SURFACE", "META", "FONT")
EXPORT_MARK = "LOOPLIFT-EXPORT "


class _Capped(io.StringIO):
    """print() target that keeps the first MAX_OUTPUT characters."""

    def write(self, s: str) -> int:
        room = MAX_OUTPUT - self.tell()
        if room > 0:
            super().write(s[:room])
        return len(s)


def _open_state(bpy: Any) -> None:
    if os.path.exists(STATE):
        bpy.ops.wm.open_mainfile(filepath=os.path.abspath(STATE), load_ui=False, use_scripts=False)
    else:
        bpy.ops.wm.read_factory_settings(use_empty=True)


def _round(v: Any, n: int = 3) -> list[float]:
    return [round(float(x), n) for x in v]


def _modifier_info(m: Any) -> dict[str, Any]:
    info: dict[str, Any] = {"name": m.name, "type": m.type, "enabled": bool(m.show_viewport)}
    for key in ("operation", "solver", "count", "use_relative_offset", "relative_offset_displace", "use_constant_offset",
                "constant_offset_displace", "use_object_offset", "width", "segments", "limit_method", "thickness",
                "levels", "angle", "axis"):
        if hasattr(m, key):
            value = getattr(m, key)
            if hasattr(value, "__len__") and not isinstance(value, str):
                value = _round(value)
            elif isinstance(value, float):
                value = round(value, 4)
            info[key] = value
    for key in ("object", "offset_object", "operand_type", "collection"):
        target = getattr(m, key, None)
        if target is not None and not isinstance(target, str):
            info[key] = target.name
        elif isinstance(target, str):
            info[key] = target
    return info


def _mesh_arrays(np: ModuleType, ev: Any) -> tuple[Any, Any, int]:
    """(vertices in world space (V, 3), triangles (T, 3), open edge count) of an evaluated object."""
    me = ev.to_mesh()
    try:
        me.calc_loop_triangles()
        nv, nt = len(me.vertices), len(me.loop_triangles)
        co = np.empty(nv * 3, dtype=np.float64)
        me.vertices.foreach_get("co", co)
        co = co.reshape(nv, 3)
        mw = np.array(ev.matrix_world, dtype=np.float64)
        co = co @ mw[:3, :3].T + mw[:3, 3]
        tris = np.empty(nt * 3, dtype=np.int64)
        me.loop_triangles.foreach_get("vertices", tris)
        ne = len(me.edges)
        open_edges = 0
        if ne and len(me.loops):
            edge_idx = np.empty(len(me.loops), dtype=np.int64)
            me.loops.foreach_get("edge_index", edge_idx)
            open_edges = int(np.count_nonzero(np.bincount(edge_idx, minlength=ne) != 2))
        elif ne:
            open_edges = ne
        return co, tris.reshape(nt, 3), open_edges
    finally:
        ev.to_mesh_clear()


def _open_edges(np: ModuleType, bpy: Any, obj: Any) -> int:
    dg = bpy.context.evaluated_depsgraph_get()
    return _mesh_arrays(np, obj.evaluated_get(dg))[2]


def _breaking_modifier(np: ModuleType, bpy: Any, obj: Any) -> str | None:
    """The first enabled modifier of `obj` after which its evaluated mesh has open edges, or None."""
    mods = [m for m in obj.modifiers if m.show_viewport]
    if not mods:
        return None
    saved = [m.show_viewport for m in obj.modifiers]
    try:
        for m in mods:
            m.show_viewport = False
        bpy.context.view_layer.update()
        if _open_edges(np, bpy, obj):
            return None  # already open before any modifier: the base mesh is the problem
        for m in mods:
            m.show_viewport = True
            bpy.context.view_layer.update()
            if _open_edges(np, bpy, obj):
                broken: str = m.name
                return broken
        return None
    finally:
        for m, s in zip(obj.modifiers, saved):
            m.show_viewport = s
        bpy.context.view_layer.update()


def _scene(np: ModuleType, bpy: Any, localize: bool) -> tuple[list[dict[str, Any]], list[tuple[str, Any, Any]]]:
    """(object descriptions, model parts) of the current scene; parts are (name, vertices, triangles)."""
    dg = bpy.context.evaluated_depsgraph_get()
    objects: list[dict[str, Any]] = []
    parts: list[tuple[str, Any, Any]] = []
    for obj in sorted(bpy.context.scene.objects, key=lambda o: o.name):
        visible = bool(obj.visible_get()) and obj.type in GEOMETRY
        d: dict[str, Any] = {"name": obj.name, "type": obj.type, "in_model": visible, "location": _round(obj.location),
             "dimensions": _round(obj.dimensions), "modifiers": [_modifier_info(m) for m in obj.modifiers]}
        if obj.type in GEOMETRY:
            try:
                co, tris, open_edges = _mesh_arrays(np, obj.evaluated_get(dg))
            except RuntimeError as e:  # an object without geometry (e.g. an empty curve)
                d["error"] = str(e)
                co, tris, open_edges = None, None, 0
            if tris is not None:
                d["triangles"], d["open_edges"] = int(len(tris)), open_edges
                if len(tris):
                    d["bounds"] = [_round(co.min(axis=0)), _round(co.max(axis=0))]
                if visible:
                    parts.append((obj.name, co, tris))
                    if open_edges and localize and obj.type == "MESH":
                        d["broken_by_modifier"] = _breaking_modifier(np, bpy, obj)
        objects.append(d)
    return objects, parts


def _write_ply(np: ModuleType, path: str, parts: list[tuple[str, Any, Any]]) -> None:
    verts = [co for _, co, _ in parts]
    offset, faces = 0, []
    for _, co, tris in parts:
        faces.append(tris + offset)
        offset += len(co)
    v = np.concatenate(verts).astype("<f4") if verts else np.zeros((0, 3), "<f4")
    f = np.concatenate(faces) if faces else np.zeros((0, 3), np.int64)
    rec = np.zeros(len(f), dtype=[("n", "u1"), ("v", "<i4", (3,))])
    rec["n"], rec["v"] = 3, f
    header = ("ply\nformat binary_little_endian 1.0\nelement vertex %d\nproperty float x\nproperty float y\n"
              "property float z\nelement face %d\nproperty list uchar int vertex_indices\nend_header\n"
              % (len(v), len(f)))
    with open(path, "wb") as out:
        out.write(header.encode("ascii"))
        out.write(v.tobytes())
        out.write(rec.tobytes())


def _export(np: ModuleType, bpy: Any, ply_path: str, localize: bool) -> dict[str, Any]:
    objects, parts = _scene(np, bpy, localize)
    triangles = sum(len(t) for _, _, t in parts)
    result: dict[str, Any] = {"objects": objects[:MAX_OBJECTS], "object_count": len(objects),
              "model_parts": [name for name, _, _ in parts], "triangles": int(triangles)}
    if triangles > MAX_TRIANGLES:
        result["too_large"] = True
    else:
        _write_ply(np, ply_path, parts)
    return result


def _agent_traceback(name: str) -> str:
    lines = traceback.format_exception(*sys.exc_info())
    keep = [lines[0]] if lines and lines[0].startswith("Traceback") else []
    for chunk in lines[1:]:
        if chunk.lstrip().startswith('File "') and name not in chunk:
            continue  # the driver's and Blender's own frames say nothing about the agent's code
        keep.append(chunk)
    return "".join(keep)[-3000:]


def step(bpy: Any, np: ModuleType, req: dict[str, Any]) -> None:
    os.makedirs(OUT, exist_ok=True)
    for name in ("report.json", "step.ply"):
        with contextlib.suppress(FileNotFoundError):
            os.remove(os.path.join(OUT, name))
    name = "<step %d>" % int(req.get("index", 0))
    _open_state(bpy)
    out = _Capped()
    error = None
    t0 = time.monotonic()
    try:
        code = compile(req["code"], name, "exec")
        namespace = {"__name__": "__step__", "bpy": bpy, "math": math}
        import bmesh
        import mathutils
        namespace.update(bmesh=bmesh, mathutils=mathutils)
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(out):
            exec(code, namespace)
    except SystemExit as e:
        error = "the step called exit(%r); steps must not exit" % (e.code,)
    except BaseException:  # noqa: BLE001 - the agent's error is the step's result
        error = _agent_traceback(name)
    run_s = time.monotonic() - t0
    if error is None:
        bpy.ops.wm.save_as_mainfile(filepath=os.path.abspath(STATE), compress=True)
    else:
        _open_state(bpy)  # rolled back: describe the model as it was before the step
    result = _export(np, bpy, os.path.join(OUT, "step.ply"), localize=True)
    result.update(ok=error is None, error=error, output=out.getvalue(), run_s=round(run_s, 3))
    with open(os.path.join(OUT, "report.json"), "w") as f:
        json.dump(result, f)


def export(bpy: Any, np: ModuleType) -> None:
    directory = tempfile.mkdtemp(prefix="export-", dir=".")
    _open_state(bpy)
    result = _export(np, bpy, os.path.join(directory, "model.ply"), localize=False)
    with open(os.path.join(directory, "report.json"), "w") as f:
        json.dump(result, f)
    sys.stdout.write("\n" + EXPORT_MARK + os.path.basename(directory) + "\n")


def build(bpy: Any, np: ModuleType, req: dict[str, Any]) -> None:
    import bmesh
    import mathutils

    directory = tempfile.mkdtemp(prefix="export-", dir=".")
    results: dict[str, Any] = {}
    for model in req.get("models", []):
        name = str(model["name"])
        bpy.ops.wm.read_factory_settings(use_empty=True)
        try:
            for code in model["steps"]:
                exec(compile(code, "<%s>" % name, "exec"),
                     {"__name__": "__step__", "bpy": bpy, "math": math, "bmesh": bmesh, "mathutils": mathutils})
            results[name] = _export(np, bpy, os.path.join(directory, name + ".ply"), localize=False)
        except Exception:  # noqa: BLE001 - one part's failure is that part's result
            results[name] = {"error": traceback.format_exc()[-2000:]}
    with open(os.path.join(directory, "report.json"), "w") as f:
        json.dump(results, f)
    sys.stdout.write("\n" + EXPORT_MARK + os.path.basename(directory) + "\n")


def main() -> None:
    mode = sys.argv[1]
    req = json.loads(sys.stdin.read() or "{}")
    import numpy as np

    import bpy

    bpy.context.preferences.filepaths.use_scripts_auto_execute = False
    bpy.context.preferences.filepaths.save_version = 0  # no state.blend1 backups
    if mode == "step":
        step(bpy, np, req)
    elif mode == "export":
        export(bpy, np)
    elif mode == "build":
        build(bpy, np, req)
    else:
        raise SystemExit("unknown mode %r" % mode)
    sys.stdout.flush()
    # Blender's atexit handlers can take a while and may print; the work is done and written.
    os._exit(0)


if __name__ == "__main__":
    main()
