"""Capture without vLLM: answers -> replies, sessions -> one growing trajectory, and what the collector does
with them (grown sessions replace, response ids link feedback). The answer bytes are in the shapes vLLM
0.32 sends (checked against the real server in tests/test_capture.py)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import httpx
import pytest
from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, Response, StreamingResponse

from collector import CollectorSettings, UnknownResponseError, export, open_store, serve_in_thread
from collector._export_correction import corrected_index
from sdk import Feedback
from server import InsecureBindError, check_bind, key_id
from server._auth import KeyRing
from server._capture_build import Exchange, SessionBook, parse_json_answer, parse_sse_answer, request_messages
from server._tools import detect_tool_parser

TOOLS = [{"type": "function", "function": {"name": "lookup_order", "parameters": {
    "type": "object", "properties": {"order_id": {"type": "string"}}}}}]


def _answer(rid: str, *, content: str | None = None, call: tuple[str, str] | None = None, n: int = 1) -> bytes:
    msg: dict[str, Any] = {"role": "assistant", "content": content}
    if call is not None:
        msg["tool_calls"] = [{"id": "chatcmpl-tool-1", "type": "function",
                              "function": {"name": call[0], "arguments": call[1]}}]
    choices = [{"index": i, "message": msg, "finish_reason": "tool_calls" if call else "stop",
                "token_ids": [5, 6, 7], "logprobs": {"content": [{"token": "a", "logprob": -0.25}] * 3}}
               for i in range(n)]
    return json.dumps({"id": rid, "object": "chat.completion", "model": "policy-v0", "choices": choices,
                       "prompt_token_ids": [1, 2], "usage": {"prompt_tokens": 2, "completion_tokens": 3,
                                                              "total_tokens": 5}}).encode()


def _sse(rid: str, deltas: list[dict[str, Any]], finish: str) -> list[bytes]:
    events = [{"id": rid, "choices": [{"index": 0, "delta": d, "token_ids": [9]}], **({"prompt_token_ids": [1]}
              if i == 0 else {})} for i, d in enumerate(deltas)]
    events.append({"id": rid, "choices": [{"index": 0, "delta": {}, "finish_reason": finish}]})
    raw = "".join(f"data: {json.dumps(e)}\n\n" for e in events) + "data: [DONE]\n\n"
    b = raw.encode()
    return [b[i:i + 7] for i in range(0, len(b), 7)]  # chunk borders anywhere, as a relay sees them


def _ex(messages: list[dict[str, Any]], *, session: str | None = None, key: str | None = None,
        task: str | None = None, body: bytes = b"", chunks: list[bytes] | None = None) -> Exchange:
    return Exchange(fields={"model": "policy", "messages": messages, "tools": TOOLS}, model="policy",
                    version="policy-v0", key_id=key, app="support", session=session, task=task, started_at=1.7e9,
                    stream=chunks is not None, body=body, chunks=chunks or [], latency_s=0.05)


def test_json_answer_keeps_tool_calls_token_ids_logprobs_usage_and_alternatives() -> None:
    r = parse_json_answer(_answer("chatcmpl-1", call=("lookup_order", '{"order_id": "93412"}'), n=2))
    assert r.response_id == "chatcmpl-1" and r.finish_reason == "tool_calls"
    assert r.message.tool_calls and r.message.tool_calls[0].function.arguments == '{"order_id": "93412"}'
    assert r.prompt_token_ids == [1, 2] and r.token_ids == [5, 6, 7] and r.logprobs == [-0.25] * 3
    assert r.usage == {"prompt_tokens": 2, "completion_tokens": 3, "total_tokens": 5}
    assert len(r.alternatives) == 1


def test_stream_answer_merges_tool_call_deltas_across_chunk_borders() -> None:
    deltas = [{"role": "assistant"},
              {"tool_calls": [{"index": 0, "id": "call-9", "type": "function", "function": {"name": "lookup_order"}}]},
              {"tool_calls": [{"index": 0, "function": {"arguments": '{"order_id": '}}]},
              {"tool_calls": [{"index": 0, "function": {"arguments": '"93412"}'}}]}]
    r = parse_sse_answer(_sse("chatcmpl-s", deltas, "tool_calls"))
    assert r.response_id == "chatcmpl-s" and r.finish_reason == "tool_calls"
    call = r.message.tool_calls[0]  # type: ignore[index]
    assert (call.id, call.function.name, json.loads(call.function.arguments)) == ("call-9", "lookup_order",
                                                                                  {"order_id": "93412"})
    assert r.message.content is None and r.token_ids == [9, 9, 9, 9] and r.prompt_token_ids == [1]


def test_stream_answer_with_error_event_is_refused() -> None:
    raw = b'data: {"error": {"message": "vLLM broke off the stream"}}\n\n'
    with pytest.raises(ValueError, match="error"):
        parse_sse_answer([raw])


def test_request_messages_map_roles_and_content_parts() -> None:
    ms = request_messages([{"role": "developer", "content": "be brief"},
                           {"role": "user", "content": [{"type": "text", "text": "look at "},
                                                        {"type": "image_url", "image_url": {"url": "x"}}]},
                           {"role": "robot", "content": "?"}])
    assert [(m.role, m.content) for m in ms] == [("system", "be brief"), ("user", "look at [image_url]")]


def test_session_exchanges_grow_one_trajectory_with_every_turns_tokens() -> None:
    book = SessionBook()
    user = {"role": "user", "content": "Where is order 93412?"}
    first = book.trajectory(_ex([user], session="s1", key="k-1",
                                body=_answer("r1", call=("lookup_order", '{"order_id": "93412"}'))), parse_json_answer(
        _answer("r1", call=("lookup_order", '{"order_id": "93412"}'))), "default")
    call = {"role": "assistant", "content": None, "tool_calls": [{"id": "chatcmpl-tool-1", "type": "function", "function": {
        "name": "lookup_order", "arguments": '{"order_id": "93412"}'}}]}
    history = [user, call, {"role": "tool", "tool_call_id": "chatcmpl-tool-1", "content": "shipped"}]
    second = book.trajectory(_ex(history, session="s1", key="k-1"), parse_json_answer(
        _answer("r2", content="Answer: shipped")), "default")
    assert first.id == second.id and first.id.startswith("cap-")
    assert [m.role for m in second.messages] == ["user", "assistant", "tool", "assistant"]
    assert [t.message_index for t in second.turns] == [1, 3]  # the first turn's token ids are kept
    md = second.metadata
    assert md["response_ids"] == ["r1", "r2"] and md["looplift_revision"] == 4 and md["key_id"] == "k-1"
    assert md["session"] == "s1" and md["tools"] == TOOLS and md["usage"]["total_tokens"] == 10
    assert [e["latency_ms"] for e in md["exchanges"]] == [50.0, 50.0]
    assert second.app == "support" and second.served_version == "policy-v0" and second.task_id.startswith("prompt-")


def test_session_that_starts_over_is_a_new_trajectory_and_other_keys_never_join() -> None:
    book = SessionBook()
    a = book.trajectory(_ex([{"role": "user", "content": "hi"}], session="s"), parse_json_answer(
        _answer("r1", content="x")), "default")
    b = book.trajectory(_ex([{"role": "user", "content": "something else"}], session="s"), parse_json_answer(
        _answer("r2", content="y")), "default")
    c = book.trajectory(_ex([{"role": "user", "content": "hi"}], session="s", key="k-other"), parse_json_answer(
        _answer("r3", content="x")), "default")
    assert len({a.id, b.id, c.id}) == 3
    assert b.metadata["response_ids"] == ["r2"]


def test_exchange_without_session_is_its_own_trajectory_named_by_task_header() -> None:
    t = SessionBook().trajectory(_ex([{"role": "user", "content": "hi"}], task="greet"),
                                 parse_json_answer(_answer("r9", content="hello")), "default")
    assert "looplift_revision" not in t.metadata and t.task_id == "greet" and t.metadata["response_ids"] == ["r9"]


# ---- the collector side ------------------------------------------------------------------------------
def _session_traj(n_exchanges: int, rid_prefix: str = "r") -> Any:
    book = SessionBook()
    msgs: list[dict[str, Any]] = []
    t = None
    for i in range(n_exchanges):
        msgs.append({"role": "user", "content": f"question {i}"})
        t = book.trajectory(_ex(list(msgs), session="s"), parse_json_answer(_answer(f"{rid_prefix}{i}", content=f"a{i}")),
                            "default")
        msgs.append({"role": "assistant", "content": f"a{i}"})
    return t


def test_collector_keeps_the_longest_revision_whatever_the_order(store: Any) -> None:
    short, long_ = _session_traj(1), _session_traj(3)
    assert short.id == long_.id
    assert store.add_trajectories([long_]).accepted == 1
    assert store.add_trajectories([short]).duplicates == 1  # a late, shorter revision (the spool) changes nothing
    assert len(store.get(long_.id).messages) == 6
    two = _session_traj(2)
    assert store.add_trajectories([two]).duplicates == 1
    fresh = _session_traj(4)
    assert store.add_trajectories([_session_traj(2), fresh]).accepted == 1
    assert len(store.get(fresh.id).messages) == 8 and store.count() == 1


def _restarted_session(session: str) -> tuple[Any, Any]:
    """Two revisions of one session: before, and after a gateway restart (a fresh `SessionBook`)."""
    msgs: list[dict[str, Any]] = [{"role": "user", "content": "question 0"}]
    first = SessionBook().trajectory(_ex(list(msgs), session=session), parse_json_answer(
        _answer(f"{session}-r0", content="a0")), "default")
    msgs += [{"role": "assistant", "content": "a0"}, {"role": "user", "content": "question 1"}]
    second = SessionBook().trajectory(_ex(list(msgs), session=session), parse_json_answer(
        _answer(f"{session}-r1", content="a1")), "default")
    return first, second


def test_a_session_that_grows_after_a_gateway_restart_keeps_its_earlier_completions(store: Any) -> None:
    """Catches: the longer revision replacing the stored one wholesale. A gateway restarted mid-conversation knows
    only the exchanges since (same trajectory id: session + first prompt), so the earlier completion's response id,
    exchange and token turn vanished from the row while its link still pointed there (found by bench/soak.py).
    Also within one batch (the spool replaying both revisions together), and in the other order: the revision from
    before the restart, journaled, arrives after the restarted gateway's longer one (found by bench/soak.py: a
    completion served the instant `looplift up` was SIGKILLed was missing). Catches: a shorter revision taken for
    a duplicate although it lists a completion the stored row lacks, and within a batch the first one winning."""
    for session, batches in (("s", "one by one"), ("t", "one batch"), ("u", "late first"), ("v", "one batch, reversed")):
        first, second = _restarted_session(session)
        assert second.id == first.id and second.metadata["response_ids"] == [f"{session}-r1"]
        if batches == "one by one":
            store.add_trajectories([first])
            store.add_trajectories([second])
        elif batches == "late first":
            store.add_trajectories([second])
            assert store.add_trajectories([first]).accepted == 1
            assert store.add_trajectories([first]).duplicates == 1  # merged once; a replay changes nothing
        elif batches == "one batch":
            store.add_trajectories([first, second])
        else:
            store.add_trajectories([second, first])
        got = store.get(first.id)
        assert got.metadata["response_ids"] == [f"{session}-r0", f"{session}-r1"], batches
        assert [e["response_id"] for e in got.metadata["exchanges"]] == [f"{session}-r0", f"{session}-r1"]
        assert [t.message_index for t in got.turns] == [1, 3] and len(got.messages) == 4
        assert got.metadata["usage"]["total_tokens"] == 10  # both exchanges' usage
        assert store.resolve_response(f"{session}-r0") == store.resolve_response(f"{session}-r1") == first.id


def test_feedback_by_response_id_reaches_the_grown_trajectory(store: Any) -> None:
    t = _session_traj(2)
    store.add_trajectories([_session_traj(1)])
    store.add_feedback(Feedback(response_id="r0", rating=-1.0))  # joins the first revision ...
    store.add_trajectories([t])  # ... and stays joined when the session grows; its score is recomposed
    store.add_feedback(Feedback(response_id="r1", rating=1.0, key_id="k-abc"))
    fb = store.feedback_for(t.id)
    assert [f.rating for f in fb] == [-1.0, 1.0] and fb[1].key_id == "k-abc"
    assert store.resolve_response("r1") == t.id
    with pytest.raises(UnknownResponseError, match="unknown response id 'nope'"):
        store.add_feedback(Feedback(response_id="nope", rating=1.0))


def test_feedback_needs_exactly_one_target() -> None:
    with pytest.raises(ValueError, match="exactly one"):
        Feedback(rating=1.0)
    with pytest.raises(ValueError, match="exactly one"):
        Feedback(trajectory_id="a", response_id="b", rating=1.0)


def test_purge_by_key_id_removes_the_keys_trajectories_and_their_response_links(store: Any) -> None:
    book = SessionBook()
    for i, key in enumerate(["k-bad", "k-good"]):
        store.add_trajectories([book.trajectory(_ex([{"role": "user", "content": f"q{i}"}], key=key),
                                                parse_json_answer(_answer(f"resp-{key}", content="a")), "default")])
    assert store.purge(where={"key_id": "k-bad"}).trajectories == 1
    assert store.resolve_response("resp-k-bad") is None and store.resolve_response("resp-k-good") is not None


def test_collector_http_feedback_by_response_id(tmp_path: Path) -> None:
    db = f"sqlite:///{tmp_path / 'c.db'}"
    s = open_store(db)
    s.add_trajectories([_session_traj(2)])
    s.close()
    with serve_in_thread(CollectorSettings(db_url=db, api_keys=("key",))) as col:
        h = {"Authorization": "Bearer key"}
        ok = httpx.post(f"{col.url}/v1/feedback", json={"response_id": "r1", "rating": 1}, headers=h)
        assert ok.status_code == 200 and ok.json()["trajectory_id"].startswith("cap-")
        missing = httpx.post(f"{col.url}/v1/feedback", json={"response_id": "zzz", "rating": 1}, headers=h)
        assert missing.status_code == 404 and "unknown response id 'zzz'" in missing.json()["error"]["message"]
        assert httpx.post(f"{col.url}/v1/feedback", json={"response_id": "r1", "rating": 1}).status_code == 401


# ---- a correction replaces the message its response id produced -----------------------------------------
CODE = "```python\nprint(17 * 23)\n```"
USER, OUTPUT = {"role": "user", "content": "What is 17 * 23? Use code."}, {"role": "user", "content": "Output: 391"}


def _agent_session() -> Any:
    """user -> assistant writes code (response r-code) -> user shows the output -> assistant answers (r-answer)."""
    book = SessionBook()
    book.trajectory(_ex([USER], session="agent"), parse_json_answer(_answer("r-code", content=CODE)), "default")
    history = [USER, {"role": "assistant", "content": CODE}, OUTPUT]
    return book.trajectory(_ex(history, session="agent"), parse_json_answer(_answer("r-answer", content="391")),
                           "default")


def _export_corrected(db_url: str, tmp_path: Path, fb: Feedback) -> tuple[dict[str, Any], dict[str, Any]]:
    """Store the agent session and `fb`, export sft and dpo; the sft line and the correction's dpo pair."""
    store = open_store(db_url)
    try:
        t = _agent_session()
        store.add_trajectories([t])
        store.add_feedback(fb)
        export(store, tmp_path / "sft.jsonl")
        export(store, tmp_path / "dpo.jsonl", format="dpo")
    finally:
        store.close()
    (line,) = [json.loads(x) for x in (tmp_path / "sft.jsonl").read_text().splitlines()]
    (pair,) = [json.loads(x) for x in (tmp_path / "dpo.jsonl").read_text().splitlines()]
    return line, pair


def test_exchanges_record_the_message_index_of_their_reply() -> None:
    """Catches: exchanges without `message_index` (feedback by response id cannot find its message), or an
    index one off (the request's last message, or the next turn, instead of the reply)."""
    t = _agent_session()
    assert [(e["response_id"], e["message_index"]) for e in t.metadata["exchanges"]] == [("r-code", 1), ("r-answer", 3)]
    assert [t.messages[e["message_index"]].content for e in t.metadata["exchanges"]] == [CODE, "391"]


def test_correction_by_the_first_response_id_replaces_the_code_turn(any_db_url: str, tmp_path: Path) -> None:
    """Catches: the correction applied to the last turn when it named the first (the wrong code kept and
    'corrected' as if it were the answer), the later turns kept after the corrected one, and a feedback row
    that forgets the response id it named."""
    fixed = "```python\nprint(17 * 23)  # 391\n```"
    line, pair = _export_corrected(any_db_url, tmp_path, Feedback(response_id="r-code", rating=-1, correction=fixed))
    assert line["corrected"] is True and line["messages"] == [USER, {"role": "assistant", "content": fixed}]
    assert line["tools"] == TOOLS  # the model had them when it wrote the corrected message
    assert (pair["source"], pair["prompt"], pair["chosen"]) == ("correction", [USER], [{"role": "assistant", "content": fixed}])
    assert pair["rejected"] == [{"role": "assistant", "content": CODE}]


def test_correction_by_the_second_response_id_keeps_the_code_and_its_output(any_db_url: str, tmp_path: Path) -> None:
    """Catches: the correction cut after the first prompt (the code turn and its output dropped, teaching the
    model to answer without running code), and a DPO pair that rejects the whole conversation after the first
    prompt instead of the corrected answer."""
    line, pair = _export_corrected(any_db_url, tmp_path, Feedback(response_id="r-answer", rating=-1, correction="It is 391."))
    code = {"role": "assistant", "content": CODE}
    assert line["messages"] == [USER, code, OUTPUT, {"role": "assistant", "content": "It is 391."}]
    assert pair["prompt"] == [USER, code, OUTPUT] and pair["chosen"] == [{"role": "assistant", "content": "It is 391."}]
    assert pair["rejected"] == [{"role": "assistant", "content": "391"}]


def test_feedback_keeps_the_response_id_it_named(store: Any) -> None:
    """Catches: `feedback.response_id` not stored (every correction would fall back to the last message), or
    stored for feedback by trajectory id."""
    t = _agent_session()
    store.add_trajectories([t])
    store.add_feedback(Feedback(response_id="r-code", correction="x"))
    store.add_feedback(Feedback(trajectory_id=t.id, correction="y"))
    assert [(f.correction, f.response_id) for f in store.feedback_for(t.id)] == [("x", "r-code"), ("y", None)]


def _older_capture(*, turns: bool, few_shot: bool = False, index: Any = "drop") -> dict[str, Any]:
    """The agent session as stored JSON, as a gateway from before `message_index` captured it (`index`:
    "drop" removes the key, anything else replaces its value); `few_shot` opens with an assistant message the
    client wrote; without `turns`, as after a gateway restart lost them."""
    data = _agent_session().model_dump(mode="json")
    if few_shot:
        data["messages"][:0] = [{"role": "user", "content": "2*3?"}, {"role": "assistant", "content": "6"}]
        data["turns"] = [{**x, "message_index": x["message_index"] + 2} for x in data["turns"]]
    for e in data["metadata"]["exchanges"]:
        if index == "drop":
            del e["message_index"]
        else:
            e["message_index"] = index
    if not turns:
        data["turns"] = []
    return data


@pytest.mark.parametrize("turns, few_shot, index, rid, expected", [
    (True, False, "drop", "r-code", 1),  # no message_index: the i-th exchange's turn
    (True, True, "drop", "r-code", 3),  # ... which knows of an assistant message the client wrote
    (False, False, "drop", "r-code", 1),  # no turns either: the i-th assistant message, counts agree
    (False, True, "drop", "r-code", 5),  # counts disagree (a few-shot answer): the last assistant message
    (True, False, 2, "r-code", 1),  # an index at a user message is not trusted: the turn decides
    (True, False, 99, "r-code", 1),  # nor one out of range
    (True, False, True, "r-answer", 3),  # nor a bool (True would be message 1)
    (True, False, "drop", "r-unknown", 3),  # an id no exchange lists: the last assistant message
    (True, False, "drop", None, 3),  # feedback by trajectory id: the last assistant message
], ids=["turns", "turns-few-shot", "assistant-order", "counts-disagree", "index-at-user", "index-out-of-range",
        "index-bool", "unknown-id", "by-trajectory"])
def test_older_captures_map_a_response_id_by_exchange_order(turns: bool, few_shot: bool, index: Any, rid: str | None,
                                                            expected: int) -> None:
    """Catches, per case: the fallback for captures without `message_index` (the i-th turn, else the i-th
    assistant message only when the counts agree, else the last) taking the wrong message, a recorded index
    trusted when it points at a user message, out of range, or is a bool."""
    data = _older_capture(turns=turns, few_shot=few_shot, index=index)
    i = corrected_index(data, rid)
    assert i == expected and data["messages"][i]["role"] == "assistant"


# ---- who may teach the model ---------------------------------------------------------------------------
@pytest.mark.parametrize("host, keys, insecure, refused", [
    ("127.0.0.1", (), False, False), ("localhost", (), False, False), ("::1", (), False, False),
    ("0.0.0.0", (), False, True), ("0.0.0.0", ("k",), False, False), ("0.0.0.0", (), True, False),
])
def test_check_bind_refuses_open_endpoints_without_keys(host: str, keys: tuple[str, ...], insecure: bool,
                                                        refused: bool) -> None:
    if refused:
        with pytest.raises(InsecureBindError, match="without API keys.*--insecure"):
            check_bind(host, keys, insecure=insecure)
    else:
        check_bind(host, keys, insecure=insecure)


def test_key_ring_matches_every_key_and_ids_are_not_secrets() -> None:
    ring = KeyRing(["alpha", "beta"])
    assert ring.match("Bearer beta") == key_id("beta") and ring.match("Bearer gamma") is None
    assert ring.match(None) is None and ring.match("beta") is None
    assert key_id("beta").startswith("k-") and "beta" not in key_id("beta") and len(key_id("beta")) == 14


# ---- tool-call parser detection --------------------------------------------------------------------------
@pytest.mark.parametrize("template, parser", [
    ("{% for m in messages %}<tool_call>{{ m }}</tool_call>{% endfor %}", "hermes"),
    ("<tool_call>\n<function={{ name }}>", "qwen3_coder"),
    ("{% if tools %}<|python_tag|>{% endif %}", "llama3_json"),
    ("[TOOL_CALLS] {{ tools }}", "mistral"),
    ("{{ messages }}", None),
    ("{% if tools %}{{ tools }}{% endif %}", None),
])
def test_tool_parser_is_read_from_the_chat_template(tmp_path: Path, template: str, parser: str | None) -> None:
    (tmp_path / "tokenizer_config.json").write_text(json.dumps({"chat_template": template}))
    assert detect_tool_parser(tmp_path) == parser


def test_the_tiny_models_template_asks_for_hermes(looplift_model_dir: Path) -> None:
    assert detect_tool_parser(looplift_model_dir) == "hermes"


@pytest.mark.parametrize("extra", [[], ["--capture"]])
@pytest.mark.slow
def test_looplift_up_refuses_an_open_host_before_starting_anything(extra: list[str], tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if k != "LOOPLIFT_API_KEYS"}
    env["LOOPLIFT_HOME"] = str(tmp_path)
    p = subprocess.run([sys.executable, "-m", "looplift", "up", "--host", "0.0.0.0", "--gateway-port", "0",
                        "--collector-port", "0", *extra], env=env, capture_output=True, text=True, timeout=120)
    out = p.stdout + p.stderr
    assert p.returncode != 0 and "refusing to serve the gateway on '0.0.0.0' without API keys" in out, out[-2000:]
    assert "--insecure" in out and "Traceback" not in out
    assert not (tmp_path / "logs" / "vllm.log").exists()  # refused before vLLM started


def test_a_stream_the_client_closed_after_done_is_captured_a_broken_one_is_not(tmp_path: Path) -> None:
    from prometheus_client import CollectorRegistry

    from sdk import CollectorClient
    from server import GatewaySettings
    from server._capture import Capture

    posted: list[dict[str, Any]] = []

    def collector(request: httpx.Request) -> httpx.Response:
        posted.extend(json.loads(request.content)["trajectories"])
        return httpx.Response(200, json={"accepted": 1, "duplicates": 0, "ids": []})

    client = CollectorClient("http://collector", spool_dir=tmp_path / "spool", transport=httpx.MockTransport(collector))
    cap = Capture(GatewaySettings(admin_token="a", state_dir=tmp_path, capture=True), CollectorRegistry(), client)
    try:
        msgs = [{"role": "user", "content": "hi"}]
        done = _sse("rid-done", [{"content": "hel"}, {"content": "lo"}], "stop")
        whole = b"".join(_sse("rid-cut", [{"content": "hel"}, {"content": "lo"}], "stop"))
        cut = [whole[:-len(b"data: [DONE]\n\n")]]  # no [DONE]: the client left mid-answer
        for chunks in (done, cut):
            ex = cap.begin({"model": "policy", "messages": msgs, "stream": True}, "policy", "policy-v0", None, {})
            assert ex is not None
            ex.chunks += chunks
            cap.finish(ex, "client_closed", 0.01)
        assert cap.begin({"messages": msgs}, "policy", "policy-v0", None, {"capture": "off"}) is None
        assert cap.flush(10)
    finally:
        cap.close()
    assert [t["metadata"]["response_ids"] for t in posted] == [["rid-done"]]


# ---- durability: what a client got a 200 for is on disk before the 200 ends --------------------------------------
def _journaled(folder: Path) -> str:
    return "".join(p.read_text() for p in sorted((folder / "journal").glob("*.jsonl")))


class _Upstream:
    """vLLM's two answer shapes for `/v1/chat/completions` (see `_answer`, `_sse`), numbered response ids."""

    def __init__(self) -> None:
        self.n = 0
        app = FastAPI()

        @app.get("/health")
        async def health() -> dict[str, str]:
            return {}

        @app.get("/v1/models")
        async def models() -> dict[str, Any]:
            return {"object": "list", "data": [{"id": "policy-v0", "root": "/base", "parent": None}]}

        @app.post("/v1/chat/completions")
        async def chat(req: Request) -> Response:
            body = await req.json()
            self.n += 1
            rid = f"chatcmpl-{self.n}"
            if not body.get("stream"):
                return JSONResponse(json.loads(_answer(rid, content="4")))

            async def events() -> Any:
                for chunk in _sse(rid, [{"content": "4"}], "stop"):
                    yield chunk
            return StreamingResponse(events(), media_type="text/event-stream")

        self.app = app


@pytest.fixture
def upstream() -> Any:
    from sdk.infra import start_server_thread

    with start_server_thread(_Upstream().app, "127.0.0.1", 0, name="fake-vllm", log_level="critical") as t:
        yield t.url


def test_a_captured_answer_is_journaled_before_the_client_has_it_all(upstream: str, tmp_path: Path) -> None:
    """Catches: the exchange queued only after the answer went out (`finish` without `seal`), so a SIGKILL right
    after a client got its 200 loses the capture. Twenty answers, JSON and streamed, each looked for in the
    journal the moment the client has read its last byte; the collector is not there yet (the client holds)."""
    from server import GatewaySettings, start_gateway_in_thread

    settings = GatewaySettings(admin_token="a", state_dir=tmp_path / "state", capture=True, await_collector=True)
    with start_gateway_in_thread(settings, upstream, port=0) as gw, httpx.Client(base_url=gw.url) as http:
        body = {"model": "policy", "messages": [{"role": "user", "content": "2+2?"}]}
        for i in range(20):
            if i % 2:
                r = http.post("/v1/chat/completions", json=body)
                assert r.status_code == 200
                rid = r.json()["id"]
            else:
                with http.stream("POST", "/v1/chat/completions", json={**body, "stream": True}) as s:
                    lines = [ln for ln in s.iter_lines() if ln.startswith("data: ")]
                    assert lines[-1] == "data: [DONE]"
                    rid = json.loads(lines[0][6:])["id"]
                    assert rid in _journaled(settings.capture_spool_dir), f"stream {i} not journaled at [DONE]"
            assert rid in _journaled(settings.capture_spool_dir), f"answer {i} ({rid}) not journaled"


def test_capture_before_the_collector_is_delivered_once_it_is_connected(upstream: str, tmp_path: Path) -> None:
    """Catches: capture starting only when the collector is connected (`looplift up` starts it after the
    gateway), so what was served meanwhile is never captured."""
    from server import GatewaySettings, start_gateway_in_thread

    settings = GatewaySettings(admin_token="a", state_dir=tmp_path / "state", capture=True, await_collector=True)
    db = f"sqlite:///{tmp_path / 'c.db'}"
    with start_gateway_in_thread(settings, upstream, port=0) as gw:
        rids = [httpx.post(f"{gw.url}/v1/chat/completions", json={"model": "policy", "messages": [
            {"role": "user", "content": f"{i}+2?"}]}).json()["id"] for i in range(3)]
        with serve_in_thread(CollectorSettings(db_url=db), "127.0.0.1", 0) as col:
            gw.app.connect_collector(col.url, None)
            assert gw.app.capture is not None and gw.app.capture.flush(20)
    store = open_store(db)
    try:
        assert sorted(rid for rid in rids if store.resolve_response(rid)) == sorted(rids)
    finally:
        store.close()
    assert _journaled(settings.capture_spool_dir) == ""  # delivered: the journal emptied


_KILLED_CLIENT = """
import os, signal, sys
from sdk import CollectorClient, Message, Outcome, Trajectory
client = CollectorClient("http://127.0.0.1:9", spool_dir=sys.argv[1], flush_interval=3600)
for i in range(20):
    client.submit(Trajectory(id=f"kept-{i}", task_id="t", model="policy", outcome=Outcome(success=True, reward=1.0),
                             messages=[Message(role="user", content=f"q{i}"), Message(role="assistant", content="a")]))
os.kill(os.getpid(), signal.SIGKILL)
"""


def test_a_sigkilled_client_loses_nothing_it_accepted(tmp_path: Path) -> None:
    """Catches: trajectories kept only in memory until the next flush (a SIGKILL loses them), and a journal
    that the next client on the same spool does not adopt and replay."""
    spool = tmp_path / "spool"
    p = subprocess.run([sys.executable, "-c", _KILLED_CLIENT, str(spool)], env={**os.environ, "PYTHONPATH": os.getcwd()},
                       capture_output=True, text=True, timeout=120)
    assert p.returncode == -9, p.stderr
    assert list(spool.glob("*.jsonl")) == []  # nothing was spooled: all 20 are only in the journal
    db = f"sqlite:///{tmp_path / 'c.db'}"
    with serve_in_thread(CollectorSettings(db_url=db), "127.0.0.1", 0) as col:
        from sdk import CollectorClient

        with CollectorClient(col.url, spool_dir=spool) as client:
            assert client.flush(20) and client.stats.replayed == 20
    store = open_store(db)
    try:
        assert store.count() == 20
    finally:
        store.close()
    assert list((spool / "journal").glob("*")) == [] and list(spool.glob("*.jsonl")) == []
