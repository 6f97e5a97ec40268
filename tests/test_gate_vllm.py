"""The gate on the real stack (session vLLM CPU server, gateway, SQLite collector, real export): a
candidate identical to the serving version is refused. Identical weights with the same per-task seeds
must give identical replies through vLLM — the premise of the paired test — so every pair is concordant.
The refused candidate ends unloaded from the gateway and from vLLM (issue 22: rejected candidates leaked)."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any, Callable

import httpx
import pytest
from _jobsteps import add_trajectories

from server import AdminClient, GatewaySettings, start_gateway_in_thread
from trainer import JobConfig, JobContext, TrainData, Trained, TrainStep, prompt_suite, run_job
from trainer._steps import SFT_STEP

pytestmark = [pytest.mark.vllm, pytest.mark.slow]
ADMIN = "gate-admin-token"


def test_the_gate_refuses_a_candidate_equal_to_the_serving_version(
    vllm_server: Any, looplift_model_dir: Path, looplift_new_adapter: Callable[[int], Path], tmp_path: Path,
    db_url: str,
) -> None:
    add_trajectories(db_url, 8)
    serving_src = looplift_new_adapter(0)

    def same_weights(ctx: JobContext, data: TrainData) -> Trained:
        return Trained(Path(shutil.copytree(serving_src, ctx.run_dir / "adapter")), None, data.count)

    suite = prompt_suite([{"id": f"p{i}", "turns": [f"Tell me about item {i}."]} for i in range(24)],
                         name="even-length", checker="_jobsteps:even_length", max_tokens=12)
    with start_gateway_in_thread(GatewaySettings(admin_token=ADMIN, state_dir=tmp_path / "gw"), vllm_server.url,
                                 port=0) as gw, AdminClient(gw.url, ADMIN) as admin:
        serving = admin.load(str(serving_src)).name
        admin.promote(serving)
        job = JobConfig(base_model_dir=looplift_model_dir, collector_db=db_url, gateway_url=gw.url, admin_token=ADMIN,
                        runs_dir=tmp_path / "runs", eval_concurrency=8)
        res = run_job(job, suite=suite, train_step=TrainStep("copy", SFT_STEP.export, same_weights))
        view = admin.versions()
        assert view.serving == serving and res.candidate is not None
        # Mutant: no unload on rejection (the candidate's adapter stays in vLLM for good).
        assert {v.name: v.state for v in view.versions}[res.candidate] == "unloaded"
        assert res.candidate not in {m["id"] for m in httpx.get(f"{vllm_server.url}/v1/models").json()["data"]}
        assert "still loaded" not in res.reason
    assert res.status == "rejected" and res.serving == serving and res.candidate != serving
    g = res.gate
    assert g is not None and (g["n"] + g["n_report"], g["b"], g["c"], g["p_value"]) == (24, 0, 0, 1.0)
    assert g["tested"] and g["k"] == 1 and g["errors"] == {"candidate": 0, "serving": 0}
    assert res.candidate_success == res.serving_success and res.candidate_report_success == res.serving_report_success
    # The checker splits the replies, so "no discordant pair" is the seeding at work, not a constant outcome.
    assert 0 < res.serving_success < 1  # type: ignore[operator]
