"""The canary on the real stack: vLLM CPU (the session `vllm_server`), the gateway, the collector over HTTP,
the trainer's `CanaryWatch` deciding through the admin API.

The app is a plain `openai` client that sends `X-Looplift-Session` and records the version that answered
(the `model` field vLLM writes) in its trajectory. What it cannot get from the tiny test model is a real
difference in quality between two random LoRA adapters, so its verifier stands in for the app's users:
each version has a success rate (`QUALITY`), applied deterministically per episode. Everything between —
the split, the served version, ingest, the live windows per version, the always-valid tests, the admin calls,
the history — is the real thing.

One test walks the three decisions in order (a worse candidate is dropped, a better one promoted, the
promoted one rolled back when its live signal falls below the replaced version's), since each needs the
previous state; one test checks the admin API's validation over HTTP.
"""

from __future__ import annotations

import time
from collections import Counter
from pathlib import Path
from typing import Callable, Iterator

import httpx
import openai
import pytest

from collector import CollectorSettings, ServerHandle, serve_in_thread
from sdk import CollectorClient, Message, Outcome, Trajectory
from server import AdminClient, CanaryError, GatewayHandle, VersionNotFoundError
from trainer._canary import CanaryConfig, CanaryWatch, WatchConfig

pytestmark = [pytest.mark.vllm, pytest.mark.slow]

ADMIN, KEY = "canary-admin", "canary-key"
#: Episodes (of 20) each version's "users" count as a success.
QUALITY = {"policy-v1": 10, "policy-v2": 2, "policy-v3": 19}
CONFIG = CanaryConfig(min_samples=20, max_samples=200, watch=WatchConfig(window_s=3600, min_samples=20, tolerance=0.1))


@pytest.fixture
def collector(tmp_path: Path) -> Iterator[ServerHandle]:
    handle = serve_in_thread(CollectorSettings(db_url=f"sqlite:///{tmp_path / 'c.db'}", api_keys=(KEY,)), port=0)
    try:
        yield handle
    finally:
        handle.stop()


def _episodes(gw: GatewayHandle, collector: ServerHandle, sessions: range, quality: dict[str, int],
              spool: Path) -> dict[int, str]:
    """One chat turn per session through the alias, judged by `quality`, sent to the collector (ingest is
    idempotent by id: a session sent again is not counted twice); returns session -> the version that answered."""
    client = openai.OpenAI(base_url=f"{gw.url}/v1", api_key="none", max_retries=0, timeout=120)
    sink = CollectorClient(collector.url, api_key=KEY, spool_dir=spool)
    served: dict[int, str] = {}
    try:
        for i in sessions:
            msgs = [{"role": "user", "content": f"episode {i}"}]
            r = client.chat.completions.create(model="policy", messages=msgs, max_tokens=2,  # type: ignore[arg-type]
                                               extra_headers={"X-Looplift-Session": f"s{i}"})
            version = served[i] = r.model
            ok = i % 20 < quality[version]
            sink.submit(Trajectory(id=f"ep-{i}", app="shop", task_id=f"t{i}", model="policy", served_version=version,
                                   messages=[Message(role="user", content=msgs[0]["content"]),
                                             Message(role="assistant", content=r.choices[0].message.content or "")],
                                   outcome=Outcome(success=ok, reward=1.0 if ok else 0.0)))
        assert sink.flush(timeout=60)
    finally:
        sink.close()
        client.close()
    return served


def _count(served: dict[int, str]) -> dict[str, int]:
    return dict(Counter(served.values()))


def _wait(pred: Callable[[], bool], what: str, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while not pred():
        assert time.monotonic() < deadline, f"timed out waiting for: {what}"
        time.sleep(0.2)


def test_worse_canary_dropped_better_promoted_falling_one_rolled_back(
    gateway: GatewayHandle, collector: ServerHandle, looplift_new_adapter: Callable[[int], Path], tmp_path: Path,
) -> None:
    admin = AdminClient(gateway.url, ADMIN)
    for i in range(3):
        admin.load(str(looplift_new_adapter(i)))
    admin.promote("policy-v1")
    said: list[str] = []
    watch = CanaryWatch(f"sqlite:///{tmp_path / 'c.db'}", lambda: AdminClient(gateway.url, ADMIN), app="shop",
                        runs_dir=tmp_path / "runs", config=CONFIG, status=said.append)
    spool = tmp_path / "spool"
    try:
        # 1. a worse candidate (2 of 20 vs 10 of 20) at 50%: dropped (E(worse) is ~27 at 30 per side, ~160 at 40)
        admin.start_canary("policy-v2", 0.5)
        served = _episodes(gateway, collector, range(0, 120), QUALITY, spool)
        assert set(served.values()) == {"policy-v1", "policy-v2"} and min(_count(served).values()) >= 35
        again = _episodes(gateway, collector, range(0, 20), QUALITY, spool)  # the same sessions: the same versions
        assert again == {i: served[i] for i in range(20)}
        verdict = watch.tick()
        assert verdict is not None and verdict.decision == "drop", said
        assert verdict.figures["p_worse"] <= CONFIG.alpha
        view = admin.canary()
        assert view.canary is None and view.serving == "policy-v1"
        dropped = view.decisions[-1]
        assert (dropped.canary, dropped.version) == ("drop", "policy-v2") and dropped.figures is not None
        assert dropped.figures["candidate_n"] >= 20 and dropped.figures["p_worse"] == verdict.figures["p_worse"]
        _wait(lambda: "policy-v2" not in {m.id for m in openai.OpenAI(base_url=f"{gateway.url}/v1", api_key="x").models.list()},
              "the dropped candidate unloaded")

        # 2. a better candidate (19 of 20 vs 10 of 20): promoted (E(better) is ~100 at 30 per side)
        admin.start_canary("policy-v3", 0.5)
        waiting = watch.tick()  # no episodes yet: it waits
        assert waiting is not None and waiting.decision == "wait" and len(watch.decisions) == 1
        served = _episodes(gateway, collector, range(200, 320), QUALITY, spool)
        assert min(_count(served).values()) >= 35
        verdict = watch.tick()
        assert verdict is not None and verdict.decision == "promote", said
        assert verdict.figures["p_better"] <= CONFIG.alpha
        view = admin.canary()
        assert view.serving == "policy-v3" and view.canary is None and view.decisions[-1].canary == "promote"

        # 3. the promoted version's live signal falls (0 of 30) far below policy-v1's before the promotion (~50%
        #    of ~120) - 10 points: E(fell) is in the thousands
        served = _episodes(gateway, collector, range(400, 430), {**QUALITY, "policy-v3": 0}, spool)
        assert _count(served) == {"policy-v3": 30}
        verdict = watch.tick()
        assert verdict is not None and verdict.decision == "rollback", said
        assert verdict.figures["reference"] == "policy-v1" and verdict.figures["live_n"] == 30
        assert verdict.figures["p_fell"] <= CONFIG.alpha
        view = admin.canary()
        assert view.serving == "policy-v1" and view.decisions[-1].canary == "rollback"
        actions = [h.action for h in admin.versions().history]  # (an "unload" of the drained one may follow)
        last_rollback = len(actions) - 1 - actions[::-1].index("rollback")
        assert actions[last_rollback + 1] == "canary"
        assert watch.tick() is None  # nothing left to judge: no canary, and the alias was rolled back
        print("canary decisions:", *(f"{d.decision} {d.version}: {d.reason}" for d in watch.decisions), sep="\n  ")
    finally:
        watch.close()
        admin.close()


def test_admin_canary_validates_over_http(gateway: GatewayHandle, looplift_new_adapter: Callable[[int], Path]) -> None:
    with AdminClient(gateway.url, ADMIN) as admin:
        admin.load(str(looplift_new_adapter(0)))
        with httpx.Client(base_url=gateway.url, headers={"Authorization": f"Bearer {ADMIN}"}, timeout=30) as http:
            r = http.post("/admin/canary", json={"version": "policy-v1", "fraction": 1.5})
            assert r.status_code == 400 and r.json()["error"]["param"] == "fraction"
            r = http.post("/admin/canary", json={"version": "policy-v1"})
            assert r.status_code == 400 and "fraction" in r.json()["error"]["message"]
            assert http.delete("/admin/canary").status_code == 404
            assert httpx.get(f"{gateway.url}/admin/canary").status_code == 401
        with pytest.raises(VersionNotFoundError):
            admin.start_canary("policy-v7", 0.1)
        with pytest.raises(CanaryError, match="already serves"):
            admin.start_canary("policy-v0", 0.1)
        view = admin.start_canary("policy-v1", 0.2)
        assert view.canary is not None and view.canary.fraction == 0.2 and view.serving == "policy-v0"
        r = httpx.post(f"{gateway.url}/v1/chat/completions", json={"model": "policy", "max_tokens": 1,
                       "messages": [{"role": "user", "content": "hi"}]}, headers={"X-Looplift-Session": "x"}, timeout=120)
        assert r.headers["x-looplift-version"] == r.json()["model"] in ("policy-v0", "policy-v1")
        assert admin.stop_canary().canary is None
