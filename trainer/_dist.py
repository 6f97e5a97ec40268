"""Training on several processes (devices): torchrun launches them, this module makes one loop run on all.

One training loop serves one process and N. Under `torchrun` every process runs the same script with
the same seed; `Dist.from_env()` reads torchrun's environment (RANK, WORLD_SIZE, LOCAL_RANK, ...) and
joins the process group (gloo on CPUs, NCCL on GPUs). A loop then needs five calls:

    with Dist.from_env(strategy) as dist:      # one process without torchrun: every call below is a no-op
        model = dist.wrap(model)                # DDP, or FSDP2 `fully_shard` per transformer block
        for idx in minibatches(...):            # every rank draws the same global batch (same seed) ...
            mine = dist.shard(idx)              # ... and trains on its slice of it
            total, count = summed_loss(mine)    # a SUM over this rank's items (tokens, pairs, rows) and their count
            loss, logged = dist.mean(total, count)  # what to backward, and the global mean for the log
            loss.backward(); clip; opt.step()
        dist.save(model, out_dir, extra_files)  # rank 0 writes the adapter atomically; every rank waits for it

Why a sum and a count, not each rank's mean: the loss of a minibatch is a mean over its tokens, and the
ranks hold different numbers of tokens. `mean()` all-reduces the count and scales each rank's sum so
that, after DDP/FSDP average the gradients over ranks, the gradient is exactly the one process's
gradient of the whole batch. The loss curve then matches one process up to float reduction order
(tests/test_dist.py measures how closely).

Strategy (`DistConfig.strategy`, `looplift.toml [trainer] strategy`): "ddp" keeps a whole replica per
process and all-reduces gradients; "fsdp" (FSDP2) shards parameters, gradients and optimizer state, for
a base model that does not fit one device. With LoRA the trainable part is small either way; FSDP is
for the frozen base.

`launch()` starts torchrun (`python -m torch.distributed.run --standalone --nproc-per-node N -m ...`):
`trainer sft --nproc N` re-launches itself with it, and the retrain job runs its train stage that way
(`trainer run --nproc N`) while the job itself (lock, export, gate, promote) stays one process.

Left out: multi-node launch (torchrun's --nnodes/--rdzv-endpoint work, but nothing here sets them up),
tensor/pipeline parallelism, mixed precision, activation checkpointing, and LoRA dropout that matches one
process (with dropout > 0 every rank draws the same masks for different examples; the losses then agree
in distribution, not step by step).
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Mapping, Optional, Sequence, TypeVar, cast

import torch
import torch.distributed as torch_dist

from . import _defaults as D
from .errors import ConfigError, TrainerError

T = TypeVar("T")

STRATEGIES = ("ddp", "fsdp")
#: Seconds a stopped torchrun gets between SIGTERM and SIGKILL.
_STOP_GRACE_S = 15.0


@dataclass(frozen=True)
class DistConfig:
    """How many processes train and how the model is spread over them (`[trainer] nproc`, `strategy`)."""

    nproc: int = D.NPROC
    """Processes to train on, one per device; > 1 runs the train stage under torchrun (gloo on CPU)."""
    strategy: str = D.STRATEGY
    """"ddp" (a full replica per process) or "fsdp" (FSDP2: parameters, gradients, optimizer state sharded)."""

    def __post_init__(self) -> None:
        if self.nproc < 1:
            raise ConfigError(f"nproc must be >= 1, got {self.nproc}")
        if self.strategy not in STRATEGIES:
            raise ConfigError(f"unknown strategy {self.strategy!r}; use one of {', '.join(STRATEGIES)}")


def under_torchrun() -> bool:
    """True in a process torchrun started (its environment names a rank and a world)."""
    return all(k in os.environ for k in ("RANK", "WORLD_SIZE", "LOCAL_RANK"))


class Dist(contextlib.AbstractContextManager["Dist"]):
    """This process's place in a training run and the collectives a loop needs (see the module docstring).

    Make it with `Dist.from_env()`; `Dist()` is one process on `device` (default: CUDA when there is one)."""

    def __init__(self, *, rank: int = 0, world_size: int = 1, local_rank: int = 0, strategy: str = "ddp",
                 device: Optional[torch.device] = None, owns_group: bool = False) -> None:
        DistConfig(strategy=strategy)  # validates
        self.rank, self.world_size, self.local_rank, self.strategy = rank, world_size, local_rank, strategy
        self.device = device or torch.device("cuda" if torch.cuda.is_available() else "cpu")
        self._owns_group = owns_group

    @classmethod
    def from_env(cls, strategy: str = "ddp") -> "Dist":
        """Join torchrun's process group when this process runs under torchrun, else one process."""
        if not under_torchrun() or int(os.environ["WORLD_SIZE"]) == 1:
            return cls(strategy=strategy)
        rank, world, local = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"]), int(os.environ["LOCAL_RANK"])
        if torch.cuda.is_available():
            device, backend = torch.device("cuda", local), "nccl"
            torch.cuda.set_device(device)
        else:
            device, backend = torch.device("cpu"), "gloo"
        owns = not torch_dist.is_initialized()
        if owns:
            torch_dist.init_process_group(backend, rank=rank, world_size=world)
        return cls(rank=rank, world_size=world, local_rank=local, strategy=strategy, device=device, owns_group=owns)

    @property
    def is_main(self) -> bool:
        """True on rank 0, the process that writes files and prints."""
        return self.rank == 0

    # -- the model ----------------------------------------------------------------------------------

    def wrap(self, model: torch.nn.Module) -> torch.nn.Module:
        """`model` on this process's device, wrapped for the strategy (unchanged for one process)."""
        model = model.to(self.device)
        if self.world_size == 1:
            return model
        if self.strategy == "ddp":
            from torch.nn.parallel import DistributedDataParallel

            ids = [self.device.index] if self.device.type == "cuda" else None
            return DistributedDataParallel(model, device_ids=ids)
        from torch.distributed.device_mesh import init_device_mesh
        from torch.distributed.fsdp import fully_shard

        mesh = init_device_mesh(self.device.type, (self.world_size,))
        # transformers models name their blocks (peft forwards the attribute to the model it wraps).
        blocks = set(getattr(model, "_no_split_modules", None) or ())
        for module in model.modules():  # each transformer block is one unit: gathered for its forward only
            if type(module).__name__ in blocks:
                fully_shard(module, mesh=mesh)
        fully_shard(model, mesh=mesh)
        return model

    def unwrap(self, model: torch.nn.Module) -> torch.nn.Module:
        """The module inside a DDP wrapper (FSDP2 wraps in place: the model itself)."""
        return model.module if hasattr(model, "module") and self.strategy == "ddp" else model  # type: ignore[return-value]

    def trainable_state(self, model: torch.nn.Module) -> Optional[dict[str, torch.Tensor]]:
        """The full trainable weights (the adapter), gathered on rank 0 (None on the others). Every rank
        must call it: under FSDP it is a collective."""
        if self.world_size > 1 and self.strategy == "fsdp":
            from torch.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict

            opts = StateDictOptions(full_state_dict=True, cpu_offload=True, ignore_frozen_params=True)
            # A model's state dict holds tensors (the stub's value type also admits nested state).
            state = cast("dict[str, torch.Tensor]", get_model_state_dict(model, options=opts))
            return state if self.is_main else None
        inner = self.unwrap(model)
        names = {n for n, p in inner.named_parameters() if p.requires_grad}
        return {k: v.detach().cpu() for k, v in inner.state_dict().items() if k in names} if self.is_main else None

    def save(self, model: torch.nn.Module, out_dir: Path, files: Mapping[str, str] = {}) -> Path:
        """Rank 0 writes `model`'s peft adapter (and `files`: name -> text) atomically into `out_dir`;
        every rank returns once it is there. Call it on every rank."""
        from sdk.infra import atomic_dir  # here: the training core imports nothing of ours at module level

        state = self.trainable_state(model)
        out_dir = Path(out_dir)
        if self.is_main:
            with atomic_dir(out_dir) as tmp:
                self.unwrap(model).save_pretrained(tmp, state_dict=state)  # type: ignore[operator]
                for name, text in files.items():
                    (tmp / name).write_text(text)
        self.barrier()
        return out_dir

    # -- the data and the loss ----------------------------------------------------------------------

    def shard(self, items: Sequence[T]) -> list[T]:
        """This rank's slice of a global minibatch (every rank draws the same one). Raises when a rank
        would get nothing: the global batch must be at least the number of processes."""
        if len(items) < self.world_size:
            raise ConfigError(f"a minibatch of {len(items)} cannot be split over {self.world_size} processes; "
                              f"use a batch size of at least {self.world_size} or fewer processes")
        return list(items[self.rank :: self.world_size])

    def mean(self, total: torch.Tensor, count: Any) -> tuple[torch.Tensor, float]:
        """(loss to backpropagate, global mean for the log) of a loss that is a mean over items split across
        ranks: `total` is this rank's SUM over its items, `count` how many it has. The backward value is
        `total * world / global_count`, so that DDP's/FSDP's gradient average equals one process's gradient
        of the whole batch's mean."""
        if self.world_size == 1:
            n = max(float(count), 1.0)
            loss = total / n
            return loss, float(loss.detach())
        both = torch.stack([total.detach().float(), torch.as_tensor(float(count), device=total.device)])
        torch_dist.all_reduce(both)
        global_total, n = float(both[0]), max(float(both[1]), 1.0)
        return total * (self.world_size / n), global_total / n

    def barrier(self) -> None:
        """Wait for every rank (no-op for one process)."""
        if self.world_size > 1:
            torch_dist.barrier()

    # -- lifetime -------------------------------------------------------------------------------------

    def close(self) -> None:
        """Leave the process group if this object joined it."""
        if self._owns_group and torch_dist.is_initialized():
            torch_dist.destroy_process_group()
            self._owns_group = False

    def __exit__(self, *exc: object) -> None:  # `with Dist() as dist:` (__enter__ from AbstractContextManager)
        self.close()

    def __repr__(self) -> str:
        return f"Dist(rank={self.rank}, world_size={self.world_size}, strategy={self.strategy!r}, device={self.device})"


def torchrun_argv(nproc: int, module_args: Sequence[str]) -> list[str]:
    """The command that runs `python -m <module_args>` in `nproc` processes on this machine.

    torchrun's own argument parser sees the module's arguments too and takes a flag that abbreviates
    one of its options (`--nproc` for `--nproc-per-node`); such a flag is refused here."""
    from torch.distributed.run import get_args_parser

    ours = [o for o in get_args_parser()._option_string_actions if o.startswith("--")]
    for arg in module_args:
        name = arg.split("=", 1)[0]
        if name.startswith("--") and any(o.startswith(name) for o in ours):
            raise ValueError(f"{name} abbreviates a torchrun option and would be taken by torchrun; "
                             "leave it out of the arguments of the module torchrun runs")
    return [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc-per-node={nproc}",
            "-m", *module_args]


def launch(
    nproc: int,
    module_args: Sequence[str],
    *,
    check_stop: Optional[Callable[[], None]] = None,
    log: Optional[Path] = None,
    poll_s: float = 0.5,
) -> int:
    """Run `python -m <module_args>` under torchrun in `nproc` processes and wait; returns its exit code.

    `log`: where its stdout and stderr go (default: this process's). `check_stop` is called every `poll_s`
    while it runs; whatever it raises (a stop request, SIGTERM turned into `JobInterrupted`) first stops
    torchrun and its workers (SIGTERM to the group, SIGKILL after a grace period), then propagates.
    """
    out = open(log, "ab") if log is not None else None  # noqa: SIM115 - closed in finally
    try:
        # Its own session: stopping it reaches torchrun's workers too.
        proc = subprocess.Popen(torchrun_argv(nproc, module_args), stdout=out, stderr=subprocess.STDOUT if out else None,
                                start_new_session=True)
        try:
            while proc.poll() is None:
                if check_stop is not None:
                    check_stop()
                time.sleep(poll_s)
        except BaseException:
            _stop_group(proc)
            raise
        return proc.returncode
    finally:
        if out is not None:
            out.close()


def _stop_group(proc: "subprocess.Popen[bytes]") -> None:
    for sig, wait in ((signal.SIGTERM, _STOP_GRACE_S), (signal.SIGKILL, 5.0)):
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            return
        try:
            proc.wait(wait)
            return
        except subprocess.TimeoutExpired:
            continue


def launch_or_raise(nproc: int, module_args: Sequence[str], *, what: str, log: Path,
                    check_stop: Optional[Callable[[], None]] = None) -> None:
    """`launch`, raising `TrainerError` with the end of `log` when the processes fail."""
    code = launch(nproc, module_args, check_stop=check_stop, log=log)
    if code != 0:
        tail = log.read_text(errors="replace").strip().splitlines()[-15:] if log.exists() else []
        raise TrainerError(f"{what} on {nproc} processes (torchrun) exited {code}; see {log}. Last lines:\n"
                           + "\n".join(tail))
