"""Training on several processes (`trainer/_dist.py`): 2 processes under torchrun (gloo, CPU) train the same
adapter as one process — the same per-step losses and final weights within a stated tolerance — through
the retrain job (`trainer run --nproc 2`, DDP) and through `trainer sft --nproc 2 --strategy fsdp`.

Tolerance. Both runs do the same arithmetic in a different order: each rank pads its half of the minibatch
to its own length (other matmul shapes, so other float32 blocking) and the gradient is the all-reduced sum
of two halves instead of one sum. A reordered float32 sum differs in its last bits (eps 1.2e-7 relative),
and training amplifies that: AdamW divides each update by the root of its second moment, so last-bit
differences in tiny gradients become weight differences of up to ~lr x 1e-3 over a run. Measured here (30
steps, lr 1e-2): step 1 agrees to 3e-8; the largest relative loss difference over the run was 7e-6 (DDP,
retrain job) and 2e-7 (FSDP); the largest weight difference 4e-6 (DDP) and 2e-5 (FSDP) with weights up to
0.18. Asserted: losses within 1e-4 relative and weights within 5e-4 absolute (>= 13x the measured noise),
while a real mistake — here one process on half the batch, the size of error a missing all-reduce or a
mean of per-rank means makes — is > 1e-2 off on both (checked in the first test, so the tolerance can fail).
"""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from _jobsteps import FakeGateway, add_trajectories, plus_one_suite

from trainer import JobConfig, JobInterrupted, run_job
from trainer._config import job_config, load_config
from trainer._dist import Dist, DistConfig, launch, torchrun_argv
from trainer._steps import SFT_STEP
from trainer.errors import ConfigError
from trainer.sft import SFTConfig, train_sft

LOSS_RTOL = 1e-4
WEIGHT_ATOL = 5e-4
#: Large enough a learning rate that the adapter moves visibly in 30 steps (the curve is not flat).
CFG = SFTConfig(steps=30, batch_size=16, lr=1e-2, seed=3)


@pytest.fixture(scope="module")
def tiny_model(looplift_small_trained_model: Path) -> Path:
    return looplift_small_trained_model


def _curve(adapter: Path) -> list[float]:
    return json.loads((adapter / "looplift_sft.json").read_text())["loss_curve"]


def _weights(adapter: Path) -> dict:  # type: ignore[type-arg]
    from safetensors.torch import load_file

    return load_file(str(adapter / "adapter_model.safetensors"))


def _compare(one: Path, many: Path) -> tuple[float, float, float]:
    """(max relative loss difference, max absolute weight difference, largest weight) of two adapters."""
    a, b = _curve(one), _curve(many)
    assert len(a) == len(b) == CFG.steps
    loss_rel = max(abs(x - y) / abs(x) for x, y in zip(a, b))
    wa, wb = _weights(one), _weights(many)
    assert wa.keys() == wb.keys() and len(wa) == 28  # 7 target modules x 2 layers x (A, B)
    weight_abs = max(float((wa[k] - wb[k]).abs().max()) for k in wa)
    return loss_rel, weight_abs, max(float(w.abs().max()) for w in wa.values())


def _report(name: str, one: Path, many: Path, figures: tuple[float, float, float]) -> None:
    a, b = _curve(one), _curve(many)
    print(f"\n{name}: loss 1 proc {a[0]:.6f} -> {a[-1]:.6f}, 2 procs {b[0]:.6f} -> {b[-1]:.6f}; "
          f"max rel loss diff {figures[0]:.2e} (tol {LOSS_RTOL:g}); max abs weight diff {figures[1]:.2e} "
          f"(tol {WEIGHT_ATOL:g}, largest weight {figures[2]:.3f})")
    print("  step  1 proc     2 procs")
    for i in (0, 1, 2, 9, 19, len(a) - 1):
        print(f"  {i + 1:4d}  {a[i]:.7f}  {b[i]:.7f}")


@pytest.mark.slow  # ~40 s each on 2 cores (+18 s to build the tiny model once)
def test_the_retrain_job_on_two_processes_trains_what_one_process_trains(
        tiny_model: Path, tmp_path: Path, db_url: str) -> None:
    add_trajectories(db_url, 40)
    gw = FakeGateway({"policy-v0": set()})
    gw.next_skill = set(range(40))
    job = JobConfig(base_model_dir=tiny_model, collector_db=db_url, app="shop", runs_dir=tmp_path / "runs", sft=CFG,
                    dist=DistConfig(nproc=2))
    res = run_job(job, suite=plus_one_suite(40), train_step=SFT_STEP, admin=gw.admin(), chat_client=gw.chat())
    assert res.status == "promoted", res.reason
    run_dir = tmp_path / "runs" / res.run_id
    many = run_dir / "adapter"
    meta = json.loads((many / "looplift_sft.json").read_text())
    assert (meta["processes"], meta["strategy"], meta["examples"]) == (2, "ddp", 40)
    assert res.train_loss == pytest.approx(meta["train_loss"])
    one = train_sft(tiny_model, run_dir / "data.jsonl", tmp_path / "one", CFG).adapter_dir
    figures = _compare(one, many)
    _report("retrain job, DDP", one, many, figures)
    assert _curve(one)[-1] < _curve(one)[0] - 0.05  # the curve being compared does move
    assert figures[0] <= LOSS_RTOL and figures[1] <= WEIGHT_ATOL

    # The tolerance can fail: one process on a different batch (half of it) is far outside it.
    half = train_sft(tiny_model, run_dir / "data.jsonl", tmp_path / "half", dataclasses.replace(CFG, batch_size=8))
    wrong = _compare(one, half.adapter_dir)
    print(f"  one process on half the batch: max rel loss diff {wrong[0]:.2e}, max abs weight diff {wrong[1]:.2e}")
    assert wrong[0] > 1e-2 and wrong[1] > 1e-2


@pytest.mark.slow  # ~40 s each on 2 cores (+18 s to build the tiny model once)
def test_trainer_sft_nproc_2_fsdp_trains_what_one_process_trains(tiny_model: Path, tmp_path: Path) -> None:
    import random

    from envs import demonstration, training_tasks

    data = tmp_path / "sft.jsonl"
    rng = random.Random(1)
    data.write_text("".join(json.dumps({"messages": demonstration(t, rng, miscopy_p=0.0)}) + "\n"
                            for t in training_tasks(48, 9)))
    one = train_sft(tiny_model, data, tmp_path / "one", CFG).adapter_dir
    flags = ["--steps", str(CFG.steps), "--batch-size", str(CFG.batch_size), "--lr", str(CFG.lr), "--seed", str(CFG.seed)]
    proc = subprocess.run([sys.executable, "-m", "trainer._cli", "sft", str(data), "--base-model", str(tiny_model),
                           "--out", str(tmp_path / "fsdp"), *flags, "--nproc", "2", "--strategy", "fsdp"],
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    printed = json.loads(proc.stdout.strip().splitlines()[-1])  # rank 0 alone prints the result
    assert (printed["processes"], printed["strategy"], printed["examples"]) == (2, "fsdp", 48)
    figures = _compare(one, tmp_path / "fsdp")
    _report("trainer sft --nproc 2 --strategy fsdp", one, tmp_path / "fsdp", figures)
    assert figures[0] <= LOSS_RTOL and figures[1] <= WEIGHT_ATOL


# ---- the pieces, without torchrun ------------------------------------------------------------------

def test_a_global_batch_is_split_by_rank_and_must_cover_every_rank() -> None:
    idx = list(range(10))
    parts = [Dist(rank=r, world_size=3).shard(idx) for r in range(3)]
    assert sorted(sum(parts, [])) == idx and [len(p) for p in parts] == [4, 3, 3]
    with pytest.raises(ConfigError, match="batch size of at least 3"):
        Dist(rank=0, world_size=3).shard([1, 2])


def test_the_config_file_selects_processes_and_strategy(tmp_path: Path) -> None:
    f = tmp_path / "looplift.toml"
    f.write_text('[trainer]\nnproc = 4\nstrategy = "fsdp"\n')
    assert job_config(load_config(f)).dist == DistConfig(nproc=4, strategy="fsdp")
    assert job_config(load_config(f), nproc=2).dist.nproc == 2  # a flag wins over the file
    f.write_text('[trainer]\nstrategy = "zero3"\n')
    with pytest.raises(ConfigError, match="unknown strategy 'zero3'; use one of ddp, fsdp"):
        job_config(load_config(f))
    with pytest.raises(ConfigError, match="nproc must be >= 1"):
        DistConfig(nproc=0)


@pytest.mark.slow
def test_trainer_sft_refuses_a_bad_nproc_in_one_line(tmp_path: Path) -> None:
    data = tmp_path / "d.jsonl"
    data.write_text("{}\n")
    proc = subprocess.run([sys.executable, "-m", "trainer._cli", "sft", str(data), "--base-model", str(tmp_path),
                           "--out", str(tmp_path / "o"), "--nproc", "0"], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2 and "error: nproc must be >= 1, got 0" in proc.stderr and "Traceback" not in proc.stderr


def test_a_flag_torchrun_would_take_is_refused() -> None:
    with pytest.raises(ValueError, match="--nproc abbreviates a torchrun option"):
        torchrun_argv(2, ["trainer._cli", "sft", "--nproc", "2"])
    assert torchrun_argv(2, ["m", "--steps", "3"])[-4:] == ["-m", "m", "--steps", "3"]


@pytest.mark.slow
def test_a_stop_request_ends_torchrun_and_its_workers(tmp_path: Path) -> None:
    mark = tmp_path / "pgid"
    stmt = f"import os, time; open({str(mark)!r}, 'w').write(str(os.getpgrp())); time.sleep(600)"
    stops = 0

    def check_stop() -> None:
        nonlocal stops
        if mark.exists() and mark.read_text():
            stops += 1
            raise JobInterrupted("SIGTERM")

    with pytest.raises(JobInterrupted):
        launch(1, ["timeit", "-n", "1", "-r", "1", stmt], check_stop=check_stop, log=tmp_path / "log", poll_s=0.1)
    assert stops == 1
    with pytest.raises(ProcessLookupError):  # the worker's whole process group is gone
        os.killpg(int(mark.read_text()), 0)
