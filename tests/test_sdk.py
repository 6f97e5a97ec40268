"""SDK: the loop (against a scripted OpenAI-compatible transport), import weight, protocols."""

from __future__ import annotations

import json
import subprocess
import sys

import httpx
import openai
import pytest

import sdk
from sdk import Outcome, StepResult, Task, Trajectory
from sdk.errors import ConfigError, GenerationError


def _scripted_server(replies: dict[str, list[str]], seen: list[dict]) -> httpx.MockTransport:
    """An OpenAI-compatible /v1/chat/completions at the transport: answers from a script per task prompt."""

    def handler(request: httpx.Request) -> httpx.Response:
        body = json.loads(request.content)
        seen.append(body)
        if body["model"] not in ("policy", "policy-v3"):
            return httpx.Response(404, json={"error": {"message": f"The model `{body['model']}` does not exist.",
                                                       "type": "invalid_request_error", "code": "model_not_found"}})
        prompt = body["messages"][0]["content"] if body["messages"][0]["role"] == "user" else body["messages"][1]["content"]
        n_assistant = sum(m["role"] == "assistant" for m in body["messages"])
        text = replies[prompt][n_assistant]
        return httpx.Response(200, json={
            "id": "x", "object": "chat.completion", "created": 0, "model": "policy-v3",
            "prompt_token_ids": [1, 2, 3],
            "choices": [{"index": 0, "finish_reason": "stop", "token_ids": [7, 8],
                         "message": {"role": "assistant", "content": text},
                         "logprobs": {"content": [{"token": "a", "logprob": -0.5, "bytes": None, "top_logprobs": []},
                                                  {"token": "b", "logprob": -0.25, "bytes": None,
                                                   "top_logprobs": []}]}}],
            "usage": {"prompt_tokens": 3, "completion_tokens": 2, "total_tokens": 5}})

    return httpx.MockTransport(handler)


class EchoEnv:
    """Done when the model says 'done'; otherwise echoes the action back as feedback."""

    def __init__(self) -> None:
        self.closed = False

    def reset(self, task: Task) -> str:
        return task.prompt

    def step(self, action: str) -> StepResult:
        if action == "done":
            return StepResult(observation="ok", reward=1.0, done=True)
        return StepResult(observation=f"you said {action}")

    def close(self) -> None:
        self.closed = True


def _client(transport: httpx.MockTransport) -> openai.AsyncOpenAI:
    return openai.AsyncOpenAI(base_url="http://127.0.0.1:9/v1", api_key="k",
                              http_client=httpx.AsyncClient(transport=transport))


async def test_loop_records_messages_steps_tokens_and_outcome() -> None:
    seen: list[dict] = []
    transport = _scripted_server({"t1": ["hello", "done"], "t2": ["done"]}, seen)
    envs: list[EchoEnv] = []

    def factory() -> EchoEnv:
        envs.append(EchoEnv())
        return envs[-1]

    trajs = await sdk.arun([Task(id="a", prompt="t1"), Task(id="b", prompt="t2")], factory,
                           client=_client(transport), app="unit", sampling=sdk.Sampling(seed=3))
    a, b = trajs
    assert [m.role for m in a.messages] == ["user", "assistant", "user", "assistant"]
    assert a.messages[2].content == "you said hello"
    assert a.served_version == "policy-v3" and a.model == "policy" and a.app == "unit"
    assert len(a.steps) == 2 and a.steps[-1].done and a.outcome == Outcome(success=True, reward=1.0)
    assert a.turns[0].completion_token_ids == [7, 8] and a.turns[0].prompt_token_ids == [1, 2, 3]
    assert a.turns[0].completion_logprobs == [-0.5, -0.25] and a.turns[1].message_index == 3
    assert len(b.steps) == 1 and a.id != b.id
    assert all(e.closed for e in envs)
    # vLLM extras are requested on every call; seeds are per task/step and stable.
    assert all(body["return_token_ids"] is True and body["logprobs"] is True for body in seen)
    assert len({body["seed"] for body in seen}) == 3


async def test_budget_exhausted_is_a_failed_outcome_not_an_error() -> None:
    transport = _scripted_server({"t": ["x", "y", "z"]}, [])
    (t,) = await sdk.arun([Task(id="a", prompt="t")], EchoEnv, client=_client(transport), max_steps=2)
    assert len(t.steps) == 2 and t.outcome is not None and not t.outcome.success and t.outcome.reward == 0.0


async def test_crashing_verifier_is_recorded_with_its_error() -> None:
    class Broken:
        def verify(self, task: Task, trajectory: Trajectory) -> Outcome:
            raise KeyError("boom")

    transport = _scripted_server({"t": ["done"]}, [])
    (t,) = await sdk.arun([Task(id="a", prompt="t")], EchoEnv, client=_client(transport), verifier=Broken())
    assert t.outcome is not None and t.outcome.error is not None and "KeyError" in t.outcome.error
    assert "traceback" in t.outcome.details


async def test_crashing_environment_does_not_stop_other_episodes() -> None:
    class Exploding(EchoEnv):
        def step(self, action: str) -> StepResult:
            raise RuntimeError("sandbox on fire")

    transport = _scripted_server({"t": ["done"]}, [])
    trajs = await sdk.arun([Task(id="a", prompt="t"), Task(id="b", prompt="t")], Exploding,
                           client=_client(transport))
    assert len(trajs) == 2
    assert all("sandbox on fire" in t.metadata["env_error"] and not t.outcome.success for t in trajs)


async def test_unknown_model_raises_a_clear_error() -> None:
    transport = _scripted_server({"t": ["done"]}, [])
    with pytest.raises(GenerationError, match="not served"):
        await sdk.arun([Task(id="a", prompt="t")], EchoEnv, client=_client(transport), model="nope")


def test_bad_arguments_are_config_errors() -> None:
    with pytest.raises(ConfigError, match="concurrency"):
        sdk.run([Task(id="a", prompt="t")], EchoEnv, concurrency=0)


async def test_run_inside_event_loop_says_use_arun() -> None:
    with pytest.raises(ConfigError, match="arun"):
        sdk.run([Task(id="a", prompt="t")], EchoEnv)


def test_sdk_imports_without_heavy_dependencies() -> None:
    code = ("import sys, sdk; heavy = [m for m in ('torch', 'vllm', 'docker', 'sqlmodel', 'transformers') "
            "if m in sys.modules]; print(heavy)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.strip()
    assert out == "[]"


def test_trajectory_rejects_unknown_fields_and_bad_roles() -> None:
    with pytest.raises(ValueError):
        Trajectory(task_id="t", model="m", messages=[{"role": "robot", "content": "x"}])  # type: ignore[list-item]
    with pytest.raises(ValueError):
        Trajectory.model_validate({"task_id": "t", "model": "m", "messages": [], "surprise": 1})
