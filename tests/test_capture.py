"""The official `openai` client against the real gateway (session vLLM CPU, tool-call parser from the tiny
model's chat template) with capture into a real collector: models.retrieve, tools with every tool_choice,
streamed tool-call deltas, sessions stitched into one trajectory, per-key capture, feedback by response id.

The model is the untrained tiny one (what it says does not matter here): a named or `required` tool_choice
makes vLLM constrain its output to the tool's JSON, so the function name is certain whatever the weights.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Iterator

import httpx
import openai
import pytest

from collector import CollectorSettings, open_store, serve_in_thread
from sdk import SamplingRecord
from server import GatewaySettings, key_id, start_gateway_in_thread

pytestmark = [pytest.mark.vllm, pytest.mark.slow]

LOOKUP = {"type": "function", "function": {
    "name": "lookup_order", "description": "Look up an order.",
    "parameters": {"type": "object", "properties": {"order_id": {"type": "string", "enum": ["48213"]}},
                   "required": ["order_id"]}}}
NAMED = {"type": "function", "function": {"name": "lookup_order"}}
ALICE, BOB = "alice-secret-key", "bob-secret-key"


@pytest.fixture(scope="module")
def stack(vllm_server: Any, tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    """A collector and a gateway capturing ALICE's traffic only (a capture key), both with API keys."""
    tmp = tmp_path_factory.mktemp("capture")
    db = f"sqlite:///{tmp / 'collector.db'}"
    with serve_in_thread(CollectorSettings(db_url=db, api_keys=("ck",))) as col:
        settings = GatewaySettings(admin_token="adm", state_dir=tmp / "gw", api_keys=(ALICE, BOB),
                                   capture_key_ids=frozenset({key_id(ALICE)}), collector_url=col.url,
                                   collector_key="ck")
        with start_gateway_in_thread(settings, vllm_server.url, port=0) as gw:  # type: ignore[attr-defined]
            yield {"gw": gw, "col": col, "db": db}


def _client(stack: dict[str, Any], key: str, **headers: str) -> openai.OpenAI:
    return openai.OpenAI(base_url=f"{stack['gw'].url}/v1", api_key=key, default_headers=headers, max_retries=0)


def _stored(stack: dict[str, Any], response_id: str) -> Any:
    assert stack["gw"].app.capture.flush(30)
    s = open_store(stack["db"])
    try:
        tid = s.resolve_response(response_id)
        return None if tid is None else s.get(tid)
    finally:
        s.close()


def test_models_retrieve_answers_for_the_alias_and_versions(stack: dict[str, Any]) -> None:
    c = _client(stack, ALICE)
    assert c.models.retrieve("policy").id == "policy"
    assert c.models.retrieve("policy-v0").id == "policy-v0"
    with pytest.raises(openai.NotFoundError, match="does not exist"):
        c.models.retrieve("policy-v99")


def test_tool_choice_named_required_and_auto_stream_and_not(stack: dict[str, Any]) -> None:
    c = _client(stack, BOB)
    msgs = [{"role": "user", "content": "Where is order 48213?"}]
    named = c.chat.completions.create(model="policy", messages=msgs, tools=[LOOKUP], tool_choice=NAMED,  # type: ignore[arg-type]
                                      max_tokens=48, temperature=0)
    calls = named.choices[0].message.tool_calls
    assert calls and calls[0].function.name == "lookup_order", named.choices[0]
    # `required`: vLLM constrains the output to the parser's tool-call format; the untrained model may not close
    # its call within max_tokens, but what it wrote is a call (accepted, not a 400 as without a parser).
    req = c.chat.completions.create(model="policy", messages=msgs, tools=[LOOKUP], tool_choice="required",
                                    max_tokens=48, temperature=0)
    done = req.choices[0].message.tool_calls
    assert (done and done[0].function.name == "lookup_order") or (
        req.choices[0].finish_reason == "length" and (req.choices[0].message.content or "").startswith("<tool_call>")), req
    auto = c.chat.completions.create(model="policy", messages=msgs, tools=[LOOKUP], tool_choice="auto",  # type: ignore[arg-type]
                                     max_tokens=8)
    assert auto.choices[0].finish_reason in ("stop", "length", "tool_calls")
    names = []
    with c.chat.completions.create(model="policy", messages=msgs, tools=[LOOKUP], tool_choice=NAMED,  # type: ignore[arg-type]
                                   max_tokens=48, temperature=0, stream=True) as stream:
        for chunk in stream:
            for tc in (chunk.choices[0].delta.tool_calls or []) if chunk.choices else []:
                if tc.function and tc.function.name:
                    names.append(tc.function.name)
    assert names == ["lookup_order"]


def test_a_session_is_one_captured_trajectory_and_feedback_finds_it(stack: dict[str, Any]) -> None:
    headers = {"X-Looplift-Session": "s-1", "X-Looplift-App": "support", "X-Looplift-Task": "order-48213"}
    c = _client(stack, ALICE, **headers)
    msgs: list[dict[str, Any]] = [{"role": "user", "content": "Where is order 48213?"}]
    first = c.chat.completions.create(model="policy", messages=msgs, tools=[LOOKUP], tool_choice=NAMED,  # type: ignore[arg-type]
                                      max_tokens=48, temperature=0, logprobs=True,
                                      extra_body={"return_token_ids": True})
    call = first.choices[0].message.tool_calls[0]  # type: ignore[index]
    msgs += [first.choices[0].message.model_dump(exclude_none=True),
             {"role": "tool", "tool_call_id": call.id, "content": "shipped"}]
    ids = [first.id]
    with c.chat.completions.create(model="policy", messages=msgs, max_tokens=6, stream=True,  # type: ignore[arg-type]
                                   stream_options={"include_usage": True}) as stream:
        for chunk in stream:
            ids.append(chunk.id)
    assert ids[1] == ids[-1] != ids[0]
    t = _stored(stack, ids[-1])
    assert t is not None and t.id == _stored(stack, ids[0]).id  # both exchanges: one trajectory
    assert (t.app, t.task_id, t.served_version) == ("support", "order-48213", "policy-v0")
    assert [m.role for m in t.messages] == ["user", "assistant", "tool", "assistant"]
    assert t.messages[1].tool_calls[0].function.name == "lookup_order"
    assert t.metadata["key_id"] == key_id(ALICE) and ALICE not in t.model_dump_json()
    assert t.metadata["response_ids"] == [ids[0], ids[-1]]
    turn = t.turns[0]
    assert turn.completion_token_ids and len(turn.completion_logprobs) == len(turn.completion_token_ids)
    # Each turn records its request's sampling, with the defaults of the gateway's vLLM (--generation-config vllm).
    assert [x.sampling for x in t.turns] == [
        SamplingRecord.from_request({"temperature": 0, "tools": [LOOKUP], "tool_choice": NAMED}, "vllm"),
        SamplingRecord.from_request({}, "vllm")]
    assert t.turns[0].sampling.constraints == ["tool_choice=named"]  # type: ignore[union-attr]
    assert t.metadata["usage"]["completion_tokens"] > 0
    fb = httpx.post(f"{stack['gw'].url}/v1/feedback", json={"response_id": ids[0], "rating": 1, "text": "thanks"},
                    headers={"Authorization": f"Bearer {ALICE}"})
    assert fb.status_code == 200 and fb.json()["trajectory_id"] == t.id
    s = open_store(stack["db"])
    try:
        assert [(f.rating, f.key_id) for f in s.feedback_for(t.id)] == [(1.0, key_id(ALICE))]
    finally:
        s.close()


def test_anonymized_per_key_capture_and_feedback_rules(stack: dict[str, Any]) -> None:
    alice = _client(stack, ALICE)
    mine = alice.chat.completions.create(model="policy", max_tokens=4,
                                         messages=[{"role": "user", "content": "I am jane.doe@example.com"}])
    t = _stored(stack, mine.id)
    assert t is not None and "jane.doe@example.com" not in t.model_dump_json()  # anonymized before storage
    off = _client(stack, ALICE, **{"X-Looplift-Capture": "off"}).chat.completions.create(
        model="policy", max_tokens=4, messages=[{"role": "user", "content": "not for training"}])
    assert _stored(stack, off.id) is None  # the SDK with a collector, and the eval gate, send this header
    bob = _client(stack, BOB, **{"X-Looplift-Session": "s-bob"})
    r = bob.chat.completions.create(model="policy", messages=[{"role": "user", "content": "hi"}], max_tokens=4)
    assert _stored(stack, r.id) is None  # BOB is not a capture key
    url = f"{stack['gw'].url}/v1/feedback"
    missing = httpx.post(url, json={"response_id": r.id, "rating": -1}, headers={"Authorization": f"Bearer {BOB}"})
    assert missing.status_code == 404 and f"No captured exchange has response id '{r.id}'" in missing.text
    assert httpx.post(url, json={"response_id": r.id, "rating": -1}).status_code == 401
    bad = httpx.post(url, json={"response_id": r.id, "rating": 3}, headers={"Authorization": f"Bearer {BOB}"})
    assert bad.status_code == 400 and "rating" in bad.json()["error"]["message"]


def test_an_open_endpoint_without_keys_is_refused(tmp_path: Path) -> None:
    from server import InsecureBindError

    with pytest.raises(InsecureBindError, match="without API keys"):
        start_gateway_in_thread(GatewaySettings(admin_token="a", state_dir=tmp_path), "http://127.0.0.1:9", "0.0.0.0")


GREETING = "Hello! How can I help you today?"


def test_a_black_box_app_teaches_the_model_and_a_scheduled_retrain_promotes(
    stack: dict[str, Any], looplift_model_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The whole loop for an app with no SDK: a greeter whose users correct its (untrained, random) replies
    through `POST /v1/feedback` by response id; a new-data trigger runs the retrain job, which trains on the
    corrections and gates on the app's own prompt suite; the candidate greets, the serving version does not."""
    from server import AdminClient
    from trainer import JobConfig, ScheduleConfig, Scheduler, prompt_suite

    app = _client(stack, ALICE, **{"X-Looplift-App": "greeter"})
    for i in range(12):
        r = app.chat.completions.create(model="policy", max_tokens=8,
                                        messages=[{"role": "user", "content": f"Hi, this is customer {i}."}])
        fb = httpx.post(f"{stack['gw'].url}/v1/feedback", headers={"Authorization": f"Bearer {ALICE}"},
                        json={"response_id": r.id, "rating": -1, "correction": GREETING})
        assert fb.status_code == 200, fb.text
    suite = prompt_suite([{"id": f"g{i}", "turns": [f"Hi, this is customer {100 + i}."], "expected": GREETING}
                          for i in range(24)], name="greeter", checker="regex:Hello", max_tokens=16, temperature=0.0)
    monkeypatch.setenv("LOOPLIFT_API_KEY", BOB)  # the gate's own requests: authenticated, not captured
    job = JobConfig(base_model_dir=looplift_model_dir, collector_db=stack["db"], gateway_url=stack["gw"].url,
                    admin_token="adm", app="greeter", min_score=0.75, min_examples=8, runs_dir=tmp_path / "runs",
                    eval_concurrency=8)
    sched = Scheduler(job, ScheduleConfig(new_data=10), suite)
    assert sched.tick(), "12 rated conversations must fire the new-data trigger"
    res = sched.results[0]
    assert res.status == "promoted", (res.status, res.reason, res.gate)
    assert res.trigger.startswith("new-data") and res.exported == 12
    assert res.candidate_success >= 0.75 and res.serving_success == 0.0, res.gate
    with AdminClient(stack["gw"].url, "adm") as admin:
        assert admin.versions().serving == res.candidate
        admin.rollback()  # the module's other tests expect the base model serving
