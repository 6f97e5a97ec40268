"""Full-weight versions (blue/green, issue 12): kind detection, the registry's state changes, and one real stack.

The unit tests drive `Registry` with `FakeSets`, an in-memory `AdapterControl` + `BaseControl` (a "vLLM set" is a
list of names; retiring one waits on an event the test sets), so no HTTP and no vLLM. The slow test runs the real
thing on vLLM CPU: a one-replica set on the session's tiny model, a full version with the same shapes and other
weights (another seed), promoted and rolled back under concurrent requests, never more than two vLLMs at once.
(The trained `looplift_base_model` would cost ~4 CPU-minutes to build for no extra coverage here.)
"""

from __future__ import annotations

import asyncio
import json
import struct
import threading
import time
import warnings
from collections import Counter
from pathlib import Path
from typing import Any, Optional

import httpx
import pytest

from _adapters import write_adapter
from server import AdapterInvalidError, GatewaySettings, UpstreamError, VersionInfo
from server._registry import Registry
from server._replicas import ReplicaSet
from server._validate import validate_checkpoint, version_kind
from server.errors import BaseConflictError, CanaryError, VLLMStartError
from test_server_swap import BASE, FakeVLLM


def write_checkpoint(d: Path, weights: bool = True, model_type: Optional[str] = "llama") -> Path:
    """A directory shaped like a full HF checkpoint (config.json + one tiny safetensors file)."""
    d.mkdir(parents=True)
    (d / "config.json").write_text(json.dumps({"model_type": model_type} if model_type else {}))
    if weights:
        header = json.dumps({"lm_head.weight": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]}}).encode()
        (d / "model.safetensors").write_bytes(struct.pack("<Q", len(header)) + header + bytes(8))
    return d


class FakeSets(FakeVLLM):
    """`FakeVLLM` that can also start and switch "vLLM sets" (`BaseControl`)."""

    def __init__(self) -> None:
        super().__init__()
        self.serving_set = [BASE]
        self.started: list[tuple[str, Optional[str]]] = []
        self.retired: list[list[str]] = []
        self.fail_start: Optional[str] = None
        self.release_old = asyncio.Event()

    async def start_base(self, name: str, model_dir: Optional[str]) -> list[Any]:
        await asyncio.sleep(0)
        if self.fail_start:
            raise VLLMStartError(self.fail_start, command=["vllm", "serve"], log_path=Path("/tmp/v.log"),
                                 log_tail="Traceback ...\nOOM")
        self.started.append((name, model_dir))
        return [name]

    def flip_base(self, name: str, new: list[Any]) -> Any:
        old, self.serving_set = self.serving_set, new
        self.loaded = {name: None}  # the new set serves only its base

        async def retire() -> None:
            await self.release_old.wait()
            self.retired.append(old)
        return retire()


@pytest.fixture
def settings(tmp_path: Path) -> GatewaySettings:
    return GatewaySettings(admin_token="t", state_dir=tmp_path / "state")


# ---- kind detection -----------------------------------------------------------------------------
def test_kind_full_checkpoint(tmp_path: Path) -> None:
    assert version_kind(str(write_checkpoint(tmp_path / "ck"))) == "full"


def test_kind_adapter(tmp_path: Path) -> None:
    assert version_kind(str(write_adapter(tmp_path / "ad"))) == "adapter"


def test_kind_adapter_with_config_json_is_adapter(tmp_path: Path) -> None:
    d = write_adapter(tmp_path / "ad")
    (d / "config.json").write_text("{}")  # some trainers save the base config beside the adapter
    assert version_kind(str(d)) == "adapter"


@pytest.mark.parametrize("weights,model_type,problem", [(False, "llama", "no weights file"),
                                                          (True, None, "model_type")])
def test_checkpoint_refused(tmp_path: Path, weights: bool, model_type: Optional[str], problem: str) -> None:
    d = write_checkpoint(tmp_path / "ck", weights=weights, model_type=model_type)
    with pytest.raises(AdapterInvalidError, match=problem) as e:
        validate_checkpoint(str(d))
    assert e.value.message.startswith("checkpoint ") and "config.json and its weights" in e.value.message


def test_checkpoint_truncated_weights_refused(tmp_path: Path) -> None:
    d = write_checkpoint(tmp_path / "ck")
    w = d / "model.safetensors"
    w.write_bytes(w.read_bytes()[:-3])
    with pytest.raises(AdapterInvalidError, match="truncated") as e:
        validate_checkpoint(str(d))
    assert e.value.message.startswith("checkpoint ")


# ---- the registry ---------------------------------------------------------------------------------
async def _ready(settings: GatewaySettings, fake: FakeVLLM) -> Registry:
    return await Registry(settings, fake).ready()


async def _promoted_full(settings: GatewaySettings, tmp_path: Path) -> tuple[FakeSets, Registry, VersionInfo]:
    """A registry whose alias serves a full version (its old set already retired)."""
    fake = FakeSets()
    fake.release_old.set()
    reg = await _ready(settings, fake)
    full = await reg.load(str(write_checkpoint(tmp_path / "ck")))
    await reg.promote(full.name)
    await reg.wait_drained(5)
    return fake, reg, full


async def test_full_version_registers_without_starting_anything(settings: GatewaySettings, tmp_path: Path) -> None:
    fake = FakeSets()
    reg = await _ready(settings, fake)
    info = await reg.load(str(write_checkpoint(tmp_path / "ck")))
    assert (info.state, info.model_dir, info.adapter_path) == ("unloaded", str((tmp_path / "ck").resolve()), None)
    assert fake.started == [] and ("load", info.name) not in fake.calls


async def test_promote_full_switches_sets_and_drains_old(settings: GatewaySettings, tmp_path: Path) -> None:
    fake = FakeSets()
    reg = await _ready(settings, fake)
    adapter = await reg.load(str(write_adapter(tmp_path / "ad")))
    full = await reg.load(str(write_checkpoint(tmp_path / "ck")))
    old_lease = reg.acquire(reg.alias)  # in flight on the old set during the flip
    assert old_lease is not None and old_lease.version == BASE
    result = await reg.promote(full.name)
    assert (result.serving, result.previous) == (full.name, BASE)
    assert fake.started == [(full.name, full.model_dir)]
    lease = reg.acquire(reg.alias)
    assert lease is not None and lease.version == full.name  # new requests go to the new set
    lease.release()
    assert reg.versions[adapter.name].state == "unloaded" and reg.versions[BASE].state == "unloaded"
    assert fake.retired == []  # still draining
    fake.release_old.set()
    old_lease.release()
    await reg.wait_drained(5)
    assert fake.retired == [[BASE]]


async def test_rollback_restarts_previous_base(settings: GatewaySettings, tmp_path: Path) -> None:
    fake, reg, full = await _promoted_full(settings, tmp_path)
    result = await reg.rollback()
    assert (result.serving, result.previous) == (BASE, full.name)
    assert fake.started[-1] == (BASE, None)  # None: the checkpoint the set was first started on
    assert reg.base == BASE and reg.versions[full.name].state == "unloaded"
    await reg.wait_drained(5)
    assert fake.retired == [[BASE], [full.name]]


async def test_failed_start_changes_nothing(settings: GatewaySettings, tmp_path: Path) -> None:
    fake = FakeSets()
    fake.fail_start = "it exited with code 1"
    reg = await _ready(settings, fake)
    full = await reg.load(str(write_checkpoint(tmp_path / "ck")))
    with pytest.raises(UpstreamError) as e:
        await reg.promote(full.name)
    assert "\n" not in e.value.message and f"{BASE} keeps serving" in e.value.message and "/tmp/v.log" in e.value.message
    assert reg.serving == BASE and reg.base == BASE and reg.versions[BASE].state == "loaded"


async def test_adapter_of_old_base_refused_after_switch(settings: GatewaySettings, tmp_path: Path) -> None:
    fake = FakeSets()
    fake.release_old.set()
    reg = await _ready(settings, fake)
    adapter = await reg.load(str(write_adapter(tmp_path / "ad")))
    full = await reg.load(str(write_checkpoint(tmp_path / "ck")))
    await reg.promote(full.name)
    with pytest.raises(BaseConflictError, match="register the adapter again") as e:
        await reg.promote(adapter.name)
    assert e.value.http_status == 409 and reg.serving == full.name
    again = await reg.load(str(tmp_path / "ad"))  # re-registered: loaded on the new base
    assert again.base == full.name
    await reg.promote(again.name)
    assert reg.serving == again.name


async def test_canary_of_full_version_refused(settings: GatewaySettings, tmp_path: Path) -> None:
    reg = await _ready(settings, FakeSets())
    full = await reg.load(str(write_checkpoint(tmp_path / "ck")))
    with pytest.raises(CanaryError, match="full-weight"):
        await reg.start_canary(full.name, 0.1)


async def test_single_upstream_refuses_full_versions(settings: GatewaySettings, tmp_path: Path) -> None:
    reg = await _ready(settings, FakeVLLM())
    with pytest.raises(BaseConflictError, match="--replicas"):
        await reg.load(str(write_checkpoint(tmp_path / "ck")))
    assert list(reg.versions) == [BASE]


async def test_remote_replicas_cannot_start_a_set(settings: GatewaySettings) -> None:
    rs = ReplicaSet(settings, ["http://127.0.0.1:9", "http://127.0.0.1:10"])
    with pytest.raises(BaseConflictError, match="--upstream"):
        await rs.start_base("policy-v1", "/nowhere")
    assert rs.base_name == BASE


async def test_restart_keeps_full_version_record(settings: GatewaySettings, tmp_path: Path) -> None:
    _, _, full = await _promoted_full(settings, tmp_path)
    # A restarted gateway's vLLM serves the base again: the full version is remembered but not serving.
    again = await _ready(settings, FakeSets())
    assert again.versions[full.name].model_dir == full.model_dir
    assert again.serving == BASE and again.base == BASE


def _hung_vllm_set(tmp_path: Path, settings: GatewaySettings) -> tuple[ReplicaSet, Path]:
    """A one-replica set whose next `start_base` runs a "vLLM" that writes its pid and never gets healthy (a real
    process in place of vLLM: only its lifetime matters); returns the set and the pid file."""
    import sys

    from sdk.infra import spawn_tied
    from server import LocalReplica, VLLMConfig, VLLMServer

    pid_file = tmp_path / "new-set.pid"
    shim = tmp_path / "python"
    shim.write_text(f"#!/bin/sh\necho $$ > {pid_file}\nexec {sys.executable} -c 'import time; time.sleep(600)'\n")
    shim.chmod(0o755)
    (tmp_path / "model").mkdir()
    serving = VLLMServer(spawn_tied(["sleep", "600"]), command=["sleep"], host="127.0.0.1", port=9,
                         log_path=tmp_path / "serving.log", startup_s=0.0)
    config = VLLMConfig(model_dir=tmp_path / "model", python=str(shim), log_path=tmp_path / "v.log",
                        start_timeout_s=600)
    return ReplicaSet(settings, [LocalReplica(config, serving)]), pid_file


def _running(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state != "Z"


async def _started(pid_file: Path) -> int:
    for _ in range(200):
        if pid_file.exists() and pid_file.read_text().strip():
            return int(pid_file.read_text())
        await asyncio.sleep(0.05)
    raise AssertionError("the new set's process never started")


async def test_a_cancelled_promote_stops_the_set_it_was_starting(settings: GatewaySettings, tmp_path: Path) -> None:
    """Broken variant (issue 22's known gap): `start_base` awaiting the starting thread without a cancel path; the
    promote's task is cancelled, and the new set's vLLM kept starting (here: ran for its whole 600 s timeout)."""
    rs, pid_file = _hung_vllm_set(tmp_path, settings)
    try:
        task = asyncio.create_task(rs.start_base("policy-v1", None))
        pid = await _started(pid_file)
        assert _running(pid)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await asyncio.wait_for(task, 30)
        assert not _running(pid)  # stopped before the cancel returned, not later
        assert rs._half == 0 and not rs._owned
    finally:
        await rs.close()
        rs.replicas[0].local.stop()  # type: ignore[union-attr]


async def test_a_closing_gateway_stops_the_set_a_promote_was_starting(settings: GatewaySettings,
                                                                       tmp_path: Path) -> None:
    """Broken variant: the starting thread not told that the gateway closes (close() stops only the sets that
    came up): the new set's vLLM outlived the gateway."""
    rs, pid_file = _hung_vllm_set(tmp_path, settings)
    try:
        task = asyncio.create_task(rs.start_base("policy-v1", None))
        pid = await _started(pid_file)
        await rs.close()
        with pytest.raises(UpstreamError, match="closing"):
            await asyncio.wait_for(task, 30)
        assert not _running(pid)
    finally:
        rs.replicas[0].local.stop()  # type: ignore[union-attr]


# ---- the real stack -------------------------------------------------------------------------------
#: Bound on the requests sent while the new set starts and just after the flip. The load is light on purpose (two
#: workers, LOAD_PAUSE_S apart): on 2 cores a new vLLM did not get healthy within 300 s next to an old one kept busy,
#: and CI saw two starts in a row miss 150 s with the workers 0.5 s apart (a healthy start here: 50 s).
MAX_REQUESTS = 2_000
LOAD_PAUSE_S = 1.5
START_TIMEOUT_S = 240.0
PROMPT = [{"role": "user", "content": "What is 2+3?"}]


def _answer(client: httpx.Client) -> tuple[str, str]:
    r = client.post("/v1/chat/completions", json={"model": "policy", "messages": PROMPT, "max_tokens": 8,
                                                  "temperature": 0, "ignore_eos": True})
    r.raise_for_status()
    body = r.json()
    return body["model"], body["choices"][0]["message"]["content"]


@pytest.mark.slow
@pytest.mark.vllm
def test_blue_green_under_load(looplift_model_dir: Path, tmp_path: Path) -> None:
    from server import AdminClient, LocalReplica, VLLMConfig, start_gateway_in_thread, start_local_replicas
    from trainer._base_model import write_untrained

    new_dir = write_untrained(tmp_path / "new-checkpoint", seed=1)  # same shapes, other weights: other answers
    # A healthy start here takes 20-50 s; a hung one (CI once saw the new vLLM print nothing for 300 s) is cut at
    # START_TIMEOUT_S, dumps its stacks into its log (reported below) and the promote is tried once more; a second
    # failure fails the test with both logs' ends, the stacks where the starts hung.
    local: list[LocalReplica] = start_local_replicas(VLLMConfig(model_dir=looplift_model_dir, port=0, warm_up=True,
                                                                log_path=tmp_path / "vllm.log",
                                                                start_timeout_s=START_TIMEOUT_S), 1)
    old_pid = local[0].pid
    settings = GatewaySettings(admin_token="t", state_dir=tmp_path / "state", alias="policy")
    gw = start_gateway_in_thread(settings, local, port=0)
    stop = threading.Event()
    outcomes: Counter[str] = Counter()
    served: Counter[str] = Counter()

    def load() -> None:
        with httpx.Client(base_url=gw.url, timeout=120) as c:
            while not stop.is_set() and sum(outcomes.values()) < MAX_REQUESTS:
                try:
                    model, _ = _answer(c)
                    outcomes["ok"] += 1
                    served[model] += 1
                except httpx.HTTPError as e:
                    outcomes[f"failed: {e}"] += 1
                time.sleep(LOAD_PAUSE_S)

    try:
        with httpx.Client(base_url=gw.url, timeout=120) as c:
            before = _answer(c)
        admin = AdminClient(gw.url, "t")
        full = admin.load(str(new_dir))
        workers = [threading.Thread(target=load) for _ in range(2)]
        for w in workers:
            w.start()
        t0 = time.perf_counter()
        try:
            swap = admin.promote(full.name)
        except UpstreamError as e:  # the start failed; the old set must have kept serving, and a retry may work
            log = tmp_path / f"vllm-{full.name}.log"
            first = f"the first start failed ({e.message}); its log ends with:\n" + _log_end(log)
            warnings.warn(f"blue/green: {first}", stacklevel=1)
            assert set(outcomes) == {"ok"} and served[full.name] == 0
            t0 = time.perf_counter()
            try:
                swap = admin.promote(full.name)
            except UpstreamError as again:
                pytest.fail(f"{first}\n\nthe second start failed too ({again.message}); the log ends with:\n"
                            + _log_end(log, 60))
        flip_s = time.perf_counter() - t0
        time.sleep(2)
        stop.set()
        for w in workers:
            w.join(60)
        with httpx.Client(base_url=gw.url, timeout=120) as c:
            after = _answer(c)
        old_gone = _wait_gone(old_pid)
        print(f"\nblue/green: promote (start+warm+flip) {flip_s:.1f} s, requests {dict(outcomes)}, served "
              f"{dict(served)}; before {before}, after {after}")
        assert swap.serving == full.name
        assert set(outcomes) == {"ok"} and served[before[0]] > 0 and served[full.name] > 0  # across the flip
        assert after[0] == full.name and after[1] != before[1]
        assert old_gone, f"the old vLLM (pid {old_pid}) still runs"
        back = admin.rollback()
        with httpx.Client(base_url=gw.url, timeout=120) as c:
            again = _answer(c)
        assert back.serving == before[0] and again == before
        assert [r.pid for r in admin.replicas()] != [old_pid]
        admin.close()
    finally:
        stop.set()
        gw.stop()  # stops the sets the gateway started itself
        for lr in local:
            lr.stop()


def _log_end(log: Path, lines: int = 40) -> str:
    return "\n".join(log.read_text(errors="replace").splitlines()[-lines:])


def _wait_gone(pid: int, timeout: float = 60) -> bool:
    import os

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return True
        time.sleep(0.2)
    return False
