"""The soak's CI variant (issue 22): bench/soak.py drives the whole product for two retrain cycles with a few faults
at seeded moments, and every invariant its checker (bench/_soak_invariants.py) reads back must hold.

The soak is the test's subject, run as a user runs it (a subprocess, its own LOOPLIFT_HOME, loopback ports); the
session's base model is handed to it so that nothing is built twice. What each invariant means is in the checker's
docstring; a failure prints the soak's table, whose evidence names the request, run or file that broke it.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = [pytest.mark.vllm, pytest.mark.slow]
ROOT = Path(__file__).resolve().parents[1]


def test_soak_ci_variant_keeps_every_invariant(looplift_base_model: Path, tmp_path: Path) -> None:
    out = tmp_path / "soak.json"
    # A SIGKILL of `looplift up` while the app's traffic is captured (the operator restarts it), of the trainer
    # mid-train, and a full disk: three kinds that land in every run whatever the gate decides.
    p = subprocess.run([sys.executable, str(ROOT / "bench" / "soak.py"), "--cycles", "2", "--faults", "3", "--seed", "0",
                        "--kinds", "collector_kill_ingest,trainer_kill_train,disk_full", "--minutes", "4",
                        "--base-model", str(looplift_base_model), "--json-out", str(out)],
                       capture_output=True, text=True, timeout=900)
    assert out.exists(), (p.stdout[-4000:], p.stderr[-4000:])
    result = json.loads(out.read_text())
    failed = [r for r in result["invariants"] if not r["passed"]]
    assert not failed and p.returncode == 0, p.stdout[-6000:]
    assert result["served"] > 0 and result["trajectories_stored"] > 0
    assert sum(result["faults_injected"].values()) >= 1, result["faults"]
    assert {r["name"] for r in result["invariants"]} >= {
        "captured_exactly_once", "no_unexpected_capture", "feedback_joined", "no_half_written_trajectory",
        "export_deterministic", "killed_export_left_nothing", "served_version_gated", "history_has_figures",
        "canary_resumed_or_ended",
        "lock_never_shared", "no_run_left_running", "nothing_left_behind", "home_disk_bounded"}
