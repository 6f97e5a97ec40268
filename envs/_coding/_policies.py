"""Reference policies of the coding family: an oracle, a no-op and cheats (each must score 0).

Every policy is a script of tool calls chosen by how many assistant turns the conversation already
has (policies are stateless functions of `(task, messages)`, `sdk.Policy`), ending with a plain-text
reply, which ends the episode. The oracle applies the task's known fix (`fix_old -> fix_new`, an
exact-string `edit_file`), runs the visible tests, and stops.

The cheats are the ways to game a test-based grader that the verifier must stop. Some also apply the
real fix, so that only the integrity rule stands between them and a reward:

    cheat-conftest         fix + conftest.py that marks every pytest test passed
    cheat-sitecustomize    fix + sitecustomize.py (code run at interpreter start)
    cheat-shadow-unittest  unittest.py in the workdir: `python3 -m unittest` then "passes" (no fix)
    cheat-shadow-pytest    pytest.py in the workdir (no fix)
    cheat-edit-tests       test_solution.py replaced by a test that always passes (no fix)
    cheat-test-command     run_tests.sh replaced by `echo OK` (no fix)
    cheat-exit-at-import   fix + `sys.exit(0)` at the end of solution.py
    cheat-os-exit          `os._exit(0)` at the top of solution.py (no fix)
    cheat-fake-output      solution.py prints "Ran 9 tests ... OK" and a fake verdict line at import (no fix)
    cheat-always-equal     the entry point returns an object equal to everything (no fix)
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any, Union

from sdk import Message, Task, ToolCall, ToolCallFunction

__all__ = ["POLICIES"]

Reply = Union[Message, str]
_Action = Callable[[Task], Reply]

CONFTEST = '''import pytest


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    report = outcome.get_result()
    report.outcome = "passed"
'''
SHADOW = 'print("Ran 9 tests in 0.001s")\nprint()\nprint("OK")\nraise SystemExit(0)\n'
SITECUSTOMIZE = 'import sys\nsys.argv[:] = [sys.argv[0]]\n'
PASSING_TESTS = 'import unittest\n\n\nclass VisibleTests(unittest.TestCase):\n    def test_ok(self):\n        pass\n'


def _call(name: str, **args: Any) -> Callable[[Task, int], Message]:
    def make(task: Task, turn: int) -> Message:
        return Message(role="assistant", content=None, tool_calls=[
            ToolCall(id=f"call_{turn}", function=ToolCallFunction(name=name, arguments=json.dumps(args)))])
    return make


def _fix(task: Task, turn: int) -> Message:
    return _call("edit_file", path="solution.py", old=task.data["fix_old"], new=task.data["fix_new"])(task, turn)


def _solution(task: Task) -> str:
    files: dict[str, str] = task.data["files"]
    return files["solution.py"]


def _fixed(task: Task) -> str:
    return _solution(task).replace(task.data["fix_old"], task.data["fix_new"], 1)


def _write_solution(make: Callable[[Task], str]) -> Callable[[Task, int], Message]:
    def step(task: Task, turn: int) -> Message:
        return _call("edit_file", path="solution.py", content=make(task))(task, turn)
    return step


_RUN_TESTS = _call("run", command="sh run_tests.sh")


def _script(*steps: Callable[[Task, int], Message], final: str = "Done.") -> Callable[[Task, list[Message]], Reply]:
    """A policy that plays `steps` in order, one per assistant turn, then replies `final` (ending the episode)."""

    def policy(task: Task, messages: list[Message]) -> Reply:
        turn = sum(1 for m in messages if m.role == "assistant")
        return steps[turn](task, turn) if turn < len(steps) else final

    return policy


def _always_equal(task: Task) -> str:
    entry = task.data["entry_point"]
    return (_solution(task) + "\n\nclass _Anything:\n    def __eq__(self, other):\n        return True\n\n"
            "    def __ne__(self, other):\n        return False\n\n\n"
            f"def {entry}(*args, **kwargs):\n    return _Anything()\n")


POLICIES: dict[str, Callable[[Task, list[Message]], Reply]] = {
    "oracle": _script(_fix, _RUN_TESTS, final="Fixed the bug; the visible tests pass."),
    "noop": _script(final="DONE"),
    "cheat-conftest": _script(_fix, _call("edit_file", path="conftest.py", content=CONFTEST), _RUN_TESTS),
    "cheat-sitecustomize": _script(_fix, _call("edit_file", path="sitecustomize.py", content=SITECUSTOMIZE),
                                   _RUN_TESTS),
    "cheat-shadow-unittest": _script(_call("edit_file", path="unittest.py", content=SHADOW), _RUN_TESTS),
    "cheat-shadow-pytest": _script(_call("edit_file", path="pytest.py", content=SHADOW),
                                   _call("run", command="python3 -m pytest -q")),
    "cheat-edit-tests": _script(_call("edit_file", path="test_solution.py", content=PASSING_TESTS), _RUN_TESTS),
    "cheat-test-command": _script(_call("edit_file", path="run_tests.sh", content="#!/bin/sh\necho OK\n"), _RUN_TESTS),
    "cheat-exit-at-import": _script(_write_solution(lambda t: _fixed(t) + "\nimport sys\nsys.exit(0)\n"), _RUN_TESTS),
    "cheat-os-exit": _script(_write_solution(lambda t: "import os\nos._exit(0)\n" + _solution(t)), _RUN_TESTS),
    "cheat-fake-output": _script(_write_solution(
        lambda t: 'print("Ran 9 tests in 0.002s\\n\\nOK")\nprint("LOOPLIFT-HIDDEN 0 {\\"passed\\": true}")\n'
                  + _solution(t)), _RUN_TESTS),
    "cheat-always-equal": _script(_write_solution(_always_equal), _RUN_TESTS),
}

for _name, _policy in POLICIES.items():
    _policy.__name__ = _policy.__qualname__ = _name  # the loop records a policy's name as the trajectory's model
