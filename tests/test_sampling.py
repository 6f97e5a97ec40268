"""Sampling records (`sdk.SamplingRecord`, trajectory schema 3): gateway capture and the SDK record each turn's
sampling parameters and the server's generation config, vLLM is started with `--generation-config vllm`, and
GRPO skips the turns whose logprobs are not those of the distribution they were sampled from. One property per
test; the last one imports vLLM's own argument parser (a minute on 2 cores)."""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any, Iterator

import httpx
import openai
import pytest

import sdk
from sdk import SamplingRecord, StepResult, Task, Trajectory, wire
from sdk.infra import ServerThread
from server import GatewayHandle, GatewaySettings, VLLMConfig, start_gateway_in_thread
from server._capture_build import Exchange, SessionBook, parse_json_answer
from server._vllm import build_command
from trainer import Episode, Group, TrainingDataError, groups_from_trajectories, load_grpo_jsonl

PLAIN = {"temperature": 1.0, "top_p": 1.0, "top_k": 0, "min_p": 0.0, "repetition_penalty": 1.0,
         "presence_penalty": 0.0, "frequency_penalty": 0.0}
LOGGER = "looplift.trainer"


# ---- the record ---------------------------------------------------------------------------------
def test_record_fills_vllms_neutral_defaults_only_under_generation_config_vllm() -> None:
    asked = {"temperature": 0.7, "top_k": -1}
    assert SamplingRecord.from_request(asked, "vllm") == SamplingRecord(
        **{**PLAIN, "temperature": 0.7}, generation_config="vllm")
    auto = SamplingRecord.from_request(asked, "auto")
    assert (auto.temperature, auto.top_k, auto.top_p, auto.min_p) == (0.7, 0, None, None)  # left to the model
    assert SamplingRecord.from_request({}, None).top_p is None


@pytest.mark.parametrize("extra, constraint", [
    ({"tools": [{"type": "function"}], "tool_choice": "required"}, "tool_choice=required"),
    ({"tools": [{"type": "function"}], "tool_choice": {"type": "function", "function": {"name": "f"}}},
     "tool_choice=named"),
    ({"response_format": {"type": "json_schema", "json_schema": {}}}, "response_format=json_schema"),
    ({"logit_bias": {"50256": -100}}, "logit_bias"),
    ({"min_tokens": 4}, "min_tokens"),
])
def test_record_names_fields_that_reshape_the_distribution(extra: dict[str, Any], constraint: str) -> None:
    plain = {"tools": [{"type": "function"}], "tool_choice": "auto", "response_format": {"type": "text"},
             "logit_bias": {}, "min_tokens": 0}
    assert SamplingRecord.from_request(plain, "vllm").constraints == []
    assert SamplingRecord.from_request(extra, "vllm").constraints == [constraint]


def test_trajectories_stored_before_sampling_records_still_load() -> None:
    old = {"schema_version": 2, "id": "old-1", "task_id": "t", "model": "policy",
           "messages": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "yo"}],
           "turns": [{"message_index": 1, "prompt_token_ids": [1], "completion_token_ids": [2],
                      "completion_logprobs": [-0.1], "finish_reason": "stop"}]}
    t = Trajectory.model_validate_json(json.dumps(old))
    assert t.schema_version == 2 and t.turns[0].sampling is None
    again = Trajectory.model_validate_json(t.model_dump_json())
    assert again == t and sdk.TRAJECTORY_SCHEMA_VERSION == 3


# ---- gateway capture ------------------------------------------------------------------------------
def _answer(rid: str) -> bytes:
    return json.dumps({"id": rid, "object": "chat.completion", "model": "policy-v0", "prompt_token_ids": [1, 2],
                       "choices": [{"index": 0, "message": {"role": "assistant", "content": "ok"},
                                    "finish_reason": "stop", "token_ids": [5], "logprobs": {"content": [
                                        {"token": "ok", "logprob": -0.5}]}}]}).encode()


def _exchange(fields: dict[str, Any], body: bytes) -> Exchange:
    return Exchange(fields={"model": "policy", **fields}, model="policy", version="policy-v0", key_id=None,
                    app="support", session="s-1", task=None, started_at=1.7e9, stream=False, body=body)


def test_capture_records_each_requests_sampling_and_the_generation_config() -> None:
    book = SessionBook()
    first = [{"role": "user", "content": "hi"}]
    ex1 = _exchange({"messages": first, "temperature": 0.7, "top_p": 0.9}, _answer("c1"))
    book.trajectory(ex1, parse_json_answer(ex1.body), "app", "vllm")
    second = first + [{"role": "assistant", "content": "ok"}, {"role": "user", "content": "more"}]
    ex2 = _exchange({"messages": second, "frequency_penalty": 0.5, "top_k": 20}, _answer("c2"))
    t = book.trajectory(ex2, parse_json_answer(ex2.body), "app", "vllm")
    s1, s2 = (turn.sampling for turn in t.turns)
    assert s1 == SamplingRecord(**{**PLAIN, "temperature": 0.7, "top_p": 0.9}, generation_config="vllm")
    assert s2 == SamplingRecord(**{**PLAIN, "frequency_penalty": 0.5, "top_k": 20}, generation_config="vllm")
    ex3 = _exchange({"messages": first}, _answer("c3"))  # no session: its own trajectory; the model's defaults
    ex3.session = None
    s3 = book.trajectory(ex3, parse_json_answer(ex3.body), "app", "auto").turns[0].sampling
    assert s3 is not None and s3.generation_config == "auto" and s3.temperature is None


class _FakeVLLM:
    """Just enough of vLLM for the gateway to start and answer one chat completion."""

    def __init__(self) -> None:
        from fastapi import FastAPI

        self.app = FastAPI()

        @self.app.get("/health")
        async def health() -> dict[str, str]:
            return {}

        @self.app.get("/v1/models")
        async def models() -> dict[str, Any]:
            return {"object": "list", "data": [{"id": "policy-v0", "root": "/base", "parent": None}]}

        @self.app.post("/v1/chat/completions")
        async def chat() -> dict[str, Any]:
            return json.loads(_answer("c1"))


@pytest.fixture
def gateway_over_fake(tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[GatewayHandle]:
    from sdk.infra import start_server_thread

    fake = _FakeVLLM()
    settings = GatewaySettings(admin_token="admin", state_dir=tmp_path / "state", generation_config=request.param)
    t: ServerThread
    with start_server_thread(fake.app, "127.0.0.1", 0, name="fake-vllm", log_level="critical") as t:
        with start_gateway_in_thread(settings, t.url, port=0) as gw:
            yield gw


@pytest.mark.parametrize("gateway_over_fake", ["vllm"], indirect=True)
async def test_sdk_through_the_gateway_records_the_generation_config_it_announces(
        gateway_over_fake: GatewayHandle) -> None:
    r = httpx.post(f"{gateway_over_fake.url}/v1/chat/completions",
                   json={"model": "policy", "messages": [{"role": "user", "content": "hi"}]})
    assert r.status_code == 200 and r.headers[wire.GENERATION_CONFIG_HEADER] == "vllm"
    client = openai.AsyncOpenAI(base_url=f"{gateway_over_fake.url}/v1", api_key="k")
    (t,) = await sdk.arun([Task(id="a", prompt="hi")], _OneStep, client=client, sampling=sdk.Sampling(top_p=0.95))
    assert t.turns[0].sampling == SamplingRecord(**{**PLAIN, "top_p": 0.95}, generation_config="vllm")


# ---- the SDK ----------------------------------------------------------------------------------------
class _OneStep:
    def reset(self, task: Task) -> str:
        return task.prompt

    def step(self, action: str) -> StepResult:
        return StepResult(observation="", reward=1.0, done=True)


def _server(headers: dict[str, str]) -> openai.AsyncOpenAI:
    def handler(request: httpx.Request) -> httpx.Response:
        return httpx.Response(200, headers=headers, content=_answer("c1"))

    return openai.AsyncOpenAI(base_url="http://127.0.0.1:9/v1", api_key="k",
                              http_client=httpx.AsyncClient(transport=httpx.MockTransport(handler)))


async def test_sdk_records_its_sampling_with_the_servers_defaults_when_the_gateway_names_them() -> None:
    sampling = sdk.Sampling(temperature=0.7, extra_body={"top_k": 40, "repetition_penalty": 1.1})
    (t,) = await sdk.arun([Task(id="a", prompt="hi")], _OneStep, sampling=sampling,
                          client=_server({wire.GENERATION_CONFIG_HEADER: "vllm"}))
    assert t.turns[0].sampling == SamplingRecord(**{**PLAIN, "temperature": 0.7, "top_k": 40,
                                                    "repetition_penalty": 1.1}, generation_config="vllm")
    (t,) = await sdk.arun([Task(id="a", prompt="hi")], _OneStep, client=_server({}))  # a server that does not say
    s = t.turns[0].sampling
    assert s is not None and (s.temperature, s.top_p, s.generation_config, s.top_k) == (1.0, 1.0, None, None)


# ---- GRPO --------------------------------------------------------------------------------------------
def _turn(sampling: dict[str, Any] | None, prompt: list[int] | None = None) -> dict[str, Any]:
    t: dict[str, Any] = {"message_index": 1, "prompt_token_ids": prompt or [5, 6], "completion_token_ids": [7, 1],
                         "completion_logprobs": [-0.5, -0.1]}
    if sampling is not None:
        t["sampling"] = sampling
    return t


def _rec(**changes: Any) -> dict[str, Any]:
    """A stored record (a dict, as an export line holds it): plain sampling under vLLM's defaults, but `changes`."""
    config = changes.pop("generation_config", "vllm")
    return SamplingRecord(**{**PLAIN, **changes}, generation_config=config).model_dump()


def _grpo_file(tmp_path: Path, completions: list[tuple[str, float, list[dict[str, Any]]]]) -> Path:
    comps = [{"id": i, "served_version": "policy-v0", "reward": r, "score": r, "turns": turns}
             for i, r, turns in completions]
    path = tmp_path / "g.jsonl"
    path.write_text(json.dumps({"task_id": "t", "prompt": [], "rewards": [c[1] for c in completions],
                                "completions": comps}) + "\n")
    return path


def test_grpo_skips_a_tempered_turn_naming_trajectory_and_parameter_and_keeps_plain_ones(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    path = _grpo_file(tmp_path, [
        ("plain", 1.0, [_turn(_rec())]),
        ("also-plain", 0.0, [_turn(_rec(temperature=1.0))]),
        ("tempered", 0.5, [_turn(_rec(temperature=0.7))]),
        # turn 0 tempered, turn 1 plain: turn 0 stays as context, turn 1 trains
        ("mixed", 1.0, [_turn(_rec(top_k=20)), _turn(_rec(), prompt=[5, 6, 7, 1, 8])]),
    ])
    with caplog.at_level(logging.WARNING, logger=LOGGER):
        (group,) = load_grpo_jsonl(path)
    assert [e.id for e in group.episodes] == ["plain", "also-plain", "mixed"]
    assert [len(e.turns) for e in group.episodes] == [1, 1, 1] and group.episodes[2].turns[0].prompt_ids == (5, 6, 7, 1, 8)
    (msg,) = [r.getMessage() for r in caplog.records]
    assert "skipped 2 assistant turn(s) in 2 trajectories" in msg
    assert "trajectory tempered turn 0: temperature=0.7" in msg and "trajectory mixed turn 0: top_k=20" in msg


def test_grpo_fails_when_no_turn_was_sampled_from_the_models_distribution(tmp_path: Path) -> None:
    path = _grpo_file(tmp_path, [("a", 1.0, [_turn(_rec(temperature=0.7))]),
                                 ("b", 0.0, [_turn(_rec(generation_config="auto", top_k=None))]),
                                 ("c", 0.0, [_turn({**_rec(), "constraints": ["tool_choice=required"]})])])
    with pytest.raises(TrainingDataError, match=r"3 assistant turn\(s\) were sampled off the model's own distribution "
                                                r"\(generation_config, temperature, tool_choice; e\.g\. trajectory a turn 0"):
        load_grpo_jsonl(path)


def test_grpo_trains_turns_without_a_record_with_one_unverified_warning(tmp_path: Path,
                                                                        caplog: pytest.LogCaptureFixture) -> None:
    path = _grpo_file(tmp_path, [("old-1", 1.0, [_turn(None)]), ("old-2", 0.0, [_turn(None), _turn(None)]),
                                 ("sdk", 0.5, [_turn(_rec(generation_config=None, top_k=None))])])
    with caplog.at_level(logging.WARNING, logger=LOGGER):
        (group,) = load_grpo_jsonl(path)
    assert len(group.episodes) == 3
    (msg,) = [r.getMessage() for r in caplog.records]
    assert "4 assistant turn(s) in 3 trajectories are trained unverified" in msg
    assert "trajectory old-1 turn 0: no sampling record" in msg and "default for top_k is unknown" in msg


def test_online_rollouts_skip_tempered_turns_too(caplog: pytest.LogCaptureFixture) -> None:
    def traj(tid: str, temperature: float) -> Trajectory:
        t = Trajectory.model_validate({"id": tid, "task_id": "t", "model": "policy", "messages": [],
                                       "outcome": {"success": True, "reward": 1.0},
                                       "turns": [_turn(_rec(temperature=temperature))]})
        return t

    with caplog.at_level(logging.WARNING, logger=LOGGER):
        groups = groups_from_trajectories([traj("hot", 1.3), traj("ok", 1.0)])
    assert groups == [Group("t", (Episode("ok", 1.0, groups[0].episodes[0].turns),))]
    assert "trajectory hot turn 0: temperature=1.3" in caplog.text
    with pytest.raises(TrainingDataError, match="temperature=1.3"):
        groups_from_trajectories([traj("hot", 1.3)])


# ---- vLLM's argv ------------------------------------------------------------------------------------
def test_vllm_is_started_with_generation_config_vllm_unless_told(tmp_path: Path) -> None:
    argv, _ = build_command(VLLMConfig(model_dir=tmp_path), 1234, on_gpu=False)
    assert argv[argv.index("--generation-config") + 1] == "vllm"
    argv, _ = build_command(VLLMConfig(model_dir=tmp_path, generation_config="auto"), 1234, on_gpu=False)
    assert argv[argv.index("--generation-config") + 1] == "auto"
    with pytest.raises(ValueError, match="generation_config="):
        VLLMConfig(model_dir=tmp_path, extra_args=("--generation-config=auto",))
