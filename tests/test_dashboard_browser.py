"""The dashboard in headless Chromium on a short real loop: the session's vLLM CPU server behind a real gateway,
the collector with its dashboard, episodes from the SDK (a prompt app and the arithmetic app in local
sandboxes), user feedback, a real retrain job (export, load, gate, decision) with a copied adapter as its
"training", a promote and a rollback. The page must load without console errors, every chart must have data,
and the screenshot must not be blank (the sandbox pool panel from the arith app's pool of 2, the replica
table from the gateway's /admin/replicas). `LOOPLIFT_DASHBOARD_SCREENSHOT=PATH` keeps a copy of the screenshot."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path
from typing import Any, Callable

import httpx
import pytest
from _chromium import Chromium, png_stats

import sdk
from collector import CollectorSettings, serve_in_thread
from envs import ArithmeticEnv, ArithmeticVerifier, training_tasks
from sandboxes import make_pool
from server import AdminClient, GatewaySettings, start_gateway_in_thread
from trainer import JobConfig, JobContext, TrainData, Trained, TrainStep, prompt_suite, run_job
from trainer._steps import SFT_STEP

pytestmark = [pytest.mark.vllm, pytest.mark.chromium, pytest.mark.slow]
ADMIN = "dashboard-admin-token"
CHARTS = ("versions", "live-version", "live-series", "live-app", "live-group", "runs", "per-day", "score-sources",
          "pii", "exports", "gateway", "replicas", "latency", "sandboxes")


def _support_suite(n: int, name: str) -> Any:
    # A black-box app: scripted user turns, a checker that splits an untrained model's replies about in half.
    # Task ids "<group>:<name>-<i>": the dashboard groups tasks by the part before the colon.
    return prompt_suite([{"id": f"{'billing' if i % 3 == 0 else 'shipping'}:{name}-{i}",
                          "turns": [f"Ticket {i}: my parcel is late."],
                          "slice": "billing" if i % 3 == 0 else "shipping"} for i in range(n)],
                        name=name, checker="_jobsteps:even_length", max_tokens=12)


def test_the_dashboard_shows_a_real_loop(vllm_server: Any, looplift_model_dir: Path,
                                         looplift_new_adapter: Callable[[int], Path], tmp_path: Path) -> None:
    db = f"sqlite:///{tmp_path / 'collector.db'}"
    with start_gateway_in_thread(GatewaySettings(admin_token=ADMIN, state_dir=tmp_path / "gw"), vllm_server.url,
                                 port=0) as gw, AdminClient(gw.url, ADMIN) as admin, \
            serve_in_thread(CollectorSettings(db_url=db, admin_token=ADMIN, gateway_url=gw.url)) as col, \
            sdk.CollectorClient(col.url, spool_dir=tmp_path / "spool") as client, make_pool("local", size=2) as pool:

        def rollouts(seed: int) -> None:
            support = _support_suite(12, f"support-{seed}")
            sdk.run(list(support.tasks), support.env_factory, verifier=support.verifier, collector=client, app="support",
                    base_url=gw.url + "/v1", budget=support.budget, sampling=sdk.Sampling(max_tokens=12, seed=seed))
            sdk.run(training_tasks(4, seed=seed), lambda: ArithmeticEnv(pool=pool), verifier=ArithmeticVerifier(),
                    collector=client, app="arith", base_url=gw.url + "/v1", max_steps=2,
                    sampling=sdk.Sampling(max_tokens=24, seed=seed))
            assert client.flush(60)

        rollouts(1)
        # A support exchange with personal data in it (replaced before storage; counted per type).
        client.submit(sdk.Trajectory(app="support", task_id="support:pii", model="policy", served_version="policy-v0",
                                     messages=[sdk.Message(role="user", content="Mail me at carol.diaz@example.net"),
                                               sdk.Message(role="assistant", content="Done.")]))
        assert client.flush(30)

        src = looplift_new_adapter(1)

        def copy_adapter(ctx: JobContext, data: TrainData) -> Trained:
            return Trained(Path(shutil.copytree(src, ctx.run_dir / "adapter")), 0.5, data.count)

        job = JobConfig(base_model_dir=looplift_model_dir, collector_db=db, gateway_url=gw.url, admin_token=ADMIN,
                        runs_dir=tmp_path / "runs", eval_concurrency=8, min_reward=0.0, min_examples=1, app="support")
        res = run_job(job, suite=_support_suite(16, "gate"), train_step=TrainStep("copy", SFT_STEP.export, copy_adapter),
                      trigger="new-data: 25 new")
        assert res.status in ("promoted", "rejected") and res.candidate_success is not None
        if res.status == "rejected":  # an operator promotes it anyway, to watch it live
            admin.promote(res.candidate)  # type: ignore[arg-type]
        rollouts(2)  # served by the candidate
        trajs = sdk.run(list(_support_suite(4, "fb").tasks), _support_suite(4, "fb").env_factory,
                        verifier=_support_suite(4, "fb").verifier, collector=client, app="support",
                        base_url=gw.url + "/v1", sampling=sdk.Sampling(max_tokens=12, seed=3))
        assert client.flush(30)
        for t, rating in zip(trajs, (1.0, -1.0, 0.5, 1.0)):
            assert httpx.post(col.url + "/v1/feedback", json={"trajectory_id": t.id, "rating": rating}).status_code == 200
        admin.rollback()  # and back to the base model

        with Chromium() as browser:
            page = browser.open(f"{col.url}/dashboard#token={ADMIN}",
                                ready_js="window.__dashboard && window.__dashboard.ready", timeout=60)
            state = page.evaluate("JSON.stringify(window.__dashboard)")
            assert page.evaluate("location.hash") == ""  # the token left the address bar
            png = page.screenshot(width=1400)
            texts = page.evaluate("document.body.innerText")
        assert page.errors == [], page.errors
    dash = json.loads(state)
    assert dash["errors"] == [], dash["errors"]
    empty = [c for c in CHARTS if not dash["charts"].get(c)]
    assert not empty, (empty, dash["charts"])
    assert "policy-v1" in texts and "rollback" in texts and res.status in texts
    assert "/2 in use" in texts and "1 of 1 healthy" in texts  # the arith app's pool of 2; the one vLLM replica
    (tmp_path / "dashboard.png").write_bytes(png)
    if os.environ.get("LOOPLIFT_DASHBOARD_SCREENSHOT"):
        shutil.copy(tmp_path / "dashboard.png", os.environ["LOOPLIFT_DASHBOARD_SCREENSHOT"])
    stats = png_stats(png)
    assert stats["width"] == 1400 and stats["height"] > 1000
    assert stats["non_white"] > 0.05 and stats["colors"] > 100  # not blank: text, bars, lines
    # The bars and points themselves: pixels in the palette's blue/green/orange, not only grey text.
    coloured = sum(1 for r, g, b in stats["pixels"] if max(r, g, b) - min(r, g, b) > 80)
    assert coloured > 500, coloured
