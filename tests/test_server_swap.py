"""The hot-swap core (`server._registry.Registry`) on its own: no app, no HTTP, no vLLM.

vLLM is replaced by `FakeVLLM`, an in-memory implementation of the registry's `AdapterControl` protocol
that records every call, can refuse a load, can hold loads at a gate (to catch the registry mid-swap), and
checks that calls never overlap. A request is a lease: `acquire` when it starts, `release` at its last byte
(a stream simply holds its lease longer). One property per test; the real-vLLM versions of the important
ones are in tests/test_server.py.
"""

from __future__ import annotations

import asyncio
import json
import random
from pathlib import Path
from typing import Optional

import pytest

from _adapters import write_adapter
from server import GatewaySettings, NothingToRollBackError, ServerError, UpstreamError, VersionExistsError
from server._registry import Lease, Registry

BASE = "policy-v0"


class FakeVLLM:
    """In-memory `AdapterControl`: what is loaded, every call in order, and knobs to refuse, block or be down."""

    def __init__(self, loaded: Optional[dict[str, Optional[str]]] = None) -> None:
        self.loaded: dict[str, Optional[str]] = {BASE: None} if loaded is None else dict(loaded)
        self.calls: list[tuple[str, str]] = []
        self.refuse: set[str] = set()
        self.gate: Optional[asyncio.Event] = None
        self.down = False
        self._active = 0
        self.max_active = 0

    async def _call(self, op: str, name: str) -> None:
        self._active += 1
        self.max_active = max(self.max_active, self._active)
        try:
            self.calls.append((op, name))
            if self.gate is not None:
                await self.gate.wait()
            await asyncio.sleep(0)  # a real call yields to the loop
            if self.down:
                raise UpstreamError("vLLM is not reachable (fake)")
        finally:
            self._active -= 1

    async def load(self, name: str, path: str) -> None:
        await self._call("load", name)
        if name in self.refuse:
            raise UpstreamError(f"vLLM refused /v1/load_lora_adapter: {name} (fake)", status=400)
        self.loaded[name] = path

    async def unload(self, name: str) -> None:
        await self._call("unload", name)
        if name not in self.loaded:
            raise UpstreamError(f"{name} is not loaded (fake)", status=404)
        del self.loaded[name]

    async def models(self) -> dict[str, Optional[str]]:
        await self._call("models", "")
        return dict(self.loaded)


@pytest.fixture
def settings(tmp_path: Path) -> GatewaySettings:
    return GatewaySettings(admin_token="t", state_dir=tmp_path / "state")


@pytest.fixture
def adapters(tmp_path: Path) -> list[str]:
    return [str(write_adapter(tmp_path / f"adapter-{i}")) for i in range(4)]


async def _registry(settings: GatewaySettings, fake: FakeVLLM) -> Registry:
    return await Registry(settings, fake).ready()


async def _serving_v1(settings: GatewaySettings, fake: FakeVLLM, adapters: list[str]) -> Registry:
    reg = await _registry(settings, fake)
    await reg.load(adapters[0])
    await reg.promote("policy-v1")
    return reg


async def _swapped_under_a_request(settings: GatewaySettings, fake: FakeVLLM, adapters: list[str]) -> tuple[Registry, Lease]:
    """v1 served, one request in flight on it, then v2 promoted."""
    reg = await _serving_v1(settings, fake, adapters)
    lease = _acquire(reg)
    await reg.load(adapters[1])
    await reg.promote("policy-v2")
    return reg, lease


def _acquire(reg: Registry, model: str = "policy") -> Lease:
    lease = reg.acquire(model)
    assert lease is not None
    return lease


async def _settle() -> None:
    for _ in range(5):  # let background drain tasks run
        await asyncio.sleep(0)


# ---- the flip --------------------------------------------------------------------------------------
async def test_no_new_request_reaches_the_old_version_after_the_flip(settings: GatewaySettings, adapters: list[str]) -> None:
    fake = FakeVLLM()
    reg = await _serving_v1(settings, fake, adapters)
    await reg.load(adapters[1])
    await reg.wait_drained()
    held = [_acquire(reg) for _ in range(3)]  # in flight on v1 across the swap
    reg.versions["policy-v2"].state = "unloaded"  # force a re-load, so the swap takes a while
    fake.loaded.pop("policy-v2")
    fake.gate = asyncio.Event()
    promote = asyncio.ensure_future(reg.promote("policy-v2"))
    await _settle()
    assert fake.calls[-1] == ("load", "policy-v2") and not promote.done()
    assert _acquire(reg).version == "policy-v1"  # mid-swap: the old version still answers
    fake.gate.set()
    result = await promote
    assert (result.serving, result.previous) == ("policy-v2", "policy-v1")
    assert {_acquire(reg).version for _ in range(10)} == {"policy-v2"}  # from the flip on: only the new one
    assert all(lease.version == "policy-v1" for lease in held)  # leases keep what they were given


async def test_old_adapter_unloaded_only_after_its_last_lease(settings: GatewaySettings, adapters: list[str]) -> None:
    fake = FakeVLLM()
    reg, stream = await _swapped_under_a_request(settings, fake, adapters)  # a stream: released at its last byte
    short = [_acquire(reg, "policy-v1") for _ in range(3)]
    for lease in short:
        lease.release()
    for _ in range(20):  # any number of loop turns: the stream still holds v1
        await asyncio.sleep(0)
        assert "policy-v1" in fake.loaded and reg.versions["policy-v1"].state == "loaded"
    assert reg.in_flight()["policy-v1"] == 1
    stream.release()
    await reg.wait_drained()
    assert "policy-v1" not in fake.loaded and reg.versions["policy-v1"].state == "unloaded"
    assert [h.action for h in reg.history][-1] == "unload"
    assert reg.acquire("policy-v1") is None  # an unloaded version no longer answers by name


async def test_request_by_name_during_the_drain_delays_the_unload(settings: GatewaySettings, adapters: list[str]) -> None:
    fake = FakeVLLM()
    reg, first = await _swapped_under_a_request(settings, fake, adapters)
    by_name = _acquire(reg, "policy-v1")  # still loaded while draining, so it may still be asked for
    first.release()
    await _settle()
    assert "policy-v1" in fake.loaded
    by_name.release()
    by_name.release()  # idempotent: a second release does not count twice
    await reg.wait_drained()
    assert "policy-v1" not in fake.loaded and reg.in_flight().get("policy-v1") is None


async def test_promoted_again_while_draining_is_not_unloaded(settings: GatewaySettings, adapters: list[str]) -> None:
    fake = FakeVLLM()
    reg, lease = await _swapped_under_a_request(settings, fake, adapters)
    await reg.promote("policy-v1")  # back before the drain finished
    lease.release()
    await reg.wait_drained()
    assert "policy-v1" in fake.loaded and reg.serving == "policy-v1"
    assert "policy-v2" not in fake.loaded  # and the version it replaced drains as usual


async def test_base_version_is_never_unloaded(settings: GatewaySettings, adapters: list[str]) -> None:
    fake = FakeVLLM()
    reg = await _serving_v1(settings, fake, adapters)
    await reg.wait_drained()
    assert BASE in fake.loaded and ("unload", BASE) not in fake.calls
    assert reg.model_ids() == ["policy", BASE, "policy-v1"]


# ---- unload on request ------------------------------------------------------------------------------
async def test_unload_waits_for_the_last_request_then_unloads(settings: GatewaySettings, adapters: list[str]) -> None:
    """Mutant: an unload that does not wait for the drain (a request answered by the version by name loses its
    adapter mid-answer)."""
    fake = FakeVLLM()
    reg = await _serving_v1(settings, fake, adapters)
    await reg.load(adapters[1])
    stream = _acquire(reg, "policy-v2")
    unload = asyncio.ensure_future(reg.unload("policy-v2"))
    for _ in range(20):
        await asyncio.sleep(0)
        assert not unload.done() and "policy-v2" in fake.loaded
    stream.release()
    info = await unload
    assert (info.name, info.state) == ("policy-v2", "unloaded") and "policy-v2" not in fake.loaded
    assert reg.acquire("policy-v2") is None and reg.history[-1].action == "unload"
    assert (await reg.unload("policy-v2")).state == "unloaded"  # again: answered as it is, vLLM not asked
    assert fake.calls.count(("unload", "policy-v2")) == 1


async def test_an_unloaded_version_stays_unloaded_across_a_restart_and_its_name_is_kept(
    settings: GatewaySettings, adapters: list[str],
) -> None:
    """Mutants: the version dropped from the registry (its name reused by the next load, which vLLM's prefix
    cache can answer with stale blocks), the new state not saved (registry.json still says loaded), a restart
    that loads it again."""
    fake = FakeVLLM()
    reg = await _serving_v1(settings, fake, adapters)
    await reg.load(adapters[1])
    await reg.unload("policy-v2")
    stored = json.loads(settings.registry_path.read_text())
    assert {v["name"]: v["state"] for v in stored["versions"]}["policy-v2"] == "unloaded"
    await reg.close()
    again = await _registry(settings, fake)
    assert again.versions["policy-v2"].state == "unloaded" and "policy-v2" not in fake.loaded
    assert again.view().versions[-1].name == "policy-v2"
    assert (await again.load(adapters[2])).name == "policy-v3"


async def test_unload_refused_by_vllm_raises_and_the_version_stays_loaded(
    settings: GatewaySettings, adapters: list[str],
) -> None:
    """Mutant: the refusal swallowed as it is for a background drain (the caller told "unloaded" while the
    adapter stays in vLLM: the leak goes on unseen)."""
    fake = FakeVLLM()
    reg = await _serving_v1(settings, fake, adapters)
    await reg.load(adapters[1])
    fake.down = True
    with pytest.raises(UpstreamError, match="not reachable"):
        await reg.unload("policy-v2")
    assert reg.versions["policy-v2"].state == "loaded" and _acquire(reg, "policy-v2").version == "policy-v2"


async def test_promoted_while_its_unload_drains_is_refused_and_kept(settings: GatewaySettings, adapters: list[str]) -> None:
    """Mutant: a drain that gave up (the version serves now) answered as a success."""
    fake = FakeVLLM()
    reg = await _serving_v1(settings, fake, adapters)
    await reg.load(adapters[1])
    lease = _acquire(reg, "policy-v2")
    unload = asyncio.ensure_future(reg.unload("policy-v2"))
    await _settle()
    await reg.promote("policy-v2")
    lease.release()
    with pytest.raises(ServerError, match="serves the alias") as e:
        await unload
    assert (e.value.http_status, e.value.code) == (409, "version_in_use")
    assert reg.serving == "policy-v2" and "policy-v2" in fake.loaded


# ---- rollback --------------------------------------------------------------------------------------
async def test_rollback_reloads_the_previous_version_and_drains_the_current(
    settings: GatewaySettings, adapters: list[str],
) -> None:
    fake = FakeVLLM()
    reg = await _serving_v1(settings, fake, adapters)
    await reg.load(adapters[1])
    await reg.promote("policy-v2")
    await reg.wait_drained()
    assert "policy-v1" not in fake.loaded
    lease = _acquire(reg)
    back = await reg.rollback()
    assert (back.serving, back.previous) == ("policy-v1", "policy-v2")
    assert fake.loaded["policy-v1"] is not None and _acquire(reg).version == "policy-v1"
    assert "policy-v2" in fake.loaded  # its request is still running
    lease.release()
    await reg.wait_drained()
    assert "policy-v2" not in fake.loaded
    assert (await reg.rollback()).serving == BASE
    with pytest.raises(NothingToRollBackError, match="nothing to roll back"):
        await reg.rollback()


# ---- refusals --------------------------------------------------------------------------------------
async def test_refused_load_leaves_everything_as_it_was(settings: GatewaySettings, adapters: list[str]) -> None:
    fake = FakeVLLM()
    reg = await _serving_v1(settings, fake, adapters)
    before = (settings.registry_path.read_text(), dict(fake.loaded), reg.serving)
    fake.refuse.add("policy-v2")
    with pytest.raises(UpstreamError, match="refused"):
        await reg.load(adapters[1])
    assert "policy-v2" not in reg.versions
    assert (settings.registry_path.read_text(), dict(fake.loaded), reg.serving) == before
    fake.refuse.clear()
    assert (await reg.load(adapters[1])).name == "policy-v2"  # the name was not burnt


async def test_refused_reload_on_promote_keeps_the_serving_version(settings: GatewaySettings, adapters: list[str]) -> None:
    fake = FakeVLLM()
    reg = await _serving_v1(settings, fake, adapters)
    await reg.load(adapters[1])
    await reg.promote("policy-v2")
    await reg.wait_drained()  # v1 is unloaded now, so promoting it needs a re-load
    stack, history = list(reg.stack), len(reg.history)
    fake.refuse.add("policy-v1")
    with pytest.raises(UpstreamError):
        await reg.promote("policy-v1")
    assert reg.serving == "policy-v2" and reg.stack == stack and len(reg.history) == history
    assert _acquire(reg).version == "policy-v2"
    assert json.loads(settings.registry_path.read_text())["serving"] == "policy-v2"


async def test_taken_name_is_refused_before_vllm_is_asked(settings: GatewaySettings, adapters: list[str]) -> None:
    fake = FakeVLLM()
    reg = await _serving_v1(settings, fake, adapters)
    calls = len(fake.calls)
    for name in ("policy-v1", "policy"):
        with pytest.raises(VersionExistsError):
            await reg.load(adapters[1], name)
    assert len(fake.calls) == calls


# ---- concurrency -----------------------------------------------------------------------------------
async def test_concurrent_promotes_run_one_after_the_other(settings: GatewaySettings, adapters: list[str]) -> None:
    fake = FakeVLLM()
    reg = await _registry(settings, fake)
    for path in adapters[:2]:
        await reg.load(path)
    for name in ("policy-v1", "policy-v2"):  # both need a re-load when promoted
        reg.versions[name].state = "unloaded"
        fake.loaded.pop(name)
    fake.gate = asyncio.Event()
    first = asyncio.ensure_future(reg.promote("policy-v1"))
    second = asyncio.ensure_future(reg.promote("policy-v2"))
    await _settle()
    assert fake.calls[-1] == ("load", "policy-v1")  # the second waits for the first, not for vLLM
    fake.gate.set()
    a, b = await asyncio.gather(first, second)
    assert fake.max_active == 1
    assert (a.previous, a.serving, b.previous, b.serving) == (BASE, "policy-v1", "policy-v1", "policy-v2")
    assert reg.stack == [BASE, "policy-v1", "policy-v2"]
    await reg.wait_drained()
    assert set(fake.loaded) == {BASE, "policy-v2"}


async def test_random_traffic_and_swaps_never_lose_an_adapter(settings: GatewaySettings, tmp_path: Path) -> None:
    # 200 requests of random length against 12 random promotes and rollbacks: every request's version stays
    # loaded in vLLM for the whole request, and every request that starts after a flip gets the new version.
    rng = random.Random(7)
    fake = FakeVLLM()
    reg = await _registry(settings, fake)
    names = [(await reg.load(str(write_adapter(tmp_path / f"r{i}")))).name for i in range(4)]
    violations: list[str] = []

    async def request(i: int) -> None:
        await asyncio.sleep(rng.random() * 0.05)
        expected = reg.serving
        lease = _acquire(reg)
        if lease.version != expected:
            violations.append(f"request {i} got {lease.version}, serving was {expected}")
        for _ in range(rng.randrange(1, 30)):
            if lease.version not in fake.loaded:
                violations.append(f"request {i}: {lease.version} unloaded under it")
            await asyncio.sleep(rng.random() * 0.002)
        lease.release()

    replaced: set[str] = set()

    async def swaps() -> None:
        for _ in range(12):
            await asyncio.sleep(rng.random() * 0.01)
            if len(reg.stack) > 1 and rng.random() < 0.3:
                replaced.add((await reg.rollback()).previous)
            else:
                replaced.add((await reg.promote(rng.choice([n for n in names if n != reg.serving]))).previous)

    await asyncio.gather(swaps(), *(request(i) for i in range(200)))
    await reg.wait_drained()
    assert not violations, violations[:5]
    assert sum(reg.in_flight().values()) == 0 and fake.max_active == 1
    # Every version the alias left is unloaded by now (versions loaded but never promoted stay loaded).
    assert not (replaced - {BASE, reg.serving}) & set(fake.loaded), (replaced, reg.serving, fake.loaded)
    assert reg.serving in fake.loaded


# ---- restart ---------------------------------------------------------------------------------------
async def test_restart_reconciles_with_what_vllm_has_loaded(settings: GatewaySettings, adapters: list[str]) -> None:
    fake = FakeVLLM()
    reg = await _serving_v1(settings, fake, adapters)
    await reg.load(adapters[1])  # v2: loaded, not serving
    await reg.close()
    # vLLM restarted: it lost v1, kept v2 under another path, and holds an adapter nobody registered.
    restarted = FakeVLLM({BASE: None, "policy-v2": adapters[3], "stray": adapters[2]})
    again = await _registry(settings, restarted)
    assert again.serving == "policy-v1" and restarted.loaded["policy-v1"] == adapters[0]
    assert "stray" not in restarted.loaded
    assert "policy-v2" not in restarted.loaded and again.versions["policy-v2"].state == "unloaded"
    assert again.history[-1].action == "restore" and again.history[-1].version == "policy-v1"
    assert [h.action for h in again.history[:3]] == ["load", "promote", "load"]  # history survived
    assert (await again.load(adapters[2])).name == "policy-v3"  # names are never reused


async def test_restart_falls_back_when_the_serving_adapter_cannot_be_loaded(
    settings: GatewaySettings, adapters: list[str],
) -> None:
    reg = await _serving_v1(settings, FakeVLLM(), adapters)
    await reg.close()
    restarted = FakeVLLM()
    restarted.refuse.add("policy-v1")
    again = await _registry(settings, restarted)
    assert again.serving == BASE and _acquire(again).version == BASE
    assert again.history[-1].action == "rollback" and "restore failed" in (again.history[-1].detail or "")


async def test_ready_retries_until_vllm_answers(settings: GatewaySettings) -> None:
    fake = FakeVLLM()
    fake.down = True
    reg = Registry(settings, fake)
    with pytest.raises(UpstreamError, match="not reachable"):
        await reg.ready()
    assert not reg.started
    fake.down = False
    assert (await reg.ready()).serving == BASE


async def test_vllm_serving_another_base_model_is_refused(settings: GatewaySettings) -> None:
    with pytest.raises(UpstreamError, match="--served-model-name policy-v0"):
        await Registry(settings, FakeVLLM({"other": None})).ready()


async def test_corrupt_registry_file_is_set_aside(settings: GatewaySettings) -> None:
    settings.registry_path.parent.mkdir(parents=True)
    settings.registry_path.write_text('{"schema": 1, "alias": "policy", "versions": [{"name": 3}]')
    reg = await _registry(settings, FakeVLLM())
    assert reg.serving == BASE and list(reg.versions) == [BASE]
    assert settings.registry_path.with_suffix(".corrupt").exists()
    assert json.loads(settings.registry_path.read_text())["serving"] == BASE
