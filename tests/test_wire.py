"""The wire contract (`sdk.wire`): names crossing a process boundary are defined once, and every collector
error is the OpenAI error shape, read back by the official `openai` client. One property per test."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest
from fastapi.testclient import TestClient
from pydantic import SecretStr

from collector import CollectorSettings, Store, create_app
from sdk import Feedback, Message, Trajectory, wire

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("sdk", "server", "collector", "trainer", "looplift", "envs", "sandboxes")
KEY = "wire-key"
ADMIN = "wire-admin"
#: A string literal that is a whole `X-Looplift-*` header name (prose in docstrings and help text is fine).
HEADER_LITERAL = re.compile(r"""b?["']x-looplift-[a-z]+["']""", re.IGNORECASE)


def test_no_package_retypes_a_looplift_header() -> None:
    found = [f"{p.relative_to(ROOT)}:{n}" for pkg in PACKAGES for p in sorted((ROOT / pkg).rglob("*.py"))
             if p != ROOT / "sdk" / "wire.py"
             for n, line in enumerate(p.read_text().splitlines(), 1) if HEADER_LITERAL.search(line)]
    assert found == [], f"import the header name from sdk.wire instead: {found}"


@pytest.mark.parametrize("value, token", [
    ("Bearer abc", "abc"), ("bearer  abc ", "abc"), ("BEARER abc", "abc"), ("Basic abc", None), ("Bearer ", None),
    ("Bearer", None), ("", None), (None, None),
])
def test_bearer_token(value: str | None, token: str | None) -> None:
    assert wire.bearer_token(value) == token


def test_asgi_header_is_how_a_scope_spells_it() -> None:
    assert wire.asgi_header(wire.SESSION_HEADER) == b"x-looplift-session"


def test_error_message_reads_error_body_and_nothing_else() -> None:
    assert wire.error_message(wire.error_body(404, "gone", code="x")) == "gone"
    assert [wire.error_message(b) for b in ({"detail": "x"}, {"error": "x"}, "x", None)] == [None] * 4


# ---- the collector answers every error in the OpenAI shape -------------------------------------------
@pytest.fixture
def http(db_url: str) -> Iterator[TestClient]:
    settings = CollectorSettings(db_url=db_url, api_keys=(KEY,), admin_token=SecretStr(ADMIN), max_body_bytes=4096)
    with TestClient(create_app(settings), raise_server_exceptions=False) as c:
        yield c


def _openai_error(http: TestClient, path: str, body: Any = None, *, key: str = KEY, method: str = "post",
                  headers: dict[str, str] | None = None) -> openai.APIStatusError:
    """The error the official client raises for the collector's answer (what its users will see)."""
    client = openai.OpenAI(api_key=key, base_url="http://testserver", http_client=http, max_retries=0)
    call = client.post if method == "post" else client.get
    kw: dict[str, Any] = {"body": body} if method == "post" else {}
    with pytest.raises(openai.APIStatusError) as e:
        call(path, cast_to=httpx.Response, options={"headers": headers or {}}, **kw)
    return e.value


CASES: dict[str, tuple[int, dict[str, Any]]] = {
    "401 ingest key": (401, {"path": "/v1/trajectories", "body": {"trajectories": []}, "key": "wrong"}),
    "401 dashboard token": (401, {"path": "/v1/dashboard/runs", "method": "get"}),
    "404 unknown trajectory": (404, {"path": "/v1/feedback", "body": {"trajectory_id": "nope", "rating": 1}}),
    "404 unknown response id": (404, {"path": "/v1/feedback", "body": {"response_id": "nope", "rating": 1}}),
    "404 no such route": (404, {"path": "/v1/nope", "body": {}}),
    "413 body too large": (413, {"path": "/v1/trajectories", "body": {"trajectories": "x" * 5000}}),
    "415 not JSON": (415, {"path": "/v1/trajectories", "body": {}, "headers": {"Content-Type": "text/plain"}}),
    "422 invalid batch": (422, {"path": "/v1/trajectories", "body": {"trajectories": "x"}}),
    "422 feedback names no target": (422, {"path": "/v1/feedback", "body": {"rating": 1}}),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_collector_errors_parse_as_openai_errors(http: TestClient, case: str) -> None:
    status, call = CASES[case]
    e = _openai_error(http, **call)
    assert (e.status_code, e.type) == (status, "invalid_request_error")
    assert isinstance(e.body, dict) and e.body["message"] and e.code


@pytest.mark.parametrize("path, method, status", [("/v1/nope", "get", 404), ("/v1/feedback", "get", 405)])
def test_the_gateways_routing_refusals_parse_as_openai_errors(path: str, method: str, status: int,
                                                              tmp_path: Path) -> None:
    """The gateway's control API answered an unknown path or a wrong method with FastAPI's `{"detail": ...}`."""
    from server import GatewaySettings, create_gateway

    gw = create_gateway(GatewaySettings(admin_token=ADMIN, state_dir=tmp_path), "http://127.0.0.1:9")
    with TestClient(gw) as http:
        e = _openai_error(http, path, method=method)
    assert (e.status_code, e.type) == (status, "invalid_request_error")
    assert path in str(e.message)


def test_feedback_without_a_target_says_what_to_send(http: TestClient) -> None:
    e = _openai_error(http, "/v1/feedback", {"rating": 1})
    assert "exactly one of trajectory_id" in str(e.body["message"])  # type: ignore[index]


def test_an_unexpected_failure_is_a_500_in_the_same_shape(http: TestClient, monkeypatch: pytest.MonkeyPatch) -> None:
    def broken(_self: Store) -> None:
        raise RuntimeError("boom")

    monkeypatch.setattr(Store, "stats", broken)
    r = http.get("/v1/stats")
    assert r.status_code == 500 and r.json()["error"]["type"] == "server_error" and "boom" not in r.text


def test_the_store_looks_up_a_response_id_once_and_the_app_never(http: TestClient, monkeypatch: pytest.MonkeyPatch) -> None:
    t = Trajectory(id="cap-1", task_id="t", model="policy", messages=[Message(role="user", content="hi")],
                   metadata={wire.RESPONSE_IDS_KEY: ["chatcmpl-1"]})
    http.app.state.store.add_trajectories([t])  # type: ignore[attr-defined]
    monkeypatch.setattr(Store, "resolve_response", lambda *_: pytest.fail("looked up outside add_feedback"))
    r = http.post("/v1/feedback", json={"response_id": "chatcmpl-1", "rating": 1}, headers={"X-API-Key": KEY})
    assert r.status_code == 200 and r.json()["trajectory_id"] == "cap-1"


@pytest.fixture
def store_with_capture(http: TestClient) -> Store:
    store: Store = http.app.state.store  # type: ignore[attr-defined]
    store.add_trajectories([Trajectory(id="cap-2", task_id="t", model="policy", messages=[Message(role="user", content="q")],
                                       metadata={wire.RESPONSE_IDS_KEY: ["chatcmpl-2"]})])
    return store


def test_store_returns_the_trajectory_a_response_id_joined(store_with_capture: Store) -> None:
    assert store_with_capture.add_feedback(Feedback(response_id="chatcmpl-2", rating=-1))[1] == "cap-2"


def test_the_gateway_relays_the_collectors_error_message() -> None:
    """The gateway's `POST /v1/feedback` reads the collector's refusal in the same shape it answers in."""
    from types import SimpleNamespace

    from fastapi import FastAPI

    from server._collector_link import CollectorLink
    from server._feedback import feedback_router

    refusal = wire.error_body(422, "invalid feedback: rating: too high. Nothing was stored.", code="invalid_body")
    link = CollectorLink("http://collector", None, transport=httpx.MockTransport(lambda _r: httpx.Response(422, json=refusal)))
    app = FastAPI()
    app.include_router(feedback_router(SimpleNamespace(keys=None, capture=None, collector_link=link)))  # type: ignore[arg-type]
    with TestClient(app) as c:
        r = c.post("/v1/feedback", json={"response_id": "chatcmpl-1", "rating": 1})
    assert r.status_code == 400 and r.json()["error"]["message"] == f"The collector refused the feedback: {refusal['error']['message']}"
