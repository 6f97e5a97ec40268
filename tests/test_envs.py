"""CodeEnv and ShellEnv against real sandboxes: the local backend always, Docker when an engine and the image are here.

Each test checks one property. Docker cases are marked `docker` and skip with the reason when the
Docker backend is unavailable.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from sandboxes import EnvSnapshot, LocalSandbox, Sandbox, SandboxConfig, SandboxPool, make_sandbox
from envs._envs import CodeEnv, ShellEnv, parse_file_blocks, parse_test_output
from sdk import Environment, Task
from _backends import BACKENDS

FAST = SandboxConfig(timeout_s=10, output_limit_bytes=16 * 1024)


@pytest.fixture(scope="module", params=BACKENDS)
def sb(request: pytest.FixtureRequest) -> Iterator[Sandbox]:
    with make_sandbox(request.param, FAST) as s:
        yield s


CALC = "def add(a, b):\n    return a + b\n\n\ndef sub(a, b):\n    return a + b  # bug\n\n\ndef mul(a, b):\n    return a * b\n"
TESTS = (
    "import unittest\nfrom calc import add, sub, mul\n\n\n"
    "class TestCalc(unittest.TestCase):\n"
    "    def test_add(self):\n        self.assertEqual(add(2, 3), 5)\n\n"
    "    def test_sub(self):\n        self.assertEqual(sub(5, 3), 2)\n\n"
    "    def test_mul(self):\n        self.assertEqual(mul(2, 3), 6)\n"
)
FIXED = CALC.replace("return a + b  # bug", "return a - b")


def _code_task(**data: object) -> Task:
    return Task(id="code:calc", prompt="Fix calc.py so the tests pass.",
                data={"files": {"calc.py": CALC, "tests/__init__.py": "", "test_calc.py": TESTS}, **data})


def _fix(content: str = FIXED, path: str = "calc.py") -> str:
    return f"Here is the fix.\n# file: {path}\n```python\n{content}```\n"


# -- CodeEnv --------------------------------------------------------------------------------------


def test_code_env_is_an_environment(sb: Sandbox) -> None:
    assert isinstance(CodeEnv(sb), Environment) and isinstance(ShellEnv(sb), Environment)


def test_code_reset_shows_files_and_format(sb: Sandbox) -> None:
    env = CodeEnv(sb)
    obs = env.reset(_code_task())
    assert obs.startswith("Fix calc.py") and "# file: calc.py" in obs and "def sub" in obs and "test_calc.py" in obs
    assert sb.read_file("calc.py").decode() == CALC


def test_code_partial_credit_names_the_failing_test(sb: Sandbox) -> None:
    env = CodeEnv(sb)
    env.reset(_code_task())
    res = env.step(_fix(CALC))  # unchanged: 2 of 3 pass
    assert res.reward == pytest.approx(2 / 3) and not res.done
    assert "test_sub" in res.observation and "2/3 tests passed" in res.observation
    assert "AssertionError" in res.observation and len(res.observation) < 2600
    assert res.info["written"] == ["calc.py"]


def test_code_full_pass_ends_the_episode(sb: Sandbox) -> None:
    env = CodeEnv(sb)
    env.reset(_code_task())
    res = env.step(_fix())
    assert res.reward == 1.0 and res.done and "3/3 tests passed" in res.observation


def test_code_tag_inside_the_block(sb: Sandbox) -> None:
    env = CodeEnv(sb)
    env.reset(_code_task())
    res = env.step(f"```python\n# file: calc.py\n{FIXED}```")
    assert res.reward == 1.0 and sb.read_file("calc.py").decode() == FIXED  # tag line not written


def test_code_reset_rejects_traversal(sb: Sandbox) -> None:
    for bad in ("../evil.py", "/etc/evil.py", "a/../../evil.py"):
        with pytest.raises(ValueError, match="relative|'\\.\\.'|absolute"):
            CodeEnv(sb).reset(Task(id="t", prompt="p", data={"files": {bad: "x"}}))


def test_code_step_rejects_traversal_as_feedback(sb: Sandbox) -> None:
    env = CodeEnv(sb)
    env.reset(_code_task())
    res = env.step(_fix("pwned\n", path="../outside.py"))
    assert "Not written" in res.observation and "'..'" in res.observation and res.info["written"] == []


def test_code_no_file_block_gets_a_hint(sb: Sandbox) -> None:
    env = CodeEnv(sb)
    env.reset(_code_task())
    res = env.step("I would change sub to subtract.\n```python\nreturn a - b\n```")
    assert "# file:" in res.observation and not res.done and res.info["format_error"]


def test_code_done_scores_and_stops(sb: Sandbox) -> None:
    env = CodeEnv(sb)
    env.reset(_code_task())
    res = env.step("DONE")
    assert res.done and res.reward == pytest.approx(2 / 3)


def test_code_protected_file_is_not_overwritten(sb: Sandbox) -> None:
    env = CodeEnv(sb)
    env.reset(_code_task(protected=["test_calc.py"]))
    res = env.step(_fix("import unittest\n", path="test_calc.py"))
    assert "protected" in res.observation and sb.read_file("test_calc.py").decode() == TESTS


def test_code_broken_command_is_reward_zero_with_tail(sb: Sandbox) -> None:
    env = CodeEnv(sb)
    env.reset(_code_task(test_command=["python3", "-c", "raise SystemExit('runner exploded')"]))
    res = env.step(_fix())
    assert res.reward == 0.0 and not res.done and "runner exploded" in res.observation


def test_code_timeout_is_reward_zero(sb: Sandbox) -> None:
    env = CodeEnv(sb, timeout_s=1.0)
    env.reset(_code_task(test_command="sleep 30"))
    res = env.step(_fix())
    assert res.reward == 0.0 and res.info["timed_out"] and "timed out" in res.observation


def test_code_env_with_factory_closes_its_sandbox() -> None:
    made: list[Sandbox] = []

    def factory() -> Sandbox:
        made.append(LocalSandbox(FAST))
        return made[-1]

    env = CodeEnv(factory)
    env.reset(_code_task())
    assert env.step(_fix()).done
    env.close()
    assert made[0].closed


# -- parsing (no sandbox) -------------------------------------------------------------------------


def test_parse_pytest_summary() -> None:
    out = "FAILED test_x.py::test_b - assert 1 == 2\n==== 1 failed, 3 passed, 1 skipped in 0.12s ====\n"
    rep = parse_test_output(out)
    assert (rep.passed, rep.failed, rep.failing, rep.runner) == (3, 1, ("test_x.py::test_b",), "pytest")


def test_parse_unittest_summary_with_errors_and_skips() -> None:
    out = "ERROR: test_a (m.T.test_a)\n---\nRan 4 tests in 0.01s\n\nFAILED (errors=1, skipped=1)\n"
    rep = parse_test_output(out)
    assert (rep.passed, rep.failed, rep.failing) == (2, 1, ("test_a (m.T.test_a)",))


def test_parse_file_blocks_ignores_untagged() -> None:
    text = "```\nnot a file\n```\n# file: a.py\n```python\nx = 1\n```\n```json\n// file: b.json\n{}\n```"
    assert parse_file_blocks(text) == [("a.py", "x = 1\n"), ("b.json", "{}\n")]


# -- ShellEnv -------------------------------------------------------------------------------------


def test_shell_cwd_and_exports_persist(sb: Sandbox) -> None:
    env = ShellEnv(sb)
    env.reset(Task(id="sh", prompt="explore"))
    assert env.step("mkdir sub").info["exit_code"] == 0
    env.step("cd sub && export X=1 && Y=2")
    res = env.step("pwd; echo X=$X Y=$Y")
    assert res.observation.splitlines()[0].endswith("/sub")
    assert "X=1 Y=" in res.observation and "Y=2" not in res.observation  # unexported: gone
    assert res.observation.endswith("[exit code 0]") and "__LOOPLIFT" not in res.observation


def test_shell_exit_code_and_stderr(sb: Sandbox) -> None:
    env = ShellEnv(sb)
    env.reset(Task(id="sh", prompt="p"))
    res = env.step("echo oops >&2; exit 3")
    assert "oops" in res.observation and res.observation.endswith("[exit code 3]") and not res.done


def test_shell_state_saved_after_exit(sb: Sandbox) -> None:
    env = ShellEnv(sb)
    env.reset(Task(id="sh", prompt="p"))
    env.step("mkdir -p d && cd d && export Z=9 && exit 1")
    assert "Z=9 in d" in env.step('echo "Z=$Z in $(basename "$PWD")"').observation


def test_shell_fenced_block_is_the_command(sb: Sandbox) -> None:
    env = ShellEnv(sb)
    env.reset(Task(id="sh", prompt="p"))
    assert env.step("Let me look:\n```bash\necho one\necho two\n```").observation == "one\ntwo\n[exit code 0]"


def test_shell_check_command_ends_the_episode(sb: Sandbox) -> None:
    env = ShellEnv(sb)
    env.reset(Task(id="sh", prompt="create out/result.txt containing 42",
                   data={"check_command": "grep -qx 42 out/result.txt"}))
    first = env.step("mkdir out && cd out")
    assert first.reward == 0.0 and not first.done
    res = env.step("echo 42 > result.txt")
    assert res.reward == 1.0 and res.done


def test_shell_timeout_keeps_previous_state(sb: Sandbox) -> None:
    env = ShellEnv(sb, timeout_s=1.0)
    env.reset(Task(id="sh", prompt="p"))
    env.step("mkdir -p keep && cd keep")
    res = env.step("cd / && sleep 30")
    assert res.info["timed_out"] and "timed out" in res.observation
    assert env.step("pwd").observation.splitlines()[0].endswith("/keep")


def test_shell_reset_starts_clean(sb: Sandbox) -> None:
    env = ShellEnv(sb)
    env.reset(Task(id="sh", prompt="p"))
    env.step("mkdir s && cd s && export W=1 && touch f")
    env.reset(Task(id="sh2", prompt="p"))
    out = env.step('echo "W=$W"; ls').observation
    assert out.startswith("W=\n") and " s\n" not in out and "\ns\n" not in out


def test_shell_env_borrows_from_a_pool_and_gives_back() -> None:
    with SandboxPool(lambda: LocalSandbox(FAST), size=1) as pool:
        env = ShellEnv(pool)
        env.reset(Task(id="sh", prompt="p"))
        assert env.step("echo hi").observation == "hi\n[exit code 0]"
        env.close()
        with pool.acquire(timeout=10) as again:  # size 1: only free once the env gave it back
            assert again.exec(["ls", "-A"]).stdout == ""  # and it was reset


# -- snapshots: the workdir out and back in, and a shell session resumed --------------------------


def test_snapshot_restores_the_workdir_into_a_fresh_sandbox(sb: Sandbox) -> None:
    sb.reset()
    sb.exec(["sh", "-c", "mkdir -p d/e && printf hi > d/e/f && printf x > run.sh && chmod +x run.sh && ln -s run.sh link"])
    snap = sb.snapshot()
    with make_sandbox(sb.backend, FAST) as other:
        other.write_file("junk.txt", "to be replaced")
        other.restore(snap)
        listing = other.exec(["sh", "-c", "find . -mindepth 1 | sort; test -x run.sh && echo exec; readlink link"])
        assert listing.stdout.split() == ["./d", "./d/e", "./d/e/f", "./link", "./run.sh", "exec", "run.sh"]
        assert other.read_file("d/e/f") == b"hi"
    sb.reset()
    sb.restore(snap)  # into the same sandbox too, after a reset
    assert sb.read_file("d/e/f") == b"hi"


def test_snapshot_of_an_empty_workdir_restores_to_empty(sb: Sandbox) -> None:
    sb.reset()
    empty = sb.snapshot()
    sb.write_file("a.txt", "x")
    sb.restore(empty)
    assert sb.exec(["ls", "-A"]).stdout == ""


def test_shell_session_resumes_from_a_snapshot(sb: Sandbox, tmp_path: Path) -> None:
    env = ShellEnv(sb)
    env.reset(Task(id="sh", prompt="p"))
    env.step("mkdir -p work/sub && cd work/sub && export STAGE=two && echo data > f.txt")
    env.snapshot().save(tmp_path / "shell.snap")
    with make_sandbox(sb.backend, FAST) as other:
        resumed = ShellEnv(other)
        resumed.restore(EnvSnapshot.load(tmp_path / "shell.snap"))
        out = resumed.step('echo "$STAGE $(basename "$PWD") $(cat f.txt)"').observation
        assert out.splitlines()[0] == "two sub data" and resumed.cwd.endswith("work/sub")
