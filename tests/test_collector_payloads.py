"""Malformed, oversized and odd request bodies: each gets a status that names the problem
(413 size, 415 media type or encoding, 422 content) and stores nothing; large but valid ones are
stored whole. One property per test."""

from __future__ import annotations

import gzip
import json
import sqlite3
from collections.abc import Iterator

import pytest
from fastapi.testclient import TestClient

from collector import CollectorSettings, create_app, open_store
from sdk._types import Message, Trajectory, TrajectoryBatch

JSON = {"Content-Type": "application/json"}


def traj(i: int = 1, content: str = "what is 2+2?", n: int = 2) -> Trajectory:
    msgs = [Message(role="user" if m % 2 == 0 else "assistant", content=f"{content} #{m}") for m in range(n)]
    return Trajectory(id=f"p-{i:04d}", task_id="task", model="policy", messages=msgs)


def body(*ts: Trajectory) -> bytes:
    return TrajectoryBatch(trajectories=list(ts)).model_dump_json().encode()


@pytest.fixture
def client(db_url: str) -> Iterator[TestClient]:
    with TestClient(create_app(CollectorSettings(db_url=db_url, max_body_bytes=2 * 1024 * 1024))) as c:
        yield c


def stored(db_url: str) -> int:
    with sqlite3.connect(db_url.removeprefix("sqlite:///")) as conn:
        return int(conn.execute("SELECT count(*) FROM trajectories").fetchone()[0])


def test_non_json_body_is_422_with_position(client: TestClient, db_url: str) -> None:
    r = client.post("/v1/trajectories", content=b'{"trajectories": [ {"id": oops} ]}', headers=JSON)
    assert r.status_code == 422
    assert "Invalid JSON" in r.json()["error"]["message"] and "line 1 column" in r.json()["error"]["message"]
    assert r.json()["errors"][0]["type"] == "json_invalid" and stored(db_url) == 0


def test_empty_body_is_422_saying_so(client: TestClient, db_url: str) -> None:
    r = client.post("/v1/trajectories", content=b"", headers=JSON)
    assert r.status_code == 422 and "request body is empty" in r.json()["error"]["message"]
    assert stored(db_url) == 0


@pytest.mark.parametrize("payload", [b"[]", b"null", b'"trajectories"', b"42"])
def test_json_that_is_not_an_object_is_422(client: TestClient, payload: bytes) -> None:
    r = client.post("/v1/trajectories", content=payload, headers=JSON)
    assert r.status_code == 422 and "Input should be an object" in r.json()["error"]["message"]


def test_invalid_utf8_is_422_naming_the_byte(client: TestClient, db_url: str) -> None:
    good = body(traj(1, content="caf\u00e9"))
    at = good.index("caf\u00e9".encode()) + 3
    bad = good[:at] + b"\xe9" + good[at + 2 :]  # latin-1 é where UTF-8 needs two bytes
    r = client.post("/v1/trajectories", content=bad, headers=JSON)
    assert r.status_code == 422
    assert f"not valid UTF-8 (byte {at}" in r.json()["error"]["message"] and "Nothing was stored" in r.json()["error"]["message"]
    assert stored(db_url) == 0


def test_lone_surrogate_escape_is_422_not_a_storage_error(client: TestClient, db_url: str) -> None:
    # Valid-looking JSON whose string cannot be encoded as UTF-8; it must not reach the database.
    bad = body(traj(1, content="XSURROGATEX")).replace(b"XSURROGATEX", b"\\ud800 alone")
    r = client.post("/v1/trajectories", content=bad, headers=JSON)
    assert r.status_code == 422 and "Invalid JSON" in r.json()["error"]["message"] and stored(db_url) == 0
    ok = body(traj(2, content="XPAIRX")).replace(b"XPAIRX", b"\\ud83d\\ude00 paired")
    assert client.post("/v1/trajectories", content=ok, headers=JSON).status_code == 200
    assert open_store(db_url).get("p-0002").messages[0].content == "\U0001F600 paired #0"  # type: ignore[union-attr]


@pytest.mark.parametrize(
    "headers,needle",
    [
        ({"Content-Type": "text/plain"}, "Content-Type 'text/plain' is not accepted"),
        ({"Content-Type": "application/x-www-form-urlencoded"}, "application/json"),
        ({"Content-Type": "multipart/form-data; boundary=x"}, "multipart/form-data"),
        ({"Content-Type": "application/json; charset=latin-1"}, "must be UTF-8"),
        ({"Content-Type": "application/json", "Content-Encoding": "gzip"}, "Content-Encoding 'gzip' is not supported"),
    ],
)
def test_wrong_media_type_or_encoding_is_415(client: TestClient, db_url: str, headers: dict[str, str], needle: str) -> None:
    payload = gzip.compress(body(traj())) if "Content-Encoding" in headers else body(traj())
    r = client.post("/v1/trajectories", content=payload, headers=headers)
    assert r.status_code == 415 and needle in r.json()["error"]["message"], r.text
    assert stored(db_url) == 0
    r = client.post("/v1/feedback", content=b'{"trajectory_id": "p-0001"}', headers=headers)
    assert r.status_code == 415


@pytest.mark.parametrize("headers", [{}, JSON, {"Content-Type": "application/json; charset=UTF-8"},
                                     {"Content-Type": "application/vnd.looplift+json"}])
def test_json_media_types_and_no_content_type_are_accepted(client: TestClient, headers: dict[str, str]) -> None:
    r = client.post("/v1/trajectories", content=body(traj()), headers=headers)
    assert r.status_code == 200 and r.json()["accepted"] == 1


@pytest.mark.slow
def test_ten_thousand_messages_within_the_cap_are_stored_whole(client: TestClient, db_url: str) -> None:
    big = traj(1, content="step", n=10_000)
    payload = body(big)
    assert len(payload) < 2 * 1024 * 1024
    r = client.post("/v1/trajectories", content=payload, headers=JSON)
    assert r.status_code == 200 and r.json()["accepted"] == 1
    got = open_store(db_url).get("p-0001")
    assert got is not None and len(got.messages) == 10_000 and got.messages[-1].content == "step #9999"
    with sqlite3.connect(db_url.removeprefix("sqlite:///")) as conn:
        assert conn.execute("SELECT n_messages FROM trajectories").fetchone()[0] == 10_000


def test_more_than_1000_trajectories_in_a_batch_is_422_naming_the_limit(client: TestClient, db_url: str) -> None:
    payload = json.dumps({"trajectories": [json.loads(traj(i).model_dump_json()) for i in range(1001)]})
    r = client.post("/v1/trajectories", content=payload, headers=JSON)
    assert r.status_code == 422 and "trajectories" in r.json()["error"]["message"] and "at most 1000" in r.json()["error"]["message"]
    assert stored(db_url) == 0


def test_body_over_the_cap_is_413_naming_the_limit(client: TestClient, db_url: str) -> None:
    r = client.post("/v1/trajectories", content=body(traj(1, content="x" * 2_200_000)), headers=JSON)
    assert r.status_code == 413 and "limit of 2097152 bytes" in r.json()["error"]["message"]
    r = client.post("/v1/feedback", content=json.dumps({"trajectory_id": "p", "text": "y" * 2_200_000}), headers=JSON)
    assert r.status_code == 413 and stored(db_url) == 0


def test_json_nested_too_deep_is_422(client: TestClient, db_url: str) -> None:
    t = json.loads(traj().model_dump_json())
    payload = json.dumps({"trajectories": [t]}).replace('"metadata": {}', '"metadata": {"a": ' + "[" * 5000 + "]" * 5000 + "}")
    r = client.post("/v1/trajectories", content=payload, headers=JSON)
    assert r.status_code == 422 and "recursion limit" in r.json()["error"]["message"] and stored(db_url) == 0


def test_duplicate_ids_inside_one_batch_store_the_first(client: TestClient, db_url: str) -> None:
    r = client.post("/v1/trajectories", content=body(traj(1, content="first"), traj(2), traj(1, content="second")), headers=JSON)
    assert r.status_code == 200
    assert r.json() == {"accepted": 2, "duplicates": 1, "ids": ["p-0001", "p-0002", "p-0001"]}
    assert open_store(db_url).get("p-0001").messages[0].content == "first #0"  # type: ignore[union-attr]
    assert stored(db_url) == 2


def test_bad_field_in_feedback_is_422_naming_it(client: TestClient) -> None:
    client.post("/v1/trajectories", content=body(traj()), headers=JSON)
    r = client.post("/v1/feedback", json={"trajectory_id": "p-0001", "rating": 3})
    assert r.status_code == 422 and "rating" in r.json()["error"]["message"] and "less than or equal to 1" in r.json()["error"]["message"]
    r = client.post("/v1/feedback", content=b"\xff", headers=JSON)
    assert r.status_code == 422 and "not valid UTF-8" in r.json()["error"]["message"]
