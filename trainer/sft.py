"""Supervised fine-tuning with LoRA on exported trajectories (rejection-sampling SFT).

Input: the `collector export --format sft` JSONL (one `{"messages": [...]}` per line). Loss is on the
model's own tokens only — each assistant turn and its end-of-turn token; prompts, environment feedback
and sandbox output are masked (see `_data.encode_chat`). The adapter is a plain peft directory that
vLLM loads as it is (`POST /v1/load_lora_adapter`).

Each call trains a fresh adapter from the base weights on all the data it is given, rather than
continuing the previous adapter: a retrain is then a pure function of (base, data, config), which is
what makes `trainer run` idempotent and a bad cycle recoverable. Left out: packing, gradient
accumulation, multi-GPU (FSDP comes with the multi-GPU issue).
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

import torch
from transformers import AutoTokenizer

from ._data import Progress, encode_chat, jsonl_fields, train_causal_lm
from ._lora import lora_model, save_adapter
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


@dataclass(frozen=True)
class SFTResult:
    adapter_dir: Path
    train_loss: float
    examples: int
    seconds: float


def load_sft_jsonl(path: Path) -> list[list[dict]]:  # type: ignore[type-arg]
    """The conversations in an SFT export; a line that is not a chat with an assistant turn is an error."""
    convs = []
    for n, (msgs,) in jsonl_fields(path, "an SFT record with `messages`", ["messages"]):
        if not any(m.get("role") == "assistant" for m in msgs):
            raise TrainingDataError(f"{path}:{n}: conversation has no assistant turn to train on")
        convs.append(msgs)
    return convs


def train_sft(
    base_model_dir: Path,
    data: Path,
    out_dir: Path,
    config: SFTConfig = SFTConfig(),
    *,
    progress: Optional[Progress] = None,
) -> SFTResult:
    """Train a LoRA adapter on `data` (SFT JSONL) over `base_model_dir`; write it atomically to `out_dir`."""
    t0 = time.monotonic()
    convs = load_sft_jsonl(Path(data))
    if not convs:
        raise TrainingDataError(f"{data} has no training examples; collect successful episodes first")
    torch.manual_seed(config.seed)
    tok = AutoTokenizer.from_pretrained(base_model_dir)
    examples = [encode_chat(tok, c, max_len=config.max_len) for c in convs]
    model = lora_model(base_model_dir, rank=config.rank, alpha=config.alpha, dropout=config.dropout)
    loss = train_causal_lm(model, examples, pad_id=tok.pad_token_id, steps=config.steps,
                           batch_size=config.batch_size, lr=config.lr, seed=config.seed, progress=progress)
    meta = {"config": config, "base_model": base_model_dir, "data": data, "examples": len(examples), "train_loss": loss}
    save_adapter(model, Path(out_dir), "sft", meta)
    return SFTResult(adapter_dir=Path(out_dir), train_loss=loss, examples=len(examples), seconds=time.monotonic() - t0)
