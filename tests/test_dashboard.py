"""The dashboard's data endpoints and page on the collector's real database (SQLite; the Postgres path shares
the same queries through `any_db_url`), and its auth. The page in a real browser on a real loop is in
`test_dashboard_browser.py`."""

from __future__ import annotations

import socket
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from collector import CollectorSettings, create_app, export, open_store, record_event
from sdk import Feedback, Message, Outcome, Step, Trajectory

TOKEN = "dash-token"
AUTH = {"Authorization": f"Bearer {TOKEN}"}


def _t(i: int, *, app: str, version: str, task: str, success: bool | None, text: str = "compute") -> Trajectory:
    return Trajectory(
        id=f"d-{app}-{version}-{i}", app=app, task_id=f"{task}:{i}", model="policy", served_version=version,
        messages=[Message(role="user", content=f"{text} {i}"), Message(role="assistant", content=str(i))],
        steps=[Step(index=0, action=str(i), observation="ok", generate_seconds=0.2 + i / 100, execute_seconds=0.05)],
        outcome=None if success is None else Outcome(success=success, reward=1.0 if success else 0.0),
        end_reason="done")


@pytest.fixture
def client(any_db_url: str) -> Iterator[TestClient]:
    with TestClient(create_app(CollectorSettings(db_url=any_db_url, admin_token=TOKEN))) as c:
        yield c


def test_the_page_is_served_without_data_and_every_data_endpoint_needs_the_admin_token(client: TestClient) -> None:
    page = client.get("/dashboard")
    assert page.status_code == 200 and "text/html" in page.headers["content-type"]
    assert '<script src="/dashboard/static/dashboard.js">' in page.text and "http" not in page.text.replace(
        "http://www.w3.org", "")  # nothing loaded from elsewhere
    js = client.get("/dashboard/static/dashboard.js")
    assert js.status_code == 200 and "window.__dashboard" in js.text and "https://" not in js.text
    assert client.get("/dashboard/static/../_db.py").status_code == 404
    for ep in ("versions", "live", "runs", "data", "health"):
        assert client.get(f"/v1/dashboard/{ep}").status_code == 401
        assert client.get(f"/v1/dashboard/{ep}", headers={"Authorization": "Bearer nope"}).status_code == 401
        assert client.get(f"/v1/dashboard/{ep}", headers=AUTH).status_code == 200
    r = client.get("/v1/dashboard/live?window=3weeks", headers=AUTH)
    assert r.status_code == 400 and "30m, 1h, 24h or 7d" in r.json()["error"]["message"]


def test_without_an_admin_token_the_dashboard_says_how_to_turn_it_on(db_url: str) -> None:
    with TestClient(create_app(CollectorSettings(db_url=db_url))) as c:
        r = c.get("/v1/dashboard/live", headers=AUTH)
    assert r.status_code == 503 and "LOOPLIFT_ADMIN_TOKEN" in r.json()["error"]["message"]


def test_settings_read_the_admin_token_file_and_the_gateway_url(tmp_path: Path) -> None:
    (tmp_path / "admin.token").write_text("from-file\n")
    s = CollectorSettings.from_env({"LOOPLIFT_HOME": str(tmp_path), "LOOPLIFT_GATEWAY_URL": "http://127.0.0.1:9"})
    assert s.admin_token is not None and s.admin_token.get_secret_value() == "from-file"
    assert s.gateway_url == "http://127.0.0.1:9" and "from-file" not in repr(s)
    s = CollectorSettings.from_env({"LOOPLIFT_HOME": str(tmp_path), "LOOPLIFT_ADMIN_TOKEN": "env"})
    assert s.admin_token is not None and s.admin_token.get_secret_value() == "env"


def test_live_data_and_runs_come_from_the_collector(client: TestClient, any_db_url: str, tmp_path: Path) -> None:
    store = open_store(any_db_url)
    try:
        trajs = ([_t(i, app="shop", version="policy-v1", task="arith", success=i < 6) for i in range(10)]
                 + [_t(i, app="shop", version="policy-v2", task="extraction", success=i < 9) for i in range(10)]
                 + [_t(i, app="mail", version="policy-v2", task="arith", success=None,
                       text="write to bob.jones@example.org") for i in range(3)])
        store.add_trajectories(trajs)
        store.add_feedback(Feedback(trajectory_id="d-mail-policy-v2-0", rating=0.5))
        store.add_feedback(Feedback(trajectory_id="d-mail-policy-v2-1", rating=-1.0))
    finally:
        store.close()
    export(any_db_url, tmp_path / "sft.jsonl", min_reward=1.0)
    record_event(any_db_url, "retrain_run", {
        "run_id": "r1", "status": "promoted", "trigger": "cron '0 3 * * *'", "reason": "better", "candidate": "policy-v2",
        "serving": "policy-v1", "candidate_success": 0.9, "serving_success": 0.6, "exported": 15,
        "finished_at": "2026-01-01T03:05:00+00:00", "gate": {"n": 100, "b": 32, "c": 2, "p_value": 1e-8}}, key="r1")

    live = client.get("/v1/dashboard/live?window=1h", headers=AUTH).json()
    by_version = {g["key"]: g for g in live["by_version"]}
    assert (by_version["policy-v1"]["successes"], by_version["policy-v1"]["with_outcome"]) == (6, 10)
    assert by_version["policy-v2"]["n"] == 13 and by_version["policy-v2"]["success_rate"] == 0.9
    assert by_version["policy-v2"]["with_feedback"] == 2 and by_version["policy-v2"]["mean_feedback"] == -0.25
    lo, hi = by_version["policy-v1"]["ci"]
    assert lo < 0.6 < hi
    assert {g["key"]: g["n"] for g in live["by_task_group"]} == {"arith": 13, "extraction": 10}
    assert {g["key"]: g["n"] for g in live["by_app"]} == {"shop": 20, "mail": 3}
    assert live["bucket_s"] == 300 and {p["key"] for p in live["series"]} == {"policy-v1", "policy-v2"}

    data = client.get("/v1/dashboard/data", headers=AUTH).json()
    assert sum(r["n"] for r in data["per_app_day"]) == 23
    assert data["pii"] == {"EMAIL": 3} and data["trajectories_with_pii"] == 3  # counted at ingest, replaced before storage
    assert data["score_sources"]["reward"] == 20 and data["score_sources"]["feedback"] == 2
    (exp,) = data["exports"]
    assert exp["format"] == "sft" and exp["count"] == 15 and exp["matched"] == 15

    (run,) = client.get("/v1/dashboard/runs", headers=AUTH).json()
    assert run["status"] == "promoted" and run["candidate_ci"][0] < 0.9 < run["candidate_ci"][1]

    health = client.get("/v1/dashboard/health", headers=AUTH).json()
    lat = {a["app"]: a for a in health["latency"]["by_app"]}
    assert lat["shop"]["steps"] == 20 and lat["shop"]["execute_p50"] == pytest.approx(0.05)
    assert 0.2 <= lat["shop"]["generate_p50"] <= 0.3
    assert health["langfuse"] == {"enabled": False} and health["gateway"]["status"] == "not configured"


def test_a_gateway_that_does_not_answer_is_a_reason_not_a_failure(db_url: str) -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))  # bound, never listening: connections are refused
        url = f"http://127.0.0.1:{s.getsockname()[1]}"
        with TestClient(create_app(CollectorSettings(db_url=db_url, admin_token=TOKEN, gateway_url=url))) as c:
            versions: dict[str, Any] = c.get("/v1/dashboard/versions", headers=AUTH).json()
            health: dict[str, Any] = c.get("/v1/dashboard/health", headers=AUTH).json()
    assert "unreachable" in versions["gateway"]["error"] and url in versions["gateway"]["error"]
    assert health["gateway"]["status"] == "unreachable" and health["collector"]["status"] == "ok"


@pytest.mark.slow
def test_a_real_gateway_whose_vllm_is_down_shows_as_unavailable_with_its_errors(db_url: str, tmp_path: Path) -> None:
    import httpx

    from server import GatewaySettings, start_gateway_in_thread

    with socket.socket() as dead:
        dead.bind(("127.0.0.1", 0))
        vllm = f"http://127.0.0.1:{dead.getsockname()[1]}"
        with start_gateway_in_thread(GatewaySettings(admin_token=TOKEN, state_dir=tmp_path / "gw"), vllm, port=0) as gw:
            r = httpx.post(gw.url + "/v1/chat/completions", json={"model": "policy", "messages": [{"role": "user",
                                                                                               "content": "hi"}]})
            assert r.status_code == 503  # the gateway answers; vLLM does not
            with TestClient(create_app(CollectorSettings(db_url=db_url, admin_token=TOKEN, gateway_url=gw.url))) as c:
                health = c.get("/v1/dashboard/health", headers=AUTH).json()
                versions = c.get("/v1/dashboard/versions", headers=AUTH).json()
    g = health["gateway"]
    assert g["status"] == "unavailable" and "ConnectError" in g["health"]["vllm"]
    assert g["metrics"]["upstream_errors"] == 1.0  # read from the gateway's own /metrics
    assert "vLLM is not reachable" in versions["gateway"]["error"]


def test_replica_load_capture_drops_and_the_replica_table_come_from_a_real_gateway(db_url: str, tmp_path: Path) -> None:
    """Main's metric names (`looplift_gateway_replica_in_flight`/`_healthy`, `looplift_gateway_capture_dropped`)
    reach the health panel, and `/admin/replicas` becomes the replica table: two vLLM replicas (neither
    answering) behind a gateway with capture on."""
    from server import GatewaySettings, start_gateway_in_thread

    with socket.socket() as a, socket.socket() as b, socket.socket() as col:
        for sock in (a, b, col):
            sock.bind(("127.0.0.1", 0))
        urls = [f"http://127.0.0.1:{sock.getsockname()[1]}" for sock in (a, b)]
        settings = GatewaySettings(admin_token=TOKEN, state_dir=tmp_path / "gw", capture=True,
                                   collector_url=f"http://127.0.0.1:{col.getsockname()[1]}")
        with start_gateway_in_thread(settings, urls, port=0) as gw, \
                TestClient(create_app(CollectorSettings(db_url=db_url, admin_token=TOKEN, gateway_url=gw.url))) as c:
            g = c.get("/v1/dashboard/health", headers=AUTH).json()["gateway"]
    other = {(o["name"], tuple(sorted(o["labels"].values()))): o["value"] for o in g["metrics"]["other"]}
    for url in urls:
        assert other[("looplift_gateway_replica_in_flight", (url,))] == 0
        assert ("looplift_gateway_replica_healthy", (url,)) in other
    assert other[("looplift_gateway_capture_dropped_total", ("queue_full",))] == 0
    assert other[("looplift_gateway_capture_dropped_total", ("error",))] == 0
    assert sorted(r["url"] for r in g["replicas"]) == sorted(urls)
    assert all(set(r) >= {"url", "healthy", "in_flight", "versions"} for r in g["replicas"])


def test_sandbox_pool_snapshots_in_step_info_become_the_pool_panel(client: TestClient, any_db_url: str) -> None:
    """Per app, the newest episode's last `sandbox_pool` snapshot (through ingest and the anonymizer), next to
    its exec latency; an app whose steps carry none has no pool; a malformed snapshot is ignored."""
    def pooled(i: int, app: str, in_use: int, *, info: Any = None) -> Trajectory:
        t = _t(i, app=app, version="policy-v1", task="arith", success=True)
        snap = {"size": 4, "in_use": in_use, "idle": 4 - in_use, "resetting": 0, "starting": 0, "started": 4 + i,
                "start_failures": 1, "replaced": i}
        t.steps = [Step(index=k, action="run", observation="ok", execute_seconds=0.1 * (k + 1),
                        info={"exit_code": 0, "sandbox_pool": info if info is not None else {**snap, "in_use": in_use - k}})
                   for k in range(2)]
        return t

    store = open_store(any_db_url)
    try:
        store.add_trajectories([pooled(0, "coder", 3)])
        store.add_trajectories([pooled(1, "coder", 2)])  # newer: its last step (in_use 2 - 1) is the one shown
        store.add_trajectories([_t(0, app="chat", version="policy-v1", task="arith", success=True),
                                pooled(2, "odd", 1, info={"size": "four"})])
    finally:
        store.close()
    lat = {a["app"]: a for a in client.get("/v1/dashboard/health", headers=AUTH).json()["latency"]["by_app"]}
    assert lat["coder"]["pool"] == {"size": 4, "in_use": 1, "idle": 2, "resetting": 0, "starting": 0, "started": 5,
                                    "start_failures": 1, "replaced": 1}
    assert lat["coder"]["steps"] == 4 and lat["coder"]["execute_p95"] == pytest.approx(0.2)
    assert lat["chat"]["pool"] is None and lat["odd"]["pool"] is None


def test_the_time_series_buckets_by_five_minutes_hours_and_days(any_db_url: str) -> None:
    from datetime import timedelta

    import sqlalchemy as sa

    from collector._dashboard_data import data, live
    from collector._schema import TrajectoryRow, utcnow

    store = open_store(any_db_url)
    try:
        store.add_trajectories([_t(i, app="shop", version="policy-v1", task="arith", success=i % 2 == 0)
                                for i in range(12)])
        # Spread the rows over the last 55 minutes, 5 minutes apart: 12 five-minute buckets, one hour or two.
        base = utcnow().replace(second=0, microsecond=0) - timedelta(minutes=55)
        with store.engine.begin() as conn:
            for i in range(12):
                conn.execute(sa.update(TrajectoryRow).where(TrajectoryRow.id == f"d-shop-policy-v1-{i}")
                             .values(created_at=base + timedelta(minutes=5 * i, seconds=7 * i)))
        short = live(store, timedelta(hours=1))
        day = live(store, timedelta(hours=24))
        per_day = data(store)["per_app_day"]
    finally:
        store.close()
    assert short["bucket_s"] == 300 and len(short["series"]) == 12 and all(p["n"] == 1 for p in short["series"])
    assert [p["t"] % 300 for p in short["series"]] == [0] * 12
    assert day["bucket_s"] == 3600 and len(day["series"]) in (1, 2) and sum(p["n"] for p in day["series"]) == 12
    assert len({r["day"] for r in per_day}) in (1, 2) and sum(r["n"] for r in per_day) == 12
