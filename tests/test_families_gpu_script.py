"""bench/families_gpu.py (issue 18's GPU benchmark) runs end to end: `--smoke` on the CPU here, as a subprocess the
way a user runs it. What it measures on a GPU is not checked here (no GPU in the test tiers)."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[1] / "bench" / "families_gpu.py"


def _run(*args: str, cuda: bool = True) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ) if cuda else {**os.environ, "CUDA_VISIBLE_DEVICES": ""}
    return subprocess.run([sys.executable, str(SCRIPT), *args], capture_output=True, text=True, timeout=300, env=env)


@pytest.mark.model_build
@pytest.mark.slow
def test_smoke_run_writes_finite_positive_figures_for_ours_and_the_baseline(tmp_path: Path) -> None:
    # Catches: a side that measured nothing (0 measured steps: a division by zero, inf or 0 tokens/s), a missing
    # baseline or ours row, a ratio not computed from the two, and --out not honoured (the JSON written elsewhere).
    out = tmp_path / "results" / "families_gpu.json"
    proc = _run("--smoke", "--out", str(out))
    assert proc.returncode == 0, proc.stderr[-4000:]
    res = json.loads(out.read_text())
    assert res["smoke"] is True and res["device"] and res["torch"]
    assert res["model"]["lora_targets"] and res["model"]["parameters"] > 0
    for kind in ("sft", "grpo"):
        for impl in ("ours", "hf_peft"):
            figures = res[kind][impl]
            for key in ("tokens_per_s", "s_per_step"):
                assert math.isfinite(figures[key]) and figures[key] > 0, (kind, impl, key, figures)
        # Same updates on both sides: the same tokens and optimizer steps.
        assert (res[kind]["ours"]["tokens"], res[kind]["ours"]["steps"]) == \
            (res[kind]["hf_peft"]["tokens"], res[kind]["hf_peft"]["steps"])
        ratio = res[kind]["ours_vs_hf_peft"]
        assert math.isfinite(ratio) and ratio == pytest.approx(
            res[kind]["ours"]["tokens_per_s"] / res[kind]["hf_peft"]["tokens_per_s"], rel=1e-2)
    assert "vs HF+PEFT" in proc.stdout


@pytest.mark.slow
def test_without_smoke_and_without_cuda_it_fails_with_one_line(tmp_path: Path) -> None:
    # Catches: a full-size run silently falling back to the CPU (hours, figures that look like GPU ones), and a
    # traceback instead of a message saying what to do.
    out = tmp_path / "families_gpu.json"
    proc = _run("--out", str(out), cuda=False)
    assert proc.returncode != 0
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "no CUDA device" in lines[0] and "--smoke" in lines[0], proc.stderr
    assert not out.exists()
