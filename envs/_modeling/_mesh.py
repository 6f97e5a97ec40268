"""Validating an exported model against a task's spec, with trimesh, on the host: feedback and grade.

Why on the host: the exported model is data (a binary PLY the driver writes), and the grading logic
should run where the agent cannot reach it. Data from a sandbox is hostile, so it is loaded
defensively: the header must be exactly the layout the driver writes, the counts must be within caps
(MAX_VERTICES, MAX_FACES) and match the byte length exactly, every index must name a vertex and every
coordinate must be finite — only then does `trimesh.load` see the bytes. The caps also bound the time
the checks take (every check below is linear or n log n in the face count; ~0.1 s at the cap here).

The checks, in order (`Spec` says what is expected; every check is reported, pass or fail):

    loads          the file parses and holds at least one triangle
    watertight     every edge is shared by exactly two faces, with consistent winding, and the
                   volume is positive (faces point outwards). A failure names the open boundaries
                   (holes in the surface): how many, how many edges, and where
    bodies         connected components (separate solids) == `bodies`
    x, y, z        the model's extent along each axis (placement and size) within `bounds_tol`
    volume         enclosed volume within `volume_tol` (only measurable on a closed mesh)
    through_holes  total genus (handles) from the Euler characteristic: sum of (2 - chi_i) / 2 over
                   closed bodies; a through hole is one handle, a blind pocket none
    probe:<what>   feedback only: a point that must be material or empty (holes, pockets, fillets,
                   bosses; `mesh.contains`, closed meshes only)
    shape          grading only (`grade_model`): the worst regional IoU against the exact part
                   (`_similarity`) at least the kind's tolerance, on sample points drawn at grading

Feedback is not the grader. `check_model` is what the agent sees after every step, and its details
say what is wrong in the task's own terms: the part is too tall or off-center along x, it has too
much material, 2 bodies where the instruction asks for 1, a hole is blocked. They quote only the
model's own measurements and the counts the instruction states, never an expected bound, volume,
tolerance or probe point. `grade_model` is what the verifier decides with: the same structural checks
without the fixed probe points, plus `shape`, which no fitted box or stepped block meets (the figures
are in `_similarity`); its result is never shown to the agent.

Deliberately not checked: surface quality (triangle shape), exact tessellation, anything the
instruction does not state.
"""

from __future__ import annotations

import io
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Optional

import numpy as np

from ._similarity import Solid, similarity

__all__ = ["UNMEASURABLE", "Check", "MeshError", "Spec", "check_model", "first_break", "grade_model", "load_ply",
           "score"]

MAX_VERTICES = 600_000
MAX_FACES = 200_000
_HEADER = re.compile(
    rb"ply\nformat binary_little_endian 1\.0\nelement vertex (\d{1,9})\nproperty float x\nproperty float y\n"
    rb"property float z\nelement face (\d{1,9})\nproperty list uchar int vertex_indices\nend_header\n")
_AXES = "xyz"
#: The detail of a check that needs a closed surface when the surface is open.
UNMEASURABLE = "not measurable, the surface is not closed"


class MeshError(ValueError):
    """The exported file is not a model this validator accepts (malformed, too large, empty)."""


@dataclass(frozen=True)
class Probe:
    """A point that must be inside material (`inside`) or empty space."""

    point: tuple[float, float, float]
    inside: bool
    what: str


@dataclass(frozen=True)
class Spec:
    """What the instruction asks for, with tolerances (millimetres, cubic millimetres)."""

    bounds: tuple[tuple[float, float, float], tuple[float, float, float]]
    bounds_tol: float
    volume: float
    volume_tol: float
    bodies: int = 1
    through_holes: int = 0
    probes: tuple[Probe, ...] = field(default_factory=tuple)
    #: The exact part, for grading (`_similarity`); None in specs written before it existed.
    solid: Optional[Solid] = None

    @classmethod
    def from_data(cls, data: Mapping[str, Any]) -> "Spec":
        """The spec stored in `task.data["spec"]` (plain JSON)."""
        lo, hi = data["bounds"]
        return cls(bounds=(tuple(map(float, lo)), tuple(map(float, hi))),  # type: ignore[arg-type]
                   bounds_tol=float(data["bounds_tol"]), volume=float(data["volume"]),
                   volume_tol=float(data["volume_tol"]), bodies=int(data.get("bodies", 1)),
                   through_holes=int(data.get("through_holes", 0)),
                   probes=tuple(Probe(tuple(map(float, p["point"])), bool(p["inside"]), str(p["what"]))  # type: ignore[arg-type]
                                for p in data.get("probes", ())),
                   solid=Solid.from_data(data["solid"]) if data.get("solid") else None)


@dataclass(frozen=True)
class Check:
    """One requirement: its stable name (for tracking it across steps), whether it holds, and why."""

    name: str
    passed: bool
    detail: str


def load_ply(data: bytes) -> Any:
    """A `trimesh.Trimesh` from the driver's binary PLY, or MeshError saying what is wrong with the bytes."""
    import trimesh

    m = _HEADER.match(data[:512])
    if m is None:
        raise MeshError("the exported file is not the expected binary PLY (its header does not match)")
    nv, nf = int(m.group(1)), int(m.group(2))
    if nv > MAX_VERTICES or nf > MAX_FACES:
        raise MeshError(f"the model is too large: {nv:,} vertices, {nf:,} triangles (limit {MAX_VERTICES:,} and "
                        f"{MAX_FACES:,}); these parts need far fewer")
    body = data[m.end():]
    if len(body) != nv * 12 + nf * 13:
        raise MeshError(f"the exported file is truncated or padded ({len(body):,} bytes of data for {nv:,} vertices "
                        f"and {nf:,} faces)")
    if nf == 0:
        raise MeshError("the model is empty: no visible object has any faces")
    verts = np.frombuffer(body, dtype="<f4", count=nv * 3)
    faces = np.frombuffer(body, dtype=[("n", "u1"), ("v", "<i4", (3,))], offset=nv * 12)
    if not np.all(np.isfinite(verts)):
        raise MeshError("the model has vertices with infinite or NaN coordinates")
    if np.any(faces["n"] != 3) or np.any(faces["v"] < 0) or np.any(faces["v"] >= nv):
        raise MeshError("the exported faces are malformed (not triangles, or indices outside the vertex list)")
    # Blender's topology as exported (process=False): merging coincident vertices here would turn the
    # pinch points an exact boolean leaves (two vertices at one spot, each side closed) into false
    # non-manifold edges. `check_model` merges only to give a seam-split surface a second chance.
    mesh = trimesh.load(io.BytesIO(data), file_type="ply", process=False)
    if not isinstance(mesh, trimesh.Trimesh) or len(mesh.faces) == 0:
        raise MeshError("the model is empty")
    return mesh


def _fmt(v: float) -> str:
    return f"{v:.2f}"


def _open_boundaries(mesh: Any) -> str:
    """Where the surface is open: boundary edges (one face) grouped into loops, and non-manifold edges (3+)."""
    import trimesh

    counts = trimesh.grouping.group_rows(mesh.edges_sorted, require_count=1)
    boundary = mesh.edges_sorted[counts] if len(counts) else np.zeros((0, 2), dtype=np.int64)
    _, inverse, occurrences = np.unique(mesh.edges_sorted, axis=0, return_inverse=True, return_counts=True)
    non_manifold = int(np.count_nonzero(occurrences > 2))
    parts = []
    if len(boundary):
        loops = trimesh.graph.connected_components(boundary, min_len=1)
        where = []
        for loop in sorted(loops, key=len, reverse=True)[:3]:
            pts = mesh.vertices[np.asarray(loop, dtype=np.int64)]
            c, ext = pts.mean(axis=0), pts.max(axis=0) - pts.min(axis=0)
            where.append(f"around ({_fmt(c[0])}, {_fmt(c[1])}, {_fmt(c[2])}), {_fmt(float(ext.max()))} across")
        parts.append(f"{len(boundary)} open edges in {len(loops)} hole{'s' if len(loops) != 1 else ''} in the surface "
                     f"({'; '.join(where)}{'; …' if len(loops) > 3 else ''})")
    if non_manifold:
        parts.append(f"{non_manifold} edges shared by more than two faces (non-manifold: e.g. touching parts not "
                     "joined by a boolean union, or a boolean with an open cutter)")
    return "; ".join(parts)


def _genus(mesh: Any, bodies: int) -> Optional[int]:
    twice = 2 * bodies - int(mesh.euler_number)
    return twice // 2 if twice >= 0 and twice % 2 == 0 else None


def _closed(mesh: Any) -> bool:
    return bool(mesh.is_watertight and mesh.is_winding_consistent)


#: How a wrong extent reads along each axis: (too large, too small, shifted down, shifted up).
_EXTENT_WORDS = {"x": ("too wide", "too narrow", "it sits too far toward -x", "it sits too far toward +x"),
                 "y": ("too deep", "too shallow", "it sits too far toward -y", "it sits too far toward +y"),
                 "z": ("too tall", "too short", "it sits too low (the instruction says where its bottom is)",
                       "it sits too high (the instruction says where its bottom is)")}


def _extent(axis: str, lo: float, hi: float, want: tuple[float, float], tol: float) -> Check:
    """The extent along `axis` in the task's terms: too large or small, shifted; only the model's own numbers."""
    big, small, low, high = _EXTENT_WORDS[axis]
    ok = abs(lo - want[0]) <= tol and abs(hi - want[1]) <= tol
    span = f"it spans {axis} = {_fmt(lo)} to {_fmt(hi)}, {_fmt(hi - lo)} mm"
    if ok:
        return Check(axis, True, f"{axis}: {span}, as the instruction asks")
    size_error, shift = (hi - lo) - (want[1] - want[0]), (lo + hi - want[0] - want[1]) / 2
    what = []
    if abs(size_error) > tol:
        what.append(f"the part is {big if size_error > 0 else small} along {axis}")
    if abs(shift) > tol:
        what.append(high if shift > 0 else low)
    if not what:
        what.append(f"its faces along {axis} are slightly off in size or placement")
    return Check(axis, False, f"{axis}: {' and '.join(what)} ({span})")


def _probe(p: Probe, got: bool) -> Check:
    if bool(got) == p.inside:
        return Check(f"probe:{p.what}", True, f"{p.what}: as the instruction says")
    if p.inside:
        return Check(f"probe:{p.what}", False, f"{p.what}: missing or misplaced (empty where the part has material)")
    return Check(f"probe:{p.what}", False, f"{p.what}: blocked or misplaced (material where the part is empty)")


def _volume(volume: float, spec: Spec) -> Check:
    if abs(volume - spec.volume) <= spec.volume_tol:
        return Check("volume", True, f"volume {volume:,.1f} mm³, as the instruction's part")
    if volume > spec.volume:
        return Check("volume", False, f"too much material (volume {volume:,.1f} mm³): a hole, pocket or cut may be "
                                      "missing or too small, or a part too large")
    return Check("volume", False, f"too little material (volume {volume:,.1f} mm³): a part may be missing or too "
                                  "small, or a hole, pocket or cut too large")


def _count(name: str, got: int, want: int, one: str, many: str) -> Check:
    word = one if got == 1 else many
    if got == want:
        return Check(name, True, f"{got} {word}, as the instruction asks")
    return Check(name, False, f"there {'is' if got == 1 else 'are'} {got} {word}; the instruction asks for {want}")


def check_model(mesh: Optional[Any], spec: Spec, load_error: Optional[str] = None, *,
                probes: bool = True) -> list[Check]:
    """Every check of `spec` against `mesh` (None when it did not load; `load_error` says why), in the task's
    terms: what the agent is told after each step. `probes=False` leaves out the fixed feature points (the
    grader's variant, `grade_model`).

    The surface counts as closed when it is closed as exported or once coincident vertices are merged
    (a seam split into two edges); the checks then use that variant, and open boundaries are reported
    on the merged one, so a seam is never called a hole."""
    points = spec.probes if probes else ()
    if mesh is None:
        why = load_error or "no model was exported"
        return [Check("loads", False, why)] + [Check(n, False, "not checked: the model did not load") for n in
                                                _names(spec, points)[1:]]
    out = [Check("loads", True, f"{len(mesh.faces):,} triangles")]
    mesh, closed = _closed_variant(mesh)
    volume = float(mesh.volume) if closed else None
    if not closed:
        out.append(Check("watertight", False, "not watertight: " + (_open_boundaries(mesh) or
                                                                    "face winding is inconsistent")))
    elif volume is not None and volume <= 0:
        out.append(Check("watertight", False, "closed, but the faces point inwards (negative volume); recalculate "
                                              "normals (bmesh.ops.recalc_face_normals)"))
    else:
        out.append(Check("watertight", True, "closed surface, consistent outward normals"))
    bodies = int(mesh.body_count)
    out.append(_count("bodies", bodies, spec.bodies, "separate body", "separate bodies"))
    lo, hi = mesh.bounds
    for i, axis in enumerate(_AXES):
        out.append(_extent(axis, float(lo[i]), float(hi[i]), (spec.bounds[0][i], spec.bounds[1][i]), spec.bounds_tol))
    good = closed and volume is not None and volume > 0
    if good:
        assert volume is not None
        out.append(_volume(volume, spec))
        genus = _genus(mesh, bodies)
        if genus is None:
            out.append(Check("through_holes", False, "the through-holes cannot be counted (the surface's topology "
                                                     "is irregular)"))
        else:
            out.append(_count("through_holes", genus, spec.through_holes, "through-hole", "through-holes"))
        if points:
            inside = mesh.contains(np.array([p.point for p in points], dtype=np.float64))
            out += [_probe(p, bool(got)) for p, got in zip(points, inside)]
    else:
        for name in ("volume", "through_holes", *(f"probe:{p.what}" for p in points)):
            out.append(Check(name, False, f"{name.split(':', 1)[-1]}: {UNMEASURABLE}"))
    return out


def _closed_variant(mesh: Any) -> tuple[Any, bool]:
    """(the mesh the checks use, whether it is closed): as exported, or with coincident vertices merged when only
    that closes it. An open mesh is returned as exported: its open edges are the ones the scene report counts."""
    if _closed(mesh):
        return mesh, True
    merged = mesh.copy()
    merged.merge_vertices()
    return (merged, True) if _closed(merged) else (mesh, False)


def grade_model(mesh: Optional[Any], spec: Spec, load_error: Optional[str] = None, *,
                seed: Optional[int] = None) -> list[Check]:
    """The grader's checks: `check_model` without the fixed feature points, plus `shape`, the similarity to the
    exact part on sample points drawn now (`seed` fixes them, for tests). Never shown to the agent."""
    out = check_model(mesh, spec, load_error, probes=False)
    if spec.solid is None:  # never passed unchecked: a spec written before `solid` existed is regenerated first
        return out + [Check("shape", False, "shape: not compared (the spec has no exact part; regenerate the task)")]
    if mesh is None or not all(c.passed for c in out if c.name in ("watertight",)):
        return out + [Check("shape", False, "shape: not compared (the model did not load or is not closed)")]
    sim = similarity(_closed_variant(mesh)[0], spec.solid, seed)
    return out + [Check("shape", sim.worst >= spec.solid.min_iou,
                        f"shape: worst regional IoU {sim.worst:.4f} (tolerance {spec.solid.min_iou:g}), whole part "
                        f"{sim.whole:.4f}, {sim.regions} regions, sample seed {sim.seed}")]


def _names(spec: Spec, points: Sequence[Probe]) -> list[str]:
    return ["loads", "watertight", "bodies", *_AXES, "volume", "through_holes", *(f"probe:{p.what}" for p in points)]


def score(checks: Sequence[Check]) -> float:
    """The fraction of checks that pass."""
    return sum(c.passed for c in checks) / len(checks) if checks else 0.0


def first_break(history: Sequence[tuple[int, Optional[Mapping[str, bool]]]], name: str) -> Optional[tuple[int, int]]:
    """Where check `name` broke: (the last step after which it passed, the first later step after which it
    failed), or None when it never passed or has not failed since. `history` holds (step, check results)
    per step, None for a step that changed nothing (refused, raised, stopped)."""
    passed_at = broke = None
    for index, results in history:
        if results is None or name not in results:
            continue
        if results[name]:
            passed_at, broke = index, None
        elif passed_at is not None and broke is None:
            broke = index
    return (passed_at, broke) if passed_at is not None and broke is not None else None
