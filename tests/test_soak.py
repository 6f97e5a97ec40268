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
from datetime import datetime, timezone
from pathlib import Path

import pytest
from _bench import load_bench

ROOT = Path(__file__).resolve().parents[1]
DAY = 86400.0


def _stamp(t: float) -> str:
    return datetime.fromtimestamp(t, timezone.utc).isoformat()


def test_the_checker_maps_wall_stamps_through_clock_steps() -> None:
    """The soak stepped the clock a day back at t=1000 and to true time again at t=2000; the product's stamps are
    on the stepped clock. Catches: stamps read as they are (a run after the back-step would seem to end before it
    started, and two runs across it to overlap or not), the offset taken from the wrong period, and a stamp written
    a moment before a step (with the old offset) put a day off."""
    soak = load_bench("soak")  # puts bench/ on the path: its checker is importable as the soak imports it
    true_time = sys.modules["_soak_invariants"].true_time
    t0 = 1_800_000_000.0
    steps = [(t0, 0.0), (t0 + 1000, -DAY), (t0 + 2000, 0.0)]
    assert true_time(_stamp(t0 + 500), steps) == pytest.approx(t0 + 500)
    assert true_time(_stamp(t0 + 1500 - DAY), steps) == pytest.approx(t0 + 1500)
    assert true_time(_stamp(t0 + 1001), steps) == pytest.approx(t0 + 1001)  # the old offset, just after a step
    assert true_time(_stamp(t0 + 2001 - DAY), steps) == pytest.approx(t0 + 2001)
    assert true_time(_stamp(t0 + 2500), steps) == pytest.approx(t0 + 2500)
    assert true_time(_stamp(t0 + 500), steps[:1]) == pytest.approx(t0 + 500) and true_time(None, steps) is None
    assert soak.CLOCK_STEP_S >= DAY  # the mapping is unique only for steps longer than any soak


def test_the_plan_never_puts_one_kind_twice_in_a_cycle() -> None:
    """36 faults of 10 kinds over 30 cycles: round-robin put the 31st pick (the 1st kind again) into cycle 1 beside
    the 1st, and both fired at one moment, one kill counted twice. Catches that, and a plan that drops picks."""
    soak = load_bench("soak")
    kinds = [f"k{i}" for i in range(10)]
    per = soak.spread([kinds[i % 10] for i in range(36)], 30)
    assert all(len(set(c)) == len(c) for c in per) and sorted(sum(per, [])) == sorted(kinds[i % 10] for i in range(36))
    assert soak.spread(["a", "b", "c"], 2) == [["a", "c"], ["b"]]  # the CI variant's plan, as before
    assert soak.spread(["a", "a"], 1) == [["a", "a"]]  # nowhere else to go: kept (a cycle of one kind twice)


@pytest.mark.vllm
@pytest.mark.slow


def test_soak_ci_variant_keeps_every_invariant(looplift_base_model: Path, name_model_dir: Path, tmp_path: Path) -> None:
    out = tmp_path / "soak.json"
    # A SIGKILL of `looplift up` while the app's traffic is captured (the operator restarts it), of the trainer
    # mid-train, and a full disk: three kinds that land in every run whatever the gate decides.
    p = subprocess.run([sys.executable, str(ROOT / "bench" / "soak.py"), "--cycles", "2", "--faults", "3", "--seed", "0",
                        "--kinds", "collector_kill_ingest,trainer_kill_train,disk_full", "--minutes", "4",
                        "--base-model", str(looplift_base_model), "--name-model", str(name_model_dir),
                        "--json-out", str(out)],
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
