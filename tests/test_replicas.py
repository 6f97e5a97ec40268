"""The gateway over two real vLLM CPU replicas: routing, affinity, versions on all, a refusal on one, and a replica
SIGKILLed under load (issue 12).

Replica A is the session's `vllm_server` (passed as a URL: a remote one to the gateway, never killed here);
replica B is this module's own vLLM, passed as a `LocalReplica` so that the gateway restarts it when it dies.
The kill test runs last and leaves B restarted. Routing without HTTP (least outstanding, affinity, exclusion)
is tested on `ReplicaSet.pick` directly at the top.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import time
from pathlib import Path
from typing import Any, Callable, Iterator

import httpx
import pytest
from typer.testing import CliRunner

from _adapters import write_adapter
from _resources import needs
from _vllm import CHAT, LONG_STREAM, slow_reader, sse_events, sse_lines, start_warm_vllm
from _wait import wait_until
from server import (
    AdminClient,
    GatewayHandle,
    GatewaySettings,
    LocalReplica,
    UpstreamError,
    VLLMConfig,
    start_gateway_in_thread,
)
from sdk.infra import ServerThread, start_server_thread
from server._cli import app as server_cli
from test_server_proxy import FakeVLLM
from server._replicas import ReplicaSet

ADMIN = "test-admin-token"
KILL_REQUESTS = 500
KILL_CONCURRENCY = 16
#: B dies once this many answers are in: early, so that B is still generating the long stream pinned to it.
KILL_AFTER = 20


# ---- routing, no HTTP ------------------------------------------------------------------------------
@pytest.fixture
def three(tmp_path: Path) -> ReplicaSet:
    rs = ReplicaSet(GatewaySettings(admin_token="t", state_dir=tmp_path), ["http://a", "http://b", "http://c"])
    for r in rs.replicas:
        rs._mark_up(r)
    return rs


def test_pick_least_outstanding(three: ReplicaSet) -> None:
    a, b, c = three.replicas
    a.in_flight, b.in_flight, c.in_flight = 3, 1, 2
    assert three.pick(None) is b


def test_pick_spreads_ties(three: ReplicaSet) -> None:
    assert {three.pick(None).url for _ in range(3)} == {"http://a", "http://b", "http://c"}  # type: ignore[union-attr]


def test_session_sticks_while_healthy_then_moves(three: ReplicaSet) -> None:
    first = three.pick("s1")
    assert first is not None
    first.in_flight = 10  # busier than the others: affinity wins over load
    assert three.pick("s1") is first
    three.mark_down(first, "killed")
    moved = three.pick("s1")
    assert moved is not None and moved is not first
    assert three.pick("s1") is moved


def test_retry_excludes_tried_and_ends(three: ReplicaSet) -> None:
    tried: list[Any] = []
    for _ in range(3):
        r = three.pick("s", tried)
        assert r is not None and r not in tried
        tried.append(r)
    assert three.pick("s", tried) is None
    assert not three.others_up(tried)


def test_local_replicas_get_their_own_cores() -> None:
    from server._vllm import replica_env

    assert replica_env(0, 1) == {}  # one replica keeps vLLM's own binding (every core)
    if len(os.sched_getaffinity(0)) >= 2 and not Path("/dev/nvidiactl").exists():
        a, b = (set(replica_env(i, 2)["VLLM_CPU_OMP_THREADS_BIND"].split(",")) for i in (0, 1))
        assert a and b and not a & b


# ---- the routed proxy against two fake vLLMs (tests/test_server_proxy.py's), no lock needed --------------
@pytest.fixture
def fakes() -> Iterator[list[tuple[FakeVLLM, ServerThread]]]:
    pairs = []
    try:
        for name in ("a", "b"):
            f = FakeVLLM()
            pairs.append((f, start_server_thread(f.app, "127.0.0.1", 0, name=f"fake-vllm-{name}", log_level="critical")))
        yield pairs
    finally:
        for _, t in pairs:
            t.stop()


def _fake_gateway(fakes: list[tuple[FakeVLLM, ServerThread]], tmp_path: Path, interval: float) -> GatewayHandle:
    settings = GatewaySettings(admin_token=ADMIN, state_dir=tmp_path / "state", replica_health_interval_s=interval)
    gw = start_gateway_in_thread(settings, [t.url for _, t in fakes], port=0)
    with AdminClient(gw.url, ADMIN) as a:
        a.promote(a.load(str(write_adapter(tmp_path / "adapter"))).name)
    return gw


def test_request_to_a_dead_replica_is_retried_on_the_other(fakes: list[tuple[FakeVLLM, ServerThread]],
                                                            tmp_path: Path) -> None:
    (fa, ta), (fb, tb) = fakes
    with _fake_gateway(fakes, tmp_path, interval=3600) as gw, httpx.Client(base_url=gw.url, timeout=30) as c:
        assert all("policy-v1" in f.loaded for f in (fa, fb))  # loaded on both before the flip
        tb.stop()  # connections to B are refused from now on; the watcher is asleep, only requests can tell
        answers = [_chat(c) for _ in range(6)]
        assert [r.status_code for r in answers] == [200] * 6
        assert {r.headers["x-looplift-replica"] for r in answers} == {ta.url}
        assert "looplift_gateway_retries_total" in (m := c.get("/metrics").text)
        assert any(line.startswith("looplift_gateway_retries_total") and float(line.split()[-1]) >= 1
                   for line in m.splitlines())
        b = next(r for r in AdminClient(gw.url, ADMIN).replicas() if r.url == tb.url)
        assert not b.healthy and "failed" in (b.detail or "")


def test_unload_reaches_every_replica(fakes: list[tuple[FakeVLLM, ServerThread]], tmp_path: Path) -> None:
    """Mutant: an unload sent to one upstream only (the other replica keeps the adapter's memory: issue 22's leak,
    halved)."""
    with _fake_gateway(fakes, tmp_path, interval=3600) as gw, AdminClient(gw.url, ADMIN) as a:
        v2 = a.load(str(write_adapter(tmp_path / "adapter-2"))).name
        assert all(v2 in f.loaded for f, _ in fakes)
        assert a.unload(v2).state == "unloaded"
        assert [v2 in f.loaded for f, _ in fakes] == [False, False]
        assert [f.calls.count(f"unload {v2}") for f, _ in fakes] == [1, 1]
        assert all(v2 not in r.versions for r in a.replicas())


def test_stream_cut_by_its_replica_ends_with_an_error_event_then_it_rejoins_with_the_adapter(
    fakes: list[tuple[FakeVLLM, ServerThread]], tmp_path: Path,
) -> None:
    (fa, _), (fb, tb) = fakes
    with _fake_gateway(fakes, tmp_path, interval=0.1) as gw, httpx.Client(base_url=gw.url, timeout=30) as c:
        session = next(s for s in (f"s{i}" for i in range(10))
                       if _chat(c, session=s).headers["x-looplift-replica"] == tb.url)
        fb.release_streams.set()
        fb.loaded.clear()  # as if B had restarted empty: it must get the serving adapter back before it rejoins
        body = {"model": "policy", "messages": CHAT, "stream": True, "cut": True}
        r = c.post("/v1/chat/completions", json=body, headers={"X-Looplift-Session": session})
        events = sse_events(r.text.split("\n"))
        assert r.headers["x-looplift-replica"] == tb.url and events[-1] != "[DONE]"
        err = json.loads(events[-1])["error"]
        assert tb.url in err["message"] and err["code"] == "upstream_error", err
        wait_until(lambda: next(x for x in AdminClient(gw.url, ADMIN).replicas() if x.url == tb.url).healthy,
                   "B back in")
        assert "policy-v1" in fb.loaded


# ---- two real replicas ------------------------------------------------------------------------------
@pytest.fixture(scope="module")
@needs("vllm")
def replica_b(looplift_model_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalReplica]:
    log = tmp_path_factory.mktemp("replica_b") / "vllm.log"
    server = start_warm_vllm(looplift_model_dir, log)
    local = LocalReplica(VLLMConfig(model_dir=looplift_model_dir, log_path=log), server)
    try:
        yield local
    finally:
        local.stop()


@pytest.fixture
def gateway(vllm_server: Any, replica_b: LocalReplica, tmp_path: Path) -> Iterator[GatewayHandle]:
    settings = GatewaySettings(admin_token=ADMIN, state_dir=tmp_path / "state")
    gw = start_gateway_in_thread(settings, [vllm_server.url, replica_b], port=0)
    try:
        yield gw
    finally:
        gw.stop()
        for url in (vllm_server.url, replica_b.url):  # leave the session vLLM as other tests expect it
            for name in _served(url) - {"policy-v0"}:
                httpx.post(f"{url}/v1/unload_lora_adapter", json={"lora_name": name}, timeout=30)


@pytest.fixture
def admin(gateway: GatewayHandle) -> Iterator[AdminClient]:
    with AdminClient(gateway.url, ADMIN) as a:
        yield a


def _served(url: str) -> set[str]:
    try:
        return {m["id"] for m in httpx.get(f"{url}/v1/models", timeout=10).json()["data"]}
    except httpx.HTTPError:
        return set()


def _chat(c: httpx.Client, session: str | None = None, **extra: Any) -> httpx.Response:
    headers = {"X-Looplift-Session": session} if session else {}
    return c.post("/v1/chat/completions", json={"model": "policy", "messages": CHAT, "max_tokens": 4, **extra},
                  headers=headers)


@pytest.mark.vllm
def test_admin_replicas_lists_both(gateway: GatewayHandle, admin: AdminClient, vllm_server: Any,
                                   replica_b: LocalReplica) -> None:
    view = {r.url: r for r in admin.replicas()}
    assert set(view) == {vllm_server.url, replica_b.url}
    assert view[replica_b.url].pid == replica_b.pid and view[vllm_server.url].pid is None
    assert all(r.healthy and "policy-v0" in r.versions for r in view.values())
    res = CliRunner().invoke(server_cli, ["replicas", "--url", gateway.url, "--token", ADMIN, "--json"])
    assert res.exit_code == 0, res.output
    assert {r["url"]: r["healthy"] for r in json.loads(res.output)} == {vllm_server.url: True, replica_b.url: True}


@pytest.mark.vllm
def test_version_loads_on_every_replica_then_the_alias_flips(
    gateway: GatewayHandle, admin: AdminClient, vllm_server: Any, replica_b: LocalReplica,
    looplift_new_adapter: Callable[[int], Path],
) -> None:
    v = admin.load(str(looplift_new_adapter(0))).name
    assert all(v in _served(u) for u in (vllm_server.url, replica_b.url))
    assert all(v in r.versions for r in admin.replicas())
    admin.promote(v)
    with httpx.Client(base_url=gateway.url, timeout=120) as c:
        answers = [_chat(c) for _ in range(6)]
    assert {r.status_code for r in answers} == {200}
    assert {r.json()["model"] for r in answers} == {v}
    # Without a session, sequential requests spread over both replicas.
    assert {r.headers["x-looplift-replica"] for r in answers} == {vllm_server.url, replica_b.url}


@pytest.mark.vllm
def test_session_stays_on_its_replica(gateway: GatewayHandle) -> None:
    with httpx.Client(base_url=gateway.url, timeout=120) as c:
        for s in ("episode-1", "episode-2"):
            replicas = {_chat(c, session=s).headers["x-looplift-replica"] for _ in range(4)}
            assert len(replicas) == 1, (s, replicas)


@pytest.mark.vllm
def test_refusal_on_one_replica_unloads_everywhere_and_keeps_serving(
    gateway: GatewayHandle, admin: AdminClient, vllm_server: Any, replica_b: LocalReplica,
    looplift_new_adapter: Callable[[int], Path],
) -> None:
    serving = admin.versions().serving
    # Behind the gateway's back, B already has an adapter under the name the next load uses: B refuses it.
    httpx.post(f"{replica_b.url}/v1/load_lora_adapter", timeout=60,
               json={"lora_name": "policy-v9", "lora_path": str(looplift_new_adapter(1))}).raise_for_status()
    with pytest.raises(UpstreamError, match=f"replica {replica_b.url}.*nothing changed"):
        admin.load(str(looplift_new_adapter(0)), name="policy-v9")
    assert "policy-v9" not in _served(vllm_server.url)  # loaded on A, then unloaded again
    assert "policy-v9" not in {v.name for v in admin.versions().versions}
    assert admin.versions().serving == serving
    with httpx.Client(base_url=gateway.url, timeout=120) as c:
        assert _chat(c).status_code == 200


@pytest.mark.vllm
@pytest.mark.slow
def test_sigkill_one_of_two_replicas_under_load_fails_no_request(
    gateway: GatewayHandle, admin: AdminClient, replica_b: LocalReplica, looplift_new_adapter: Callable[[int], Path],
) -> None:
    v = admin.load(str(looplift_new_adapter(0))).name
    admin.promote(v)
    old_pid = replica_b.pid
    # A long stream pinned to B (by its session), not read until B is dead.
    with httpx.Client(base_url=gateway.url, timeout=120) as c:
        session = next(s for s in (f"pin-{i}" for i in range(40))
                       if _chat(c, session=s).headers["x-looplift-replica"] == replica_b.url)
    reader = slow_reader(gateway.url)
    stream_cm = reader.stream("POST", "/v1/chat/completions", json=LONG_STREAM,
                              headers={"X-Looplift-Session": session})
    stream = stream_cm.__enter__()
    assert stream.headers["x-looplift-replica"] == replica_b.url

    results: list[dict[str, Any]] = []
    killed_at: list[float] = []

    async def worker(ac: httpx.AsyncClient, queue: asyncio.Queue[int]) -> None:
        while True:
            try:
                i = queue.get_nowait()
            except asyncio.QueueEmpty:
                return
            if len(results) >= KILL_AFTER and not killed_at:
                os.killpg(replica_b.pid, signal.SIGKILL)  # the API server, engine core and worker at once
                killed_at.append(time.monotonic())
            rec: dict[str, Any] = {"i": i, "after_kill": bool(killed_at)}
            try:
                r = await ac.post("/v1/chat/completions",
                                  json={"model": "policy", "messages": CHAT, "max_tokens": 8, "ignore_eos": True})
                rec.update(status=r.status_code, replica=r.headers.get("x-looplift-replica"),
                           model=r.json().get("model") if r.status_code == 200 else r.text[:300])
            except Exception as e:  # a failed request is exactly what this test looks for
                rec.update(status=None, error=repr(e))
            results.append(rec)

    async def main() -> float:
        queue: asyncio.Queue[int] = asyncio.Queue()
        for i in range(KILL_REQUESTS):
            queue.put_nowait(i)
        t0 = time.monotonic()
        async with httpx.AsyncClient(base_url=gateway.url, timeout=120,
                                     limits=httpx.Limits(max_connections=KILL_CONCURRENCY)) as ac:
            await asyncio.wait_for(asyncio.gather(*(worker(ac, queue) for _ in range(KILL_CONCURRENCY))), 600)
        return time.monotonic() - t0

    elapsed = asyncio.run(main())
    metrics = httpx.get(f"{gateway.url}/metrics", timeout=10).text
    retried = sum(float(line.split()[-1]) for line in metrics.splitlines()
                  if line.startswith("looplift_gateway_retries_total"))
    failed = [r for r in results if r["status"] != 200]
    by_replica: dict[str, int] = {}
    for r in results:
        by_replica[str(r.get("replica"))] = by_replica.get(str(r.get("replica")), 0) + 1

    # The stream on B ends with an SSE error event that names B, not with [DONE].
    events = sse_events(list(sse_lines(stream)))
    stream_cm.__exit__(None, None, None)
    reader.close()

    print(f"\nreplica kill: {len(results)} non-stream requests at c={KILL_CONCURRENCY}, B SIGKILLed after "
          f"{KILL_AFTER} answers; failed={len(failed)} retried={retried:.0f} in {elapsed:.1f} s; "
          f"answered by {by_replica}")
    assert len(results) == KILL_REQUESTS and killed_at
    assert not failed, failed[:5]
    assert {r["model"] for r in results} == {v}
    assert retried >= 1  # B had requests in flight when it died: they were answered by A
    assert not [r for r in results if r["after_kill"] and r["replica"] == replica_b.url]  # B was out at once
    assert events and events[-1] != "[DONE]", events[-3:]
    err = json.loads(events[-1])["error"]
    assert replica_b.url in err["message"] and err["code"] == "upstream_error", err

    # B is restarted by the gateway and rejoins only with the serving version loaded on it.
    t_kill = killed_at[0]

    def b_back() -> bool:
        b = next(r for r in admin.replicas() if r.url == replica_b.url)
        if b.healthy:
            assert v in b.versions, b  # never healthy without the serving adapter
        return b.healthy

    wait_until(b_back, "replica B restarted and healthy again", timeout=300, every=0.5)
    print(f"replica B back {time.monotonic() - t_kill:.0f} s after the kill (restart + adapter load)")
    b = next(r for r in admin.replicas() if r.url == replica_b.url)
    assert b.restarts == 1 and b.pid != old_pid and v in _served(replica_b.url)
    with httpx.Client(base_url=gateway.url, timeout=300) as c:
        r = _chat(c, session=f"after-{time.time()}")  # whichever replica: both serve v now
        assert r.status_code == 200 and r.json()["model"] == v


@pytest.mark.parametrize("args, message", [
    (["--replicas", "0"], "--replicas 0 needs at least one --upstream URL"),
    (["--upstream", "gpu-node:8000"], "must be a URL like http://"),
])
def test_up_refuses_bad_replica_flags_before_starting_anything(args: list[str], message: str) -> None:
    from looplift._cli import app as looplift_cli

    res = CliRunner().invoke(looplift_cli, ["up", *args, "--gateway-port", "0", "--collector-port", "0"])
    assert res.exit_code == 2 and message in res.output, res.output
