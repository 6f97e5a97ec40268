"""SDK: the loop (against a scripted OpenAI-compatible transport), import weight, protocols."""

from __future__ import annotations

import json
from pathlib import Path
import subprocess
import time
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


@pytest.mark.slow
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


# ---- tools, budgets, policies (schema v2) --------------------------------------------------------
def _tool_server(script: list[dict], seen: list[dict]) -> httpx.MockTransport:
    """Answers the n-th assistant turn of a conversation with `script[n]` (a message dict, tool calls allowed)."""

    def handler(request: httpx.Request) -> httpx.Response:
        body = json.loads(request.content)
        seen.append(body)
        n = sum(m["role"] == "assistant" for m in body["messages"])
        msg = {"role": "assistant", "content": None, **script[n]}
        return httpx.Response(200, json={
            "id": f"c{n}", "object": "chat.completion", "created": 0, "model": "policy-v1",
            "prompt_token_ids": list(range(10 + n)),
            "choices": [{"index": 0, "finish_reason": "tool_calls" if msg.get("tool_calls") else "stop",
                         "token_ids": [100 + n] * 5, "message": msg, "logprobs": None}],
            "usage": {"prompt_tokens": 10 + n, "completion_tokens": 5, "total_tokens": 15 + n}})

    return httpx.MockTransport(handler)


def _call(i: str, name: str, args: dict) -> dict:
    return {"id": i, "type": "function", "function": {"name": name, "arguments": json.dumps(args)}}


class CalcEnv:
    """Exposes an `add` tool; a text answer equal to the task's sum ends the episode."""

    tools = [{"type": "function", "function": {"name": "add", "description": "a+b",
                                               "parameters": {"type": "object", "properties": {
                                                   "a": {"type": "number"}, "b": {"type": "number"}}}}}]

    def reset(self, task: Task) -> str:
        return task.prompt

    def step(self, action: str) -> StepResult:
        ok = action.strip() == "5"
        return StepResult(observation="right" if ok else "wrong", reward=float(ok), done=ok)

    def step_tool(self, call: sdk.ToolCall) -> StepResult:
        args = json.loads(call.function.arguments)
        return StepResult(observation=str(args["a"] + args["b"]))


async def test_tool_calls_are_executed_and_answered_in_openai_format() -> None:
    seen: list[dict] = []
    script = [{"tool_calls": [_call("k1", "add", {"a": 2, "b": 3}), _call("k2", "add", {"a": 1, "b": 1})]},
              {"content": "5"}]
    (t,) = await sdk.arun([Task(id="a", prompt="2+3?")], CalcEnv, client=_client(_tool_server(script, seen)),
                          tool_choice="auto")
    assert seen[0]["tools"] == CalcEnv.tools and seen[0]["tool_choice"] == "auto"
    assert [m.role for m in t.messages] == ["user", "assistant", "tool", "tool", "assistant"]
    assert t.messages[1].tool_calls is not None and t.messages[1].tool_calls[0].function.name == "add"
    assert (t.messages[2].tool_call_id, t.messages[2].content) == ("k1", "5")
    assert (t.messages[3].tool_call_id, t.messages[3].content) == ("k2", "2")
    # the second request carried the tool results back, in order, as OpenAI tool messages
    assert [m["role"] for m in seen[1]["messages"]] == ["user", "assistant", "tool", "tool"]
    assert [s.tool_call.id if s.tool_call else None for s in t.steps] == ["k1", "k2", None]
    assert t.end_reason == "done" and t.outcome is not None and t.outcome.success
    assert [turn.message_index for turn in t.turns] == [1, 4] and t.turns[1].completion_token_ids == [101] * 5


async def test_tool_call_to_an_environment_without_tools_is_answered_not_run() -> None:
    script = [{"tool_calls": [_call("k1", "rm", {"path": "/"})]}, {"content": "done"}]
    (t,) = await sdk.arun([Task(id="a", prompt="x")], EchoEnv, client=_client(_tool_server(script, [])))
    assert t.messages[2].role == "tool" and "has no tools" in (t.messages[2].content or "")
    assert t.end_reason == "done"


async def test_token_budget_caps_each_request_and_ends_the_episode() -> None:
    seen: list[dict] = []
    script = [{"content": "x"}] * 10
    (t,) = await sdk.arun([Task(id="a", prompt="x")], EchoEnv, client=_client(_tool_server(script, seen)),
                          budget=sdk.Budget(max_steps=10, max_tokens=12), sampling=sdk.Sampling(max_tokens=8))
    # 5 tokens per reply: 8, then 7 (12-5), then 2 (12-10) are asked for; after 15 >= 12 the episode ends
    assert [b["max_tokens"] for b in seen] == [8, 7, 2]
    assert t.end_reason == "max_tokens" and len(t.turns) == 3


async def test_time_budget_ends_a_slow_step() -> None:
    class Slow(EchoEnv):
        def step(self, action: str) -> StepResult:
            time.sleep(0.5)
            return StepResult(observation="late")

    (t,) = await sdk.arun([Task(id="a", prompt="x")], Slow, client=_client(_tool_server([{"content": "x"}] * 3, [])),
                          budget=sdk.Budget(max_steps=3, max_seconds=0.2))
    assert t.end_reason == "max_seconds" and t.steps[-1].info == {"timeout": True}


async def test_step_budget_and_done_are_recorded() -> None:
    (t,) = await sdk.arun([Task(id="a", prompt="x")], EchoEnv,
                          client=_client(_tool_server([{"content": "x"}] * 5, [])), max_steps=2)
    assert t.end_reason == "max_steps" and len(t.steps) == 2


async def test_policy_replaces_the_model_in_the_same_loop() -> None:
    def oracle(task: Task, messages: list[sdk.Message]) -> sdk.Message | str:
        if messages[-1].role == "user" and len(messages) == 1:
            return sdk.Message(role="assistant", tool_calls=[sdk.ToolCall(
                id="p1", function=sdk.ToolCallFunction(name="add", arguments='{"a": 2, "b": 3}'))])
        return messages[-1].content or ""  # echo the tool's answer as text

    async def broken(task: Task, messages: list[sdk.Message]) -> str:
        raise ValueError("no idea")

    (good,) = await sdk.arun([Task(id="a", prompt="2+3?")], CalcEnv, policy=oracle, verifier=None)
    assert good.end_reason == "done" and good.outcome is not None and good.outcome.success and good.turns == []
    (bad,) = await sdk.arun([Task(id="a", prompt="2+3?")], CalcEnv, policy=broken)
    assert bad.end_reason == "policy_error" and "no idea" in bad.metadata["policy_error"]


async def test_server_error_ends_only_that_episode() -> None:
    def handler(request: httpx.Request) -> httpx.Response:
        return httpx.Response(400, json={"error": {"message": "bad conversation", "type": "invalid_request_error"}})

    client = openai.AsyncOpenAI(base_url="http://127.0.0.1:9/v1", api_key="k", max_retries=0,
                                http_client=httpx.AsyncClient(transport=httpx.MockTransport(handler)))
    (t,) = await sdk.arun([Task(id="a", prompt="x")], EchoEnv, client=client)
    assert t.end_reason == "generation_error" and "bad conversation" in t.metadata["generation_error"]


async def test_a_callers_client_gets_the_app_and_capture_headers_too(tmp_path: Path) -> None:
    """`X-Looplift-App` / `X-Looplift-Capture: off` go out on a client the caller passed (the online RL loop's),
    next to that client's own headers: else a capturing gateway stores a second, outcome-less copy of each
    episode."""
    sent: list[httpx.Headers] = []

    def handler(request: httpx.Request) -> httpx.Response:
        sent.append(request.headers)
        return httpx.Response(200, json={"id": "x", "object": "chat.completion", "created": 0, "model": "policy",
                                         "choices": [{"index": 0, "finish_reason": "stop",
                                                      "message": {"role": "assistant", "content": "done"}}]})

    client = openai.AsyncOpenAI(base_url="http://127.0.0.1:9/v1", api_key="k", default_headers={"X-Mine": "1"},
                                http_client=httpx.AsyncClient(transport=httpx.MockTransport(handler)))
    collector = sdk.CollectorClient("http://127.0.0.1:9", spool_dir=tmp_path / "spool",
                                    transport=httpx.MockTransport(lambda r: httpx.Response(
                                        200, json={"accepted": 1, "duplicates": 0, "ids": []})))
    try:
        (t,) = await sdk.arun([Task(id="a", prompt="x")], EchoEnv, client=client, app="rl", collector=collector,
                              headers={"X-Extra": "e"})
    finally:
        collector.close()
    assert t.end_reason == "done" and len(sent) == 1
    h = sent[0]
    assert (h["x-looplift-app"], h["x-looplift-capture"], h["x-extra"], h["x-mine"]) == ("rl", "off", "e", "1")


def test_suites_and_families_refuse_what_cannot_work() -> None:
    env, ver = EchoEnv, None
    with pytest.raises(ConfigError, match="no tasks"):
        sdk.EvalSuite(name="s", tasks=[], env_factory=env, verifier=ver)  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match="more than once"):
        sdk.EvalSuite(name="s", tasks=[Task(id="a", prompt=""), Task(id="a", prompt="")], env_factory=env,
                      verifier=ver)  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match="cheat"):
        sdk.EnvFamily(name="f", description="", tasks=lambda s, n, seed: [], env_factory=env, verifier=ver,  # type: ignore[arg-type]
                      policies={"oracle": lambda t, m: "", "noop": lambda t, m: ""})
    with pytest.raises(ConfigError, match="max_steps"):
        sdk.Budget(max_steps=0)
    with pytest.raises(ConfigError, match="either budget= or max_steps="):
        sdk.run([Task(id="a", prompt="t")], EchoEnv, budget=sdk.Budget(), max_steps=2)
    suite = sdk.EvalSuite(name="s", tasks=[Task(id="a", prompt="", data={"slice": "hard"}), Task(id="b", prompt="")],
                          env_factory=env, verifier=ver)  # type: ignore[arg-type]
    assert {k: [t.id for t in v] for k, v in suite.slices().items()} == {"hard": ["a"], "all": ["b"]}
