"""Gateway tests against a real vLLM CPU server (session fixture `vllm_server`) over real HTTP."""

from __future__ import annotations

import asyncio
import json
import shutil
import struct
import time
from pathlib import Path
from typing import Any, Callable, Iterator

import httpx
import openai
import pytest
from prometheus_client.parser import text_string_to_metric_families

from _vllm import CHAT, LONG_STREAM, slow_reader, sse_events, sse_lines
from _wait import wait_until
from server import (
    AdapterInvalidError,
    AdminAuthError,
    AdminClient,
    GatewayHandle,
    GatewaySettings,
    NothingToRollBackError,
    UpstreamError,
    VersionNotFoundError,
    start_gateway_in_thread,
)

pytestmark = pytest.mark.vllm

ADMIN = "test-admin-token"


@pytest.fixture
def client(gateway: GatewayHandle) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=gateway.url, timeout=120) as c:
        yield c


@pytest.fixture
def admin(gateway: GatewayHandle) -> Iterator[AdminClient]:
    with AdminClient(gateway.url, ADMIN) as a:
        yield a


def _vllm_models(vllm_server: Any) -> set[str]:
    return {m["id"] for m in httpx.get(f"{vllm_server.url}/v1/models", timeout=10).json()["data"]}


def _chat(client: httpx.Client, model: str = "policy", **extra: Any) -> httpx.Response:
    return client.post("/v1/chat/completions", json={"model": model, "messages": CHAT, "max_tokens": 6, **extra})


def _metrics(client: httpx.Client) -> dict[str, float]:
    out: dict[str, float] = {}
    for fam in text_string_to_metric_families(client.get("/metrics").text):
        for s in fam.samples:
            key = s.name + json.dumps(dict(sorted(s.labels.items())))
            out[key] = s.value
    return out


# ---- OpenAI surface ------------------------------------------------------------------------------
def test_chat_non_stream_passes_token_ids_and_logprobs(client: httpx.Client) -> None:
    r = _chat(client, return_token_ids=True, logprobs=True, top_logprobs=2)
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["model"] == "policy-v0"
    assert r.headers["x-looplift-version"] == "policy-v0"
    choice = body["choices"][0]
    assert body["prompt_token_ids"] and all(isinstance(t, int) for t in body["prompt_token_ids"])
    assert len(choice["token_ids"]) == body["usage"]["completion_tokens"] > 0
    assert len(choice["logprobs"]["content"]) == len(choice["token_ids"])
    assert len(choice["logprobs"]["content"][0]["top_logprobs"]) == 2


def test_chat_stream_proxies_sse_with_token_ids(client: httpx.Client) -> None:
    # ignore_eos: exactly max_tokens tokens whatever is sampled (an early EOS is the model's, not the proxy's).
    body = {"model": "policy", "messages": CHAT, "max_tokens": 6, "stream": True,
            "return_token_ids": True, "logprobs": True, "ignore_eos": True}
    with client.stream("POST", "/v1/chat/completions", json=body) as r:
        assert r.status_code == 200
        assert r.headers["content-type"].startswith("text/event-stream")
        events = sse_events(list(sse_lines(r)))
    assert events[-1] == "[DONE]"
    chunks = [json.loads(e) for e in events[:-1]]
    assert {c["model"] for c in chunks} == {"policy-v0"}
    token_ids = [t for c in chunks for ch in c["choices"] for t in ch.get("token_ids") or []]
    assert len(token_ids) == 6
    assert chunks[0]["prompt_token_ids"]


def test_completions(client: httpx.Client) -> None:
    r = client.post("/v1/completions", json={"model": "policy", "prompt": "1+1=", "max_tokens": 5, "seed": 7})
    assert r.status_code == 200, r.text
    assert r.json()["object"] == "text_completion"
    assert r.json()["usage"]["completion_tokens"] == 5


def test_openai_client_against_gateway(gateway: GatewayHandle) -> None:
    oc = openai.OpenAI(base_url=f"{gateway.url}/v1", api_key="unused", max_retries=0)
    # ignore_eos: exactly max_tokens tokens whatever the untrained model samples (it can sample EOS first: a CI run
    # got one token back).
    resp = oc.chat.completions.create(model="policy", messages=CHAT, max_tokens=4,  # type: ignore[arg-type]
                                      extra_body={"return_token_ids": True, "ignore_eos": True})
    assert resp.model == "policy-v0"
    assert resp.choices[0].model_extra and len(resp.choices[0].model_extra["token_ids"]) == 4
    # Counted by usage, not by chunks: vLLM sends no chunk for a token that ends inside a UTF-8 character (the
    # tiny model's sampled tokens often do), so 4 tokens can arrive in 3 chunks.
    chunks = list(oc.chat.completions.create(model="policy", messages=CHAT, max_tokens=4, stream=True,  # type: ignore[arg-type]
                                             stream_options={"include_usage": True}, extra_body={"ignore_eos": True}))
    assert chunks[-1].usage is not None and chunks[-1].usage.completion_tokens == 4
    assert [c.choices[0].finish_reason for c in chunks if c.choices and c.choices[0].finish_reason] == ["length"]
    assert {m.id for m in oc.models.list()} >= {"policy", "policy-v0"}
    with pytest.raises(openai.NotFoundError) as e:
        oc.chat.completions.create(model="nope", messages=CHAT, max_tokens=1)  # type: ignore[arg-type]
    assert e.value.code == "model_not_found"


def test_models_lists_alias_and_loaded_versions(client: httpx.Client, admin: AdminClient,
                                                 looplift_new_adapter: Callable[[int], Path]) -> None:
    v = admin.load(str(looplift_new_adapter(0)))
    data = client.get("/v1/models").json()
    assert data["object"] == "list"
    ids = [m["id"] for m in data["data"]]
    assert ids == ["policy", "policy-v0", v.name]
    assert data["data"][0]["root"] == "policy-v0"


def test_unknown_model_404_openai_shape(client: httpx.Client) -> None:
    r = _chat(client, model="gpt-17")
    assert r.status_code == 404
    assert r.json() == {"error": {
        "message": r.json()["error"]["message"], "type": "invalid_request_error",
        "param": "model", "code": "model_not_found"}}
    assert "gpt-17" in r.json()["error"]["message"]


@pytest.mark.parametrize(
    "body,param",
    [(b"{not json", None), (b'{"messages": []}', "model"), (b'{"model": "policy"}', "messages"),
     (b'{"model": "policy", "messages": "hi"}', "messages")],
)
def test_malformed_requests_400_name_the_field(client: httpx.Client, body: bytes, param: Any) -> None:
    r = client.post("/v1/chat/completions", content=body, headers={"content-type": "application/json"})
    assert r.status_code == 400
    err = r.json()["error"]
    assert err["type"] == "invalid_request_error" and err["param"] == param
    if param:
        assert param in err["message"]


def test_api_keys_required_when_configured(vllm_server: Any, tmp_path: Path) -> None:
    settings = GatewaySettings(admin_token=ADMIN, state_dir=tmp_path, api_keys=("k1", "k2"))
    with start_gateway_in_thread(settings, vllm_server.url, port=0) as gw:
        assert httpx.get(f"{gw.url}/v1/models").status_code == 401
        r = httpx.post(f"{gw.url}/v1/chat/completions", headers={"Authorization": "Bearer nope"},
                       json={"model": "policy", "messages": CHAT, "max_tokens": 1})
        assert r.status_code == 401 and r.json()["error"]["code"] == "invalid_api_key"
        ok = httpx.post(f"{gw.url}/v1/chat/completions", headers={"Authorization": "Bearer k2"},
                        json={"model": "policy", "messages": CHAT, "max_tokens": 1}, timeout=60)
        assert ok.status_code == 200


# ---- health / metrics ----------------------------------------------------------------------------
def test_health_names_serving_version(client: httpx.Client) -> None:
    r = client.get("/health")
    assert r.status_code == 200
    assert r.json() == {"status": "ok", "vllm": "ok", "alias": "policy", "serving": "policy-v0"}


def test_metrics_count_requests_swaps_and_in_flight(client: httpx.Client, admin: AdminClient,
                                                   looplift_new_adapter: Callable[[int], Path]) -> None:
    assert _chat(client).status_code == 200
    assert _chat(client, model="nope").status_code == 404
    v = admin.load(str(looplift_new_adapter(0)))
    admin.promote(v.name)
    admin.rollback()
    m = _metrics(client)
    ok = 'looplift_gateway_requests_total{"endpoint": "/v1/chat/completions", "model": "policy", "status": "200", "version": "policy-v0"}'
    assert m[ok] == 1
    assert m['looplift_gateway_requests_total{"endpoint": "/v1/chat/completions", "model": "unknown", "status": "404", "version": ""}'] == 1
    assert m['looplift_gateway_swaps_total{"kind": "promote"}'] == 1
    assert m['looplift_gateway_swaps_total{"kind": "rollback"}'] == 1
    assert m['looplift_gateway_request_seconds_count{"endpoint": "/v1/chat/completions"}'] == 1
    assert m['looplift_gateway_in_flight{"version": "policy-v0"}'] == 0
    assert "looplift_gateway_upstream_errors" in client.get("/metrics").text


# ---- admin ---------------------------------------------------------------------------------------
@pytest.mark.parametrize("headers", [{}, {"Authorization": "Bearer wrong"}, {"Authorization": ADMIN}])
def test_admin_requires_token(client: httpx.Client, headers: dict[str, str]) -> None:
    for method, path, body in [("GET", "/admin/versions", None), ("POST", "/admin/versions", {"path": "/x"}),
                               ("POST", "/admin/promote", {"version": "policy-v0"}),
                               ("POST", "/admin/rollback", None), ("DELETE", "/admin/versions/policy-v0", None)]:
        r = client.request(method, path, json=body, headers=headers)
        assert r.status_code == 401, (path, r.text)
        assert r.json()["error"]["code"] == "invalid_admin_token"


def test_admin_client_wrong_token_raises(gateway: GatewayHandle) -> None:
    with pytest.raises(AdminAuthError, match="Bearer"):
        AdminClient(gateway.url, "wrong").versions()


def test_load_promote_rollback(client: httpx.Client, admin: AdminClient, vllm_server: Any,
                               looplift_new_adapter: Callable[[int], Path]) -> None:
    base_text = _chat(client, seed=1, temperature=0).json()["choices"][0]["message"]["content"]
    v1 = admin.load(str(looplift_new_adapter(0)))
    assert (v1.name, v1.state, v1.serving) == ("policy-v1", "loaded", False)
    # Loaded but not promoted: answers by its own name, the alias still serves v0.
    direct = _chat(client, model="policy-v1", seed=1, temperature=0).json()
    assert direct["model"] == "policy-v1"
    assert direct["choices"][0]["message"]["content"] != base_text  # the adapter changes the output
    assert _chat(client).json()["model"] == "policy-v0"

    swap = admin.promote("policy-v1")
    assert (swap.serving, swap.previous) == ("policy-v1", "policy-v0")
    assert _chat(client).json()["model"] == "policy-v1"
    assert client.get("/health").json()["serving"] == "policy-v1"

    v2 = admin.load(str(looplift_new_adapter(1)))
    admin.promote(v2.name)
    assert _chat(client).json()["model"] == "policy-v2"
    wait_until(lambda: "policy-v1" not in _vllm_models(vllm_server), "v1 unloaded after promote of v2", timeout=30)

    back = admin.rollback()
    assert (back.serving, back.previous) == ("policy-v1", "policy-v2")
    assert _chat(client).json()["model"] == "policy-v1"  # re-loaded on rollback
    wait_until(lambda: "policy-v2" not in _vllm_models(vllm_server), "v2 unloaded after rollback", timeout=30)
    assert admin.rollback().serving == "policy-v0"
    with pytest.raises(NothingToRollBackError):
        admin.rollback()
    view = admin.versions()
    assert view.serving == "policy-v0"
    assert [h.action for h in view.history if h.action in ("promote", "rollback")] == [
        "promote", "promote", "rollback", "rollback"]


def test_promote_unknown_version_404(admin: AdminClient, client: httpx.Client) -> None:
    with pytest.raises(VersionNotFoundError, match="policy-v9"):
        admin.promote("policy-v9")
    r = client.post("/admin/promote", json={"version": "policy-v9"}, headers={"Authorization": f"Bearer {ADMIN}"})
    assert r.status_code == 404


def _unload(client: httpx.Client, version: str) -> httpx.Response:
    return client.delete(f"/admin/versions/{version}", headers={"Authorization": f"Bearer {ADMIN}"})


def test_unload_frees_a_loaded_version_in_vllm(client: httpx.Client, admin: AdminClient, vllm_server: Any,
                                               looplift_new_adapter: Callable[[int], Path]) -> None:
    """Mutants: the registry marked unloaded but vLLM never asked (the adapter's memory stays taken: the leak
    of issue 22), the version still answering by name after its unload."""
    v1 = admin.load(str(looplift_new_adapter(0))).name
    assert _chat(client, model=v1).status_code == 200 and v1 in _vllm_models(vllm_server)
    r = _unload(client, v1)
    assert r.status_code == 200 and (r.json()["name"], r.json()["state"]) == (v1, "unloaded")
    assert v1 not in _vllm_models(vllm_server)  # gone when the answer comes, not some time later
    assert v1 not in {m["id"] for m in client.get("/v1/models").json()["data"]}
    assert _chat(client, model=v1).status_code == 404
    view = admin.versions()
    assert {v.name: v.state for v in view.versions}[v1] == "unloaded" and view.serving == "policy-v0"
    assert view.history[-1].action == "unload" and view.history[-1].version == v1
    assert _chat(client).json()["model"] == "policy-v0"


def test_unload_unknown_version_404(admin: AdminClient, client: httpx.Client) -> None:
    """Mutant: an unknown name answered 200 (a typo would look like a successful unload)."""
    with pytest.raises(VersionNotFoundError, match="policy-v9"):
        admin.unload("policy-v9")
    r = _unload(client, "policy-v9")
    assert r.status_code == 404 and r.json()["error"]["code"] == "version_not_found"


def test_unload_refuses_the_serving_version_and_the_base_model(
    client: httpx.Client, admin: AdminClient, vllm_server: Any, looplift_new_adapter: Callable[[int], Path],
) -> None:
    """Mutants: the serving version unloadable (every alias request would fail until a promote), the base model
    sent to vLLM's unload (it is not an adapter)."""
    r = _unload(client, "policy-v0")  # the base model, serving
    assert r.status_code == 409 and r.json()["error"]["code"] == "version_in_use"
    v1 = admin.load(str(looplift_new_adapter(0))).name
    admin.promote(v1)
    r = _unload(client, v1)
    assert r.status_code == 409 and r.json()["error"]["code"] == "version_in_use" and "promote" in r.text
    r = _unload(client, "policy-v0")  # the base model, no longer serving
    assert r.status_code == 409 and r.json()["error"]["code"] == "base_conflict"
    assert {v1, "policy-v0"} <= _vllm_models(vllm_server) and _chat(client).json()["model"] == v1


def test_unload_refuses_the_running_canarys_candidate(
    client: httpx.Client, admin: AdminClient, vllm_server: Any, looplift_new_adapter: Callable[[int], Path],
) -> None:
    """Mutant: the candidate unloadable while its canary runs (its share of the alias's traffic would fall back
    silently, and the watch would judge a canary that no longer exists)."""
    v1 = admin.load(str(looplift_new_adapter(0))).name
    admin.start_canary(v1, 0.5)
    r = _unload(client, v1)
    assert r.status_code == 409 and r.json()["error"]["code"] == "canary_conflict" and "DELETE /admin/canary" in r.text
    assert v1 in _vllm_models(vllm_server) and admin.canary().canary is not None


def _corrupt_variants(good: Path, tmp: Path) -> list[tuple[str, str, Path]]:
    out = []
    missing = tmp / "does-not-exist"
    out.append(("missing dir", "does not exist", missing))
    no_cfg = tmp / "no-config"
    shutil.copytree(good, no_cfg)
    (no_cfg / "adapter_config.json").unlink()
    out.append(("no config", "adapter_config.json is missing", no_cfg))
    bad_json = tmp / "bad-json"
    shutil.copytree(good, bad_json)
    (bad_json / "adapter_config.json").write_text("{ nope")
    out.append(("bad json", "not valid JSON", bad_json))
    big_rank = tmp / "big-rank"
    shutil.copytree(good, big_rank)
    cfg = json.loads((big_rank / "adapter_config.json").read_text())
    cfg["r"] = 64
    (big_rank / "adapter_config.json").write_text(json.dumps(cfg))
    out.append(("rank", "exceeds the server's --max-lora-rank 8", big_rank))
    no_weights = tmp / "no-weights"
    shutil.copytree(good, no_weights)
    (no_weights / "adapter_model.safetensors").unlink()
    out.append(("no weights", "no adapter weights file", no_weights))
    truncated = tmp / "truncated"
    shutil.copytree(good, truncated)
    w = truncated / "adapter_model.safetensors"
    w.write_bytes(w.read_bytes()[:-100])
    out.append(("truncated", "truncated", truncated))
    garbage = tmp / "garbage"
    shutil.copytree(good, garbage)
    (garbage / "adapter_model.safetensors").write_bytes(b"\x00" * 64)
    out.append(("garbage", "corrupt", garbage))
    return out


def test_bad_adapters_refused_and_old_version_keeps_serving(
    client: httpx.Client, admin: AdminClient, vllm_server: Any, tmp_path: Path,
    looplift_new_adapter: Callable[[int], Path],
) -> None:
    v1 = admin.load(str(looplift_new_adapter(0)))
    admin.promote(v1.name)
    before = admin.versions()
    for label, problem, path in _corrupt_variants(looplift_new_adapter(1), tmp_path):
        r = client.post("/admin/versions", json={"path": str(path)}, headers={"Authorization": f"Bearer {ADMIN}"})
        assert r.status_code == 400, label
        assert problem in r.json()["error"]["message"], (label, r.json())
        with pytest.raises(AdapterInvalidError):
            admin.load(str(path))
    after = admin.versions()
    assert [v.name for v in after.versions] == [v.name for v in before.versions]
    assert after.serving == "policy-v1"
    assert _chat(client).json()["model"] == "policy-v1"
    assert _vllm_models(vllm_server) == {"policy-v0", "policy-v1"}


def _rename_tensor(adapter: Path, old: str, new: str) -> None:
    # Rewrite the safetensors header so one tensor names a module vLLM's Llama does not have.
    w = adapter / "adapter_model.safetensors"
    raw = w.read_bytes()
    (n,) = struct.unpack("<Q", raw[:8])
    header = json.loads(raw[8:8 + n])
    header = {k.replace(old, new): v for k, v in header.items()}
    hb = json.dumps(header).encode()
    hb += b" " * (-len(hb) % 8)
    w.write_bytes(struct.pack("<Q", len(hb)) + hb + raw[8 + n:])


def test_vllm_refusal_is_reported_and_registry_unchanged(
    client: httpx.Client, admin: AdminClient, vllm_server: Any, looplift_new_adapter: Callable[[int], Path],
) -> None:
    bad = looplift_new_adapter(0)
    _rename_tensor(bad, "q_proj", "zz_proj")  # passes our checks; vLLM refuses the unknown module
    with pytest.raises(UpstreamError) as e:
        admin.load(str(bad))
    assert e.value.http_status in (400, 502)
    assert "vLLM refused" in e.value.message
    assert [v.name for v in admin.versions().versions] == ["policy-v0"]
    assert _vllm_models(vllm_server) == {"policy-v0"}
    assert _chat(client).status_code == 200  # vLLM survived the refusal
    assert admin.load(str(looplift_new_adapter(0))).name == "policy-v1"  # the name was not burnt


def test_restart_serves_same_version(vllm_server: Any, tmp_path: Path,
                                     looplift_new_adapter: Callable[[int], Path]) -> None:
    settings = GatewaySettings(admin_token=ADMIN, state_dir=tmp_path / "state")
    with start_gateway_in_thread(settings, vllm_server.url, port=0) as gw:
        with AdminClient(gw.url, ADMIN) as a:
            a.promote(a.load(str(looplift_new_adapter(0))).name)
    assert json.loads((tmp_path / "state" / "registry.json").read_text())["serving"] == "policy-v1"
    # Simulate a vLLM restart losing the adapter: the next gateway must re-load it on start.
    httpx.post(f"{vllm_server.url}/v1/unload_lora_adapter", json={"lora_name": "policy-v1"}).raise_for_status()
    with start_gateway_in_thread(settings, vllm_server.url, port=0) as gw:
        r = httpx.post(f"{gw.url}/v1/chat/completions", json={"model": "policy", "messages": CHAT, "max_tokens": 2},
                       timeout=60)
        assert r.json()["model"] == "policy-v1"
        with AdminClient(gw.url, ADMIN) as a:
            assert a.versions().history[-1].action == "restore"
            assert a.rollback().serving == "policy-v0"  # history survived the restart


def test_stream_client_disconnect_releases_in_flight(gateway: GatewayHandle, admin: AdminClient) -> None:
    # 8 choices: ~8 MB of SSE, more than loopback's send buffer (autotuned up to 4 MB) and the 4 KB
    # receive window can absorb, so the unread stream is provably still in flight at the check.
    with slow_reader(gateway.url) as c:
        with c.stream("POST", "/v1/chat/completions", json={**LONG_STREAM, "n": 8}) as r:
            lines = sse_lines(r)
            assert next(lines).startswith("data: ")
            time.sleep(0.3)
            assert admin.versions().versions[0].in_flight == 1
        # Leaving the block closes the connection mid-stream; the gateway cannot have finished
        # sending (we stopped reading), so the release below comes from the disconnect path.
    wait_until(lambda: admin.versions().versions[0].in_flight == 0, "in-flight released after disconnect", timeout=5.0)


# ---- hot swap under load -------------------------------------------------------------------------
def test_hot_swap_under_load_drops_nothing(
    gateway: GatewayHandle, admin: AdminClient, vllm_server: Any, looplift_new_adapter: Callable[[int], Path],
) -> None:
    names = [admin.load(str(looplift_new_adapter(i))).name for i in range(3)]
    admin.promote(names[0])
    results: list[dict[str, Any]] = []
    observations: list[dict[str, Any]] = []

    # Swaps are triggered by progress, not by the clock, so the test holds however fast this
    # machine is: swap 1 once 8 requests have been answered (those went to names[0]), swap 2 once
    # 20 have, and the last 10 requests wait for swap 2 (so they must go to names[2]).
    answered = 0
    progress = asyncio.Condition()
    swap2_done = asyncio.Event()

    async def note_answered() -> None:
        nonlocal answered
        async with progress:
            answered += 1
            progress.notify_all()

    async def one(ac: httpx.AsyncClient, i: int) -> None:
        await asyncio.sleep(i * 0.08)  # 40 requests spread over ~3 s
        if i >= 30:
            await swap2_done.wait()
        stream = i % 2 == 0
        body = {"model": "policy", "messages": CHAT, "max_tokens": 40 if stream else 8, "ignore_eos": True,
                "stream": stream}
        rec: dict[str, Any] = {"i": i, "stream": stream, "start": time.time()}
        try:
            if stream:
                async with ac.stream("POST", "/v1/chat/completions", json=body) as r:
                    rec["status"] = r.status_code
                    await note_answered()
                    events = sse_events((await r.aread()).decode("utf-8").split("\n"))  # see sse_lines
                rec["ok"] = events[-1] == "[DONE]" and not any('"error"' in e for e in events)
                rec["model"] = json.loads(events[0])["model"]
            else:
                r = await ac.post("/v1/chat/completions", json=body)
                await note_answered()
                rec["status"], rec["ok"], rec["model"] = r.status_code, r.status_code == 200, r.json().get("model")
        except Exception as e:  # a failed request is exactly what this test looks for
            rec["status"], rec["ok"], rec["error"] = None, False, repr(e)
        rec["end"] = time.time()
        results.append(rec)

    async def swapper() -> None:
        loop = asyncio.get_running_loop()
        for name, after in zip(names[1:], (8, 20)):
            async with progress:
                await progress.wait_for(lambda: answered >= after)  # noqa: B023 (evaluated right here)
            swap = await loop.run_in_executor(None, admin.promote, name)
            if name == names[2]:
                swap2_done.set()
            # vLLM first, registry second: an old version's count only falls after the flip, so if it
            # is still > 0 in the later registry read, it was > 0 when vLLM was asked.
            models = await loop.run_in_executor(None, _vllm_models, vllm_server)
            view = await loop.run_in_executor(None, admin.versions)
            prev = next(v for v in view.versions if v.name == swap.previous)
            observations.append({"at": time.time(), "previous": swap.previous, "prev_in_flight": prev.in_flight,
                                 "prev_state": prev.state, "prev_in_vllm": swap.previous in models,
                                 "swap_ms": swap.swap_ms})

    async def main() -> None:
        async with httpx.AsyncClient(base_url=gateway.url, timeout=120) as ac:
            await asyncio.wait_for(asyncio.gather(swapper(), *(one(ac, i) for i in range(40))), 180)

    asyncio.run(main())
    failed = [r for r in results if not r["ok"] or r["status"] != 200]
    assert not failed, failed
    assert len(results) == 40
    served = {r["model"] for r in results}
    assert served >= {names[0], names[2]}, served  # the swaps happened during the load
    # While a previous version still had requests in flight, it stayed loaded in vLLM.
    for o in observations:
        if o["prev_in_flight"] > 0:
            assert o["prev_state"] == "loaded" and o["prev_in_vllm"], o
    # Eventually both drained versions are unloaded, each only after its last request ended.
    wait_until(lambda: _vllm_models(vllm_server) == {"policy-v0", names[2]}, "old adapters unloaded", timeout=30)
    unloads = {h.version: h.at.timestamp() for h in admin.versions().history if h.action == "unload"}
    assert set(unloads) == {names[0], names[1]}
    # No wall-clock comparison of an unload with the client's last byte (under load the client read it 0.8 s
    # after the unload in one run): a version unloaded while one of its requests was in flight fails that
    # request, which `failed` above would hold, and the in-flight observations check it.
    print(f"\nhot-swap: {len(results)} requests, 0 failed, swap_ms={[round(o['swap_ms'], 3) for o in observations]},"
          f" prev in flight at flip={[o['prev_in_flight'] for o in observations]}")


def test_drain_waits_for_long_stream_before_unload(
    gateway: GatewayHandle, admin: AdminClient, vllm_server: Any, looplift_new_adapter: Callable[[int], Path],
) -> None:
    v1 = admin.load(str(looplift_new_adapter(0))).name
    v2 = admin.load(str(looplift_new_adapter(1))).name
    admin.promote(v1)
    with slow_reader(gateway.url) as c:
        with c.stream("POST", "/v1/chat/completions", json=LONG_STREAM) as r:
            lines = sse_lines(r)
            first = next(line for line in lines if line.startswith("data: "))
            assert json.loads(first[6:])["model"] == v1
            swap = admin.promote(v2)
            assert swap.previous == v1
            time.sleep(0.5)  # an eager (wrong) unload would happen within a drain poll (50 ms)
            # Read vLLM first, then the registry: v1 gets no new requests after the flip, so if its
            # in-flight count is still 1 afterwards it was 1 while vLLM was read, and v1 must have been loaded.
            in_vllm = _vllm_models(vllm_server)
            mid = {v.name: v for v in admin.versions().versions}
            # Usually the unread stream is still in flight here. On a busy machine the kernel's socket
            # buffers have been seen to absorb the whole stream first (the gateway then has legitimately
            # finished it); the ordering check after the stream covers that case.
            if mid[v1].in_flight == 1:
                assert mid[v1].state == "loaded" and v1 in in_vllm
            assert _chat(httpx.Client(base_url=gateway.url, timeout=60)).json()["model"] == v2  # new traffic: v2
            rest = sse_events(list(lines))
    assert rest[-1] == "[DONE]" and not any('"error"' in e for e in rest)
    assert {json.loads(e)["model"] for e in rest[:-1]} == {v1}  # the whole stream came from v1
    wait_until(lambda: v1 not in _vllm_models(vllm_server), "v1 unloaded once its stream ended", timeout=30)
    history = admin.versions().history
    assert history[-1].action == "unload" and history[-1].version == v1
    promoted_at = max(h.at.timestamp() for h in history if h.action == "promote" and h.version == v2)
    if mid[v1].in_flight == 1:  # it was still streaming 0.5 s after the flip, so the unload came later
        assert history[-1].at.timestamp() >= promoted_at + 0.5


def test_cli_admin_commands(gateway: GatewayHandle, looplift_new_adapter: Callable[[int], Path]) -> None:
    from typer.testing import CliRunner

    from server._cli import app

    run = CliRunner().invoke
    common = ["--url", gateway.url, "--token", ADMIN]
    res = run(app, ["load", str(looplift_new_adapter(0)), "--name", "canary", *common, "--json"])
    assert res.exit_code == 0, res.output
    assert json.loads(res.output)["name"] == "canary"
    res = run(app, ["promote", "canary", *common])
    assert res.exit_code == 0 and "policy -> canary" in res.output
    res = run(app, ["versions", *common, "--json"])
    view = json.loads(res.output)
    assert view["serving"] == "canary" and [v["name"] for v in view["versions"]] == ["policy-v0", "canary"]
    res = run(app, ["versions", *common])
    assert res.exit_code == 0 and "canary" in res.output
    assert run(app, ["rollback", *common]).exit_code == 0
    res = run(app, ["unload", "canary", *common, "--json"])  # drained by the rollback, or now
    assert res.exit_code == 0 and json.loads(res.output)["state"] == "unloaded"
    res = run(app, ["unload", "policy-v0", *common])
    assert res.exit_code == 1 and "serves the alias" in res.output and "Traceback" not in res.output
    res = run(app, ["promote", "policy-v7", *common])
    assert res.exit_code == 1 and "policy-v7" in res.output and "Traceback" not in res.output
    res = run(app, ["versions", "--url", gateway.url, "--token", "wrong"])
    assert res.exit_code == 1 and "Bearer" in res.output
