"""sdk's composable verifiers (AllOf, Weighted, Gated) and the LLM judge, faked only at the HTTP seam.

The judge talks to a real `openai.OpenAI` client whose transport is an `httpx.MockTransport`: the
request the judge sends is inspected as the server would see it, and the reply is a chat completion
as an OpenAI-compatible server returns it (the embedded tiny model cannot judge).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import httpx
import openai
import pytest

from sdk import AllOf, Gated, LLMJudge, Message, Outcome, Task, Trajectory, Weighted

TASK = Task(id="t1", prompt="Fix the off-by-one in count_up.")


def _traj(text: str) -> Trajectory:
    return Trajectory(task_id=TASK.id, model="m", messages=[Message(role="user", content=TASK.prompt),
                                                          Message(role="assistant", content=text)])


class Fixed:
    """A verifier with a fixed outcome that counts its calls."""

    def __init__(self, success: bool, reward: float, **details: Any) -> None:
        self.outcome = Outcome(success=success, reward=reward, details=details)
        self.calls = 0

    def verify(self, task: Task, trajectory: Trajectory) -> Outcome:
        self.calls += 1
        return self.outcome


class Crashes:
    def verify(self, task: Task, trajectory: Trajectory) -> Outcome:
        raise RuntimeError("verifier bug")


# -- combinators ----------------------------------------------------------------------------------


def test_all_of_needs_every_part_and_takes_the_lowest_reward() -> None:
    out = AllOf({"format": Fixed(True, 1.0), "tests": Fixed(True, 0.75)}).verify(TASK, _traj("x"))
    assert out.success and out.reward == 0.75 and set(out.details["parts"]) == {"format", "tests"}
    bad = AllOf({"format": Fixed(True, 1.0), "tests": Fixed(False, 0.0, why="2 failed")}).verify(TASK, _traj("x"))
    assert not bad.success and bad.reward == 0.0 and bad.details["parts"]["tests"]["details"] == {"why": "2 failed"}


def test_weighted_mean_and_threshold() -> None:
    parts = {"tests": (3.0, Fixed(True, 1.0)), "style": (1.0, Fixed(False, 0.2))}
    out = Weighted(parts).verify(TASK, _traj("x"))
    assert out.reward == pytest.approx(0.8) and not out.success  # no threshold: every part must succeed
    assert Weighted(parts, threshold=0.75).verify(TASK, _traj("x")).success
    assert out.details["weights"] == {"tests": 3.0, "style": 1.0}
    with pytest.raises(ValueError, match="weight"):
        Weighted({"a": (0.0, Fixed(True, 1.0))})


def test_gated_skips_the_expensive_check_when_the_gate_fails() -> None:
    expensive = Fixed(True, 1.0)
    out = Gated(Fixed(False, 0.4, reasons=["wrote conftest.py"]), expensive, names=("integrity", "tests")).verify(
        TASK, _traj("x"))
    assert expensive.calls == 0 and not out.success and out.reward == 0.0
    assert out.details["skipped"] == ["tests"] and out.details["parts"]["integrity"]["details"]["reasons"]


def test_gated_result_is_the_expensive_check_when_the_gate_passes() -> None:
    out = Gated(Fixed(True, 1.0), Fixed(False, 0.3)).verify(TASK, _traj("x"))
    assert not out.success and out.reward == 0.3 and out.details["skipped"] == []


@pytest.mark.parametrize("make", [
    lambda: AllOf({"ok": Fixed(True, 1.0), "boom": Crashes()}),
    lambda: Weighted({"ok": (1.0, Fixed(True, 1.0)), "boom": (1.0, Crashes())}),
    lambda: Gated(Fixed(True, 1.0), Crashes(), names=("gate", "boom")),
])
def test_a_crashing_part_is_an_error_not_a_zero(make: Callable[[], Any]) -> None:
    out = make().verify(TASK, _traj("x"))
    assert out.error is not None and out.error.startswith("boom: RuntimeError: verifier bug") and not out.success
    assert "Traceback" in out.details["parts"]["boom"]["details"]["traceback"]


def test_combinators_nest() -> None:
    inner = AllOf({"a": Fixed(True, 1.0), "b": Fixed(True, 0.5)})
    out = Gated(Fixed(True, 1.0), inner).verify(TASK, _traj("x"))
    assert out.success and out.reward == 0.5 and out.details["parts"]["then"]["details"]["parts"]["b"]["reward"] == 0.5


# -- the LLM judge at the HTTP seam ---------------------------------------------------------------


def _completion(content: str) -> dict[str, Any]:
    return {"id": "chatcmpl-1", "object": "chat.completion", "created": 0, "model": "judge-model",
            "choices": [{"index": 0, "finish_reason": "stop", "message": {"role": "assistant", "content": content}}],
            "usage": {"prompt_tokens": 10, "completion_tokens": 10, "total_tokens": 20}}


def _judge(handler: Callable[[httpx.Request], httpx.Response], **kw: Any) -> tuple[LLMJudge, list[dict[str, Any]]]:
    seen: list[dict[str, Any]] = []

    def record(request: httpx.Request) -> httpx.Response:
        seen.append(json.loads(request.content))
        return handler(request)

    client = openai.OpenAI(base_url="http://judge.test/v1", api_key="k", max_retries=0,
                           http_client=httpx.Client(transport=httpx.MockTransport(record)))
    return LLMJudge("Fixes the bug without touching the tests.", model="judge-model", client=client, **kw), seen


def _reply(scores: dict[str, float]) -> Callable[[httpx.Request], httpx.Response]:
    body = {"scores": [{"trajectory_id": k, "explanation": f"attempt {k}", "score": v} for k, v in scores.items()]}
    return lambda request: httpx.Response(200, json=_completion(json.dumps(body)))


def test_judge_ranks_a_group_in_one_call_and_stores_prompt_and_scores() -> None:
    judge, seen = _judge(_reply({"1": 0.2, "2": 0.9, "3": 0.9}))
    group = [_traj("I edited the tests."), _traj("Changed `<` to `<=`."), _traj("Fixed the loop bound.")]
    outs = judge.score_group(TASK, group)
    assert len(seen) == 1  # one request for the whole group
    req = seen[0]
    assert req["model"] == "judge-model" and req["response_format"] == {"type": "json_object"}
    user = req["messages"][1]["content"]
    assert "Fixes the bug without touching the tests." in user and TASK.prompt in user
    assert all(f'<trajectory id="{i}">' in user for i in (1, 2, 3)) and "Changed `<` to `<=`." in user
    assert [o.reward for o in outs] == [0.2, 0.9, 0.9] and [o.success for o in outs] == [False, True, True]
    j = outs[0].details["judge"]
    assert j["rank"] == 3 and outs[1].details["judge"]["rank"] == 1 and outs[2].details["judge"]["rank"] == 1
    assert j["messages"] == req["messages"] and j["scores"] == {"1": 0.2, "2": 0.9, "3": 0.9}
    assert j["explanation"] == "attempt 1" and j["group"] == [t.id for t in group] and "scores" in j["response"]


def test_judge_verify_is_a_group_of_one() -> None:
    judge, seen = _judge(_reply({"1": 0.7}))
    out = judge.verify(TASK, _traj("Fixed."))
    assert out.success and out.reward == 0.7 and "Score all 1 trajectories" in seen[0]["messages"][1]["content"]


def test_judge_accepts_fenced_json() -> None:
    body = "```json\n" + json.dumps({"scores": [{"trajectory_id": "1", "score": 1.0}]}) + "\n```"
    judge, _ = _judge(lambda r: httpx.Response(200, json=_completion(body)))
    assert judge.verify(TASK, _traj("x")).reward == 1.0


@pytest.mark.parametrize("content, why", [
    ("not json at all", "not the expected JSON"),
    (json.dumps({"scores": [{"trajectory_id": "1", "score": 1.7}]}), "not the expected JSON"),
    (json.dumps({"scores": [{"trajectory_id": "1", "score": 0.5}]}), "expected ['1', '2']"),
])
def test_judge_unusable_reply_is_an_error_for_the_whole_group(content: str, why: str) -> None:
    judge, _ = _judge(lambda r: httpx.Response(200, json=_completion(content)))
    outs = judge.score_group(TASK, [_traj("a"), _traj("b")])
    assert all(o.error and why in o.error and not o.success for o in outs)
    assert outs[0].details["judge"]["response"] == content


def test_judge_http_error_is_an_error() -> None:
    judge, _ = _judge(lambda r: httpx.Response(500, json={"error": {"message": "overloaded"}}))
    out = judge.verify(TASK, _traj("x"))
    assert out.error and "the judge request failed" in out.error and "InternalServerError" in out.error


def test_judge_gated_behind_a_cheap_check_is_not_called_when_the_check_fails() -> None:
    judge, seen = _judge(_reply({"1": 1.0}))
    out = Gated(Fixed(False, 0.0), judge, names=("tests", "judge")).verify(TASK, _traj("x"))
    assert not seen and not out.success and out.details["skipped"] == ["judge"]
