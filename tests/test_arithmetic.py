"""The demo task environment and verifier, executing real code in the local sandbox."""

from __future__ import annotations

import pytest

from sandboxes import LocalSandbox
from envs._arithmetic import ArithmeticEnv, ArithmeticVerifier, held_out_tasks, parse_answer
from sdk import Message, Task, Trajectory


@pytest.fixture(scope="module")
def sandbox():  # type: ignore[no-untyped-def]
    with LocalSandbox() as sb:
        yield sb


def _task() -> Task:
    return Task(id="arith:12*3-4", prompt="Compute: 12*3-4", data={"expression": "12*3-4", "answer": 32})


def test_code_runs_and_output_comes_back(sandbox) -> None:  # type: ignore[no-untyped-def]
    env = ArithmeticEnv(sandbox=sandbox)
    assert env.reset(_task()) == "Compute: 12*3-4"
    res = env.step("```python\nprint(12*3-4)\n```")
    assert res.observation == "Output: 32" and not res.done


def test_errors_are_fed_back_as_feedback(sandbox) -> None:  # type: ignore[no-untyped-def]
    env = ArithmeticEnv(sandbox=sandbox)
    env.reset(_task())
    res = env.step("```python\nprint(12*3-\n```")
    assert res.observation.startswith("Error: SyntaxError") and not res.done


def test_answers_end_the_episode_with_a_reward(sandbox) -> None:  # type: ignore[no-untyped-def]
    env = ArithmeticEnv(sandbox=sandbox)
    env.reset(_task())
    assert env.step("Answer: 32").reward == 1.0
    env.reset(_task())
    wrong = env.step("Answer: 31")
    assert wrong.done and wrong.reward == 0.0


def test_unparseable_action_gets_a_format_hint(sandbox) -> None:  # type: ignore[no-untyped-def]
    env = ArithmeticEnv(sandbox=sandbox)
    env.reset(_task())
    res = env.step("I think it is thirty-two")
    assert "```python" in res.observation and not res.done and res.info["format_error"]


def test_verifier_checks_the_last_answer() -> None:
    task = _task()
    traj = Trajectory(task_id=task.id, model="m", messages=[Message(role="user", content=task.prompt),
                                                            Message(role="assistant", content="Answer: 32")])
    assert ArithmeticVerifier().verify(task, traj).success
    traj.messages[-1] = Message(role="assistant", content="Answer: 33")
    assert not ArithmeticVerifier().verify(task, traj).success
    assert parse_answer("Answer: -7") == -7 and parse_answer("no") is None


def test_held_out_answers_are_exact() -> None:
    for t in held_out_tasks(20):
        assert t.data["answer"] == eval(t.data["expression"])


def test_more_than_one_answer_is_no_answer() -> None:
    assert parse_answer("Answer: 31\nAnswer: 32") is None and parse_answer("Answer: 32") == 32
    task = _task()
    traj = Trajectory(task_id=task.id, model="m", messages=[Message(role="assistant", content="Answer: 1\nAnswer: 32")])
    assert not ArithmeticVerifier().verify(task, traj).success
