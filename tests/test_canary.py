"""Canary routing and decisions, the watch after a promotion: the registry with an in-memory vLLM
(`FakeVLLM`) and a real collector (SQLite) whose trajectories are the live signal. One property per test."""

from __future__ import annotations

import asyncio
from collections import Counter
from pathlib import Path
from typing import Any, Iterator

import pytest

from _adapters import write_adapter
from collector import CollectorSettings, ServerHandle, open_store, serve_in_thread
from sdk import Message, Outcome, Trajectory
from server import CanaryConfig, CanaryError, GatewaySettings
from server._canary import CanaryController, compare
from server._collector_link import CollectorLink
from server._registry import Registry
from test_server_swap import FakeVLLM

KEY = "col-key"
CFG = CanaryConfig(min_episodes=20, alpha=0.05, max_s=3600, watch_s=3600, poll_s=0.05)


@pytest.fixture
def collector(tmp_path: Path) -> Iterator[tuple[ServerHandle, Any]]:
    db = f"sqlite:///{tmp_path / 'c.db'}"
    store = open_store(db)
    with serve_in_thread(CollectorSettings(db_url=db, api_keys=(KEY,))) as handle:
        yield handle, store
    store.close()


def _live(store: Any, version: str, successes: int, failures: int, *, rated: bool = False, tag: str = "") -> None:
    """`successes + failures` episodes `version` served: verifier outcomes, or (rated) user ratings only."""
    ts = []
    for i in range(successes + failures):
        ok = i < successes
        ts.append(Trajectory(id=f"{version}-{tag}-{i}", task_id="t", model="policy", served_version=version,
                             messages=[Message(role="user", content="q"), Message(role="assistant", content="a")],
                             outcome=None if rated else Outcome(success=ok, reward=float(ok))))
    store.add_trajectories(ts)
    if rated:
        from sdk import Feedback

        for i, t in enumerate(ts):
            store.add_feedback(Feedback(trajectory_id=t.id, rating=1.0 if i < successes else -1.0))


async def _setup(tmp_path: Path, url: str, cfg: CanaryConfig = CFG) -> tuple[Registry, CanaryController, CollectorLink]:
    settings = GatewaySettings(admin_token="t", state_dir=tmp_path / "state", canary=cfg)
    reg = await Registry(settings, FakeVLLM()).ready()
    for i in range(2):
        await reg.load(str(write_adapter(tmp_path / f"a{i}")))
    link = CollectorLink(url, KEY)
    return reg, CanaryController(reg, lambda: link, cfg), link


def test_compare_is_a_one_sided_two_proportion_test() -> None:
    def counts(k: int, n: int) -> dict[str, int]:
        return {"with_outcome": n, "successes": k, "with_feedback": 0, "positive_feedback": 0}

    worse = compare(counts(10, 40), counts(30, 40), 20)
    assert worse is not None and worse["signal"] == "success" and worse["p_value"] < 0.001
    same = compare(counts(30, 40), counts(30, 40), 20)
    assert same is not None and abs(same["p_value"] - 0.5) < 1e-9
    assert compare(counts(5, 10), counts(30, 40), 20) is None  # not enough signal yet


async def test_canary_routes_its_fraction_and_keeps_a_session_on_one_version(tmp_path: Path) -> None:
    reg = await Registry(GatewaySettings(admin_token="t", state_dir=tmp_path / "s"), FakeVLLM()).ready()
    await reg.load(str(write_adapter(tmp_path / "a")))
    await reg.start_canary("policy-v1", 0.25)
    seen = Counter()
    for _ in range(4000):
        lease = reg.acquire("policy")
        assert lease is not None
        seen[lease.version] += 1
        lease.release()
    assert 800 < seen["policy-v1"] < 1200 and seen["policy-v0"] + seen["policy-v1"] == 4000
    for session in ("alice", "bob", "carol", "dave"):
        versions = set()
        for _ in range(50):
            lease = reg.acquire("policy", session)
            assert lease is not None
            versions.add(lease.version)
            lease.release()
        assert len(versions) == 1
    assert reg.acquire("policy-v0") is not None  # by version name, no canary routing
    with pytest.raises(CanaryError, match="already serves"):
        await reg.start_canary("policy-v0", 0.1)


async def test_canary_not_worse_is_promoted_with_its_figures(tmp_path: Path, collector: Any) -> None:
    handle, store = collector
    reg, ctl, link = await _setup(tmp_path, handle.url)
    await reg.start_canary("policy-v1", 0.1)
    _live(store, "policy-v1", 19, 6)
    _live(store, "policy-v0", 60, 30)
    await ctl.tick()
    assert reg.serving == "policy-v1" and reg.canary is None
    d = ctl.view().decisions[-1]
    assert (d.kind, d.action, d.version, d.against) == ("canary", "promote", "policy-v1", "policy-v0")
    assert d.figures["candidate"] == {"k": 19, "n": 25, "rate": 0.76} and d.figures["signal"] == "success"
    event = next(h for h in reversed(reg.history) if h.action == "canary")
    assert event.detail.startswith("promoted: not worse") and event.figures["p_value"] == d.figures["p_value"]
    assert reg.history[-1].action == "promote"
    assert ctl.view().watch is not None  # the promotion is now watched
    await link.close()


async def test_canary_worse_on_user_ratings_is_dropped_and_unloaded(tmp_path: Path, collector: Any) -> None:
    handle, store = collector
    reg, ctl, link = await _setup(tmp_path, handle.url)
    await reg.start_canary("policy-v2", 0.5)
    _live(store, "policy-v2", 5, 20, rated=True)  # a black-box app: ratings, no verifier
    _live(store, "policy-v0", 20, 5, rated=True)
    await ctl.tick()
    assert reg.serving == "policy-v0" and reg.canary is None
    d = ctl.view().decisions[-1]
    assert d.action == "drop" and d.figures["signal"] == "positive feedback" and d.figures["p_value"] < 0.05
    await reg.wait_drained()
    assert reg.versions["policy-v2"].state == "unloaded"
    await link.close()


async def test_canary_without_signal_is_dropped_after_max_s(tmp_path: Path, collector: Any) -> None:
    handle, store = collector
    reg, ctl, link = await _setup(tmp_path, handle.url, CanaryConfig(min_episodes=20, max_s=0.2, poll_s=0.05))
    await reg.start_canary("policy-v1", 0.1)
    _live(store, "policy-v1", 3, 0)
    await ctl.tick()
    assert reg.canary is not None  # too early to say
    await asyncio.sleep(0.3)
    await ctl.tick()
    assert reg.canary is None and reg.serving == "policy-v0"
    assert "not enough live signal" in ctl.view().decisions[-1].reason
    await link.close()


async def test_promotion_whose_live_signal_falls_is_rolled_back_automatically(tmp_path: Path, collector: Any) -> None:
    handle, store = collector
    reg, ctl, link = await _setup(tmp_path, handle.url)
    _live(store, "policy-v0", 27, 3, tag="before")  # the serving version's record before the promotion
    await asyncio.sleep(0.05)
    await reg.promote("policy-v1")
    _live(store, "policy-v1", 25, 5, tag="ok")  # no significant fall: kept for now
    await ctl.tick()
    assert reg.serving == "policy-v1"
    _live(store, "policy-v1", 2, 28, tag="bad")  # then it falls apart
    await ctl.tick()
    assert reg.serving == "policy-v0"
    assert reg.history[-1].action == "auto_rollback" and reg.history[-1].figures is not None
    assert "live signal fell" in (reg.history[-1].detail or "")
    d = ctl.view().decisions[-1]
    assert (d.kind, d.action) == ("watch", "rollback") and ctl.view().watch is None
    await link.close()


async def test_controller_loop_decides_a_running_canary(tmp_path: Path, collector: Any) -> None:
    handle, store = collector
    reg, ctl, link = await _setup(tmp_path, handle.url)
    ctl.start()
    await reg.start_canary("policy-v1", 0.2)
    _live(store, "policy-v1", 20, 0, tag="c")
    _live(store, "policy-v0", 20, 0, tag="s")
    ctl.poke()
    for _ in range(100):
        if reg.canary is None:
            break
        await asyncio.sleep(0.05)
    await ctl.stop()
    assert reg.serving == "policy-v1"
    await link.close()
