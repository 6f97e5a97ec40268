"""Supervised fine-tuning with LoRA on exported trajectories (rejection-sampling SFT).

Input: the `collector export --format sft` JSONL (one `{"messages": [...], "tools"?: [...]}` per line). Loss is on the
model's own tokens only — each assistant turn and its end-of-turn token; prompts, environment feedback
and sandbox output are masked (see `_data.encode_chat`). The adapter is a plain peft directory that
vLLM loads as it is (`POST /v1/load_lora_adapter`).

Each call trains a fresh adapter from the base weights on all the data it is given, rather than
continuing the previous adapter: a retrain is then a pure function of (base, data, config), which is
what makes `trainer run` idempotent and a bad cycle recoverable. Several processes (`trainer sft --nproc N`,
DDP or FSDP under torchrun) train the same adapter as one process: see `_dist`. Left out: packing,
gradient accumulation.
"""

from __future__ import annotations

import dataclasses
import json
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

import torch
from transformers import AutoTokenizer

from ._data import Progress, encode_chat, train_causal_lm, trains_on
from ._lora import ensure_room, lora_model
from ._dist import Dist
from ._json import jsonl_objects
from .errors import TrainingDataError


@dataclass(frozen=True)
class SFTConfig:
    """LoRA SFT hyper-parameters; written next to every adapter as `looplift_sft.json`."""

    rank: int = 8
    """LoRA rank; vLLM accepts 1, 8, 16, 32, 64, … up to the server's --max-lora-rank."""
    alpha: int = 16
    dropout: float = 0.0
    lr: float = 2e-3
    steps: int = 200
    """Optimizer steps (minibatches), independent of the data size so a cycle's cost is bounded."""
    batch_size: int = 32
    seed: int = 0
    max_len: int = 512


def sft_module_args(data: Path, base_model_dir: Path, out_dir: Path, config: SFTConfig, strategy: str) -> list[str]:
    """`python -m` arguments of the `trainer sft` command that trains `config` (what torchrun runs in each
    process for `trainer sft --nproc N` and for the retrain job's train stage)."""
    flags = [a for f in dataclasses.fields(config) for a in (f"--{f.name.replace('_', '-')}", str(getattr(config, f.name)))]
    return ["trainer._cli", "sft", str(data), "--base-model", str(base_model_dir), "--out", str(out_dir), *flags,
            "--strategy", strategy]


@dataclass(frozen=True)
class SFTResult:
    adapter_dir: Path
    train_loss: float
    examples: int
    seconds: float


def load_sft_jsonl(path: Path) -> list[tuple[list[dict], Optional[list[dict]]]]:  # type: ignore[type-arg]
    """The (conversation, tools) pairs in an SFT export (`tools`: the function specs a tool-using conversation
    was given, else None); a line that is not a chat with an assistant turn to train on (not `"weight": 0`) is an
    error."""
    convs = []
    for n, record in jsonl_objects(path, TrainingDataError, "an SFT record with `messages`"):
        msgs = record.get("messages") if isinstance(record, dict) else None
        if not isinstance(msgs, list):
            raise TrainingDataError(f"{path}:{n}: not an SFT record with `messages`")
        if not any(trains_on(m) for m in msgs):
            raise TrainingDataError(f"{path}:{n}: conversation has no assistant turn to train on (none, or every "
                                    "one has \"weight\": 0)")
        convs.append((msgs, record.get("tools") or None))
    return convs


def train_sft(
    base_model_dir: Path,
    data: Path,
    out_dir: Path,
    config: SFTConfig = SFTConfig(),
    *,
    progress: Optional[Progress] = None,
    dist: Optional[Dist] = None,
) -> SFTResult:
    """Train a LoRA adapter on `data` (SFT JSONL) over `base_model_dir`; write it atomically to `out_dir`.

    `dist`: this process's share of a torchrun job (`Dist.from_env()`); every rank calls this with the same
    arguments and rank 0 writes the adapter. Default: one process (on the GPU when there is one)."""
    dist = dist or Dist()
    t0 = time.monotonic()
    convs = load_sft_jsonl(Path(data))
    if not convs:
        raise TrainingDataError(f"{data} has no training examples; collect successful episodes first")
    torch.manual_seed(config.seed)  # the same LoRA init on every rank
    tok = AutoTokenizer.from_pretrained(base_model_dir)
    # Tools are rendered into the prompt as the server renders a request's `tools`.
    examples = [encode_chat(tok, c, tools=tools, max_len=config.max_len) for c, tools in convs]
    model = lora_model(base_model_dir, rank=config.rank, alpha=config.alpha, dropout=config.dropout)
    ensure_room(model, Path(out_dir))
    model = dist.wrap(model)
    curve: list[float] = []

    def record(step: int, total: int, loss: float) -> None:
        curve.append(loss)
        if progress is not None:
            progress(step, total, loss)

    loss = train_causal_lm(model, examples, pad_id=tok.pad_token_id, steps=config.steps,
                           batch_size=config.batch_size, lr=config.lr, seed=config.seed, progress=record, dist=dist)
    meta = {"config": dataclasses.asdict(config), "base_model": str(base_model_dir), "data": str(data),
            "examples": len(examples), "train_loss": loss, "processes": dist.world_size, "strategy": dist.strategy,
            "loss_curve": curve}
    dist.save(model, Path(out_dir), {"looplift_sft.json": json.dumps(meta, indent=2)})
    return SFTResult(adapter_dir=Path(out_dir), train_loss=loss, examples=len(examples), seconds=time.monotonic() - t0)
