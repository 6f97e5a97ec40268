"""Chat conversations -> token ids with a loss mask on the model's own tokens only, and the causal-LM
training loop over them.

Used by both the base-model builder and SFT, so both train on exactly what the model generates:
each assistant message's content and its closing `<|end|>`. Prompts, environment feedback and tool
output are masked (label -100): the model must not learn to predict the sandbox.
"""

from __future__ import annotations

import math
import random
from pathlib import Path
from typing import Any, Callable, Iterator, Optional, Sequence

import torch

from ._dist import Dist
from ._json import jsonl_objects
from .errors import TrainingDataError

IGNORE = -100
Progress = Callable[[int, int, float], None]  # (step, total, loss)


def encode_chat(tokenizer: Any, messages: Sequence[dict[str, Any]], *, tools: Optional[Sequence[dict[str, Any]]] = None,
                max_len: int = 512) -> tuple[list[int], list[int]]:
    """Return (input_ids, labels) for one conversation; labels are -100 outside assistant turns. `tools` (OpenAI
    function specs) are rendered as the server renders a request's `tools`, so a tool-using conversation trains
    on the prompt the model will see.

    Assistant spans are found by rendering growing prefixes of the conversation: the tokens between
    "everything before, plus the generation prompt" and "everything up to and including this message"
    are the assistant's. This relies on every turn ending in a special token, so prefixes tokenize
    identically (true for our template and for most chat templates)."""

    def ids(msgs: Sequence[dict[str, Any]], gen: bool) -> list[int]:
        out = tokenizer.apply_chat_template(list(msgs), tools=list(tools) if tools else None, tokenize=True,
                                            add_generation_prompt=gen)
        # transformers 5 returns a BatchEncoding-like mapping; older versions a list.
        return list(out["input_ids"] if isinstance(out, dict) or hasattr(out, "keys") else out)

    full = ids(messages, False)
    labels = [IGNORE] * len(full)
    for i, m in enumerate(messages):
        if m.get("role") != "assistant":
            continue
        start = len(ids(messages[:i], True))
        upto = ids(messages[: i + 1], False)
        end = len(upto)
        if full[:end] != upto:  # pragma: no cover - template not prefix-stable
            raise ValueError("chat template is not prefix-stable; cannot mask assistant turns")
        labels[start:end] = full[start:end]
    return full[:max_len], labels[:max_len]


def collate(examples: Sequence[tuple[list[int], list[int]]], pad_id: int) -> dict[str, torch.Tensor]:
    """Right-pad a batch: input_ids (B, T), attention_mask (B, T), labels (B, T)."""
    t = max(len(x) for x, _ in examples)
    input_ids = torch.full((len(examples), t), pad_id, dtype=torch.long)
    labels = torch.full((len(examples), t), IGNORE, dtype=torch.long)
    mask = torch.zeros((len(examples), t), dtype=torch.long)
    for b, (x, y) in enumerate(examples):
        input_ids[b, : len(x)] = torch.tensor(x)
        labels[b, : len(y)] = torch.tensor(y)
        mask[b, : len(x)] = 1
    return {"input_ids": input_ids, "attention_mask": mask, "labels": labels}


def jsonl_fields(path: Path, what: str, keys: Sequence[str]) -> Iterator[tuple[int, list[Any]]]:
    """(line number, [obj[key] for key in keys]) for each non-blank line of an export; a line that is not a
    JSON object with those keys is a `TrainingDataError` naming the file, the line and `what` it should be."""
    for n, obj in jsonl_objects(path, TrainingDataError, what):
        try:
            yield n, [obj[k] for k in keys]
        except (KeyError, TypeError) as e:
            raise TrainingDataError(f"{path}:{n}: not {what} ({e})") from e


def minibatches(n: int, batch_size: int, steps: int, seed: int) -> Iterator[list[int]]:
    """`steps` minibatches of indices into `n` examples: shuffled epochs back to back, so no example is
    seen twice before every example was seen once (the cost is `steps`, whatever `n` is)."""
    rng = random.Random(seed)
    order: list[int] = []
    for _ in range(steps):
        if len(order) < batch_size:
            more = list(range(n))
            rng.shuffle(more)
            order += more
        idx, order = order[:batch_size], order[batch_size:]
        yield idx


def token_loss_sum(model: Any, batch: dict[str, torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor]:
    """(sum of next-token cross-entropies over the unmasked labels, how many there are) for one batch.

    A sum and a count rather than a mean, so that a minibatch split over several processes still
    averages over all of its tokens (`Dist.mean`); in one process `sum / count` is the usual mean."""
    logits = model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"]).logits  # (B, T, V)
    labels = batch["labels"][:, 1:]  # (B, T-1): position t predicts token t+1
    logits = logits[:, :-1].float()  # (B, T-1, V)
    total = torch.nn.functional.cross_entropy(logits.flatten(0, 1), labels.flatten(), ignore_index=IGNORE,
                                              reduction="sum")
    return total, (labels != IGNORE).sum()


def train_causal_lm(
    model: torch.nn.Module,
    examples: list[tuple[list[int], list[int]]],
    *,
    pad_id: int,
    steps: int,
    batch_size: int,
    lr: float,
    seed: int,
    progress: Optional[Progress] = None,
    dist: Optional[Dist] = None,
) -> float:
    """AdamW with linear warmup and cosine decay over `steps` minibatches; returns the final loss
    (mean of the last 20 steps). Shared by the base-model builder and SFT.

    `dist` (a `Dist` whose `wrap` made `model`) spreads each minibatch over the ranks: every rank draws the
    same `batch_size` examples and trains on its share; the loss is the mean over the whole minibatch's
    tokens, as in one process."""
    dist = dist or Dist()
    params = [p for p in model.parameters() if p.requires_grad]
    device = params[0].device
    opt = torch.optim.AdamW(params, lr=lr, weight_decay=0.0)
    warmup = max(1, steps // 20)
    sched = torch.optim.lr_scheduler.LambdaLR(
        opt, lambda s: min(1.0, (s + 1) / warmup) * 0.5 * (1 + math.cos(math.pi * min(1.0, s / steps)))
    )
    model.train()
    recent: list[float] = []
    for step, idx in enumerate(minibatches(len(examples), batch_size, steps, seed)):
        batch = {k: v.to(device) for k, v in collate([examples[i] for i in dist.shard(idx)], pad_id).items()}
        loss, logged = dist.mean(*token_loss_sum(model, batch))  # mean over the minibatch's unmasked tokens
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(params, 1.0)
        opt.step()
        sched.step()
        recent = (recent + [logged])[-20:]
        if progress is not None:
            progress(step + 1, steps, recent[-1])
    model.eval()
    return sum(recent) / max(1, len(recent))
