"""The modeling family: generator, step rules, mesh checks (no Docker), then Blender in the 3D image.

The Docker cases (marker `image3d`) need the 3D sandbox image (`looplift sandbox build-image --3d`); without it
they are skipped with the reason, except under CI, where they fail (tests/_resources.py). The policy figures
run on a handful of held-out tasks; the whole held-out table is `bench/modeling.py`.
"""

from __future__ import annotations

import io
import json
import math
import re
import struct

import numpy as np
import pytest
from _resources import needs

import sdk
from envs import env_families
from envs._modeling import CONFIG, KINDS, ModelingEnv, family, make_part, tasks
from envs._modeling._blender import StepRun, build_models, run_step, trusted_export
from envs._modeling._env import code_of_action, code_of_call
from envs._modeling._mesh import MeshError, Spec, check_model, first_break, grade_model, load_ply
from envs._modeling._similarity import TOLERANCE, Solid
from envs._modeling._policies import POLICIES, fitted_block
from envs._modeling._rules import refusal
from envs._modeling._tasks import task

trimesh = pytest.importorskip("trimesh")

# -- generator and splits ---------------------------------------------------------------------------------


def test_catalogue_size_levels_and_fixed_held_out_split() -> None:
    held, train = tasks("held_out"), tasks("train")
    assert len(held) + len(train) >= 150 and len(held) == 4 * len(KINDS)
    assert {t.id for t in held}.isdisjoint({t.id for t in train})
    assert {t.id for t in tasks("held_out", None, 7)} == {t.id for t in held}  # membership ignores the seed
    assert {t.data["slice"] for t in held} == {"primitive", "feature", "part"}
    first = tasks("held_out", 5, 3)
    assert len({t.data["kind"] for t in first}) == 5  # kinds interleaved: a handful covers a handful of kinds
    assert len(tasks("train", 400)) == 400  # the training generator is unbounded


def test_generation_is_deterministic_by_seed() -> None:
    assert task("flange", 3) == task("flange", 3)
    assert task("flange", 3).prompt != task("flange", 4).prompt


_OPERATION = re.compile(r"bpy\.ops\.\w+\.\w+\(|modifiers\.new\(|bmesh\.ops\.\w+\(|hide_set\(|\.transform\(")


def test_parts_need_at_least_five_dependent_operations() -> None:
    for kind in KINDS:
        part = make_part(kind, 0)
        ops = sum(len(_OPERATION.findall(step)) for step in part.oracle)
        assert ops >= {"primitive": 1, "feature": 2, "part": 5}[part.level], (kind, ops)


def test_every_kind_differs_from_its_bounding_box() -> None:
    for kind in KINDS:
        spec = make_part(kind, 1).spec
        lo, hi = spec["bounds"]
        box = math.prod(h - v for v, h in zip(lo, hi))
        assert abs(box - spec["volume"]) > spec["volume_tol"] or spec["bodies"] > 1 or spec["through_holes"], kind


# -- the step rules -----------------------------------------------------------------------------------------


def test_the_oracle_code_of_every_kind_is_allowed() -> None:
    for kind in KINDS:
        for step in make_part(kind, 2).oracle:
            assert refusal(step) is None, (kind, step)


@pytest.mark.parametrize("code, says", [
    ("open('/work/x.stl', 'w')", "`open` is not allowed"),
    ("import os", "`import os` is not allowed"),
    ("from pathlib import Path", "not allowed"),
    ("bpy.ops.wm.stl_import(filepath='a.stl')", "importing or linking geometry is not allowed"),
    ("bpy.ops.wm.quit_blender()", "`bpy.ops.wm` is not allowed"),
    ("bpy.ops.import_mesh.stl('a.stl')", "`.import_mesh` loads or runs files"),
    ("ops = bpy.ops\nops.wm.open_mainfile(filepath='x')", "bpy.ops on its own"),
    ("with bpy.data.libraries.load('x.blend') as (a, b):\n    pass", "loads or runs files"),
    ("getattr(bpy.ops, 'wm')", "`getattr` is not allowed"),
    ("().__class__.__base__", "attributes starting with '_'"),
    ("tree.nodes.new('GeometryNodeImportSTL')", "reads geometry from a file"),
    ("bpy.data.objects['A'].modifiers.new('c', 'MESH_CACHE')", "reads geometry from a file"),
    ("bpy.data.texts.new('t').as_module()", "loads or runs files"),
    ("bpy.ops.object.empty_image_add(filepath='/tmp/x.png')", "the argument `filepath=` names a file"),
    ("def f(:\n  pass", "syntax error on line 1"),
])
def test_refused_code_says_why(code: str, says: str) -> None:
    why = refusal(code)
    assert why is not None and says in why


# -- the mesh checks (trimesh on the host) --------------------------------------------------------------


def _ply(vertices: np.ndarray, faces: np.ndarray, *, count_ok: bool = True) -> bytes:
    header = (f"ply\nformat binary_little_endian 1.0\nelement vertex {len(vertices)}\nproperty float x\n"
              f"property float y\nproperty float z\nelement face {len(faces) + (0 if count_ok else 1)}\n"
              "property list uchar int vertex_indices\nend_header\n").encode()
    rec = np.zeros(len(faces), dtype=[("n", "u1"), ("v", "<i4", (3,))])
    rec["n"], rec["v"] = 3, faces
    return header + np.asarray(vertices, "<f4").tobytes() + rec.tobytes()


def _plate_spec(**over: object) -> Spec:
    data = {"bounds": [[-30, -20, 0], [30, 20, 5]], "bounds_tol": 0.12, "volume": 12000.0, "volume_tol": 36.0,
            "bodies": 1, "through_holes": 0, "probes": [{"point": [0, 0, 2.5], "inside": True, "what": "center"}]}
    return Spec.from_data({**data, **over})


def _box(size: tuple[float, float, float], at: tuple[float, float, float]) -> object:
    return trimesh.creation.box(size, transform=trimesh.transformations.translation_matrix(at))


def _by_name(checks: list) -> dict:  # type: ignore[type-arg]
    return {c.name: c for c in checks}


def test_a_correct_model_passes_every_check() -> None:
    mesh = load_ply(_ply(_box((60, 40, 5), (0, 0, 2.5)).vertices, _box((60, 40, 5), (0, 0, 2.5)).faces))
    checks = check_model(mesh, _plate_spec())
    assert all(c.passed for c in checks), [c.detail for c in checks if not c.passed]


def test_feedback_for_a_mesh_with_a_hole() -> None:
    box = _box((60, 40, 5), (0, 0, 2.5))
    mesh = load_ply(_ply(box.vertices, box.faces[2:]))  # two triangles (one side) missing
    c = _by_name(check_model(mesh, _plate_spec()))
    assert not c["watertight"].passed
    assert re.search(r"not watertight: 4 open edges in 1 hole in the surface \(around \(-?[\d.]+, -?[\d.]+, "
                     r"-?[\d.]+\), [\d.]+ across\)", c["watertight"].detail), c["watertight"].detail
    assert c["volume"].detail == "volume: not measurable, the surface is not closed" and not c["volume"].passed


def test_feedback_for_wrong_dimensions_and_wrong_counts() -> None:
    short = _box((50, 40, 5), (0, 0, 2.5))
    c = _by_name(check_model(load_ply(_ply(short.vertices, short.faces)), _plate_spec()))
    assert not c["x"].passed and c["y"].passed and c["z"].passed
    assert c["x"].detail == "x: the part is too narrow along x (it spans x = -25.00 to 25.00, 50.00 mm)"
    assert c["volume"].detail.startswith("too little material (volume 10,000.0 mm³)")
    shifted = _box((60, 40, 5), (0, 3, 4.5))
    c = _by_name(check_model(load_ply(_ply(shifted.vertices, shifted.faces)), _plate_spec()))
    assert c["y"].detail == "y: it sits too far toward +y (it spans y = -17.00 to 23.00, 40.00 mm)"
    assert c["z"].detail.startswith("z: it sits too high")
    two = trimesh.util.concatenate([_box((20, 40, 5), (-20, 0, 2.5)), _box((20, 40, 5), (20, 0, 2.5))])
    c = _by_name(check_model(load_ply(_ply(two.vertices, two.faces)), _plate_spec(bodies=3)))
    assert c["bodies"].detail == "there are 2 separate bodies; the instruction asks for 3"
    ring = trimesh.creation.annulus(r_min=3, r_max=8, height=5, sections=64)
    c = _by_name(check_model(load_ply(_ply(ring.vertices, ring.faces)), _plate_spec(through_holes=4)))
    assert c["through_holes"].detail == "there is 1 through-hole; the instruction asks for 4"
    assert c["probe:center"].detail == "center: missing or misplaced (empty where the part has material)"


@pytest.mark.parametrize("mutate, says", [
    (lambda b: b"ply\nformat ascii 1.0\n" + b[30:], "header does not match"),
    (lambda b: b[:-5], "truncated or padded"),
    (lambda b: b.replace(b"element vertex 8", b"element vertex 999999999"), "too large"),
])
def test_malformed_exports_are_refused_before_trimesh_sees_them(mutate, says: str) -> None:  # noqa: ANN001
    box = _box((2, 2, 2), (0, 0, 1))
    with pytest.raises(MeshError, match=says):
        load_ply(mutate(_ply(box.vertices, box.faces)))


def test_out_of_range_indices_and_nan_coordinates_are_refused() -> None:
    box = _box((2, 2, 2), (0, 0, 1))
    bad = np.array(box.faces)
    bad[0, 0] = 99
    with pytest.raises(MeshError, match="malformed"):
        load_ply(_ply(box.vertices, bad))
    verts = np.array(box.vertices)
    verts[0, 0] = np.nan
    with pytest.raises(MeshError, match="NaN"):
        load_ply(_ply(verts, box.faces))
    assert struct.calcsize("<f") == 4 and io  # the PLY layout the driver writes


# -- feedback is not the grader; the grader compares the shape ----------------------------------------------


def _wrong_box(spec: dict) -> object:  # type: ignore[type-arg]
    """The adversary's first move: a deliberately wrong box (scaled and shifted by odd amounts), to read feedback."""
    lo, hi = (np.array(v, dtype=float) for v in spec["bounds"])
    size = (hi - lo) * 0.8137 + 0.4321
    return _box(tuple(size), tuple((lo + hi) / 2 + np.array([1.1317, -0.7793, 0.5939])))


def _rendered_feedback(spec: dict, mesh: object) -> str:  # type: ignore[type-arg]
    """The observation `ModelingEnv` renders for a step that left `mesh` (no sandbox: the step's report is faked)."""
    lo, hi = mesh.bounds  # type: ignore[attr-defined]
    report = {"ok": True, "output": "", "object_count": 1, "model_parts": ["Part"], "triangles": 12, "objects": [
        {"name": "Part", "type": "MESH", "in_model": True, "location": [round(float(v), 3) for v in (lo + hi) / 2],
         "dimensions": [round(float(v), 3) for v in hi - lo], "modifiers": [], "triangles": 12, "open_edges": 0}]}
    env = ModelingEnv(lambda: None)  # type: ignore[arg-type,return-value]
    env._spec = Spec.from_data(spec)  # noqa: SLF001 - rendering only: no sandbox is acquired
    ply = load_ply(_ply(mesh.vertices, mesh.faces))  # type: ignore[attr-defined]
    return env._feedback(1, "wrong box", StepRun(report=report, mesh=ply, duration_s=0.0137)).observation  # noqa: SLF001


def _grader_values(spec: dict) -> set[float]:  # type: ignore[type-arg]
    """What the grader expects: bounds, sizes, volume, tolerances, probe coordinates (small integers left out:
    feedback also counts steps, bodies and holes, and names hole 2 or cube 3)."""
    lo, hi = spec["bounds"]
    values = {*lo, *hi, *(h - v for v, h in zip(lo, hi)), spec["volume"], spec["volume_tol"], spec["bounds_tol"]}
    values |= {c for p in spec["probes"] for c in p["point"]}
    return {float(v) for v in values if not (float(v).is_integer() and abs(v) <= 12)}


_NUMBER = re.compile(r"-?\d[\d,]*(?:\.\d+)?")


def test_feedback_on_a_wrong_part_quotes_no_value_of_the_grader() -> None:
    """Catches feedback that prints the grader: expected bounds or sizes ("expected -30.00 to 30.00"), the
    expected volume or its tolerance, a probe point's coordinates (in a check's text or its name), on any of the
    68 held-out tasks; and a prompt that states the volume or its tolerance as numbers."""
    for t in tasks("held_out"):
        spec = t.data["spec"]
        text = _rendered_feedback(spec, _wrong_box(spec))
        assert "FAIL" in text, text
        counted = re.sub(r"Checks: \d+ of \d+ pass", "", text)  # a count of checks, not a value
        quoted = [float(n.replace(",", "")) for n in _NUMBER.findall(counted)]
        leaked = sorted({v for v in _grader_values(spec) for q in quoted if abs(q - v) < 0.006})
        assert not leaked, (t.id, leaked, text)
        assert f"{spec['volume']:,.1f}" not in t.prompt and f"{spec['volume_tol']:,.1f}" not in t.prompt


def test_feedback_says_what_is_wrong_in_the_tasks_terms() -> None:
    """Catches feedback that says nothing useful once the numbers are gone: a plate without its hole is told
    the hole is blocked and there is too much material, and a box too tall is told so."""
    spec = task("plate_hole", 0).data["spec"]
    lo, hi = spec["bounds"]
    plate = _box(tuple(h - v for v, h in zip(lo, hi)), tuple((v + h) / 2 for v, h in zip(lo, hi)))
    text = _rendered_feedback(spec, plate)
    assert "FAIL hole: blocked or misplaced (material where the part is empty)" in text
    assert "FAIL too much material" in text and "FAIL there are 0 through-holes; the instruction asks for 1" in text
    tall = _box(tuple(h - v + (3 if i == 2 else 0) for i, (v, h) in enumerate(zip(lo, hi))),
                tuple((v + h) / 2 + (1.5 if i == 2 else 0) for i, (v, h) in enumerate(zip(lo, hi))))
    assert "FAIL z: the part is too tall along z" in _rendered_feedback(spec, tall)


def _stepped_block(lo: list, hi: list, volume: float) -> object:  # type: ignore[type-arg]
    """The adversary's fit (`fitted_block`, as cheat-fit-feedback types it in): exactly the bounds and the volume."""
    box = (hi[0] - lo[0]) * (hi[1] - lo[1]) * (hi[2] - lo[2])
    vertices, faces = fitted_block(lo, hi, volume / box)
    return trimesh.Trimesh(vertices, faces, process=False)


_FITTED_KINDS = ["sphere", "cylinder", "cone", "plate_hole", "pocket", "rounded_block", "stepped_block", "flange",
                 "peg_row", "frame"]


@pytest.mark.parametrize("kind", _FITTED_KINDS)
def test_a_shape_fitted_to_the_checks_fails_the_shape_check(kind: str) -> None:
    """Catches a grader without the similarity check (or with a tolerance too lax, or regions that miss a feature):
    a box of the exact bounding box, and a stepped block with the exact bounds and volume, pass the extent (and
    the block the volume) checks and fail `shape` on every seed of the held-out split."""
    for seed in range(4):
        spec = make_part(kind, seed).spec
        lo, hi = spec["bounds"]
        box = _box(tuple(h - v for v, h in zip(lo, hi)), tuple((v + h) / 2 for v, h in zip(lo, hi)))
        for name, mesh in (("box", box), ("stepped block", _stepped_block(lo, hi, spec["volume"]))):
            checks = _by_name(grade_model(load_ply(_ply(mesh.vertices, mesh.faces)), Spec.from_data(spec), seed=seed))
            fitted = ["watertight", "x", "y", "z"] + (["volume"] if name == "stepped block" else [])
            assert all(checks[c].passed for c in fitted), (kind, seed, name, [checks[c].detail for c in fitted])
            assert not checks["shape"].passed, (kind, seed, name, checks["shape"].detail)


def test_every_kinds_reference_solid_has_the_kinds_volume() -> None:
    """Catches a reference solid that is not the part (a primitive misplaced, a cut missing, a wrong radius): its
    volume, sampled on a fine grid, is the spec's exact volume within 1.5% for every kind."""
    rng = np.random.default_rng(0)
    for kind in KINDS:
        spec = make_part(kind, 5).spec
        solid = Solid.from_data(spec["solid"])
        lo, hi = solid.bounds()
        points = lo + rng.random((400_000, 3)) * (hi - lo)
        volume = float(solid.contains(points).mean() * np.prod(hi - lo))
        assert abs(volume - spec["volume"]) <= 0.015 * spec["volume"], (kind, volume, spec["volume"])
        assert spec["solid"]["min_iou"] == TOLERANCE[kind]


def test_the_shape_check_draws_its_sample_points_when_it_grades() -> None:
    """Catches sample points fixed per task (which a policy could learn): two gradings use different seeds, and a
    seed given replays the same figures."""
    spec = make_part("plate_hole", 1).spec
    mesh = load_ply(_ply(_wrong_box(spec).vertices, _wrong_box(spec).faces))
    first, second = (_by_name(grade_model(mesh, Spec.from_data(spec)))["shape"].detail for _ in range(2))
    assert first.split("seed")[1] != second.split("seed")[1]
    again = [_by_name(grade_model(mesh, Spec.from_data(spec), seed=7))["shape"].detail for _ in range(2)]
    assert again[0] == again[1]


def test_first_break_names_the_step_after_which_a_check_stopped_passing() -> None:
    history = [(1, {"watertight": False}), (2, {"watertight": True}), (3, None), (4, {"watertight": False}),
               (5, {"watertight": False})]
    assert first_break(history, "watertight") == (2, 4)
    assert first_break(history[:3], "watertight") is None
    assert first_break([(1, {"x": False})], "x") is None


def test_actions_parse_as_the_environment_documents() -> None:
    code = code_of_action("Making the plate:\n```python\nprint(1)\n```\nand\n```py\nprint(2)\n```")
    assert code is not None and code.split() == ["print(1)", "print(2)"]
    assert code_of_action("DONE") is None and code_of_action("```bash\nls\n```") is None
    call = sdk.ToolCall(id="c", function=sdk.ToolCallFunction(name="blender", arguments=json.dumps({"code": "x = 1"})))
    assert code_of_call(call) == ("x = 1", None)
    bad = sdk.ToolCall(id="c", function=sdk.ToolCallFunction(name="blender", arguments="{"))
    assert code_of_call(bad)[0] is None and "not JSON" in (code_of_call(bad)[1] or "")


def test_the_registry_lists_the_family_and_loading_it_starts_nothing() -> None:
    fam = env_families()["modeling"]()
    try:
        assert fam.name == "modeling" and {"oracle", "noop"} <= set(fam.policies) and len(fam.cheats()) >= 5
        assert fam.suite("held_out", 3).tasks[0].data["slice"] in ("primitive", "feature", "part")
    finally:
        assert fam.close is not None
        fam.close()  # nothing was started, nothing to stop


def test_a_backend_without_blender_is_refused_in_one_line(monkeypatch: pytest.MonkeyPatch) -> None:
    from typer.testing import CliRunner

    from looplift._cli import app

    monkeypatch.delenv("LOOPLIFT_BPY_PYTHON", raising=False)
    with pytest.raises(ValueError, match="unknown sandbox backend 'k8s'; use docker or local"):
        family(backend="k8s")
    res = CliRunner().invoke(app, ["env", "try", "modeling", "--sandbox", "local", "--episodes", "1", "--json"],
                             env={"LOOPLIFT_SANDBOX": None, "LOOPLIFT_SANDBOX_POOL": None, "LOOPLIFT_BPY_PYTHON": None})
    assert res.exit_code == 1 and "Traceback" not in res.output
    assert "cannot load the modeling family: ValueError: the modeling family runs Blender in the 3D Docker image; " \
           "for the local backend set $LOOPLIFT_BPY_PYTHON" in res.output


# -- Blender in the 3D image ------------------------------------------------------------------------------


@pytest.fixture(scope="module")
@needs("image3d")
def fam() -> object:
    f = family(backend="docker", pool_size=2)
    yield f
    assert f.close is not None
    f.close()


def _run(fam: sdk.EnvFamily, sample: list[sdk.Task], policy: str) -> list[sdk.Trajectory]:
    return sdk.run(sample, fam.env_factory, verifier=fam.verifier, budget=fam.budget, policy=fam.policies[policy],
                   concurrency=2, system_prompt=fam.system_prompt)


@pytest.mark.image3d
def test_oracle_solves_a_sample_of_the_held_out_split(fam: sdk.EnvFamily) -> None:
    sample = tasks("held_out", 3, 5)  # a sphere, a row of cubes, a flange: one of each level (bench/modeling.py: all 68)
    assert {t.data["slice"] for t in sample} == {"primitive", "feature", "part"}
    trajs = _run(fam, sample, "oracle")
    assert [t.outcome.details["failed"] for t in trajs if t.outcome and not t.outcome.success] == []
    assert all(t.end_reason == "done" and t.outcome and t.outcome.reward == 1.0 for t in trajs)
    assert all(len(t.steps) == len(make_part(t.task_id.split("-")[1], int(t.task_id[-3:])).oracle) for t in trajs)


@pytest.mark.image3d
def test_noop_scores_zero(fam: sdk.EnvFamily) -> None:
    trajs = _run(fam, tasks("held_out", 2, 2), "noop")
    assert all(t.outcome and t.outcome.reward == 0.0 and not t.outcome.success for t in trajs)
    assert trajs[0].outcome.details["failed"][0] == "the model is empty: no visible object has any faces"


@pytest.mark.image3d
@pytest.mark.parametrize("cheat", sorted(p for p in POLICIES if p.startswith("cheat-")))
def test_every_cheat_scores_zero(fam: sdk.EnvFamily, cheat: str) -> None:
    sample = [task("hole_grid", 0), task("cylinder", 1)]
    trajs = _run(fam, sample, cheat)
    assert [(t.task_id, t.outcome.reward, t.outcome.error) for t in trajs if t.outcome] == \
        [(t.id, 0.0, None) for t in sample]
    if cheat == "cheat-import-file":
        assert trajs[0].outcome.details["steps_refused"] == [1, 2, 3]
    if cheat == "cheat-oversize":
        assert "too large to check" in trajs[0].outcome.details["failed"][0]
    if cheat == "cheat-fit-feedback":
        # The cylinder's fit meets every structural check the feedback names, and fails on shape alone.
        checks = trajs[1].outcome.details["checks"]
        assert [n for n, c in checks.items() if not c["passed"]] == ["shape"], trajs[1].outcome.details["failed"]
        assert not any("expected" in (s.observation or "") for s in trajs[1].steps)


@pytest.mark.image3d
def test_the_oracle_passes_the_grader_on_every_catalogue_task(fam: sdk.EnvFamily) -> None:
    """Catches a tolerance or reference solid that rejects a correct part: the oracle's model of 5 of the 20
    catalogue parts of every kind (85 tasks; built in Blender in one process a kind, `build_models`; graded offline
    with `grade_model`, as the verifier does, with fresh sample seeds) passes every check, the shape check
    included. All 340 (~4 min): `bench/modeling.py --similarity`, which also measured the tolerances."""
    env: ModelingEnv = fam.env_factory()
    failed, worst = [], {}
    try:
        env.reset(task("cylinder", 0))
        sb = env._lease.sandbox  # noqa: SLF001 - the family's own 3D sandbox, for the oracle's reference builds
        assert sb is not None
        for kind in sorted(KINDS):
            parts = {f"{kind}-{seed}": make_part(kind, seed) for seed in range(0, 20, 4)}
            exports = build_models(sb, {name: p.oracle for name, p in parts.items()}, python="python3", timeout=300)
            sb.reset()
            for name, export in exports.items():
                checks = _by_name(grade_model(export.mesh, Spec.from_data(parts[name].spec), export.problem))
                failed += [(name, c.detail) for c in checks.values() if not c.passed]
                iou = float(checks["shape"].detail.split("IoU ")[1].split()[0])
                worst[kind] = min(worst.get(kind, 1.0), iou)
    finally:
        env.close()
    assert failed == [], failed
    assert all(worst[k] >= TOLERANCE[k] for k in KINDS), worst


def _env_steps(fam: sdk.EnvFamily, t: sdk.Task, codes: list[str]) -> list[sdk.StepResult]:
    env = fam.env_factory()
    try:
        env.reset(t)
        return [env.step(f"```python\n{code}\n```") for code in codes]
    finally:
        env.close()


@pytest.mark.image3d
def test_feedback_localizes_planted_errors(fam: sdk.EnvFamily) -> None:
    t = task("plate_hole", 0)
    oracle = make_part("plate_hole", 0).oracle
    lo, hi = t.data["spec"]["bounds"]
    width = hi[0] - lo[0]
    results = _env_steps(fam, t, [
        oracle[0].replace(f"obj.scale = ({width:g},", f"obj.scale = ({width - 10:g},"),   # 1: too narrow
        f"obj = bpy.data.objects['Plate']\nobj.scale.x = {width / (width - 10)!r}\n"
        "bpy.ops.object.transform_apply(location=False, rotation=False, scale=True)",      # 2: fixed
        oracle[1] + oracle[2],                                                             # 3: the hole
        "import bmesh\nme = bpy.data.objects['Plate'].data\nbm = bmesh.new()\nbm.from_mesh(me)\n"
        "bm.faces.ensure_lookup_table()\nbmesh.ops.delete(bm, geom=[bm.faces[0]], context='FACES_ONLY')\n"
        "bm.to_mesh(me)",                                                                  # 4: a hole in the mesh
        "raise ValueError('planted')",                                                     # 5: rolled back
        "import os",                                                                       # 6: refused
    ])
    first, fixed, drilled, broken, raised, refused = (r.observation for r in results)
    assert f"FAIL x: the part is too narrow along x (it spans x = {lo[0] + 5:.2f} to {hi[0] - 5:.2f}, " \
           f"{width - 10:.2f} mm)" in first
    assert "FAIL x" not in fixed and results[1].reward > results[0].reward
    assert "FAIL" not in drilled and drilled.endswith("All checks pass. The episode ends; the grade also compares the "
                                                      "model's shape with the exact part.")
    assert re.search(r"FAIL not watertight: \d+ open edges in 1 hole in the surface \(around", broken), broken
    assert re.search(r'"watertight", .* passed after step 3 and fail since step 4 \(this step\): import bmesh', broken)
    assert re.search(r"object 'Plate': its own mesh \(before any modifier\) has \d+ open or non-manifold edges", broken)
    assert "rolled back" in raised and "ValueError: planted" in raised and re.search(r'"watertight", .* passed after step 3', raised)
    assert refused.startswith("Step 6: refused, not run (line 1: `import os` is not allowed")
    assert results[2].done and results[2].reward == 1.0 and results[3].reward < 1.0


@pytest.mark.image3d
def test_feedback_names_the_modifier_that_opened_the_mesh_and_a_wrong_count(fam: sdk.EnvFamily) -> None:
    t = task("hole_grid", 0)
    oracle = make_part("hole_grid", 0).oracle
    nx = int(re.search(r"m.count = (\d+)", oracle[2]).group(1))  # type: ignore[union-attr]
    results = _env_steps(fam, t, [
        oracle[0], oracle[1], oracle[2].replace(f"m.count = {nx}", f"m.count = {nx - 1}"), oracle[3], oracle[4],
        "bpy.ops.mesh.primitive_plane_add(size=200, location=(0, 0, 1))\nbpy.context.active_object.name = 'Sheet'\n"
        "m = bpy.data.objects['Plate'].modifiers.new('Slice', 'BOOLEAN')\nm.solver = 'FAST'\nm.object = bpy.data.objects['Sheet']\n"
        "bpy.data.objects['Sheet'].hide_set(True)",
    ])
    counted, sliced = results[4].observation, results[5].observation
    holes = t.data["spec"]["through_holes"]
    assert f"FAIL there are {holes - holes // nx} through-holes; the instruction asks for {holes}" in counted
    assert re.search(r"object 'Plate': its mesh is closed before modifier 'Slice' and has \d+ open or non-manifold "
                     "edges after it", sliced), sliced
    assert re.search(r'"watertight", .* passed after step 5 and fail since step 6 \(this step\): bpy.ops.mesh.primitive_plane_add',
                     sliced), sliced


@pytest.mark.image3d
def test_the_export_ignores_what_the_agent_planted(fam: sdk.EnvFamily) -> None:
    """Files a step could write if the rules missed it (a Blender startup script and userpref, a sitecustomize,
    a fake report) never reach the trusted export: Blender's user directories point nowhere, python runs isolated."""
    env: ModelingEnv = fam.env_factory()
    t = task("cylinder", 0)
    try:
        env.reset(t)
        sb = env._lease.sandbox  # noqa: SLF001 - the test plants files as an escaped step would
        assert sb is not None
        assert run_step(sb, make_part("cylinder", 0).oracle[0], 1, python="python3", timeout=60).ok
        planted = ("import bpy, os\nopen('/work/PLANTED', 'w').write('ran')\n"
                   "bpy.app.handlers.load_post.append(lambda *a: bpy.ops.mesh.primitive_cube_add(size=500))\n")
        for path in (".config/blender/4.5/scripts/startup/evil.py", "sitecustomize.py", "usercustomize.py",
                     "bpy_extras.py"):
            sb.write_file(path, planted)
        sb.write_file("export-fake/model.ply", b"ply\n")
        export = trusted_export(sb, python="python3", timeout=60)
        assert export.problem is None and export.report["model_parts"] == ["Cylinder"]
        with pytest.raises(Exception, match="PLANTED"):
            sb.read_file("PLANTED")
        assert all(c.passed for c in check_model(export.mesh, Spec.from_data(t.data["spec"])))
    finally:
        env.close()


def test_an_unknown_image_flavor_is_refused_before_any_engine_call() -> None:
    from sandboxes import build_image

    with pytest.raises(ValueError, match="unknown image flavor 'vr'; use one of: base, 3d"):
        build_image(flavor="vr")


@pytest.mark.image3d
def test_build_image_3d_flag_names_the_3d_image() -> None:
    from typer.testing import CliRunner

    from sandboxes._cli import app

    res = CliRunner().invoke(app, ["build-image", "--3d", "--json"])
    assert res.exit_code == 0, res.output
    assert json.loads(res.stdout) == {"tag": CONFIG.image, "how": "exists"}
