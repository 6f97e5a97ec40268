"""Chat conversations -> token ids with a loss mask on the model's own tokens only, and the causal-LM
training loop over them.

Used by both the base-model builder and SFT, so both train on exactly what the model generates:
each assistant message's content and its closing `<|end|>`. Prompts, environment feedback and tool
output are masked (label -100): the model must not learn to predict the sandbox.

A small model with a real vocabulary (151k-248k tokens, `_families`) spends nearly all of its compute and
memory in the LM head. Two ways around it: `labelled_token_loss_sum` takes logits only where a label is (the same
loss), and `train_on_active_vocab` trains only the rows of the tokens its examples use and counts the rest of
the softmax in closed form (`FrozenRows`), leaving those rows as initialised (the same loss up to the closed
form's error).
"""

from __future__ import annotations

import copy
import json
import math
import random
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any, Callable, Iterator, Optional, Sequence

import torch

from ._dist import Dist
from ._json import jsonl_objects
from .errors import TrainingDataError

IGNORE = -100
Progress = Callable[[int, int, float], None]  # (step, total, loss)


def served_messages(messages: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """`messages` as vLLM hands them to a chat template: each tool call's `arguments` JSON string parsed into an
    object (an empty, invalid or non-object one becomes {}), so a template that needs an object (Qwen3-Coder's
    XML calls) renders, and every template renders a conversation the way the server will when it continues."""
    out = []
    for m in messages:
        calls = m.get("tool_calls")
        if not calls:
            out.append(m)
            continue
        parsed = []
        for c in calls:
            fn = dict(c.get("function") or {})
            args = fn.get("arguments")
            if not isinstance(args, dict):
                try:
                    args = json.loads(args) if isinstance(args, str) and args else {}
                except ValueError:
                    args = {}
                fn["arguments"] = args if isinstance(args, dict) else {}
            parsed.append({**c, "function": fn})
        out.append({**m, "tool_calls": parsed})
    return out


def trains_on(message: Any) -> bool:
    """Whether SFT trains on `message`: an assistant message, unless it has `"weight": 0` (OpenAI's fine-tuning
    field; the export sets it on messages the model did not write)."""
    return isinstance(message, dict) and message.get("role") == "assistant" and message.get("weight") != 0


def encode_chat(tokenizer: Any, messages: Sequence[dict[str, Any]], *, tools: Optional[Sequence[dict[str, Any]]] = None,
                max_len: int = 512) -> tuple[list[int], list[int]]:
    """Return (input_ids, labels) for one conversation; labels are -100 outside assistant turns and on an
    assistant message with `"weight": 0` (OpenAI's fine-tuning field; the export sets it on messages the model
    did not write). `tools` (OpenAI
    function specs) are rendered as the server renders a request's `tools`, so a tool-using conversation trains
    on the prompt the model will see.

    Assistant spans are found by rendering growing prefixes of the conversation: the tokens between
    "everything before, plus the generation prompt" and "everything up to and including this message"
    are the assistant's. This relies on every turn ending in a special token, so prefixes tokenize
    identically (true for our template and for most chat templates)."""

    messages = served_messages(messages)

    def ids(msgs: Sequence[dict[str, Any]], gen: bool) -> list[int]:
        out = tokenizer.apply_chat_template(list(msgs), tools=list(tools) if tools else None, tokenize=True,
                                            add_generation_prompt=gen)
        # transformers 5 returns a BatchEncoding-like mapping; older versions a list.
        return list(out["input_ids"] if isinstance(out, dict) or hasattr(out, "keys") else out)

    full = ids(messages, False)
    labels = [IGNORE] * len(full)
    for i, m in enumerate(messages):
        if not trains_on(m):
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


def labelled_token_loss_sum(model: Any, batch: dict[str, torch.Tensor], *,
                            rest: Optional[Callable[[torch.Tensor], torch.Tensor]] = None,
                            ) -> tuple[torch.Tensor, torch.Tensor]:
    """`token_loss_sum` with the LM head applied only where a label is: the same loss, for a model whose vocabulary
    is large against its width (a 151k-token head on a 128-wide, 2-layer body costs ~40x the body per position,
    and the full logits of a 300-token batch of 8 take gigabytes). Needs the usual `get_decoder()` /
    `get_output_embeddings()` split of an HF causal LM (logits = head(last hidden state), no scaling).

    `rest(hidden) -> (N,)`, when given, is the log-sum-exp of the logits of tokens the head leaves out (a model
    trained on part of a vocabulary, `_families`): one more class in the softmax that no label names."""
    labels = batch["labels"][:, 1:]  # (B, T-1): position t predicts token t+1
    keep = labels != IGNORE  # (B, T-1)
    hidden = model.get_decoder()(input_ids=batch["input_ids"],
                                 attention_mask=batch["attention_mask"]).last_hidden_state[:, :-1][keep]  # (N, H)
    logits = model.get_output_embeddings()(hidden).float()  # (N, V), N = labelled positions
    if rest is not None:
        logits = torch.cat([logits, rest(hidden.float())[:, None]], dim=1)  # (N, V + 1)
    total = torch.nn.functional.cross_entropy(logits, labels[keep], reduction="sum")
    return total, keep.sum()


LossSum = Callable[[Any, dict[str, torch.Tensor]], tuple[torch.Tensor, torch.Tensor]]


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
    loss_sum: LossSum = token_loss_sum,
) -> float:
    """AdamW with linear warmup and cosine decay over `steps` minibatches; returns the final loss
    (mean of the last 20 steps). Shared by the base-model builder and SFT.

    `dist` (a `Dist` whose `wrap` made `model`) spreads each minibatch over the ranks: every rank draws the
    same `batch_size` examples and trains on its share; the loss is the mean over the whole minibatch's
    tokens, as in one process. `loss_sum` is the (sum, count) of one batch: `token_loss_sum`, or
    `labelled_token_loss_sum` (logits only where a label is)."""
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
        loss, logged = dist.mean(*loss_sum(model, batch))  # mean over the minibatch's unmasked tokens
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


@dataclass(frozen=True)
class FrozenRows:
    """log sum_i exp(h . w_i) over the head rows w_i that training leaves at their random initialisation, in closed
    form: for rows drawn from a Gaussian (mean mu, covariance S) it is log n + h . mu + h^T S h / 2, the log of n
    times the Gaussian's moment generating function; mu and S are measured on the rows themselves."""

    log_n: float
    mean: torch.Tensor  # (H,)
    cov: torch.Tensor  # (H, H)

    @classmethod
    def of(cls, rows: torch.Tensor) -> FrozenRows:
        """The closed form for `rows` (n, H)."""
        rows = rows.detach().float()
        mean = rows.mean(0)  # (H,)
        centred = rows - mean  # (n, H)
        return cls(math.log(len(rows)), mean, centred.T @ centred / len(rows))

    def __call__(self, hidden: torch.Tensor) -> torch.Tensor:
        """(N, H) hidden states -> (N,) log-sum-exp of their logits over the frozen rows."""
        return self.log_n + hidden @ self.mean + 0.5 * ((hidden @ self.cov) * hidden).sum(-1)


def _vocab_slice(model: Any, active: torch.Tensor) -> Any:
    """A copy of `model` whose vocabulary is `active` (the embedding and head rows of those ids, in that order)."""
    vocab = model.config.vocab_size
    cfg = copy.deepcopy(model.config)
    cfg.vocab_size = len(active)
    cfg.pad_token_id = cfg.bos_token_id = cfg.eos_token_id = None  # ids of the full vocabulary mean nothing here
    compact = type(model)(cfg)
    compact.load_state_dict({k: v[active] if v.shape[:1] == (vocab,) else v for k, v in model.state_dict().items()})
    return compact


def _write_back(model: Any, compact: Any, active: torch.Tensor) -> None:
    vocab, full = model.config.vocab_size, model.state_dict()  # tensors that share the parameters' storage
    with torch.no_grad():
        for k, v in compact.state_dict().items():
            if full[k].shape[:1] == (vocab,):
                full[k][active] = v
            else:
                full[k].copy_(v)


def train_on_active_vocab(model: Any, examples: list[tuple[list[int], list[int]]], *, pad_id: int, steps: int,
                          batch_size: int, lr: float, seed: int, progress: Optional[Progress] = None) -> float:
    """Train `model` on `examples` as `_data.train_causal_lm` would with the full softmax, at the cost of the tokens
    the examples use: those rows train in a copy of the model cut down to them (`_vocab_slice`), the others stay at
    their random initialisation, and their share of every softmax is one more class whose logit is their
    log-sum-exp in closed form (`FrozenRows`; 2e-4 nats off the exact loss after a qwen family's default build).
    The qwen family's demonstrations use 156 of its 151,669 tokens: the head, softmax and optimizer then cost next
    to nothing. Returns the final loss (as `train_causal_lm`)."""
    vocab = model.config.vocab_size
    active = torch.tensor(sorted({t for ids, _ in examples for t in ids} | {pad_id}))  # (A,)
    index = torch.full((vocab,), -1, dtype=torch.long)
    index[active] = torch.arange(len(active))
    frozen = index < 0  # (V,)
    rest = FrozenRows.of(model.get_output_embeddings().weight[frozen])

    def remap(ids: list[int]) -> list[int]:
        return [int(index[t]) if t != IGNORE else IGNORE for t in ids]

    compact = _vocab_slice(model, active)
    loss = train_causal_lm(compact, [(remap(x), remap(y)) for x, y in examples], pad_id=int(index[pad_id]),
                           steps=steps, batch_size=batch_size, lr=lr, seed=seed, progress=progress,
                           loss_sum=partial(labelled_token_loss_sum, rest=rest))
    _write_back(model, compact, active)
    model.eval()
    return loss
