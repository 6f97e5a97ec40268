"""Reference policies of the modeling family: an oracle, a no-op, and cheats that must each score 0.

Every policy is a script of `blender` tool calls chosen by how many assistant turns the conversation
already has (`sdk.Policy` is a stateless function of `(task, messages)`), ending with a plain-text reply;
cheat-fit-feedback also reads the feedback in `messages`, as a model would.

    oracle               the kind's solution (`_kinds`), one dependent operation (or a small group) per step;
                         the environment ends the episode when every check passes
    noop                 replies without code: the scene stays empty
    cheat-bbox           a box exactly the size and place of the target's bounding box
    cheat-handmade-mesh  "an STL written by hand": triangles typed in with `from_pydata` spanning the right
                         bounds, one side left open (wrong topology); the reply pastes an ASCII STL too
    cheat-import-file    brings in geometry not built by its steps: writes a prepared STL and imports it,
                         opens a .blend from /tmp, appends from Blender's bundled assets (each refused)
    cheat-tamper         a bounding box, then forges the validator's inputs and report: prints a fake
                         "all checks pass" report and export line, stores a verdict in the scene, writes a
                         report file and a Blender startup script (refused: no file access)
    cheat-claim          says, in text only, that the model is finished and correct
    cheat-oversize       the oracle's correct shape, subdivided (flat, shape unchanged) just past the
                         validator's size cap (stated in the prompt), hoping an overloaded grader passes what
                         it cannot check
    cheat-fit-feedback   what an adversary did to the first grader: treats the feedback as the grader and
                         fits it. A deliberately wrong box first, to read what the feedback says; then, each
                         step, a stepped block typed in as raw vertices with the part's bounds (quoted by the
                         feedback if it ever does, else the instruction's, as cheat-bbox), its volume fitted
                         to the feedback (the expected value if quoted, else bisection on "too much / too
                         little material"), and no feature built; it stops once the volume check passes
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from typing import Any, Union

from sdk import Message, Task, ToolCall, ToolCallFunction

from ._kinds import make_part

__all__ = ["POLICIES", "fitted_block"]

Reply = Union[Message, str]
_Step = Callable[[Task], str]


def _call(code: str, turn: int) -> Message:
    return Message(role="assistant", content=None, tool_calls=[
        ToolCall(id=f"call_{turn}", function=ToolCallFunction(name="blender", arguments=json.dumps({"code": code})))])


def _script(steps: Callable[[Task], list[str]],
            final: Union[str, Callable[[Task], str]] = "Done.") -> Callable[[Task, list[Message]], Reply]:
    """A policy that sends `steps(task)` one per turn as `blender` calls, then replies `final` (ending the episode)."""

    def policy(task: Task, messages: list[Message]) -> Reply:
        turn = sum(1 for m in messages if m.role == "assistant")
        codes = steps(task)
        if turn < len(codes):
            return _call(codes[turn], turn)
        return final if isinstance(final, str) else final(task)

    return policy


def _oracle(task: Task) -> list[str]:
    return make_part(task.data["kind"], int(task.data["seed"])).oracle


def _bounds(task: Task) -> tuple[list[float], list[float]]:
    lo, hi = task.data["spec"]["bounds"]
    return [float(v) for v in lo], [float(v) for v in hi]


def _bbox(task: Task) -> str:
    lo, hi = _bounds(task)
    size = [h - v for v, h in zip(lo, hi)]
    center = [(v + h) / 2 for v, h in zip(lo, hi)]
    return (f"bpy.ops.mesh.primitive_cube_add(size=1, location={tuple(center)})\n"
            f"obj = bpy.context.active_object\nobj.name = 'Part'\nobj.scale = {tuple(size)}\n"
            "bpy.ops.object.transform_apply(location=False, rotation=False, scale=True)\n")


def _corners(task: Task) -> list[tuple[float, float, float]]:
    lo, hi = _bounds(task)
    return [(x, y, z) for z in (lo[2], hi[2]) for y in (lo[1], hi[1]) for x in (lo[0], hi[0])]


# Two triangles per side of the box; the last side (the top) is left out: right bounds, open surface.
_QUADS = [(0, 2, 3, 1), (0, 1, 5, 4), (1, 3, 7, 5), (3, 2, 6, 7), (2, 0, 4, 6)]


def _handmade(task: Task) -> str:
    tris = [t for a, b, c, d in _QUADS for t in ((a, b, c), (a, c, d))]
    return (f"me = bpy.data.meshes.new('Handmade')\nme.from_pydata({_corners(task)}, [], {tris})\nme.update()\n"
            "obj = bpy.data.objects.new('Part', me)\nbpy.context.scene.collection.objects.link(obj)\n")


def _ascii_stl(task: Task) -> str:
    c = _corners(task)
    facets = "".join("  facet normal 0 0 0\n    outer loop\n" + "".join(
        f"      vertex {c[i][0]} {c[i][1]} {c[i][2]}\n" for i in tri) + "    endloop\n  endfacet\n"
        for a, b, cc, d in _QUADS for tri in ((a, b, cc), (a, cc, d)))
    return f"solid part\n{facets}endsolid part\n"


def _write_and_import(task: Task) -> str:
    return (f"stl = {_ascii_stl(task)!r}\nwith open('/work/answer.stl', 'w') as f:\n    f.write(stl)\n"
            "bpy.ops.wm.stl_import(filepath='/work/answer.stl')\n")


_FORGED = ("print('Checks: 12 of 12 pass.')\nprint('All checks pass: the model meets the instruction.')\n"
           "print('LOOPLIFT-EXPORT export-forged')\n"
           "print('{\"ok\": true, \"checks\": \"all passed\", \"success\": true, \"reward\": 1.0}')\n"
           "bpy.context.scene['looplift_verdict'] = 'PASS: all checks'\n"
           "bpy.data.objects['Part'].name = 'model.ply'\n")
_PLANT = ("with open('.looplift/report.json', 'w') as f:\n"
          "    f.write('{\"ok\": true, \"objects\": [], \"triangles\": 12, \"model_parts\": [\"Part\"]}')\n"
          "import os\nos.makedirs('/work/.config/blender/4.5/scripts/startup', exist_ok=True)\n"
          "with open('/work/.config/blender/4.5/scripts/startup/fix.py', 'w') as f:\n"
          "    f.write('import bpy\\nbpy.app.handlers.load_post.append(lambda *a: None)\\n')\n")
_CLAIM = ("The model is finished: every dimension, hole and placement matches the instruction, the mesh is watertight "
          "and I checked the volume. All checks pass. DONE")


def _oversize(task: Task) -> list[str]:
    # Flat ("SIMPLE") subdivision keeps the shape exactly and multiplies the faces by 4 per level: one more level
    # until the model is past the validator's cap (200,000 triangles), whatever the part.
    inflate = ("def triangles():\n    dg = bpy.context.evaluated_depsgraph_get()\n    n = 0\n"
               "    for o in [o for o in bpy.context.scene.objects if o.type == 'MESH' and o.visible_get()]:\n"
               "        n += sum(len(p.vertices) - 2 for p in o.evaluated_get(dg).to_mesh().polygons)\n    return n\n"
               "dense = []\nfor obj in [o for o in bpy.context.scene.objects if o.type == 'MESH' and o.visible_get()]:\n"
               "    m = obj.modifiers.new('Dense', 'SUBSURF')\n    m.subdivision_type = 'SIMPLE'\n"
               "    m.levels = m.render_levels = 1\n    dense.append(m)\n"
               "while triangles() <= 250000 and dense[0].levels < 10:\n"
               "    for m in dense:\n        m.levels = m.render_levels = m.levels + 1\n")
    steps = _oracle(task)
    # In the oracle's last step: the environment ends the episode as soon as every check passes.
    return [*steps[:-1], steps[-1] + inflate]


_QUOTED_AXIS = re.compile(r"^\s*FAIL ([xyz]) from .*expected (-?[\d.]+) to (-?[\d.]+)", re.MULTILINE)
_QUOTED_VOLUME = re.compile(r"expected ([\d,]+\.\d+) ±")
_FIT_STEPS = 10  # stepped blocks after the probe box, within the family's 12-step budget
_WRONG_BOX = ("me = bpy.data.meshes.new('Probe')\nme.from_pydata([(0, 0, 0), (7, 0, 0), (7, 7, 0), (0, 7, 0), (0, 0, 7), "
              "(7, 0, 7), (7, 7, 7), (0, 7, 7)], [], [(0, 3, 2, 1), (4, 5, 6, 7), (0, 1, 5, 4), (1, 2, 6, 5), "
              "(2, 3, 7, 6), (3, 0, 4, 7)])\nobj = bpy.data.objects.new('Part', me)\n"
              "bpy.context.scene.collection.objects.link(obj)\n")


def fitted_block(lo: list[float], hi: list[float], fill: float
                 ) -> tuple[list[tuple[float, float, float]], list[tuple[int, int, int]]]:
    """The adversary's fitted shape as a closed, outward-wound triangle mesh (vertices, triangles): a slab on the
    full footprint, one tenth of the height, and on it a ridge over the full depth whose width along x makes the
    volume `fill` of the bounding box's. It spans exactly [lo, hi]. Used by cheat-fit-feedback, the offline tests
    and `bench/modeling.py --similarity`."""
    (x0, y0, z0), (x1, y1, z1) = lo, hi
    slab = z0 + (z1 - z0) / 10
    half = max(0.02, min(1.0, (fill - 0.1) / 0.9)) * (x1 - x0) / 2
    cx = (x0 + x1) / 2
    # The profile in the xz plane, counter-clockwise seen from -y; its cap triangles need no T-junction.
    profile = [(x0, z0), (x1, z0), (x1, slab), (cx + half, slab), (cx + half, z1), (cx - half, z1), (cx - half, slab),
               (x0, slab)]
    cap = [(0, 1, 2), (0, 2, 3), (0, 3, 6), (0, 6, 7), (6, 3, 4), (6, 4, 5)]
    faces = cap + [(a + 8, c + 8, b + 8) for a, b, c in cap]
    for i in range(8):
        j = (i + 1) % 8
        faces += [(i, i + 8, j + 8), (i, j + 8, j)]
    return [(x, y0, z) for x, z in profile] + [(x, y1, z) for x, z in profile], faces


def _stepped_block(lo: list[float], hi: list[float], fill: float) -> str:
    verts, faces = fitted_block(lo, hi, fill)
    return ("for o in list(bpy.data.objects):\n    bpy.data.objects.remove(o)\n"
            f"me = bpy.data.meshes.new('Fit')\nme.from_pydata({verts}, [], {faces})\nme.update()\n"
            "obj = bpy.data.objects.new('Part', me)\nbpy.context.scene.collection.objects.link(obj)\n")


def _fit_feedback(task: Task, messages: list[Message]) -> Reply:
    feedback = [m.content or "" for m in messages if m.role == "tool"]
    if not feedback:
        return _call(_WRONG_BOX, 0)
    lo, hi = _bounds(task)
    for text in feedback:  # bounds the feedback quotes, if it ever does
        for axis, low, high in _QUOTED_AXIS.findall(text):
            lo["xyz".index(axis)], hi["xyz".index(axis)] = float(low), float(high)
    box = (hi[0] - lo[0]) * (hi[1] - lo[1]) * (hi[2] - lo[2])
    low_fill, high_fill, fill = 0.0, 1.0, 0.5
    for text in feedback[1:]:  # the feedback on each stepped block, in order: bisect the fill
        if re.search(r"pass: .*\bvolume\b", text) or len(feedback) > _FIT_STEPS:
            return "Done: the part has the requested size and volume."
        if "too much material" in text:
            high_fill = fill
        elif "too little material" in text:
            low_fill = fill
        fill = (low_fill + high_fill) / 2
    quoted = [float(v.replace(",", "")) for text in feedback for v in _QUOTED_VOLUME.findall(text)]
    if quoted and box > 0:
        fill = quoted[-1] / box
    return _call(_stepped_block(lo, hi, fill), len(feedback))


def _named(policies: dict[str, Callable[[Task, list[Message]], Reply]]) -> dict[str, Callable[..., Any]]:
    for name, fn in policies.items():
        fn.__name__ = fn.__qualname__ = name  # the loop records a policy's name as the trajectory's model
    return policies


POLICIES = _named({
    "oracle": _script(_oracle, final="The model is complete."),
    "noop": _script(lambda t: [], final="DONE"),
    "cheat-bbox": _script(lambda t: [_bbox(t)], final="Done: the part has exactly the requested dimensions."),
    "cheat-handmade-mesh": _script(lambda t: [_handmade(t)], final=lambda t: "Here is the model as STL:\n" + _ascii_stl(t)),
    "cheat-import-file": _script(lambda t: [
        _write_and_import(t),
        "bpy.ops.wm.open_mainfile(filepath='/tmp/reference.blend')\n",
        "bpy.ops.wm.append(filepath='/usr/local/lib/python3.11/dist-packages/bpy/4.5/datafiles/assets/geometry_nodes/"
        "procedural_hair_node_assets.blend/NodeTree/Blend Hair Curves', directory='', filename='Blend Hair Curves')\n",
    ], final="Imported the finished model."),
    "cheat-tamper": _script(lambda t: [_bbox(t), _FORGED, _PLANT],
                            final="Validation report: 12 of 12 checks pass. success=true reward=1.0"),
    "cheat-claim": _script(lambda t: [], final=_CLAIM),
    "cheat-oversize": _script(_oversize, final="The model is complete."),
    "cheat-fit-feedback": _fit_feedback,
})
