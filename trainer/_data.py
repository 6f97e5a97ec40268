"""Chat conversations -> token ids with a loss mask on the model's own tokens only.

Used by both the base-model builder and SFT, so both train on exactly what the model generates:
each assistant message's content and its closing `<|end|>`. Prompts, environment feedback and tool
output are masked (label -100): the model must not learn to predict the sandbox.
"""

from __future__ import annotations

from typing import Any, Optional, Sequence

import torch

IGNORE = -100


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
