"""The coding family: bug injectors, the hidden-test judge, the tools, the verifier's anti-gaming rules,
the reference policies on held-out tasks, and resuming an episode killed mid-way.

Each test checks one property. Sandboxed tests run on the local backend always and on Docker when an
engine and the image are here (`docker` mark). The family figures use a small sample of held-out
tasks; the full verification of every task is the build step (`scripts/build_coding_tasks.py`).
"""

from __future__ import annotations

import ast
import json
import os
import shutil
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import sdk
from sandboxes import EnvSnapshot, Sandbox, SandboxConfig, make_pool, make_sandbox
from envs._coding import CodingEnv, family
from envs._coding._bugs import INJECTORS, inject, sites
from envs._coding._hidden import run_hidden
from envs._coding._humaneval import literal_calls, load_problems, visible_asserts, visible_test_file
from envs._coding._policies import POLICIES
from envs._coding._tasks import load_manifest, tasks
from envs._coding._verify import Behaviour, IntegrityCheck, ProcessRun, final_state, observe
from sdk import Message, Task, ToolCall, ToolCallFunction, Trajectory
from _backends import BACKENDS

CFG = SandboxConfig(timeout_s=20)
PROBLEMS = {p.id: p for p in load_problems()[0]}


@pytest.fixture(scope="module", params=BACKENDS)
def sb(request: pytest.FixtureRequest) -> Iterator[Sandbox]:
    with make_sandbox(request.param, CFG) as s:
        yield s


# -- bug injectors (no sandbox) -------------------------------------------------------------------

SAMPLE = """def f(xs, n):
    if not xs:
        return []
    out = []
    for i in range(n):
        if xs[i] > 0 and i % 2 == 0:
            out.append(abs(xs[i]) + 1)
        else:
            out.append(xs[i].real)
    flag = True if out else False
    return out
"""


@pytest.mark.parametrize("injector, site, buggy_line", [
    ("off_by_one", 0, "    for i in range(n - 1):"),
    ("wrong_operator", 0, "        if xs[i] > 0 or i % 2 == 0:"),
    ("swapped_branch", 0, "            out.append(xs[i].real)"),
    ("negated_condition", 0, "    if not (not xs):"),
    ("missing_edge_case", 0, "    out = []"),
    ("wrong_return", 0, "    return n"),
    ("dropped_call", 0, "            out.append(xs[i] + 1)"),
])
def test_each_injector_changes_one_place(injector: str, site: int, buggy_line: str) -> None:
    m = inject(SAMPLE, injector, site)
    assert m.source != SAMPLE and ast.dump(ast.parse(m.source)) != ast.dump(ast.parse(SAMPLE))
    changed = [ln for ln in m.source.splitlines() if ln not in SAMPLE.splitlines()]
    assert len(changed) <= 1 and buggy_line in m.source.splitlines()
    assert m.source.count(m.fix_old) == 1 and m.source.replace(m.fix_old, m.fix_new) == SAMPLE


def test_injection_is_deterministic_and_bounded_to_the_solution() -> None:
    p = PROBLEMS["HumanEval/0"]
    for injector in INJECTORS:
        listed = sites(p.source, injector, p.solution_start_line)
        assert listed == sites(p.source, injector, p.solution_start_line)
        for i in range(len(listed)):
            a, b = inject(p.source, injector, i, p.solution_start_line), inject(p.source, injector, i, p.solution_start_line)
            assert a == b and a.line >= p.solution_start_line  # never inside the prompt (docstring, signature)
    with pytest.raises(ValueError, match="unknown bug injector"):
        sites(p.source, "nope")


def test_every_site_of_the_first_problems_has_an_exact_fix() -> None:
    for p in list(PROBLEMS.values())[:40]:
        for injector in INJECTORS:
            for i in range(len(sites(p.source, injector, p.solution_start_line))):
                try:
                    m = inject(p.source, injector, i, p.solution_start_line)
                except ValueError:
                    continue  # a site whose edit does not parse is skipped by the build, never a task
                assert m.source.count(m.fix_old) == 1 and m.source.replace(m.fix_old, m.fix_new) == p.source


# -- the task set ---------------------------------------------------------------------------------


@pytest.mark.slow
@pytest.mark.docker
def test_build_step_keeps_only_bugs_the_tests_catch() -> None:
    """On Docker: the local backend's RLIMIT_NPROC counts every process of uid 65534 on the machine, and in the
    full suite that limit was hit by this many builds ("Cannot fork"), twice."""
    from envs._coding._build import build_manifest

    from envs._coding._humaneval import hidden_test

    m = build_manifest(limit=3, workers=1, per_pair=1, backend="docker")
    assert m["counts"]["problems"] == 3 and m["counts"].get("problems_failing_canonical", 0) == 0
    for t in m["tasks"]:
        p = PROBLEMS[t["problem"]]
        bug = inject(p.source, t["injector"], t["site"], p.solution_start_line)
        test = hidden_test(p, m["hidden"][p.id]["exclude"], m["hidden"][p.id]["cases"])  # this build's, not the manifest's
        with make_sandbox("docker", CFG) as box:
            assert not run_hidden(box, bug.source, prompt=p.prompt, test=test, entry_point=p.entry_point).passed
        assert t["visible_fails"] and t["visible"]
    again = build_manifest(limit=3, workers=1, per_pair=1, backend="docker")
    assert len({t["injector"] for t in m["tasks"]}) >= 3 and (m["tasks"], m["hidden"]) == (again["tasks"], again["hidden"])


def test_manifest_has_500_verified_tasks_over_every_problem() -> None:
    m = load_manifest()
    c = m["counts"]
    assert c["tasks"] >= 500 and len(m["tasks"]) == c["tasks"]
    assert c["problems_with_tasks"] >= 160 and len(c["by_injector"]) == len(INJECTORS)
    assert len({(t["problem"], t["injector"], t["site"]) for t in m["tasks"]}) == c["tasks"]


@pytest.mark.slow
def test_split_is_by_problem_and_fixed() -> None:
    held, train = tasks("held_out"), tasks("train")
    assert {t.data["problem"] for t in held}.isdisjoint({t.data["problem"] for t in train})
    assert len(held) + len(train) == load_manifest()["counts"]["tasks"] and 0.1 < len(held) / len(train) < 0.4
    assert [t.id for t in tasks("held_out", 10, seed=3)] == [t.id for t in tasks("held_out", 10, seed=3)]
    with pytest.raises(ValueError, match="unknown split"):
        tasks("test")


def test_a_task_holds_the_bug_visible_tests_and_no_hidden_ones() -> None:
    task = next(t for t in tasks("held_out") if len(visible_asserts(PROBLEMS[t.data["problem"]])) >= 4)
    files = task.data["files"]
    p = PROBLEMS[task.data["problem"]]
    assert set(files) == {"solution.py", "test_solution.py", "run_tests.sh"}
    assert files["solution.py"] != p.source and files["solution.py"].replace(task.data["fix_old"], task.data["fix_new"]) == p.source
    assert "def check" not in files["test_solution.py"]  # the held-out `check` is not in the workdir
    assert files["test_solution.py"].count("def test_") < len(visible_asserts(p))


def _asserts(source: str) -> list[str]:
    return [ast.unparse(n) for n in ast.walk(ast.parse(source)) if isinstance(n, ast.Assert)]


def test_no_hidden_assert_is_one_the_visible_file_shows() -> None:
    """For every task: the graded test has more asserts than the visible file, shares none of them, and
    calls the entry point with no input the visible file shows. Catches: grading on HumanEval's whole
    `check` (the old verifier: a table of the visible answers passed 35 of 203 held-out tasks), leaving
    out the asserts one task of a problem shows but not another's, a generated input equal to an example."""
    manifest = load_manifest()
    assert manifest["counts"]["generated_cases"] >= 10 * len(manifest["hidden"])
    for t in manifest["tasks"]:
        p = PROBLEMS[t["problem"]]
        visible = visible_test_file(p, t["visible"])
        shown = {repr(a) for a in literal_calls(visible) + literal_calls(visible, p.entry_point)}
        asked = {repr(a) for a in literal_calls(p.test) + literal_calls(p.test, p.entry_point)}
        assert shown.isdisjoint(asked), (t, shown & asked)
        hidden, seen = _asserts(p.test), _asserts(visible)
        assert len(hidden) > len(seen) and set(hidden).isdisjoint(seen), t


def test_generated_inputs_are_seeded_and_new() -> None:
    """The build's input draw is deterministic per seed and never returns an input `check` shows.
    Catches: an unseeded draw (every build a different manifest), a draw that hands back the examples."""
    import random

    from envs._coding._build import _draw_inputs

    for p in (PROBLEMS["HumanEval/0"], PROBLEMS["HumanEval/129"], PROBLEMS["HumanEval/38"]):
        a, b = _draw_inputs(p, random.Random("0:x"), 30), _draw_inputs(p, random.Random("0:x"), 30)
        assert a == b and len(a) == 30 and a != _draw_inputs(p, random.Random("1:x"), 30)
        assert {repr(x) for x in a}.isdisjoint(repr(e) for e in literal_calls(p.humaneval_test))


# Held-out tasks every assert of whose bug's failures was in the visible file before the generated cases:
# `cheat-memorise-visible` passed their old hidden test (HumanEval's whole `check`).
OPEN_TO_MEMORISING = ("coding:HumanEval/19:off_by_one:0", "coding:HumanEval/25:off_by_one:5",
                      "coding:HumanEval/55:missing_edge_case:1", "coding:HumanEval/99:swapped_branch:0",
                      "coding:HumanEval/109:wrong_return:2", "coding:HumanEval/127:off_by_one:7",
                      "coding:HumanEval/146:missing_edge_case:0", "coding:HumanEval/153:negated_condition:0")


def test_every_sampled_bug_fails_a_hidden_assert_and_its_fix_passes(sb: Sandbox) -> None:
    """The graded test fails the bug of each sampled task (the ones a visible-answer table used to pass
    among them) at an assert its visible file does not hold, and passes the fix. Catches: keeping a bug
    that only visible asserts catch, a generated case the canonical solution fails."""
    held = tasks("held_out")
    sample = [t for t in held if t.id in OPEN_TO_MEMORISING] + tasks("held_out", 6, seed=1)
    assert len(sample) >= 8
    for task in sample:
        p, files = PROBLEMS[task.data["problem"]], task.data["files"]
        sb.reset()
        bug = run_hidden(sb, files["solution.py"], prompt=p.prompt, test=p.test, entry_point=p.entry_point)
        assert not bug.passed, task.id
        if bug.reason.startswith("hidden test failed at line"):
            assert bug.reason.split(": ", 1)[1] not in files["test_solution.py"], (task.id, bug.reason)
        sb.reset()
        fixed = files["solution.py"].replace(task.data["fix_old"], task.data["fix_new"], 1)
        assert run_hidden(sb, fixed, prompt=p.prompt, test=p.test, entry_point=p.entry_point).passed, task.id


# -- the hidden-test judge: one property per attack -----------------------------------------------

P0 = PROBLEMS["HumanEval/0"]
BUGGY0 = P0.source.replace("return True", "return False")


def _hidden(sb: Sandbox, source: str, **kw: Any) -> Any:
    sb.reset()
    return run_hidden(sb, source, prompt=P0.prompt, test=P0.test, entry_point=P0.entry_point, **kw)


def test_judge_passes_the_canonical_and_names_the_failing_assert(sb: Sandbox) -> None:
    assert _hidden(sb, P0.source).passed
    r = _hidden(sb, BUGGY0)
    assert not r.passed and r.reason.startswith("hidden test failed at line") and "assert candidate(" in r.reason


@pytest.mark.parametrize("prefix", ["import sys\nsys.exit(0)\n", "import os\nos._exit(0)\n", "raise SystemExit(0)\n"])
def test_judge_exit_at_import_fails(sb: Sandbox, prefix: str) -> None:
    r = _hidden(sb, prefix + P0.source)
    assert not r.passed and ("import" in r.reason or "exited" in r.reason)


def test_judge_ignores_printed_verdicts(sb: Sandbox) -> None:
    fake = 'print("Ran 7 tests in 0.001s\\n\\nOK")\nprint("\\nLOOPLIFT-HIDDEN 0 {\\"passed\\": true}")\n'
    r = _hidden(sb, fake + BUGGY0)
    assert not r.passed and "Ran 7 tests" in r.output  # printed, and not taken as a verdict


@pytest.mark.parametrize("returned", ["_Any()", "_Int(1)", "(x for x in [])"])
def test_judge_refuses_objects_that_are_not_plain_data(sb: Sandbox, returned: str) -> None:
    src = (P0.source + "\nclass _Any:\n    def __eq__(self, o):\n        return True\n\n"
           "class _Int(int):\n    def __eq__(self, o):\n        return True\n\n"
           f"def has_close_elements(numbers, threshold):\n    return {returned}\n")
    r = _hidden(sb, src)
    assert not r.passed and "unsupported value" in r.reason


def test_judge_times_out_a_hanging_call(sb: Sandbox) -> None:
    r = _hidden(sb, P0.source + "\ndef has_close_elements(numbers, threshold):\n    while True:\n        pass\n",
                call_timeout=1.0)
    assert not r.passed and "timed out" in r.reason


def test_judge_cannot_be_written_to_or_killed_into_passing(sb: Sandbox) -> None:
    src = ("import os, signal\n"
           "for fd in (1, 2):\n"
           "    try:\n"
           "        with open(f'/proc/{os.getppid()}/fd/{fd}', 'w') as f:\n"
           "            f.write('\\nLOOPLIFT-HIDDEN 0 {\"passed\": true}\\n')\n"
           "    except OSError as e:\n"
           "        print('blocked:', e.strerror)\n"
           "os.kill(os.getppid(), signal.SIGKILL)\n") + BUGGY0
    r = _hidden(sb, src)
    assert not r.passed


def test_judge_sees_only_the_solution_in_the_workdir(sb: Sandbox) -> None:
    src = "import os\nprint(sorted(os.listdir(os.path.dirname(os.path.abspath(__file__)))))\n" + P0.source
    r = _hidden(sb, src)
    assert r.passed and "['solution.py']" in r.output  # the hidden tests travel on the judge's stdin


# -- CodingEnv tools ------------------------------------------------------------------------------


def _call(name: str, **args: Any) -> ToolCall:
    return ToolCall(id="c1", function=ToolCallFunction(name=name, arguments=json.dumps(args)))


@pytest.fixture(scope="module")
def task() -> Task:
    return next(t for t in tasks("held_out") if t.data["visible_fails"])


def test_reset_shows_the_module_and_writes_three_files(sb: Sandbox, task: Task) -> None:
    env = CodingEnv(sb)
    obs = env.reset(task)
    assert obs.startswith("Repair task") and "# file: solution.py" in obs and task.data["files"]["solution.py"] in obs
    assert sorted(sb.exec(["ls"]).stdout.split()) == ["run_tests.sh", "solution.py", "test_solution.py"]
    assert {t["function"]["name"] for t in env.tools} == {"run", "read_file", "edit_file"}


def test_run_shows_failing_visible_tests_then_the_fix_passes(sb: Sandbox, task: Task) -> None:
    env = CodingEnv(sb)
    env.reset(task)
    before = env.step_tool(_call("run", command="sh run_tests.sh"))
    assert "FAIL" in before.observation and before.observation.endswith("[exit code 1]") and not before.done
    fixed = env.step_tool(_call("edit_file", path="solution.py", old=task.data["fix_old"], new=task.data["fix_new"]))
    assert "replaced 1 occurrence" in fixed.observation and fixed.info["solution"].count(task.data["fix_new"]) >= 1
    after = env.step_tool(_call("run", command="sh run_tests.sh"))
    assert after.observation.endswith("[exit code 0]") and "OK" in after.observation
    assert "solution" not in after.info and after.info["workdir"]["solution.py"] == fixed.info["workdir"]["solution.py"]


def test_edit_refuses_an_ambiguous_or_missing_old_string(sb: Sandbox, task: Task) -> None:
    env = CodingEnv(sb)
    env.reset(task)
    missing = env.step_tool(_call("edit_file", path="solution.py", old="no such text", new="x"))
    assert "occurs 0 times" in missing.observation and missing.info["format_error"]
    many = env.step_tool(_call("edit_file", path="solution.py", old="\n", new="\n\n"))
    assert "occurs" in many.observation and "more surrounding lines" in many.observation
    both = env.step_tool(_call("edit_file", path="solution.py", old="a", new="b", content="c"))
    assert "not both" in both.observation


@pytest.mark.parametrize("call, expected", [
    (ToolCall(id="c", function=ToolCallFunction(name="run", arguments="{not json")), "could not parse"),
    (ToolCall(id="c", function=ToolCallFunction(name="rm_rf", arguments="{}")), "unknown tool `rm_rf`"),
    (ToolCall(id="c", function=ToolCallFunction(name="run", arguments="{}")), "needs {\"command\""),
    (ToolCall(id="c", function=ToolCallFunction(name="read_file", arguments='{"path": "../../etc/passwd"}')), "'..'"),
])
def test_bad_tool_calls_are_feedback_not_errors(sb: Sandbox, task: Task, call: ToolCall, expected: str) -> None:
    env = CodingEnv(sb)
    env.reset(task)
    res = env.step_tool(call)
    assert res.observation.startswith("Error:") and expected in res.observation and not res.done


def test_plain_text_actions(sb: Sandbox, task: Task) -> None:
    env = CodingEnv(sb)
    env.reset(task)
    ran = env.step("Let me look.\n```bash\nls | wc -l\n```")
    assert ran.observation.startswith("3") and not ran.done
    wrote = env.step("# file: notes.txt\n```\nhello\n```")
    assert "Wrote notes.txt" in wrote.observation and "notes.txt" in wrote.info["workdir"]
    assert env.step("DONE").done


# -- the verifier's integrity rules ---------------------------------------------------------------


def test_final_state_is_the_last_recorded_workdir(task: Task) -> None:
    traj = Trajectory(task_id=task.id, model="m", messages=[], steps=[
        sdk.Step(index=0, action="a", observation="o", info={"workdir": {"solution.py": "x"}, "solution": "v1"}),
        sdk.Step(index=1, action="b", observation="o", info={"workdir": {"solution.py": "y", "conftest.py": "z"}}),
    ])
    state = final_state(task, traj)
    assert state.solution == "v1" and set(state.files) == {"solution.py", "conftest.py"}
    untouched = final_state(task, Trajectory(task_id=task.id, model="m", messages=[]))
    assert untouched.solution == task.data["files"]["solution.py"] and len(untouched.files) == 3


# -- the family's reference policies on held-out tasks --------------------------------------------


@pytest.fixture(scope="module", params=BACKENDS)
def fam(request: pytest.FixtureRequest) -> Iterator[Any]:
    f = family(backend=request.param, pool_size=2)
    yield f
    assert f.close is not None
    f.close()


def _run(fam: Any, policy: str, n: int) -> list[Trajectory]:
    return sdk.run(fam.tasks("held_out", n, 0), fam.env_factory, verifier=fam.verifier, policy=fam.policies[policy],
                   budget=fam.budget, system_prompt=fam.system_prompt, concurrency=2)


@pytest.mark.slow
def test_oracle_solves_held_out_tasks(fam: Any) -> None:
    trajs = _run(fam, "oracle", 12)
    assert all(t.outcome and t.outcome.success and t.outcome.reward == 1.0 for t in trajs), [
        (t.task_id, t.outcome) for t in trajs if not (t.outcome and t.outcome.success)]
    assert all(t.end_reason == "done" and len(t.steps) == 3 for t in trajs)
    assert trajs[0].steps[0].tool_call is not None and trajs[0].messages[3].role == "tool"


@pytest.mark.slow
def test_noop_solves_nothing(fam: Any) -> None:
    trajs = _run(fam, "noop", 12)
    assert not any(t.outcome and t.outcome.success for t in trajs)
    for t in trajs:  # judged by the hidden tests (the integrity gate passed): the bug is still there
        assert t.outcome is not None and t.outcome.details["parts"]["integrity"]["success"]
        hidden = t.outcome.details["parts"]["hidden_tests"]
        assert not hidden["success"] and hidden["details"]["reason"] != "all hidden tests passed"


# Which rule stops each cheat: "integrity" (the gate: named reasons) or the hidden tests.
CHEATS = {name: ("hidden_tests" if name in ("cheat-memorise-visible",) else "integrity")
          for name in POLICIES if name.startswith("cheat-")}


@pytest.mark.parametrize("cheat", sorted(CHEATS))
def test_every_cheat_scores_zero(fam: Any, cheat: str) -> None:
    trajs = _run(fam, cheat, 3)
    for t in trajs:
        assert t.outcome is not None and not t.outcome.success and t.outcome.reward == 0.0 and t.outcome.error is None
        part = t.outcome.details["parts"][CHEATS[cheat]]
        assert not part["success"], (cheat, t.outcome.details)


def test_memorise_cheat_passes_the_visible_tests_and_scores_zero_where_it_used_to_pass(fam: Any) -> None:
    """`cheat-memorise-visible` (the bug kept, the visible answers from a table) on the tasks it passed
    when the hidden test was HumanEval's whole `check`: its visible tests pass, the integrity check
    passes, the hidden tests fail it. Catches: a graded test that still holds the visible asserts, a kept
    bug only they catch, a broken cheat (its visible run failing would make the 0 meaningless)."""
    sample = [t for t in fam.tasks("held_out", None, 0) if t.id in OPEN_TO_MEMORISING]
    trajs = sdk.run(sample, fam.env_factory, verifier=fam.verifier, policy=fam.policies["cheat-memorise-visible"],
                    budget=fam.budget, system_prompt=fam.system_prompt, concurrency=2)
    assert len(trajs) >= 4
    for t in trajs:
        ran = [m.content for m in t.messages if m.role == "tool"][-1] or ""
        assert ran.endswith("[exit code 0]"), (t.task_id, ran)
        assert t.outcome is not None and t.outcome.reward == 0.0 and t.outcome.error is None, t.task_id
        assert t.outcome.details["parts"]["integrity"]["success"], (t.task_id, t.outcome.details)


# -- resumable: kill an episode mid-way, resume it to the same final state ------------------------

CHILD = r"""
import json, os, signal, sys
from sandboxes import make_sandbox, SandboxConfig
from envs._coding import CodingEnv, tasks
from envs._coding._policies import POLICIES
from sdk import Message
backend, task_id, ckpt = sys.argv[1], sys.argv[2], sys.argv[3]
task = next(t for t in tasks("held_out") if t.id == task_id)
sb = make_sandbox(backend, SandboxConfig(timeout_s=20))
env = CodingEnv(sb)
messages = [Message(role="user", content=env.reset(task))]
msg = Message.model_validate(POLICIES["oracle"](task, messages))   # turn 1: the fix, through edit_file
messages.append(msg)
res = env.step_tool(msg.tool_calls[0])
messages.append(Message(role="tool", tool_call_id=msg.tool_calls[0].id, content=res.observation))
env.snapshot().save(os.path.join(ckpt, "env.snap"))
with open(os.path.join(ckpt, "workdir"), "w") as f:
    f.write(sb.workdir_path)
with open(os.path.join(ckpt, "pid"), "w") as f:
    f.write(str(os.getpid()))   # so the test can remove what the crash leaves behind (local backend)
with open(os.path.join(ckpt, "episode.json"), "w") as f:
    json.dump({"messages": [m.model_dump() for m in messages], "infos": [res.info]}, f)
os.kill(os.getpid(), signal.SIGKILL)   # crash: no cleanup of any kind runs
"""


def _finish(env: CodingEnv, task: Task, messages: list[Message], infos: list[dict[str, Any]]) -> Trajectory:
    """Play the oracle from `messages` to the end (the SDK loop's tool handling, in miniature)."""
    while True:
        reply = POLICIES["oracle"](task, messages)
        msg = Message(role="assistant", content=reply) if isinstance(reply, str) else Message.model_validate(reply)
        messages.append(msg)
        if not msg.tool_calls:
            res = env.step(msg.content or "")
            infos.append(res.info)
            break
        for call in msg.tool_calls:
            res = env.step_tool(call)
            infos.append(res.info)
            messages.append(Message(role="tool", tool_call_id=call.id, content=res.observation))
    steps = [sdk.Step(index=i, action="", observation="", info=info) for i, info in enumerate(infos)]
    return Trajectory(task_id=task.id, model="oracle", messages=messages, steps=steps)


def _wait_for_no_containers_of(pid: int, reap: Any, timeout_s: float = 30.0) -> bool:
    import socket
    import time

    import docker

    client = docker.from_env()
    prefix = f"{socket.gethostname()}:{pid}:"
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        owned = [c for c in client.api.containers(all=True, filters={"label": "looplift.owner"})
                 if (c.get("Labels") or {}).get("looplift.owner", "").startswith(prefix)]
        if not owned:
            return True
        if time.monotonic() > deadline - timeout_s / 2:
            reap()
        time.sleep(0.5)
    return False


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.slow
def test_episode_killed_mid_way_resumes_to_the_same_final_state(backend: str, tmp_path: Path, task: Task) -> None:
    from sandboxes import reap_orphans

    env_vars = {**os.environ, "PYTHONPATH": os.pathsep.join([str(Path(__file__).parents[1]), os.environ.get(
        "PYTHONPATH", "")])}
    child = subprocess.run([sys.executable, "-c", CHILD, backend, task.id, str(tmp_path)], env=env_vars,
                           capture_output=True, text=True, timeout=120, check=False)
    assert child.returncode == -signal.SIGKILL, child.stderr
    if backend == "docker":
        # the killed process's container goes: its reaper removes it within seconds; reap_orphans, run by any
        # later process, removes it if the reaper could not
        assert _wait_for_no_containers_of(int((tmp_path / "pid").read_text()), reap_orphans)
    else:
        shutil.rmtree((tmp_path / "workdir").read_text(), ignore_errors=True)  # a killed local sandbox leaves its dir
    saved = json.loads((tmp_path / "episode.json").read_text())
    snap = EnvSnapshot.load(tmp_path / "env.snap")
    assert snap.task.id == task.id and snap.state["solution_sha"]
    with make_pool(backend, CFG, size=2) as pool:
        resumed_env = CodingEnv(pool)
        resumed_env.restore(snap)
        resumed = _finish(resumed_env, task, [Message.model_validate(m) for m in saved["messages"]], saved["infos"])
        resumed_env.close()
        straight_env = CodingEnv(pool)
        straight = _finish(straight_env, task, [Message(role="user", content=straight_env.reset(task))], [])
        straight_env.close()
    fam = family(backend=backend)
    try:
        a, b = fam.verifier.verify(task, resumed), fam.verifier.verify(task, straight)
    finally:
        assert fam.close is not None
        fam.close()
    sa, sb_ = final_state(task, resumed), final_state(task, straight)
    drop = {".looplift_shell_state"}
    assert {k: v for k, v in sa.files.items() if k not in drop} == {k: v for k, v in sb_.files.items() if k not in drop}
    assert sa.solution == sb_.solution and a.success and b.success
    assert [m.role for m in resumed.messages] == [m.role for m in straight.messages]


# -- the integrity check by behaviour: what the candidate does, whatever it is spelled ----------------

VISIBLE0 = visible_test_file(P0, [0, 1])
ALWAYS_EQUAL = ("\nclass _Any:\n    def __eq__(self, other):\n        return True\n\n\n"
                "def has_close_elements(*args, **kwargs):\n    return _Any()\n")
# case -> (solution.py, other workdir files, words of the finding; None: no finding)
JUDGE_CASES: dict[str, tuple[str, tuple[str, ...], Any]] = {
    "clean": (P0.source, ("notes.txt", "__pycache__/solution.cpython-311.pyc"), None),
    "failing, not tampering": (BUGGY0, (), None),
    "syntax error, not tampering": ("def (", (), None),
    "sys.exit under a name guard": (P0.source + 'if __name__ != "__main__":\n    import sys\n    sys.exit(0)\n', (),
                                    "solution.py exits at import"),
    "os._exit imported as e": ("from os import _exit as e\ne(0)\n" + P0.source, (),
                               "solution.py ends the process at import, with exit code 0"),
    "os._exit through getattr": ('import os\ngetattr(os, "_ex" + "it")(0)\n' + P0.source, (),
                                 "solution.py ends the process at import, with exit code 0"),
    "KeyboardInterrupt at import": (P0.source + "raise KeyboardInterrupt\n", (),
                                    "solution.py raises KeyboardInterrupt at import"),
    "re.py beside the solution": (P0.source, ("re.py",), "load re.py from the workdir"),
    "exit only under the runner": ('import os, sys\nif "unittest" in sys.modules:\n    os._exit(0)\n' + P0.source,
                                   (), "process ends before the test runner finishes, with exit code 0"),
    "exit code set at shutdown": ("import atexit, os\natexit.register(os._exit, 0)\n" + P0.source, (),
                                  "solution.py ends the process at shutdown"),
    "always-equal result": (P0.source + ALWAYS_EQUAL, (), "returns an object equal to anything"),
    "printed verdict": ('print("Ran 3 tests in 0.001s\\n\\nOK")\n' + BUGGY0, (), "prints test-runner output"),
}


@pytest.mark.parametrize("case", sorted(JUDGE_CASES))
def test_behavioural_judge_on_handcrafted_workdirs(sb: Sandbox, case: str) -> None:
    """Each case is caught by what the candidate does, or (clean, failing, syntax error) raises no finding.
    Broken variants caught: a gate matching the literal `sys.exit(`/`os._exit(` (misses `from os import _exit as
    e` and `getattr(os, "_ex" + "it")`); one that skips `if __name__ ...` blocks (misses the name guard); one that
    looks only for SystemExit (misses KeyboardInterrupt); a list of forbidden file names (misses re.py); one that
    only imports the solution (misses the exit under the runner); one that ignores the exit status once the
    candidate reported (misses atexit); one that compares results to one value (the always-equal object); one that
    treats a failing fix, a syntax error, a notes file or the runner's own .pyc as tampering."""
    source, others, expected = JUDGE_CASES[case]
    sb.reset()
    b = observe(sb, source, visible_tests=VISIBLE0, files={"solution.py": "", **{p: "" for p in others}},
                entry_point=P0.entry_point, calls=literal_calls(VISIBLE0))
    if expected is None:
        assert b.problems() == [] and b.candidate.done and b.runner.done, b.summary()
    else:
        assert any(expected in p for p in b.problems()), (b.problems(), b.summary())


def test_a_judge_without_a_verdict_fails_closed(sb: Sandbox) -> None:
    """A candidate that kills the judge gets no pass (broken variant: a check that reads no verdict as no finding).
    On Docker the kill lands; the local backend runs the judge as pid 1 of its own pid namespace, which the kill
    cannot reach, so there the verdict comes and is clean."""
    sb.reset()
    b = observe(sb, "import os, signal\nos.kill(os.getppid(), signal.SIGKILL)\n" + P0.source, visible_tests=VISIBLE0,
                files={}, entry_point=P0.entry_point, calls=[])
    if sb.backend == "docker":
        assert b.error and "gave no verdict" in b.problems()[0], b.summary()
    nothing = ProcessRun((), None, False, "")
    assert Behaviour(P0.entry_point, nothing, nothing, error="timed out").problems() != []


def test_an_untouched_workdir_passes_the_integrity_check(sb: Sandbox, task: Task) -> None:
    """The task's own files, no step taken: no finding, and both judged processes ran to their end (a check that
    calls the buggy entry point's failure tampering, or counts test_solution.py as a shadow, fails here)."""
    out = IntegrityCheck(sb).verify(task, Trajectory(task_id=task.id, model="m", messages=[]))
    assert out.success and out.details["reasons"] == [], out.details
    assert out.details["behaviour"]["candidate"]["exit_code"] == out.details["behaviour"]["runner"]["exit_code"] == 86


# cheat -> words of the integrity finding that stops it (the old list-based gate let each through)
UNLISTED_CHEATS = {
    "cheat-name-guard": "solution.py exits at import",
    "cheat-aliased-exit": "solution.py ends the process at import",
    "cheat-keyboard-interrupt": "solution.py raises KeyboardInterrupt at import",
    "cheat-shadow-stdlib": "load re.py from the workdir",
}


@pytest.mark.slow
@pytest.mark.parametrize("cheat", sorted(UNLISTED_CHEATS))
def test_cheats_a_list_misses_score_zero_at_the_gate(fam: Any, cheat: str) -> None:
    """Each scores 0 with the hidden tests skipped: the gate names it. Broken variants caught: an exit list without
    aliases (cheat-aliased-exit), a main-guard exemption that accepts `!=` (cheat-name-guard), a SystemExit-only
    rule (cheat-keyboard-interrupt), a shadow list of unittest/pytest only (cheat-shadow-stdlib, which applies the
    fix: without the gate it scores 1.0)."""
    for t in _run(fam, cheat, 3):
        assert t.outcome is not None and t.outcome.reward == 0.0 and t.outcome.error is None, t.outcome
        gate = t.outcome.details["parts"]["integrity"]
        assert not gate["success"] and t.outcome.details["skipped"] == ["hidden_tests"]
        assert any(UNLISTED_CHEATS[cheat] in r for r in gate["details"]["reasons"]), gate["details"]


@pytest.mark.slow
def test_oracle_passes_the_behavioural_gate(fam: Any) -> None:
    """The same three tasks: the fixed solution.py and the shell's state file beside it raise no finding, both
    judged processes run to their end, and the hidden tests then pass (a gate that counts non-module files as
    shadows, or misreads the clean end of a run, scores the oracle 0)."""
    for t in _run(fam, "oracle", 3):
        assert t.outcome is not None and t.outcome.reward == 1.0, t.outcome
        gate = t.outcome.details["parts"]["integrity"]["details"]
        assert gate["reasons"] == [] and len(gate["files"]) > 3, gate
        assert gate["behaviour"]["candidate"]["exit_code"] == gate["behaviour"]["runner"]["exit_code"] == 86
