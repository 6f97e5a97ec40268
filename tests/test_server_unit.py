"""`server` tests that need no vLLM: public API, adapter validation, settings/token, vLLM start
failures, the gateway with vLLM down, the admin client and CLI error paths."""

from __future__ import annotations

import os
import re
import stat
import time
from pathlib import Path
from typing import Any

import httpx
import pytest
from typer.testing import CliRunner

import server
from _adapters import write_adapter
from server import (
    AdapterInvalidError,
    AdminClient,
    AdminTokenMissingError,
    GatewaySettings,
    VLLMConfig,
    VLLMStartError,
    start_gateway_in_thread,
    start_vllm,
    validate_adapter,
)
from server._cli import app
from server._validate import validate_checkpoint, version_kind
from server._vllm import build_command, free_port


# ---- adapter validation --------------------------------------------------------------------------
def test_validate_accepts_a_good_adapter(tmp_path: Path) -> None:
    assert validate_adapter(str(write_adapter(tmp_path / "a")), 8) == (tmp_path / "a").resolve()


@pytest.mark.parametrize(
    "mutate,problem",
    [
        (lambda d: (d / "adapter_config.json").unlink(), "adapter_config.json is missing"),
        (lambda d: (d / "adapter_config.json").write_text("[1]"), "not a JSON object"),
        (lambda d: (d / "adapter_config.json").write_text('{"peft_type": "IA3", "r": 8}'), "only LORA"),
        (lambda d: (d / "adapter_config.json").write_text('{"r": "8"}'), "positive integer rank"),
        (lambda d: (d / "adapter_config.json").write_text('{"r": 16}'), "r=16 exceeds"),
        (lambda d: (d / "adapter_model.safetensors").unlink(), "no adapter weights file"),
        (lambda d: (d / "adapter_model.safetensors").write_bytes(b""), "is empty"),
        (lambda d: (d / "adapter_model.safetensors").write_bytes(b"\xff" * 8 + b"{}"), "corrupt"),
        (lambda d: (d / "adapter_model.safetensors").write_bytes(
            (d / "adapter_model.safetensors").read_bytes() + b"xx"), "truncated or padded"),
    ],
)
def test_validate_names_the_problem(tmp_path: Path, mutate, problem: str) -> None:  # type: ignore[no-untyped-def]
    d = write_adapter(tmp_path / "a")
    mutate(d)
    with pytest.raises(AdapterInvalidError) as e:
        validate_adapter(str(d), 8)
    assert problem in e.value.message
    assert str(d) in e.value.message


@pytest.mark.parametrize("path, problem", [
    ("~no-such-user-looplift/adapter", "names no user"),  # Path.expanduser: RuntimeError
    ("/tmp/" + "x" * 300, "cannot read it (File name too long)"),  # Path.is_file: OSError ENAMETOOLONG
])
def test_a_path_the_gateway_cannot_read_is_refused_not_a_crash(path: str, problem: str) -> None:
    """`POST /admin/versions` with such a path answered 500 (schemathesis, issue 22): the error escaped as what
    it is, not as `AdapterInvalidError` (400). Checked in the order `Registry.load` calls them."""
    with pytest.raises(AdapterInvalidError, match=re.escape(problem)):
        validate_checkpoint(path) if version_kind(path) == "full" else validate_adapter(path, 8)
    with pytest.raises(AdapterInvalidError) as e:
        validate_checkpoint(path)
    assert e.value.kind == "checkpoint"


def test_validate_rejects_non_lora_tensors(tmp_path: Path) -> None:
    d = write_adapter(tmp_path / "a", tensors=("weight",))
    with pytest.raises(AdapterInvalidError, match="no lora_A/lora_B"):
        validate_adapter(str(d), 8)


# ---- settings and admin token --------------------------------------------------------------------
def test_admin_token_generated_0600_and_reused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LOOPLIFT_HOME", str(tmp_path))
    monkeypatch.delenv("LOOPLIFT_ADMIN_TOKEN", raising=False)
    monkeypatch.setenv("LOOPLIFT_API_KEYS", " a, b ,,")
    s1 = GatewaySettings.from_env()
    token_file = tmp_path / "admin.token"
    assert stat.S_IMODE(token_file.stat().st_mode) == 0o600
    assert token_file.read_text().strip() == s1.admin_token and len(s1.admin_token) >= 32
    assert GatewaySettings.from_env().admin_token == s1.admin_token
    assert s1.api_keys == ("a", "b")
    assert s1.state_dir == tmp_path / "server"
    monkeypatch.setenv("LOOPLIFT_ADMIN_TOKEN", "from-env")
    assert GatewaySettings.from_env(alias="coder").admin_token == "from-env"
    assert GatewaySettings.from_env(alias="coder").base_version == "coder-v0"


def test_settings_refuse_empty_token_and_bad_alias() -> None:
    with pytest.raises(ValueError, match="LOOPLIFT_ADMIN_TOKEN"):
        GatewaySettings(admin_token="")
    with pytest.raises(ValueError, match="alias"):
        GatewaySettings(admin_token="t", alias="no spaces")


def test_admin_client_without_token_says_how_to_fix(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LOOPLIFT_HOME", str(tmp_path))
    monkeypatch.delenv("LOOPLIFT_ADMIN_TOKEN", raising=False)
    with pytest.raises(AdminTokenMissingError, match="--token"):
        AdminClient("http://127.0.0.1:9")


# ---- vLLM process --------------------------------------------------------------------------------
def test_build_command_cpu_and_gpu(tmp_path: Path) -> None:
    cfg = VLLMConfig(model_dir=tmp_path, extra_args=("--seed", "3"), env={"X": "1"}, kv_cache_gib=2)
    argv, env = build_command(cfg, 1234, on_gpu=False)
    joined = " ".join(argv)
    assert "-m vllm.entrypoints.openai.api_server" in joined
    for flag in ("--dtype float32", "--max-model-len 512", "--host 127.0.0.1", "--port 1234", "--enable-lora",
                 "--max-lora-rank 8", "--max-loras 4", "--served-model-name policy-v0", "--seed 3"):
        assert flag in joined
    assert env["VLLM_ALLOW_RUNTIME_LORA_UPDATING"] == "True" and env["VLLM_CPU_KVCACHE_SPACE"] == "2"
    assert env["X"] == "1"
    argv, env = build_command(cfg, 1234, on_gpu=True)
    assert "--dtype auto" in " ".join(argv)
    assert "VLLM_CPU_KVCACHE_SPACE" not in env or env["VLLM_CPU_KVCACHE_SPACE"] == os.environ.get("VLLM_CPU_KVCACHE_SPACE")


def test_vllm_missing_model_dir_fails_at_once(tmp_path: Path) -> None:
    with pytest.raises(VLLMStartError, match="does not exist"):
        start_vllm(VLLMConfig(model_dir=tmp_path / "nope", log_path=tmp_path / "v.log"))


@pytest.mark.vllm
def test_vllm_broken_config_raises_with_log_tail(tmp_path: Path) -> None:
    model = tmp_path / "model"
    model.mkdir()
    (model / "config.json").write_text('{"model_type": "llama", "hidden_size": ')  # truncated JSON
    port = free_port()
    with pytest.raises(VLLMStartError) as e:
        start_vllm(VLLMConfig(model_dir=model, port=port, log_path=tmp_path / "v.log", start_timeout_s=120))
    err = e.value
    assert "exited with code" in err.message
    assert "vllm.entrypoints.openai.api_server" in err.message and str(model) in err.message
    assert err.log_tail and err.log_tail in err.message
    assert len(err.log_tail.splitlines()) <= 40
    with pytest.raises(httpx.ConnectError):  # nothing left listening
        httpx.get(f"http://127.0.0.1:{port}/health", timeout=2)


def test_vllm_start_that_hangs_dumps_its_stacks(tmp_path: Path) -> None:
    """A start that never gets healthy (a real Python process hung in a function stands in for vLLM) ends with
    the hung process's stack in the log and in the error, and nothing left running."""
    import sys

    (tmp_path / "model").mkdir()
    shim = tmp_path / "python"
    shim.write_text(f"#!/bin/sh\nexec {sys.executable} -c 'import time\ndef stuck_in_import():\n"
                    f"    time.sleep(3600)\nstuck_in_import()' \"$@\"\n")
    shim.chmod(0o755)
    with pytest.raises(VLLMStartError) as e:
        start_vllm(VLLMConfig(model_dir=tmp_path / "model", python=str(shim), log_path=tmp_path / "v.log",
                              start_timeout_s=3))
    assert "not healthy after 3 s" in e.value.message and "stacks" in e.value.message
    assert "stuck_in_import" in e.value.log_tail  # faulthandler's traceback, written by the hung process
    assert not list(tmp_path.glob("core*"))


# ---- gateway with vLLM down ----------------------------------------------------------------------
def test_gateway_with_vllm_down_reports_503(tmp_path: Path) -> None:
    settings = GatewaySettings(admin_token="t", state_dir=tmp_path)
    dead = f"http://127.0.0.1:{free_port()}"
    with start_gateway_in_thread(settings, dead, port=0) as gw:
        h = httpx.get(f"{gw.url}/health")
        assert h.status_code == 503 and h.json()["status"] == "unavailable"
        r = httpx.post(f"{gw.url}/v1/chat/completions", json={"model": "policy", "messages": []})
        assert r.status_code == 503 and r.json()["error"]["code"] == "upstream_unavailable"
        # Input errors are still reported as such, before any upstream call.
        assert httpx.post(f"{gw.url}/v1/chat/completions", json={"messages": []}).status_code == 400


def test_gateway_port_in_use_is_a_clear_error(tmp_path: Path) -> None:
    settings = GatewaySettings(admin_token="t", state_dir=tmp_path)
    with start_gateway_in_thread(settings, "http://127.0.0.1:9", port=0) as gw:
        with pytest.raises(server.GatewayStartError, match="pick another --port"):
            start_gateway_in_thread(settings, "http://127.0.0.1:9", port=gw.port)


# ---- CLI -----------------------------------------------------------------------------------------
def test_cli_admin_error_exits_nonzero_without_traceback(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LOOPLIFT_HOME", str(tmp_path))
    monkeypatch.delenv("LOOPLIFT_ADMIN_TOKEN", raising=False)
    runner = CliRunner()
    res = runner.invoke(app, ["versions", "--url", f"http://127.0.0.1:{free_port()}"])
    assert res.exit_code == 1
    assert "no admin token" in res.output and "Traceback" not in res.output
    res = runner.invoke(app, ["versions", "--url", f"http://127.0.0.1:{free_port()}", "--token", "x"])
    assert res.exit_code == 1
    assert "cannot reach the gateway" in res.output and "Traceback" not in res.output


# ---- process supervision (a real child process stands in for vLLM: only its lifetime matters) ------
def _spawn(cmd: str, tmp_path: Path):  # type: ignore[no-untyped-def]
    import sys

    from sdk.infra import spawn_tied
    from server import VLLMServer

    log = tmp_path / "child.log"
    log.write_text("line one\nboom: out of memory\n")
    p = spawn_tied(["bash", "-c", cmd])
    return VLLMServer(p, command=[sys.executable], host="127.0.0.1", port=1, log_path=log, startup_s=0.0)


def test_watchdog_reports_unexpected_exit(tmp_path: Path) -> None:
    import threading

    srv = _spawn("sleep 0.3; exit 3", tmp_path)
    fired = threading.Event()
    seen: list[server.VLLMDiedError] = []
    srv.start_watchdog(on_death=lambda e: (seen.append(e), fired.set()), poll_s=0.05)
    assert fired.wait(5)
    assert seen[0].returncode == 3 and "out of memory" in seen[0].message
    assert srv.died is seen[0] and not srv.alive


def test_stop_kills_the_whole_process_group(tmp_path: Path) -> None:
    srv = _spawn("trap '' TERM; sleep 100 & sleep 100; wait", tmp_path)  # ignores SIGTERM, has a child
    srv.start_watchdog(poll_s=0.05)
    time.sleep(0.2)
    srv.stop(grace_s=0.5)  # returns: SIGKILL after the grace period, since SIGTERM is ignored
    assert not srv.alive and srv.died is None  # a requested stop is not a death
    import subprocess

    def group_alive() -> list[str]:  # zombies waiting for init to reap them do not count
        out = subprocess.run(["ps", "-o", "stat=", "-g", str(srv.process.pid)], capture_output=True, text=True).stdout
        return [s for s in out.split() if not s.startswith("Z")]

    deadline = time.monotonic() + 3
    while group_alive() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert group_alive() == []


def test_cli_start_with_missing_model_exits_1(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LOOPLIFT_HOME", str(tmp_path))
    res = CliRunner().invoke(app, ["start", "--model", str(tmp_path / "nope"), "--port", "0"])
    assert res.exit_code == 1
    assert "does not exist" in res.output and "Traceback" not in res.output


@pytest.mark.parametrize("args, message", [
    ([], "give --model DIR (start vLLM here), --upstream URL"),
    (["--upstream", "http://127.0.0.1:9", "--replicas", "2"], "--replicas starts local vLLMs: it needs --model DIR"),
], ids=["neither", "replicas-without-model"])
def test_cli_start_takes_a_model_or_upstreams(args: list[str], message: str) -> None:
    res = CliRunner().invoke(app, ["start", *args, "--port", "0"])
    assert res.exit_code == 2 and message in res.output and "Traceback" not in res.output


@pytest.mark.parametrize("n", [1, 2], ids=["one-upstream", "two-upstreams"])
@pytest.mark.slow
def test_cli_start_upstream_serves_the_gateway_alone_and_stops_on_sigterm(tmp_path: Path, n: int) -> None:
    """`server start --upstream URL [--upstream URL2]` starts no vLLM: the gateway answers at once (503 on /health
    while no vLLM does; with two, both are listed), and SIGTERM stops it cleanly. (Over a real vLLM:
    tests/test_deploy.py; over two real replicas: tests/test_replicas.py.)"""
    import selectors
    import signal
    import subprocess
    import sys

    port, dead = free_port(), [free_port() for _ in range(n)]
    env = {**os.environ, "LOOPLIFT_HOME": str(tmp_path), "LOOPLIFT_ADMIN_TOKEN": "t" * 32}
    flags = [x for d in dead for x in ("--upstream", f"http://127.0.0.1:{d}/")]
    proc = subprocess.Popen([sys.executable, "-m", "server._cli", "start", *flags, "--port", str(port)], env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        assert proc.stdout is not None
        with selectors.DefaultSelector() as sel:  # wait for the "gateway at" line, 60 s at most
            sel.register(proc.stdout, selectors.EVENT_READ)
            line, deadline = "", time.monotonic() + 60
            while "gateway at" not in line and sel.select(max(0.0, deadline - time.monotonic())):
                line = proc.stdout.readline()
                if not line:
                    break
        assert "gateway at" in line and "over " + ", ".join(f"http://127.0.0.1:{d}" for d in dead) in line, line
        assert httpx.get(f"http://127.0.0.1:{port}/health", timeout=5).status_code == 503
        listed = httpx.get(f"http://127.0.0.1:{port}/admin/replicas", headers={"Authorization": "Bearer " + "t" * 32},
                           timeout=5).json()
        assert [r["url"] for r in listed] == [f"http://127.0.0.1:{d}" for d in dead]
        assert not any(r["healthy"] for r in listed)
    finally:
        proc.send_signal(signal.SIGTERM)
        out, _ = proc.communicate(timeout=60)
    assert proc.returncode == 0 and "stopped (SIGTERM)" in out and "vLLM ready" not in out, out


async def _ok_app(scope: dict[str, Any], receive: Any, send: Any) -> None:
    """The smallest ASGI app: lifespan, and 200 "ok" to any request."""
    if scope["type"] == "lifespan":
        while True:
            if (await receive())["type"] == "lifespan.startup":
                await send({"type": "lifespan.startup.complete"})
            else:
                await send({"type": "lifespan.shutdown.complete"})
                return
    await send({"type": "http.response.start", "status": 200, "headers": []})
    await send({"type": "http.response.body", "body": b"ok"})


@pytest.mark.parametrize("fast_loop", [False, True], ids=["asyncio", "uvloop"])
def test_accepted_connections_have_tcp_nodelay(fast_loop: bool) -> None:
    # Regression: a pre-bound socket created with proto=0 made asyncio skip TCP_NODELAY, and every response
    # waited ~40 ms for a delayed ACK. Checked on the server's end of the connection, not by timing responses.
    # (uvloop, the gateway's loop, sets it whatever the proto; asyncio's, the collector's, only for IPPROTO_TCP.)
    import socket

    from sdk.infra import start_server_thread

    with start_server_thread(_ok_app, "127.0.0.1", 0, fast_loop=fast_loop) as st, httpx.Client(base_url=st.url) as c:
        assert c.get("/").text == "ok"  # the client keeps the connection open: the server's end is still there
        accepted = [p.transport.get_extra_info("socket") for p in list(st._server.server_state.connections)]
        assert accepted and all(s.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY) for s in accepted)


def _versions_body() -> dict[str, Any]:
    return {"alias": "policy", "serving": "policy-v0", "versions": [], "history": []}


def test_admin_client_waits_for_a_restarting_gateway_but_never_resends() -> None:
    """Broken variants: no waiting (a job's publish fails because `looplift up` is restarting, its training
    thrown away), or waiting on every transport error, which re-sends a request the gateway may have acted on (a
    load done twice is two versions)."""
    calls: list[str] = []

    def refusing_twice(request: httpx.Request) -> httpx.Response:
        calls.append(request.url.path)
        if len(calls) <= 2:
            raise httpx.ConnectError("[Errno 111] Connection refused", request=request)
        return httpx.Response(200, json=_versions_body())

    with server.AdminClient("http://gw", "tok", transport=httpx.MockTransport(refusing_twice), connect_wait_s=10) as a:
        assert a.versions().serving == "policy-v0" and len(calls) == 3

    sent: list[str] = []

    def cut_after_sending(request: httpx.Request) -> httpx.Response:
        sent.append(request.url.path)
        raise httpx.ReadError("connection reset", request=request)

    with server.AdminClient("http://gw", "tok", transport=httpx.MockTransport(cut_after_sending),
                            connect_wait_s=10) as a, pytest.raises(server.ServerError, match="cannot reach the gateway"):
        a.load("/adapters/a1")
    assert sent == ["/admin/versions"]  # once: it may have been loaded

    t0 = time.monotonic()
    refused: list[str] = []

    def always_refusing(request: httpx.Request) -> httpx.Response:
        refused.append(request.url.path)
        raise httpx.ConnectError("[Errno 111] Connection refused", request=request)

    with server.AdminClient("http://gw", "tok", transport=httpx.MockTransport(always_refusing),
                            connect_wait_s=1.5) as a, pytest.raises(server.ServerError, match=r"tried for 2 s"):
        a.versions()
    assert 1.4 <= time.monotonic() - t0 < 10 and len(refused) >= 2
