"""DPO with LoRA on `collector export --format dpo` pairs (best vs worst of one task and prompt; a user's
correction as chosen against the reply it corrected).

For a pair (prompt x, chosen y_w, rejected y_l), with log-probabilities summed over the assistant tokens
of the completion only (prompts, tool output and user turns inside a completion are masked):

    m    = [log pi(y_w|x) - log ref(y_w|x)] - [log pi(y_l|x) - log ref(y_l|x)]     (B,)
    loss = -log sigmoid(beta * m) + nll_weight * (-log pi(y_w|x) / |y_w|)         (B,) -> (), mean over the minibatch

The second term (RPO's NLL on the chosen reply; TRL's `rpo_alpha`) keeps the chosen reply likely: DPO
alone can satisfy the margin by making both replies unlikely, and on a small model that wrecks what
it generates (measured here: a LoRA on the tiny model stopped writing code at all).

The reference is the policy training starts from, computed once before training: the serving
version's adapter when the job continues it (`init_adapter`; `DPOConfig.reference = "serving"`, the
default, used whenever the serving version is an adapter), else the base model under a fresh adapter
(`reference = "base"`, or a serving version that is the base itself). DPO's reference should be the
policy that produced the pairs; training a fresh adapter from the base would also throw away what the
serving adapter learned. With `reference = "base"` a retrain is a pure function of (base, data, config),
like SFT. Pairs are text (a correction was typed by a person, so there are no sampled ids to be exact
about) and are tokenized with the chat template, as SFT does.

Nothing is truncated: a pair whose prompt and longer reply do not fit in `max_len` tokens is an error
naming the pair (its line, the chosen and rejected trajectory ids) and the lengths. Truncated from the
right, a long prompt leaves no reply token to score and the pair trains on nothing; a cut reply is not the
reply that was preferred.

Left out, on purpose: IPO/KTO/ORPO variants, label smoothing, a reference other than the starting
policy, truncation, and multi-GPU.
"""

from __future__ import annotations

import contextlib
import math
import statistics
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Optional

import torch
import torch.nn.functional as F
from transformers import AutoTokenizer

from . import _defaults as D
from ._data import IGNORE, Progress, collate, encode_chat, minibatches
from ._json import jsonl_objects
from ._lora import ensure_room, lora_model, save_adapter
from ._tokens import token_logprobs
from .errors import ConfigError, TrainingDataError

REFERENCES = ("serving", "base")


@dataclass(frozen=True)
class DPOConfig:
    """DPO hyper-parameters; written next to every adapter as `looplift_dpo.json`."""

    rank: int = 8
    alpha: int = 16
    lr: float = 1e-3
    steps: int = 100
    """Optimizer steps, independent of the data size so a run's cost is bounded."""
    batch_size: int = 16
    """Pairs per optimizer step."""
    beta: float = 0.1
    nll_weight: float = 1.0
    """Weight of the per-token NLL of the chosen reply (0: plain DPO)."""
    seed: int = 0
    max_len: int = 512
    """Tokens of prompt + reply; a longer pair is an error (nothing is truncated)."""
    reference: str = D.DPO_REFERENCE
    """What the job starts from and DPO compares against. "serving": the serving version's adapter, continued,
    is also the reference (when the serving version is an adapter; its own rank and alpha then apply); "base":
    a fresh adapter, the base model as reference."""

    def __post_init__(self) -> None:
        if self.reference not in REFERENCES:
            raise ConfigError(f"DPOConfig.reference ([dpo] reference) = {self.reference!r}: choose one of "
                              f"{', '.join(REFERENCES)} (the default is {D.DPO_REFERENCE!r})")


@dataclass(frozen=True)
class DPOResult:
    adapter_dir: Path
    train_loss: float
    pairs: int
    accuracy: float
    """Fraction of training pairs whose margin m is positive after training."""
    seconds: float


Pair = tuple[tuple[list[int], list[int]], tuple[list[int], list[int]]]  # ((ids, labels) chosen, (ids, labels) rejected)


_WHAT = "a DPO pair with prompt, chosen and rejected"


def load_dpo_jsonl(path: Path, tokenizer: Any, *, max_len: int = 512) -> list[Pair]:
    """The pairs of a DPO export, encoded; a line without a prompt and two assistant completions, or a pair
    longer than `max_len` tokens, is an error."""
    pairs: list[Pair] = []
    too_long: list[str] = []
    longest = 0
    for n, obj in jsonl_objects(path, TrainingDataError, _WHAT):
        try:
            prompt, chosen, rejected = obj["prompt"], obj["chosen"], obj["rejected"]
        except (KeyError, TypeError) as e:
            raise TrainingDataError(f"{path}:{n}: not {_WHAT} ({e})") from e
        for side, msgs in (("chosen", chosen), ("rejected", rejected)):
            if not any(m.get("role") == "assistant" for m in msgs):
                raise TrainingDataError(f"{path}:{n}: {side} has no assistant message to score")
        c = encode_chat(tokenizer, prompt + chosen, max_len=sys.maxsize)
        r = encode_chat(tokenizer, prompt + rejected, max_len=sys.maxsize)
        if max(len(c[0]), len(r[0])) > max_len:
            longest = max(longest, len(c[0]), len(r[0]))
            p_len = next((i for i, lab in enumerate(c[1]) if lab != IGNORE), len(c[1]))  # before the first scored token
            too_long.append(f"line {n} (pair {len(pairs)}, chosen {obj.get('chosen_id', '?')}, rejected "
                            f"{obj.get('rejected_id', '?')}): prompt {p_len} + chosen {len(c[0]) - p_len} / rejected "
                            f"{len(r[0]) - p_len} tokens")
        pairs.append((c, r))
    if too_long:
        raise TrainingDataError(
            f"{path}: {len(too_long)} of {len(pairs)} DPO pairs are longer than max_len={max_len} tokens; the first is "
            f"{too_long[0]}. DPO does not truncate (a cut prompt leaves no reply to score, a cut reply is not the one "
            f"preferred). Raise DPOConfig.max_len ([dpo] max_len) to at least {longest} if the base model's context "
            "holds it, or take these pairs' trajectories out of the data")
    return pairs


def _seq_logprob(model: Any, batch: dict[str, torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor]:
    """Sum of log p over labeled tokens, and their number, per row: (B,), (B,)."""
    # Labeled tokens equal input_ids (`encode_chat`), so the per-token logprobs of the ids are the labels' ones.
    tok = token_logprobs(model, batch["input_ids"], batch["attention_mask"])  # (B, T-1)
    mask = batch["labels"][:, 1:] != IGNORE  # (B, T-1)
    return (tok * mask).sum(-1), mask.sum(-1)  # (B,), (B,)


def _both(model: Any, pairs: list[Pair], pad_id: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Chosen and rejected sequence logprobs (B,) each, and the chosen token counts (B,), in one forward
    pass over 2B rows."""
    batch = collate([p[0] for p in pairs] + [p[1] for p in pairs], pad_id)
    lp, n = _seq_logprob(model, batch)  # (2B,), (2B,)
    b = len(pairs)
    return lp[:b], lp[b:], n[:b]


def dpo_loss(pol_c: torch.Tensor, pol_r: torch.Tensor, ref_c: torch.Tensor, ref_r: torch.Tensor, n_c: torch.Tensor,
             config: DPOConfig) -> torch.Tensor:
    """The minibatch's loss: mean over pairs of -log sigmoid(beta * margin) + nll_weight * NLL(chosen), where
    margin = (log pi(c) - log ref(c)) - (log pi(r) - log ref(r)) on the sequence logprobs (B,) and the NLL is the
    chosen reply's per-token mean (its sum over `n_c` labeled tokens)."""
    margin = (pol_c - ref_c) - (pol_r - ref_r)  # (B,)
    nll = -pol_c / n_c.clamp(min=1)  # (B,)
    return (-F.logsigmoid(config.beta * margin) + config.nll_weight * nll).mean()  # ()


def train_dpo(
    base_model_dir: Path,
    data: Path,
    out_dir: Path,
    config: DPOConfig = DPOConfig(),
    *,
    init_adapter: Optional[Path] = None,
    progress: Optional[Progress] = None,
) -> DPOResult:
    """Train a LoRA adapter with DPO on `data` (DPO JSONL) over `base_model_dir`; write it atomically to `out_dir`.
    `init_adapter` (the serving version's adapter, which produced the pairs) is continued and is the reference;
    None: a fresh adapter, the base model as reference."""
    t0 = time.monotonic()
    torch.manual_seed(config.seed)
    tok = AutoTokenizer.from_pretrained(base_model_dir)
    pairs = load_dpo_jsonl(Path(data), tok, max_len=config.max_len)
    if not pairs:
        raise TrainingDataError(f"{data} has no pairs; DPO needs tasks with a better and a worse reply to the same "
                                "prompt, or user corrections")
    model = lora_model(base_model_dir, rank=config.rank, alpha=config.alpha, init_adapter=init_adapter)
    ensure_room(model, Path(out_dir))
    pad = tok.pad_token_id
    model.eval()
    # The reference: the policy before any step (the init adapter), or the base model (the adapter switched off).
    as_reference = contextlib.nullcontext() if init_adapter is not None else model.disable_adapter()
    with torch.no_grad(), as_reference:
        ref = [_both(model, pairs[i:i + config.batch_size], pad) for i in range(0, len(pairs), config.batch_size)]
    ref_c = torch.cat([r[0] for r in ref])  # (N,)
    ref_r = torch.cat([r[1] for r in ref])  # (N,)
    params = [p for p in model.parameters() if p.requires_grad]
    opt = torch.optim.AdamW(params, lr=config.lr, weight_decay=0.0)
    model.train()
    recent: list[float] = []
    for step, idx in enumerate(minibatches(len(pairs), config.batch_size, config.steps, config.seed)):
        pol_c, pol_r, n_c = _both(model, [pairs[i] for i in idx], pad)  # (B,) each
        loss = dpo_loss(pol_c, pol_r, ref_c[idx], ref_r[idx], n_c, config)  # ()
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(params, 1.0)
        opt.step()
        recent = (recent + [loss.item()])[-20:]
        if progress is not None:
            progress(step + 1, config.steps, recent[-1])
    model.eval()
    with torch.no_grad():
        pol = [_both(model, pairs[i:i + config.batch_size], pad) for i in range(0, len(pairs), config.batch_size)]
    margins = (torch.cat([p[0] for p in pol]) - ref_c) - (torch.cat([p[1] for p in pol]) - ref_r)  # (N,)
    accuracy = float((margins > 0).float().mean())
    loss_final = statistics.fmean(recent) if recent else math.nan
    meta = {"config": config, "base_model": base_model_dir, "data": data, "init_adapter": init_adapter,
            "reference": "init_adapter" if init_adapter is not None else "base", "pairs": len(pairs),
            "train_loss": loss_final, "accuracy": accuracy}
    save_adapter(model, Path(out_dir), "dpo", meta)
    return DPOResult(adapter_dir=Path(out_dir), train_loss=loss_final, pairs=len(pairs), accuracy=accuracy,
                     seconds=round(time.monotonic() - t0, 2))
