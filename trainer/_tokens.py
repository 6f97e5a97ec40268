"""Token-exact training rows from what vLLM returned, and the per-token logprobs of a batch.

An episode of K assistant turns arrives as K (prompt ids, completion ids, logprobs) triples. Turn k+1's
prompt normally starts with turn k's prompt + completion (the chat template re-renders the same
conversation and appends the observation), so the episode packs into one row:

    ids   = prompt_1 + completion_1 + obs_2 + completion_2 + ...   (obs_k = the new tail of prompt_k)
    mask  =    0     +      1       +   0   +      1       + ...   (loss only on sampled tokens)

When the server re-rendered the conversation differently (the model sampled a non-canonical split of
its text, which re-tokenizing the text undoes), turn k+1 does not extend turn k. Such a turn starts a
row of its own from its exact prompt ids, so every completion is still trained against exactly the
context it was sampled in; nothing is ever re-tokenized. With `require_prefix=True` it is an error
naming the trajectory and the turn instead.

Deliberately not here: truncation (a row is at most one served prompt + completion long, which the
server's max_model_len already bounds) and sequence packing of several episodes into one row.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Sequence

import torch

from ._rollouts import Episode
from .errors import TokenDataError


@dataclass(frozen=True)
class TokenRow:
    ids: list[int]
    loss: list[bool]
    """True on the tokens vLLM sampled (they carry the loss)."""
    behaviour: list[float]
    """The sampling server's logprob of each sampled token; 0.0 elsewhere."""


def episode_rows(ep: Episode, *, require_prefix: bool = False) -> list[TokenRow]:
    """The rows one episode trains as (one, unless a turn did not extend the previous one)."""
    rows: list[TokenRow] = []
    ids: list[int] = []
    loss: list[bool] = []
    beh: list[float] = []
    for k, turn in enumerate(ep.turns):
        prompt = list(turn.prompt_ids)
        if ids and prompt[: len(ids)] == ids:
            tail = prompt[len(ids):]
        else:
            if ids:
                if require_prefix:
                    at = next((i for i, (a, b) in enumerate(zip(prompt, ids)) if a != b), min(len(prompt), len(ids)))
                    raise TokenDataError(
                        ep.id, k, f"prompt ids do not start with turn {k - 1}'s prompt + completion (first "
                        f"difference at token {at} of {len(ids)}): the server re-tokenized the conversation text")
                rows.append(TokenRow(ids, loss, beh))
            ids, loss, beh, tail = [], [], [], prompt
        ids = ids + tail + list(turn.completion_ids)
        loss = loss + [False] * len(tail) + [True] * len(turn.completion_ids)
        beh = beh + [0.0] * len(tail) + list(turn.logprobs)
    rows.append(TokenRow(ids, loss, beh))
    return rows


def pad_rows(rows: Sequence[TokenRow], pad_id: int) -> dict[str, torch.Tensor]:
    """Right-pad: input_ids (B, T) long, attention_mask (B, T) long, loss_mask (B, T) bool, behaviour (B, T)."""
    b, t = len(rows), max(len(r.ids) for r in rows)
    out = {
        "input_ids": torch.full((b, t), pad_id, dtype=torch.long),
        "attention_mask": torch.zeros((b, t), dtype=torch.long),
        "loss_mask": torch.zeros((b, t), dtype=torch.bool),
        "behaviour": torch.zeros((b, t), dtype=torch.float32),
    }
    for i, r in enumerate(rows):
        n = len(r.ids)
        out["input_ids"][i, :n] = torch.tensor(r.ids)
        out["attention_mask"][i, :n] = 1
        out["loss_mask"][i, :n] = torch.tensor(r.loss)
        out["behaviour"][i, :n] = torch.tensor(r.behaviour)
    return out


def token_logprobs(model: Any, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
    """log p(ids[:, t] | ids[:, :t]) for t >= 1, as (B, T-1); position t-1 of the result scores token t."""
    logits = model(input_ids=input_ids, attention_mask=attention_mask).logits[:, :-1].float()  # (B, T-1, V)
    target = input_ids[:, 1:].unsqueeze(-1)  # (B, T-1, 1)
    # gather - logsumexp instead of log_softmax: no second (B, T, V) tensor (the vocabulary can be 150k).
    logprobs: torch.Tensor = logits.gather(-1, target).squeeze(-1) - torch.logsumexp(logits, dim=-1)  # (B, T-1)
    return logprobs
