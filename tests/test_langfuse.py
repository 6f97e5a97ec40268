"""The Langfuse export, with the real Langfuse SDK faked only at its seams: an OpenTelemetry in-memory span
exporter and an httpx `MockTransport` (the SDK's own constructor arguments), or a stand-in Langfuse server on
loopback (`_fake_langfuse`) that the SDK reaches over real HTTP, configured by Langfuse's own env vars."""

from __future__ import annotations

import base64
import json
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from _fake_langfuse import Received, fake_langfuse
from fastapi.testclient import TestClient
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from typer.testing import CliRunner

from collector import CollectorSettings, ConfigError, LangfuseSettings, create_app, open_store, serve_in_thread
from collector._cli import app as collector_cli
from collector._langfuse import LangfuseExporter, trace_id_for
from sdk import Message, Outcome, Step, ToolCall, ToolCallFunction, Trajectory, TrajectoryBatch, TurnTokens
from sdk.infra import start_server_thread

EMAIL, PHONE, CARD = "alice.smith@private-mail.example", "+44 20 7946 0958", "4111 1111 1111 1111"
A = "langfuse.observation."


def _key() -> str:
    """A public key of its own per test: the SDK keeps one set of resources per key for the whole process."""
    return f"pk-lf-test-{uuid.uuid4().hex[:12]}"


def episode(i: int = 0, *, content: str = "Compute 6*7 with the python tool.", answer: str = "42") -> Trajectory:
    """An SDK-style episode: a tool call turn (one step), then a text turn (one step), verified."""
    call = ToolCall(id=f"call-{i}", function=ToolCallFunction(name="python", arguments='{"code": "print(6*7)"}'))
    return Trajectory(
        id=f"ep-{i}", app="shop", task_id=f"arith:6*7#{i}", model="policy", served_version="policy-v2",
        messages=[Message(role="user", content=content), Message(role="assistant", tool_calls=[call]),
                  Message(role="tool", tool_call_id=call.id, content="42"),
                  Message(role="assistant", content=f"ANSWER: {answer}")],
        turns=[TurnTokens(message_index=1, prompt_token_ids=[1, 2, 3, 4], completion_token_ids=[5, 6]),
               TurnTokens(message_index=3, prompt_token_ids=[1, 2, 3, 4, 5, 6, 7], completion_token_ids=[8, 9, 10],
                          finish_reason="stop")],
        steps=[Step(index=0, action='{"name": "python"}', observation="42", tool_call=call, generate_seconds=0.25,
                    execute_seconds=0.125),
               Step(index=1, action=f"ANSWER: {answer}", observation="correct", reward=1.0, done=True,
                    generate_seconds=0.5, execute_seconds=0.0625)],
        outcome=Outcome(success=True, reward=1.0, details={"expected": 42}), end_reason="done")


@pytest.fixture
def seams() -> Iterator[tuple[LangfuseExporter, InMemorySpanExporter, list[httpx.Request]]]:
    """An exporter whose SDK client exports spans to memory and sends its HTTP calls to a MockTransport."""
    spans = InMemorySpanExporter()
    calls: list[httpx.Request] = []

    def handler(request: httpx.Request) -> httpx.Response:
        request.read()
        calls.append(request)
        return httpx.Response(200, json={"successes": [], "errors": []})

    exporter = LangfuseExporter(LangfuseSettings(public_key=_key(), secret_key="sk-test", host="http://langfuse.invalid"),
                                span_exporter=spans, httpx_client=httpx.Client(transport=httpx.MockTransport(handler)))
    yield exporter, spans, calls
    exporter.close()


def _scores(calls: list[httpx.Request]) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for c in calls:
        if c.url.path.endswith("/scores"):
            body = json.loads(c.content)
            out.extend(body if isinstance(body, list) else [body])
    return out


def _ingest(client: TestClient, *trajs: Trajectory) -> None:
    r = client.post("/v1/trajectories", content=TrajectoryBatch(trajectories=list(trajs)).model_dump_json())
    assert r.status_code == 200, r.text


def test_an_episode_is_one_trace_a_generation_per_turn_a_span_per_step(seams: Any, db_url: str) -> None:
    exporter, memory, calls = seams
    t = episode()
    with TestClient(create_app(CollectorSettings(db_url=db_url), langfuse=exporter)) as client:
        _ingest(client, t)
        assert exporter.flush(30)
    spans = memory.get_finished_spans()
    trace_id = trace_id_for(t.id)
    assert {format(s.context.trace_id, "032x") for s in spans} == {trace_id}  # one trace, id derived from the trajectory
    (root,) = [s for s in spans if s.parent is None]
    assert root.attributes[A + "type"] == "agent" and root.attributes["langfuse.trace.name"] == "shop"
    assert json.loads(root.attributes["langfuse.trace.metadata.task_id"]) == t.task_id
    children = sorted((s for s in spans if s.parent is not None), key=lambda s: s.start_time)
    assert all(s.parent.span_id == root.context.span_id for s in children)
    kinds = [(s.attributes[A + "type"], s.name) for s in children]
    # generation (tool call) -> its step -> generation (answer) -> its step, laid end to end
    assert kinds == [("generation", "generation 1"), ("span", "python 0"), ("generation", "generation 3"), ("span", "step 1")]
    for a, b in zip(children, children[1:]):
        assert b.start_time == a.end_time
    gen1, step0, gen3, step1 = children
    assert gen1.end_time - gen1.start_time == 250_000_000 and step0.end_time - step0.start_time == 125_000_000
    assert gen3.attributes[A + "model.name"] == "policy-v2"
    assert json.loads(gen3.attributes[A + "usage_details"]) == {"input": 7, "output": 3, "total": 10}
    assert json.loads(gen1.attributes[A + "output"])["tool_calls"][0]["function"]["name"] == "python"
    assert step1.attributes[A + "input"] == "ANSWER: 42" and step1.attributes[A + "output"] == "correct"
    assert json.loads(step1.attributes[A + "metadata.reward"]) == 1.0
    assert root.start_time <= children[0].start_time and root.end_time >= children[-1].end_time
    scores = {s["name"]: s for s in _scores(calls)}
    assert {s["traceId"] for s in scores.values()} == {trace_id}
    assert scores["success"]["value"] == 1.0 and scores["success"]["dataType"] == "BOOLEAN"
    assert json.loads(scores["success"]["comment"])["details"] == {"expected": 42}
    assert scores["reward"]["value"] == 1.0 and scores["looplift_score"]["comment"] == "source: reward"
    assert exporter.stats.traces == 1 and exporter.stats.failed == 0 and exporter.stats.dropped == 0


def test_feedback_arriving_later_scores_the_same_trace(seams: Any, db_url: str) -> None:
    exporter, _memory, calls = seams
    t = episode(1)
    with TestClient(create_app(CollectorSettings(db_url=db_url), langfuse=exporter)) as client:
        _ingest(client, t)
        r = client.post("/v1/feedback", json={"trajectory_id": t.id, "rating": -0.5, "correction": "ANSWER: 41",
                                              "text": "off by one"})
        assert r.status_code == 200
        assert exporter.flush(30)
    scores = {s["name"]: s for s in _scores(calls)}
    assert scores["user_rating"]["traceId"] == trace_id_for(t.id) and scores["user_rating"]["value"] == -0.5
    assert scores["user_rating"]["comment"] == "off by one"
    assert scores["user_correction"]["comment"] == "ANSWER: 41" and scores["user_correction"]["value"] == 1.0


def test_a_captured_exchange_without_steps_gets_a_generation_per_answer(seams: Any, db_url: str) -> None:
    exporter, memory, _calls = seams
    t = Trajectory(id="cap-1", app="chat", task_id="session-7", model="policy", served_version="policy-v1",
                   messages=[Message(role="user", content="hi"), Message(role="assistant", content="hello"),
                             Message(role="user", content="bye"), Message(role="assistant", content="see you")],
                   metadata={"session_id": "s-7", "captured": True})
    with TestClient(create_app(CollectorSettings(db_url=db_url), langfuse=exporter)) as client:
        _ingest(client, t)
        assert exporter.flush(30)
    spans = memory.get_finished_spans()
    gens = [s for s in spans if s.attributes[A + "type"] == "generation"]
    assert len(gens) == 2 and len(spans) == 3
    (root,) = [s for s in spans if s.parent is None]
    assert root.attributes["session.id"] == "s-7"
    assert json.loads(gens[-1].attributes[A + "output"])["content"] == "see you"


def test_only_anonymized_text_leaves_the_machine(fake_server: tuple[str, Received], tmp_path: Path) -> None:
    url, got = fake_server
    settings = CollectorSettings.from_env({"LOOPLIFT_HOME": str(tmp_path), "LANGFUSE_PUBLIC_KEY": _key(),
                                           "LANGFUSE_SECRET_KEY": "sk-test", "LANGFUSE_HOST": url})
    t = episode(2, content=f"Mail {EMAIL} or call {PHONE}: compute 6*7", answer="42")
    t.steps[0].observation = f"card {CARD} charged"
    t.outcome.details["customer"] = EMAIL  # type: ignore[union-attr]
    t.metadata["contact"] = PHONE
    handle = serve_in_thread(settings)
    try:
        r = httpx.post(handle.url + "/v1/trajectories", content=TrajectoryBatch(trajectories=[t]).model_dump_json())
        assert r.status_code == 200
        r = httpx.post(handle.url + "/v1/feedback", json={"trajectory_id": t.id, "rating": 1,
                                                            "correction": f"write to {EMAIL}", "text": f"I am {PHONE}"})
        assert r.status_code == 200
    finally:
        handle.stop()  # the app's shutdown flushes the exporter and the SDK
    sent = got.text()
    assert "<EMAIL_1>" in sent and len(got.spans) == 5 and got.scores  # the data went out ...
    for value in (EMAIL, PHONE, CARD, CARD.replace(" ", "")):  # ... and no original value with it
        assert value not in sent, value


@pytest.fixture
def fake_server() -> Iterator[tuple[str, Received]]:
    app, got = fake_langfuse()
    with start_server_thread(app, "127.0.0.1", 0, name="fake-langfuse") as server:
        yield server.url, got


def test_langfuse_env_vars_turn_it_on_and_the_sdk_delivers_over_http(fake_server: tuple[str, Received],
                                                                     tmp_path: Path) -> None:
    url, got = fake_server
    pk = _key()
    settings = CollectorSettings.from_env({"LOOPLIFT_HOME": str(tmp_path), "LANGFUSE_PUBLIC_KEY": pk,
                                           "LANGFUSE_SECRET_KEY": "sk-test", "LANGFUSE_HOST": url})
    assert settings.langfuse is not None and settings.langfuse.host == url
    assert "sk-test" not in repr(settings)
    handle = serve_in_thread(settings)
    ts = [episode(10 + i) for i in range(3)]
    try:
        r = httpx.post(handle.url + "/v1/trajectories", content=TrajectoryBatch(trajectories=ts).model_dump_json())
        assert r.status_code == 200 and r.json()["accepted"] == 3
    finally:
        handle.stop()
    assert f"Basic {base64.b64encode(f'{pk}:sk-test'.encode()).decode()}" in got.auth
    assert {s["trace_id"] for s in got.spans} == {trace_id_for(t.id) for t in ts}
    assert len(got.spans) == 3 * 5 and {s["scope"] for s in got.spans} == {"looplift.collector"}
    assert sorted(s["name"] for s in got.scores) == sorted(["success", "reward", "looplift_score"] * 3)


def test_off_by_default_and_half_configured_is_a_one_line_error(tmp_path: Path) -> None:
    home = {"LOOPLIFT_HOME": str(tmp_path)}
    assert CollectorSettings.from_env(home).langfuse is None
    keys = {"LANGFUSE_PUBLIC_KEY": "pk", "LANGFUSE_SECRET_KEY": "sk"}
    assert CollectorSettings.from_env(home | keys | {"LOOPLIFT_COLLECTOR_LANGFUSE": "off"}).langfuse is None
    assert CollectorSettings.from_env(home | keys).langfuse is not None
    with pytest.raises(ConfigError, match="LANGFUSE_SECRET_KEY is not set"):
        CollectorSettings.from_env(home | {"LANGFUSE_PUBLIC_KEY": "pk"})


def test_a_full_queue_drops_and_counts_and_ingest_never_waits(db_url: str) -> None:
    spans = InMemorySpanExporter()
    exporter = LangfuseExporter(
        LangfuseSettings(public_key=_key(), secret_key="sk", host="http://langfuse.invalid", queue_size=2),
        span_exporter=spans, httpx_client=httpx.Client(transport=httpx.MockTransport(lambda r: httpx.Response(200))))
    store = open_store(db_url)
    exporter.attach(store)
    try:
        # The exporter's thread is not started yet: nothing drains the queue, as when Langfuse lags far behind.
        result = store.add_trajectories([episode(20 + i) for i in range(5)])
        assert result.accepted == 5 and store.count() == 5  # every row stored ...
        assert exporter.stats.enqueued == 2 and exporter.stats.dropped == 3  # ... 2 queued, 3 dropped and counted
        exporter.start()
        assert exporter.flush(30)
        assert exporter.stats.traces == 2
        assert len({s.context.trace_id for s in spans.get_finished_spans()}) == 2
        assert exporter.to_dict()["dropped"] == 3
    finally:
        exporter.close()
        store.close()


@pytest.mark.slow
def test_langfuse_down_never_fails_ingest(tmp_path: Path) -> None:
    with socketless_port() as closed:
        settings = CollectorSettings.from_env({"LOOPLIFT_HOME": str(tmp_path), "LANGFUSE_PUBLIC_KEY": _key(),
                                               "LANGFUSE_SECRET_KEY": "sk", "LANGFUSE_HOST": f"http://127.0.0.1:{closed}"})
        handle = serve_in_thread(settings)
        try:
            for i in range(3):
                r = httpx.post(handle.url + "/v1/trajectories",
                               content=TrajectoryBatch(trajectories=[episode(30 + i)]).model_dump_json())
                assert r.status_code == 200 and r.json()["accepted"] == 1
        finally:
            handle.stop()
    store = open_store(settings.db_url)
    assert store.count() == 3
    store.close()


class socketless_port:
    """A loopback port nothing listens on (bound, never listening, for the block)."""

    def __enter__(self) -> int:
        import socket

        self._s = socket.socket()
        self._s.bind(("127.0.0.1", 0))
        return int(self._s.getsockname()[1])

    def __exit__(self, *exc: object) -> None:
        self._s.close()


def test_export_as_a_langfuse_dataset(fake_server: tuple[str, Received], tmp_path: Path, db_url: str,
                                      monkeypatch: pytest.MonkeyPatch) -> None:
    url, got = fake_server
    store = open_store(db_url)
    store.add_trajectories([episode(40 + i) for i in range(4)])
    store.close()
    monkeypatch.setenv("LOOPLIFT_HOME", str(tmp_path))
    env = {"LANGFUSE_PUBLIC_KEY": _key(), "LANGFUSE_SECRET_KEY": "sk", "LANGFUSE_HOST": url}
    runner = CliRunner()
    args = ["export", "--db", db_url, "--format", "langfuse-dataset", "--dataset", "shop-eval", "--json",
            "--out", str(tmp_path / "ds.jsonl")]
    for _ in range(2):  # twice: the same items again, not copies
        r = runner.invoke(collector_cli, args, env=env)
        assert r.exit_code == 0, r.output
    out = json.loads(r.stdout)
    assert out["langfuse_dataset"] == {"name": "shop-eval", "items": 4, "host": url} and out["format"] == "sft"
    assert [d["name"] for d in got.datasets] == ["shop-eval", "shop-eval"]
    assert len(got.items) == 8 and len({i["id"] for i in got.items}) == 4
    item = next(i for i in got.items if i["metadata"]["id"] == "ep-40")
    assert item["datasetName"] == "shop-eval" and item["sourceTraceId"] == trace_id_for("ep-40")
    assert item["input"] == [{"role": "user", "content": "Compute 6*7 with the python tool."}]
    assert item["expectedOutput"][-1] == {"role": "assistant", "content": "ANSWER: 42"}
    # Without Langfuse's settings, and --dataset without the format: one line, exit 2.
    r = runner.invoke(collector_cli, args, env={"LANGFUSE_PUBLIC_KEY": "", "LANGFUSE_SECRET_KEY": ""})
    assert r.exit_code == 2 and "LANGFUSE_PUBLIC_KEY" in r.output and "Traceback" not in r.output
    r = runner.invoke(collector_cli, ["export", "--db", db_url, "--dataset", "x", "--out", str(tmp_path / "o.jsonl")])
    assert r.exit_code == 2 and "--format langfuse-dataset" in r.output


def test_a_dataset_push_to_an_unreachable_langfuse_is_one_line(tmp_path: Path, db_url: str,
                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    store = open_store(db_url)
    store.add_trajectories([episode(50)])
    store.close()
    monkeypatch.setenv("LOOPLIFT_HOME", str(tmp_path))
    with socketless_port() as closed:
        r = CliRunner().invoke(collector_cli, ["export", "--db", db_url, "--format", "langfuse-dataset", "--out",
                                               str(tmp_path / "ds.jsonl")],
                               env={"LANGFUSE_PUBLIC_KEY": _key(), "LANGFUSE_SECRET_KEY": "sk",
                                    "LANGFUSE_HOST": f"http://127.0.0.1:{closed}"})
    assert r.exit_code == 1 and "pushing the Langfuse dataset 'looplift-all-" in r.output
    assert "Traceback" not in r.output and len(r.output.strip().splitlines()) <= 3
    assert (tmp_path / "ds.jsonl").exists()  # the export itself was written
