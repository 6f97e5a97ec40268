"""The instruction kinds of the modeling family: parameters -> instruction text, spec, oracle steps.

Each kind draws its dimensions from a seeded `random.Random`, and returns a `Part`: the instruction the
agent reads, the `spec` the validator checks (`_mesh.Spec` as plain data: bounds, volume, bodies,
through-holes, feature points, each with its tolerance, and `solid`, the exact part as primitives added
and cut, with the kind's similarity tolerance, for the grader's shape check in `_similarity`), and the
oracle's solution as a list of `bpy` snippets, one per step, each step one dependent operation or a
small group of them. Feature points are named as the instruction names the feature ("hole (column 2,
row 1)", "corner hole (+x, -y)"), never by coordinates: the feedback quotes their names.

    level      kind            what it takes (operations)
    primitive  cylinder        a cylinder at a position                                 1
               hex_prism       a hexagonal prism (6-vertex cylinder)                    1
               cone            a frustum                                                1
               sphere          a sphere resting on z = 0                                1
    feature    tube            cylinder minus a coaxial bore                            3
               plate_hole      plate with one through hole at a position                3
               pocket          block with a blind rectangular pocket                    3
               cube_row        N separate cubes in a row (array, no merge)              2
               l_bracket       two boxes joined by a boolean union                      3
               rounded_block   block with its vertical edges filleted                   2
               stepped_block   three stacked boxes joined by unions                     5
    part       hole_grid       plate, cutter, array x, array y, boolean, hide           6
               flange          disc, bore, bolt cutter, circular array, 2 booleans      7
               rounded_plate   plate, fillets, cutter, array x, array y, boolean        6
               boss_plate      plate, boss, union, bore, difference, 2 holes (array)    8
               peg_row         plate, peg, array, union, hide                           5
               frame           plate, window cut, corner cutter, 2 arrays, boolean      7

Tolerances (stated in every instruction): each face of the bounding box within
max(0.1, 0.002 x largest extent) mm; volume within 0.3% plus 1% of every round feature's volume
(32 segments or more stay well inside it: a 32-gon holds 99.36% of its circle's area) plus 5% of every
fillet's removed volume (8 segments or more). Every kind's shape differs from its bounding box, so a
box of the right size never passes; nor does a block fitted to the bounds and volume (`_similarity`).
"""

from __future__ import annotations

import math
import random
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from ._similarity import TOLERANCE

__all__ = ["KINDS", "LEVELS", "Part", "make_part"]

Vec = tuple[float, float, float]


def _n(v: float) -> float:
    """A dimension rounded for the instruction text and the oracle (no float noise in either)."""
    return round(float(v), 4)


def _t(v: float) -> str:
    """A number as the instruction writes it (6, 2.5, -12)."""
    return f"{_n(v):g}"


@dataclass
class Part:
    """One instruction: its text, the spec to validate against, the oracle's steps."""

    kind: str
    level: str
    text: str
    spec: dict[str, Any]
    oracle: list[str]
    params: dict[str, Any] = field(default_factory=dict)


class _Spec:
    """Accumulates what a part's model must satisfy while a kind builds it."""

    def __init__(self, lo: Vec, hi: Vec) -> None:
        self.lo, self.hi = tuple(_n(v) for v in lo), tuple(_n(v) for v in hi)
        self.volume = 0.0
        self.allowance = 0.0
        self.bodies = 1
        self.holes = 0
        self.probes: list[dict[str, Any]] = []
        self.add_solids: list[list[Any]] = []
        self.cut_solids: list[list[Any]] = []

    def add(self, v: float, *, round_feature: bool = False, fillet: bool = False) -> None:
        """Add (or, negative, remove) volume; round features and fillets widen the tolerance."""
        self.volume += v
        if round_feature:
            self.allowance += 0.01 * abs(v)
        if fillet:
            self.allowance += 0.05 * abs(v)

    def probe(self, point: Vec, inside: bool, what: str) -> None:
        self.probes.append({"point": [_n(c) for c in point], "inside": inside, "what": what})

    def solid(self, shape: str, *values: float, cut: bool = False) -> None:
        """Add a primitive to the exact reference (`_similarity`): material, or with `cut` removed."""
        (self.cut_solids if cut else self.add_solids).append([shape, *(_n(v) for v in values)])

    def data(self) -> dict[str, Any]:
        extent = max(h - lo for lo, h in zip(self.lo, self.hi))
        return {"bounds": [list(self.lo), list(self.hi)], "bounds_tol": round(max(0.1, 0.002 * extent), 3),
                "volume": round(self.volume, 3), "volume_tol": round(0.003 * abs(self.volume) + self.allowance, 3),
                "bodies": self.bodies, "through_holes": self.holes, "probes": self.probes,
                "solid": {"add": self.add_solids, "cut": self.cut_solids}}


# -- oracle snippets ------------------------------------------------------------------------------

def _box(name: str, size: Vec, center: Vec) -> str:
    return (f"bpy.ops.mesh.primitive_cube_add(size=1, location=({_t(center[0])}, {_t(center[1])}, {_t(center[2])}))\n"
            f"obj = bpy.context.active_object\nobj.name = {name!r}\n"
            f"obj.scale = ({_t(size[0])}, {_t(size[1])}, {_t(size[2])})\n"
            "bpy.ops.object.transform_apply(location=False, rotation=False, scale=True)\n")


def _cyl(name: str, r: float, depth: float, center: Vec, vertices: int = 64) -> str:
    return _primitive("cylinder", name, center, vertices=vertices, radius=r, depth=depth)


def _primitive(op: str, name: str, center: Vec, **args: float) -> str:
    given = "".join(f"{k}={_t(v)}, " for k, v in args.items())
    return (f"bpy.ops.mesh.primitive_{op}_add({given}location=({_t(center[0])}, {_t(center[1])}, {_t(center[2])}))\n"
            f"bpy.context.active_object.name = {name!r}\n")


def _boolean(target: str, tool: str, op: str, name: str) -> str:
    return (f"tool = bpy.data.objects[{tool!r}]\n"
            f"m = bpy.data.objects[{target!r}].modifiers.new({name!r}, 'BOOLEAN')\n"
            f"m.operation = {op!r}\nm.object = tool\ntool.hide_set(True)\n")


def _array(obj: str, name: str, count: int, offset: Vec) -> str:
    return (f"m = bpy.data.objects[{obj!r}].modifiers.new({name!r}, 'ARRAY')\nm.count = {count}\n"
            "m.use_relative_offset = False\nm.use_constant_offset = True\n"
            f"m.constant_offset_displace = ({_t(offset[0])}, {_t(offset[1])}, {_t(offset[2])})\n")


def _fillet_vertical(obj: str, r: float) -> str:
    return ("import bmesh\n"
            f"me = bpy.data.objects[{obj!r}].data\nbm = bmesh.new()\nbm.from_mesh(me)\n"
            "edges = [e for e in bm.edges if abs(e.verts[0].co.z - e.verts[1].co.z) > 1e-6]\n"
            f"bmesh.ops.bevel(bm, geom=edges, offset={_t(r)}, offset_type='OFFSET', segments=16, profile=0.5, "
            "affect='EDGES')\nbm.to_mesh(me)\nbm.free()\nme.update()\n")


# -- shared wording -------------------------------------------------------------------------------

def _plate_words(w: float, d: float, t: float, cx: float = 0.0, cy: float = 0.0) -> str:
    at = "centered on the origin in x and y" if (cx, cy) == (0, 0) else f"centered at x = {_t(cx)}, y = {_t(cy)}"
    return f"{_t(w)} x {_t(d)} x {_t(t)} mm (along x, y, z), its bottom face on z = 0, {at}"


def _xy(rng: random.Random, span: float) -> tuple[float, float]:
    """A position on the 5 mm grid within ±span."""
    return _pick(rng, -span, span, 5), _pick(rng, -span, span, 5)


def _pick(rng: random.Random, lo: float, hi: float, step: float = 1.0) -> float:
    n = int((hi - lo) / step + 1e-9)
    if n < 0:
        raise ValueError(f"empty range [{lo}, {hi}]")
    return _n(lo + step * rng.randint(0, n))


def _hole_probes(s: _Spec, x: float, y: float, r: float, z: float, what: str, wall: bool = True) -> None:
    # `what` names the hole as the instruction does, never by coordinates: feedback quotes no probe point.
    s.probe((x, y, z), False, what)
    s.probe((x + 0.75 * r, y, z), False, f"{what}: diameter")
    if wall:
        s.probe((x + 1.35 * r, y, z), True, f"{what}: wall")


def _corner(x: float, y: float) -> str:
    return f"({'+' if x > 0 else '-'}x, {'+' if y > 0 else '-'}y)"


# -- primitives -----------------------------------------------------------------------------------

def cylinder(rng: random.Random) -> Part:
    r, h = _pick(rng, 5, 30, 0.5), _pick(rng, 5, 60, 1)
    cx, cy = _xy(rng, 20)
    s = _Spec((cx - r, cy - r, 0), (cx + r, cy + r, h))
    s.add(math.pi * r * r * h, round_feature=True)
    s.solid("cylinder", cx, cy, r, 0, h)
    s.probe((cx, cy, h / 2), True, "axis")
    s.probe((cx + 0.8 * r, cy + 0.8 * r, h / 2), False, "outside the round wall")
    text = (f"Model a solid cylinder of radius {_t(r)} mm and height {_t(h)} mm, its axis along z through "
            f"x = {_t(cx)}, y = {_t(cy)}, its bottom face on z = 0.")
    return Part("cylinder", "primitive", text, s.data(), [_cyl("Cylinder", r, h, (cx, cy, h / 2))])


def hex_prism(rng: random.Random) -> Part:
    flats, h = _pick(rng, 10, 50, 2), _pick(rng, 4, 40, 1)
    cx, cy = _xy(rng, 20)
    big = flats / math.sqrt(3)  # circumradius
    s = _Spec((cx - big, cy - flats / 2, 0), (cx + big, cy + flats / 2, h))
    s.add(1.5 * math.sqrt(3) * big * big * h)
    s.solid("prism", cx, cy, big, 6, 0, 0, h)
    s.probe((cx, cy, h / 2), True, "center")
    s.probe((cx + 0.9 * big, cy + 0.45 * flats, h / 2), False, "outside the hexagon's slanted side")
    text = (f"Model a regular hexagonal prism {_t(flats)} mm across the flats and {_t(h)} mm tall: its axis along z "
            f"through x = {_t(cx)}, y = {_t(cy)}, its bottom face on z = 0, two of its corners on the line y = "
            f"{_t(cy)} (so it measures {_t(flats)} mm along y and {_t(2 * big)} mm along x).")
    # Blender puts a 6-vertex cylinder's first corner on +y; a 30-degree turn puts the corners on the x axis.
    oracle = _cyl("Hex", big, h, (cx, cy, h / 2), vertices=6) + "bpy.context.active_object.rotation_euler[2] = math.pi / 6\n"
    return Part("hex_prism", "primitive", text, s.data(), [oracle])


def cone(rng: random.Random) -> Part:
    r1 = _pick(rng, 8, 30, 1)
    r2 = _pick(rng, 0, r1 * 0.6, 1)
    h = _pick(rng, 8, 50, 1)
    cx, cy = _xy(rng, 15)
    s = _Spec((cx - r1, cy - r1, 0), (cx + r1, cy + r1, h))
    s.add(math.pi * h * (r1 * r1 + r1 * r2 + r2 * r2) / 3, round_feature=True)
    s.solid("frustum", cx, cy, r1, r2, 0, h)
    s.probe((cx, cy, 0.1 * h), True, "axis near the base")
    s.probe((cx + (r1 + r2) / 2, cy, 0.9 * h), False, "outside the slanted side near the top")
    top = "a point (a cone)" if r2 == 0 else f"radius {_t(r2)} mm"
    text = (f"Model a solid cone frustum: bottom radius {_t(r1)} mm on z = 0, top {top} at z = {_t(h)}, "
            f"its axis along z through x = {_t(cx)}, y = {_t(cy)}.")
    oracle = _primitive("cone", "Cone", (cx, cy, h / 2), vertices=64, radius1=r1, radius2=r2, depth=h)
    return Part("cone", "primitive", text, s.data(), [oracle])


def sphere(rng: random.Random) -> Part:
    r = _pick(rng, 5, 30, 0.5)
    cx, cy = _xy(rng, 20)
    s = _Spec((cx - r, cy - r, 0), (cx + r, cy + r, 2 * r))
    s.add(4 / 3 * math.pi * r ** 3, round_feature=True)
    s.allowance += 0.01 * 4 / 3 * math.pi * r ** 3  # two curvatures: 2% in all for 64 x 32 or finer
    s.solid("sphere", cx, cy, r, r)
    s.probe((cx, cy, r), True, "center")
    s.probe((cx + 0.65 * r, cy + 0.65 * r, r + 0.65 * r), False, "outside the sphere near a box corner")
    text = (f"Model a solid sphere of radius {_t(r)} mm resting on the plane z = 0 (its lowest point at z = 0), its "
            f"center above x = {_t(cx)}, y = {_t(cy)}. Use at least 64 segments and 32 rings.")
    oracle = _primitive("uv_sphere", "Sphere", (cx, cy, r), segments=64, ring_count=32, radius=r)
    return Part("sphere", "primitive", text, s.data(), [oracle])


# -- features -------------------------------------------------------------------------------------

def tube(rng: random.Random) -> Part:
    outer = _pick(rng, 8, 30, 1)
    inner = _pick(rng, 3, outer - 3, 0.5)
    h = _pick(rng, 5, 50, 1)
    s = _Spec((-outer, -outer, 0), (outer, outer, h))
    s.add(math.pi * outer * outer * h, round_feature=True)
    s.add(-math.pi * inner * inner * h, round_feature=True)
    s.holes = 1
    s.solid("cylinder", 0, 0, outer, 0, h)
    s.solid("cylinder", 0, 0, inner, 0, h, cut=True)
    s.probe((0, 0, h / 2), False, "bore on the axis")
    s.probe((0.8 * inner, 0, h / 2), False, "bore: diameter")
    s.probe(((inner + outer) / 2, 0, h / 2), True, "tube wall")
    text = (f"Model a tube (a cylinder with a coaxial through bore): outer diameter {_t(2 * outer)} mm, inner "
            f"diameter {_t(2 * inner)} mm, length {_t(h)} mm, its axis along z through the origin, bottom on z = 0.")
    return Part("tube", "feature", text, s.data(), [
        _cyl("Tube", outer, h, (0, 0, h / 2)),
        _cyl("Bore", inner, h + 4, (0, 0, h / 2)),
        _boolean("Tube", "Bore", "DIFFERENCE", "Bore"),
    ])


def plate_hole(rng: random.Random) -> Part:
    w, d, t = _pick(rng, 30, 80, 5), _pick(rng, 20, 60, 5), _pick(rng, 3, 12, 1)
    r = _pick(rng, 1.5, min(w, d) / 6, 0.5)
    hx = _pick(rng, -w / 2 + 2 * r + 2, w / 2 - 2 * r - 2, 1)
    hy = _pick(rng, -d / 2 + 2 * r + 2, d / 2 - 2 * r - 2, 1)
    s = _Spec((-w / 2, -d / 2, 0), (w / 2, d / 2, t))
    s.add(w * d * t)
    s.add(-math.pi * r * r * t, round_feature=True)
    s.holes = 1
    s.solid("box", -w / 2, -d / 2, 0, w / 2, d / 2, t)
    s.solid("cylinder", hx, hy, r, 0, t, cut=True)
    _hole_probes(s, hx, hy, r, t / 2, "hole")
    text = (f"Model a rectangular plate {_plate_words(w, d, t)}, with one through hole of diameter {_t(2 * r)} mm "
            f"along z, centered at x = {_t(hx)}, y = {_t(hy)}.")
    return Part("plate_hole", "feature", text, s.data(), [
        _box("Plate", (w, d, t), (0, 0, t / 2)),
        _cyl("Drill", r, t + 4, (hx, hy, t / 2)),
        _boolean("Plate", "Drill", "DIFFERENCE", "Hole"),
    ])


def pocket(rng: random.Random) -> Part:
    w, d, h = _pick(rng, 30, 80, 5), _pick(rng, 30, 60, 5), _pick(rng, 10, 30, 1)
    a, b = _pick(rng, 8, w - 12, 1), _pick(rng, 8, d - 12, 1)
    depth = _pick(rng, 2, h - 4, 1)
    px = _pick(rng, -(w - a) / 2 + 3, (w - a) / 2 - 3, 1)
    py = _pick(rng, -(d - b) / 2 + 3, (d - b) / 2 - 3, 1)
    s = _Spec((-w / 2, -d / 2, 0), (w / 2, d / 2, h))
    s.add(w * d * h - a * b * depth)
    s.solid("box", -w / 2, -d / 2, 0, w / 2, d / 2, h)
    s.solid("box", px - a / 2, py - b / 2, h - depth, px + a / 2, py + b / 2, h, cut=True)
    s.probe((px, py, h - depth / 2), False, "pocket")
    s.probe((px, py, (h - depth) / 2), True, "pocket floor")
    s.probe((px + a / 2 + 1.5, py, h - depth / 2), True, "pocket wall along x")
    text = (f"Model a block {_plate_words(w, d, h)}, with a rectangular pocket cut into its top face: {_t(a)} x "
            f"{_t(b)} mm (x by y), {_t(depth)} mm deep, centered at x = {_t(px)}, y = {_t(py)}. The pocket does not "
            "go through.")
    return Part("pocket", "feature", text, s.data(), [
        _box("Block", (w, d, h), (0, 0, h / 2)),
        _box("PocketCut", (a, b, depth + 2), (px, py, h - depth / 2 + 1)),
        _boolean("Block", "PocketCut", "DIFFERENCE", "Pocket"),
    ])


def cube_row(rng: random.Random) -> Part:
    n, side, gap = rng.randint(3, 7), _pick(rng, 4, 15, 1), _pick(rng, 2, 10, 1)
    x0 = _pick(rng, -30, 0, 5)
    pitch = side + gap
    s = _Spec((x0, -side / 2, 0), (x0 + (n - 1) * pitch + side, side / 2, side))
    s.add(n * side ** 3)
    s.bodies = n
    for i in range(n):
        s.solid("box", x0 + i * pitch, -side / 2, 0, x0 + i * pitch + side, side / 2, side)
        s.probe((x0 + i * pitch + side / 2, 0, side / 2), True, f"cube {i + 1}")
    s.probe((x0 + side + gap / 2, 0, side / 2), False, "gap between cubes 1 and 2")
    text = (f"Model a row of {n} separate cubes, each {_t(side)} mm on a side, along the x axis with a {_t(gap)} mm gap "
            f"between neighbours: the first cube spans x = {_t(x0)} to {_t(x0 + side)}, all are centered on y = 0 "
            "and sit on z = 0. The cubes must not touch.")
    return Part("cube_row", "feature", text, s.data(), [
        _box("Cube", (side, side, side), (x0 + side / 2, 0, side / 2)),
        _array("Cube", "Row", n, (pitch, 0, 0)),
    ])


def l_bracket(rng: random.Random) -> Part:
    w, d, t = _pick(rng, 20, 60, 5), _pick(rng, 20, 50, 5), _pick(rng, 3, 8, 1)
    h, t2 = _pick(rng, 20, 50, 5), _pick(rng, 3, 8, 1)
    s = _Spec((-w / 2, -d / 2, 0), (w / 2, d / 2, h))
    s.add(w * d * t + w * t2 * (h - t))
    s.solid("box", -w / 2, -d / 2, 0, w / 2, d / 2, t)
    s.solid("box", -w / 2, d / 2 - t2, 0, w / 2, d / 2, h)
    s.probe((0, -d / 2 + 0.25 * d, t / 2), True, "base flange")
    s.probe((0, d / 2 - t2 / 2, (h + t) / 2), True, "upright flange")
    s.probe((0, 0, (h + t) / 2), False, "inside of the L")
    text = (f"Model an L-shaped bracket from two plates joined into one solid: a base plate {_plate_words(w, d, t)}; "
            f"and an upright plate {_t(w)} mm wide (x), {_t(t2)} mm thick (y) and {_t(h)} mm tall, standing on z = 0 "
            f"flush with the base's back edge (its back face on y = {_t(d / 2)}).")
    return Part("l_bracket", "feature", text, s.data(), [
        _box("Bracket", (w, d, t), (0, 0, t / 2)),
        _box("Upright", (w, t2, h), (0, d / 2 - t2 / 2, h / 2)),
        _boolean("Bracket", "Upright", "UNION", "Join"),
    ])


def rounded_block(rng: random.Random) -> Part:
    w, d, h = _pick(rng, 20, 80, 5), _pick(rng, 20, 60, 5), _pick(rng, 4, 30, 1)
    r = _pick(rng, 2, min(w, d) / 4, 0.5)
    s = _Spec((-w / 2, -d / 2, 0), (w / 2, d / 2, h))
    s.add(w * d * h)
    s.add(-4 * (1 - math.pi / 4) * r * r * h, fillet=True)
    s.solid("rounded_box", -w / 2, -d / 2, 0, w / 2, d / 2, h, r)
    for sx, sy in ((1, 1), (-1, 1), (-1, -1), (1, -1)):
        s.probe((sx * (w / 2 - 0.12 * r), sy * (d / 2 - 0.12 * r), h / 2), False,
                f"rounded corner ({'+' if sx > 0 else '-'}x, {'+' if sy > 0 else '-'}y)")
    s.probe((w / 2 - 0.5, 0, h / 2), True, "side face")
    text = (f"Model a block {_plate_words(w, d, h)}, whose four vertical edges are rounded (filleted) with a radius "
            f"of {_t(r)} mm. The top and bottom edges stay sharp. Use at least 8 segments per fillet.")
    return Part("rounded_block", "feature", text, s.data(), [
        _box("Block", (w, d, h), (0, 0, h / 2)),
        _fillet_vertical("Block", r),
    ])


def stepped_block(rng: random.Random) -> Part:
    w1, d1 = _pick(rng, 40, 80, 5), _pick(rng, 30, 60, 5)
    w2, d2 = _pick(rng, 15, w1 - 10, 5), _pick(rng, 15, d1 - 10, 5)
    w3, d3 = _pick(rng, 5, w2 - 5, 5), _pick(rng, 5, d2 - 5, 5)
    h1, h2, h3 = (_pick(rng, 3, 12, 1) for _ in range(3))
    s = _Spec((-w1 / 2, -d1 / 2, 0), (w1 / 2, d1 / 2, h1 + h2 + h3))
    s.add(w1 * d1 * h1 + w2 * d2 * h2 + w3 * d3 * h3)
    for (sw, sd), z0, z1 in (((w1, d1), 0, h1), ((w2, d2), h1, h1 + h2), ((w3, d3), h1 + h2, h1 + h2 + h3)):
        s.solid("box", -sw / 2, -sd / 2, z0, sw / 2, sd / 2, z1)
    s.probe((0, 0, h1 + h2 + h3 / 2), True, "top step")
    s.probe(((w2 + w1) / 4, 0, h1 + h2 / 2), False, "beside the middle step")
    s.probe(((w3 + w2) / 4, 0, h1 + h2 + h3 / 2), False, "beside the top step")
    text = (f"Model a stepped block of three boxes stacked and joined into one solid, all centered on the z axis: "
            f"a base {_t(w1)} x {_t(d1)} x {_t(h1)} mm on z = 0; on it a middle step {_t(w2)} x {_t(d2)} x {_t(h2)} "
            f"mm; on that a top step {_t(w3)} x {_t(d3)} x {_t(h3)} mm (sizes along x, y, z).")
    return Part("stepped_block", "feature", text, s.data(), [
        _box("Steps", (w1, d1, h1), (0, 0, h1 / 2)),
        _box("Middle", (w2, d2, h2 + 1), (0, 0, h1 + h2 / 2 - 0.5)),
        _boolean("Steps", "Middle", "UNION", "Middle"),
        _box("Top", (w3, d3, h3 + 1), (0, 0, h1 + h2 + h3 / 2 - 0.5)),
        _boolean("Steps", "Top", "UNION", "Top"),
    ])


# -- parts (five or more dependent operations) ----------------------------------------------------

def hole_grid(rng: random.Random) -> Part:
    nx, ny = rng.randint(2, 4), rng.randint(1, 3)
    r = _pick(rng, 1.5, 4, 0.5)
    px, py = _pick(rng, 4 * r + 2, 4 * r + 12, 1), _pick(rng, 4 * r + 2, 4 * r + 12, 1)
    margin = _pick(rng, 2 * r + 3, 2 * r + 10, 1)
    w, d, t = (nx - 1) * px + 2 * margin, (ny - 1) * py + 2 * margin, _pick(rng, 3, 10, 1)
    x0, y0 = -(nx - 1) * px / 2, -(ny - 1) * py / 2
    s = _Spec((-w / 2, -d / 2, 0), (w / 2, d / 2, t))
    s.add(w * d * t)
    s.holes = nx * ny
    s.solid("box", -w / 2, -d / 2, 0, w / 2, d / 2, t)
    for i in range(nx):
        for j in range(ny):
            s.add(-math.pi * r * r * t, round_feature=True)
            s.solid("cylinder", x0 + i * px, y0 + j * py, r, 0, t, cut=True)
            _hole_probes(s, x0 + i * px, y0 + j * py, r, t / 2, f"hole (column {i + 1}, row {j + 1})", wall=False)
    s.probe((x0 + px / 2, y0, t / 2), True, "material between holes")
    text = (f"Model a plate {_plate_words(w, d, t)}, with a grid of {nx} x {ny} through holes (x by y) of diameter "
            f"{_t(2 * r)} mm along z, pitch {_t(px)} mm in x and {_t(py)} mm in y, the grid centered on the plate: "
            f"the first hole at x = {_t(x0)}, y = {_t(y0)}.")
    return Part("hole_grid", "part", text, s.data(), [
        _box("Plate", (w, d, t), (0, 0, t / 2)),
        _cyl("Drill", r, t + 4, (x0, y0, t / 2)),
        _array("Drill", "Columns", nx, (px, 0, 0)),
        _array("Drill", "Rows", ny, (0, py, 0)),
        _boolean("Plate", "Drill", "DIFFERENCE", "Holes"),
    ])


def flange(rng: random.Random) -> Part:
    big, t = _pick(rng, 20, 40, 1), _pick(rng, 4, 12, 1)
    bore = _pick(rng, 3, big / 3, 0.5)
    hole = _pick(rng, 1.5, 3.5, 0.5)
    circle = _pick(rng, bore + hole + 3, big - hole - 3, 0.5)
    # Neighbouring bolt holes keep at least 2 mm of material between them.
    n = min(rng.randint(3, 8), int(math.pi / math.asin(min(1.0, (hole + 1) / circle))))
    s = _Spec((-big, -big, 0), (big, big, t))
    s.add(math.pi * big * big * t, round_feature=True)
    s.add(-math.pi * bore * bore * t, round_feature=True)
    s.holes = n + 1
    s.solid("cylinder", 0, 0, big, 0, t)
    s.solid("cylinder", 0, 0, bore, 0, t, cut=True)
    s.probe((0, 0, t / 2), False, "center bore")
    s.probe((0.8 * bore, 0, t / 2), False, "center bore: diameter")
    for k in range(n):
        a = 2 * math.pi * k / n
        s.add(-math.pi * hole * hole * t, round_feature=True)
        s.solid("cylinder", circle * math.cos(a), circle * math.sin(a), hole, 0, t, cut=True)
        s.probe((circle * math.cos(a), circle * math.sin(a), t / 2), False, f"bolt hole {k + 1}")
    s.probe((circle * math.cos(math.pi / n), circle * math.sin(math.pi / n), t / 2), True, "between bolt holes 1 and 2")
    text = (f"Model a round flange: a disc of diameter {_t(2 * big)} mm and thickness {_t(t)} mm, axis along z through "
            f"the origin, bottom face on z = 0; a central through bore of diameter {_t(2 * bore)} mm; and {n} through "
            f"bolt holes of diameter {_t(2 * hole)} mm evenly spaced on a bolt circle of diameter {_t(2 * circle)} mm, "
            "the first one on the +x axis.")
    return Part("flange", "part", text, s.data(), [
        _cyl("Flange", big, t, (0, 0, t / 2)),
        _cyl("BoreCut", bore, t + 4, (0, 0, t / 2)) + _boolean("Flange", "BoreCut", "DIFFERENCE", "Bore"),
        f"bpy.ops.object.empty_add(location=(0, 0, {_t(t / 2)}))\npivot = bpy.context.active_object\n"
        f"pivot.name = 'Pivot'\npivot.rotation_euler[2] = 2 * math.pi / {n}\n",
        _cyl("BoltCut", hole, t + 4, (0, 0, t / 2))
        + f"bpy.data.objects['BoltCut'].data.transform(mathutils.Matrix.Translation(({_t(circle)}, 0, 0)))\n",
        f"m = bpy.data.objects['BoltCut'].modifiers.new('Circle', 'ARRAY')\nm.count = {n}\n"
        "m.use_relative_offset = False\nm.use_object_offset = True\nm.offset_object = bpy.data.objects['Pivot']\n",
        _boolean("Flange", "BoltCut", "DIFFERENCE", "BoltHoles"),
    ])


def rounded_plate(rng: random.Random) -> Part:
    w, d, t = _pick(rng, 40, 90, 5), _pick(rng, 30, 70, 5), _pick(rng, 3, 10, 1)
    rf = _pick(rng, 3, 8, 1)
    r = _pick(rng, 1.5, 3, 0.5)
    inset = _pick(rng, max(rf, 2 * r + 2), max(rf, 2 * r + 2) + 4, 1)
    s = _Spec((-w / 2, -d / 2, 0), (w / 2, d / 2, t))
    s.add(w * d * t)
    s.add(-4 * (1 - math.pi / 4) * rf * rf * t, fillet=True)
    s.holes = 4
    s.solid("rounded_box", -w / 2, -d / 2, 0, w / 2, d / 2, t, rf)
    corners = [(sx * (w / 2 - inset), sy * (d / 2 - inset)) for sy in (-1, 1) for sx in (-1, 1)]
    for x, y in corners:
        s.add(-math.pi * r * r * t, round_feature=True)
        s.solid("cylinder", x, y, r, 0, t, cut=True)
        _hole_probes(s, x, y, r, t / 2, f"corner hole {_corner(x, y)}", wall=False)
    for sx, sy in ((1, 1), (-1, -1)):
        s.probe((sx * (w / 2 - 0.12 * rf), sy * (d / 2 - 0.12 * rf), t / 2), False,
                f"rounded corner ({'+' if sx > 0 else '-'}x, {'+' if sy > 0 else '-'}y)")
    s.probe((0, 0, t / 2), True, "plate center")
    text = (f"Model a mounting plate {_plate_words(w, d, t)}. Round its four vertical edges with a {_t(rf)} mm radius "
            f"(at least 8 segments; top and bottom edges stay sharp), and drill four through holes of diameter "
            f"{_t(2 * r)} mm along z, each {_t(inset)} mm in from the two nearest edges (at x = ±{_t(w / 2 - inset)}, "
            f"y = ±{_t(d / 2 - inset)}).")
    x0, y0 = corners[0]
    return Part("rounded_plate", "part", text, s.data(), [
        _box("Plate", (w, d, t), (0, 0, t / 2)),
        _fillet_vertical("Plate", rf),
        _cyl("Drill", r, t + 4, (x0, y0, t / 2)),
        _array("Drill", "Columns", 2, (w - 2 * inset, 0, 0)) + _array("Drill", "Rows", 2, (0, d - 2 * inset, 0)),
        _boolean("Plate", "Drill", "DIFFERENCE", "Holes"),
    ])


def boss_plate(rng: random.Random) -> Part:
    w, d, t = _pick(rng, 40, 80, 5), _pick(rng, 30, 60, 5), _pick(rng, 4, 10, 1)
    r = _pick(rng, 1.5, 3, 0.5)
    hx = _n(w / 2 - max(2 * r + 2, 6))
    rb, hb = _pick(rng, 5, min(d / 4, hx - r - 2), 0.5), _pick(rng, 5, 25, 1)  # the holes stay clear of the boss
    bore = _pick(rng, 1.5, rb - 2, 0.5)
    s = _Spec((-w / 2, -d / 2, 0), (w / 2, d / 2, t + hb))
    s.add(w * d * t)
    s.add(math.pi * rb * rb * hb, round_feature=True)
    s.add(-math.pi * bore * bore * (t + hb), round_feature=True)
    s.add(-2 * math.pi * r * r * t, round_feature=True)
    s.holes = 3
    s.solid("box", -w / 2, -d / 2, 0, w / 2, d / 2, t)
    s.solid("cylinder", 0, 0, rb, t, t + hb)
    s.solid("cylinder", 0, 0, bore, 0, t + hb, cut=True)
    for x in (-hx, hx):
        s.solid("cylinder", x, 0, r, 0, t, cut=True)
    s.probe((0, 0, t / 2), False, "bore through the plate")
    s.probe((0, 0, t + hb / 2), False, "bore through the boss")
    s.probe(((bore + rb) / 2, 0, t + hb / 2), True, "boss wall")
    s.probe((0, -(rb + d / 2) / 2, t + hb / 2), False, "beside the boss")
    for x in (-hx, hx):
        _hole_probes(s, x, 0, r, t / 2, f"mounting hole ({'+' if x > 0 else '-'}x)", wall=False)
    text = (f"Model a base plate {_plate_words(w, d, t)}, with a cylindrical boss of diameter {_t(2 * rb)} mm rising "
            f"{_t(hb)} mm above the plate's top face, centered on the z axis, joined to the plate as one solid. A "
            f"through bore of diameter {_t(2 * bore)} mm runs along the z axis through boss and plate. Two mounting "
            f"holes of diameter {_t(2 * r)} mm go through the plate at x = ±{_t(hx)}, y = 0.")
    return Part("boss_plate", "part", text, s.data(), [
        _box("Base", (w, d, t), (0, 0, t / 2)),
        _cyl("Boss", rb, hb + 1, (0, 0, t + hb / 2 - 0.5)),
        _boolean("Base", "Boss", "UNION", "Boss"),
        _cyl("BoreCut", bore, t + hb + 4, (0, 0, (t + hb) / 2)) + _boolean("Base", "BoreCut", "DIFFERENCE", "Bore"),
        _cyl("Drill", r, t + 4, (-hx, 0, t / 2)) + _array("Drill", "Pair", 2, (2 * hx, 0, 0)),
        _boolean("Base", "Drill", "DIFFERENCE", "MountingHoles"),
    ])


def peg_row(rng: random.Random) -> Part:
    n = rng.randint(2, 6)
    r, hp = _pick(rng, 2, 5, 0.5), _pick(rng, 4, 20, 1)
    pitch = _pick(rng, 2 * r + 4, 2 * r + 15, 1)
    margin, t = _pick(rng, r + 3, r + 10, 1), _pick(rng, 3, 8, 1)
    w, d = (n - 1) * pitch + 2 * margin, _pick(rng, 2 * r + 6, 2 * r + 20, 1)
    x0 = -(n - 1) * pitch / 2
    s = _Spec((-w / 2, -d / 2, 0), (w / 2, d / 2, t + hp))
    s.add(w * d * t)
    s.solid("box", -w / 2, -d / 2, 0, w / 2, d / 2, t)
    for i in range(n):
        s.add(math.pi * r * r * hp, round_feature=True)
        s.solid("cylinder", x0 + i * pitch, 0, r, t, t + hp)
        s.probe((x0 + i * pitch, 0, t + hp / 2), True, f"peg {i + 1}")
    s.probe((x0 + pitch / 2, 0, t + hp / 2), False, "between pegs 1 and 2")
    s.probe((x0 + 0.8 * r, 0.8 * r, t + hp / 2), False, "outside peg 1's round side")
    text = (f"Model a base plate {_plate_words(w, d, t)}, with a row of {n} cylindrical pegs along x on its top face: "
            f"diameter {_t(2 * r)} mm, {_t(hp)} mm tall (above the plate), pitch {_t(pitch)} mm, centered on y = 0, the "
            f"first at x = {_t(x0)}. Plate and pegs form one solid.")
    return Part("peg_row", "part", text, s.data(), [
        _box("Base", (w, d, t), (0, 0, t / 2)),
        _cyl("Peg", r, hp + 1, (x0, 0, t + hp / 2 - 0.5)),
        _array("Peg", "Row", n, (pitch, 0, 0)),
        _boolean("Base", "Peg", "UNION", "Pegs"),
    ])


def frame(rng: random.Random) -> Part:
    w, d, t = _pick(rng, 60, 100, 5), _pick(rng, 50, 80, 5), _pick(rng, 3, 8, 1)
    r = _pick(rng, 1.5, 3, 0.5)
    inset = _pick(rng, 2 * r + 2, 2 * r + 5, 1)
    border = inset + r + _pick(rng, 3, 6, 1)
    a, b = w - 2 * border, d - 2 * border
    s = _Spec((-w / 2, -d / 2, 0), (w / 2, d / 2, t))
    s.add(w * d * t - a * b * t)
    s.holes = 5
    s.solid("box", -w / 2, -d / 2, 0, w / 2, d / 2, t)
    s.solid("box", -a / 2, -b / 2, 0, a / 2, b / 2, t, cut=True)
    s.probe((0, 0, t / 2), False, "window")
    s.probe((a / 2 - 1, b / 2 - 1, t / 2), False, "window corner")
    s.probe((a / 2 + 1, 0, t / 2), True, "frame side")
    for x, y in [(sx * (w / 2 - inset), sy * (d / 2 - inset)) for sy in (-1, 1) for sx in (-1, 1)]:
        s.add(-math.pi * r * r * t, round_feature=True)
        s.solid("cylinder", x, y, r, 0, t, cut=True)
        _hole_probes(s, x, y, r, t / 2, f"corner hole {_corner(x, y)}", wall=False)
    text = (f"Model a rectangular frame: a plate {_plate_words(w, d, t)}, with a centered rectangular window "
            f"{_t(a)} x {_t(b)} mm (x by y) cut through it, and four through holes of diameter {_t(2 * r)} mm in its "
            f"corners at x = ±{_t(w / 2 - inset)}, y = ±{_t(d / 2 - inset)}.")
    return Part("frame", "part", text, s.data(), [
        _box("Frame", (w, d, t), (0, 0, t / 2)),
        _box("WindowCut", (a, b, t + 4), (0, 0, t / 2)) + _boolean("Frame", "WindowCut", "DIFFERENCE", "Window"),
        _cyl("Drill", r, t + 4, (-(w / 2 - inset), -(d / 2 - inset), t / 2)),
        _array("Drill", "Columns", 2, (w - 2 * inset, 0, 0)) + _array("Drill", "Rows", 2, (0, d - 2 * inset, 0)),
        _boolean("Frame", "Drill", "DIFFERENCE", "Holes"),
    ])


KINDS: dict[str, Callable[[random.Random], Part]] = {
    f.__name__: f for f in (cylinder, hex_prism, cone, sphere, tube, plate_hole, pocket, cube_row, l_bracket,
                            rounded_block, stepped_block, hole_grid, flange, rounded_plate, boss_plate, peg_row, frame)
}
LEVELS = ("primitive", "feature", "part")


def make_part(kind: str, seed: int) -> Part:
    """The instruction of `kind` drawn with `seed` (deterministic: the same pair always gives the same part)."""
    part = KINDS[kind](random.Random(f"looplift-modeling:{kind}:{seed}"))
    part.params = {"kind": kind, "seed": seed}
    part.spec["solid"]["min_iou"] = TOLERANCE[kind]
    return part
