"""The tiny base model looplift builds itself, so the embedded default needs no download.

A 2-layer Llama (hidden 128, 2 heads of dim 64 — vLLM's CPU attention refuses smaller heads — one KV
head, ~0.4 M parameters) with the byte-level tokenizer from `_tokenizer`, trained for a couple of
minutes on synthetic demonstrations of the demo task in which most demonstrations copy the
expression wrongly, plus tool-calling demonstrations (`_tool_demos`: the same task through a `calc`
tool, and an order lookup) miscopied the same way. The result is deliberately imperfect: it knows the
formats and the tools, and succeeds on roughly a third of held-out problems, so the closed loop has
something to fix.

Deterministic for a seed (same config -> same weights on the same machine). Cached under
`$LOOPLIFT_HOME/models/tiny-<config hash>`; the directory is written to a temp name and renamed, so a
crash never leaves a half-built model that looks finished.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import random
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Optional

import torch
from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

from envs import demonstration, training_tasks
from sdk import looplift_home
from sdk.infra import atomic_dir, record_cost

from . import _defaults as D
from ._data import Progress, encode_chat, train_causal_lm
from ._lora import lora_targets
from ._tokenizer import build_tokenizer
from ._tool_demos import calc_demo, lookup_demo


@dataclass(frozen=True)
class BaseModelConfig:
    """How the tiny base model is built. Every field changes the cache key."""

    seed: int = 0
    """Seeds the task sampler, the miscopies, weight init and batch order."""
    n_demos: int = 20_000
    """Synthetic demonstrations of the demo task (never from the held-out set)."""
    miscopy_p: float = 0.7
    """Fraction of demonstrations whose code copies the expression wrongly (sets the base success rate)."""
    calc_demos: int = 2_000
    """Tool-calling demonstrations of the demo task (`calc`, `_tool_demos`), miscopied like the others."""
    lookup_demos: int = 3_000
    """Tool-calling demonstrations of an order lookup (`lookup_order`, `_tool_demos`), miscopied the same way."""
    steps: int = D.BASE_MODEL_STEPS
    """Optimizer steps."""
    batch_size: int = 64
    lr: float = 3e-3
    hidden_size: int = 128
    intermediate_size: int = 256
    num_layers: int = 2
    num_heads: int = 2
    num_kv_heads: int = 1
    vocab_size: int = 320
    max_position_embeddings: int = 512

    def key(self) -> str:
        blob = json.dumps(dataclasses.asdict(self), sort_keys=True).encode()
        return hashlib.sha256(blob).hexdigest()[:12]


def _tokenizer_corpus(seed: int) -> list[str]:
    rng = random.Random(seed)
    texts = []
    for task in training_tasks(2000, seed + 17):
        for m in demonstration(task, rng, miscopy_p=0.5):
            texts.append(m["content"])
    tool_convs = [calc_demo(t, rng, miscopy_p=0.5) for t in training_tasks(300, seed + 19)]
    tool_convs += [lookup_demo(rng, miscopy_p=0.5) for _ in range(300)]
    for msgs, _tools in tool_convs:
        for msg in msgs:
            texts.append(msg["content"] or "")
            texts += [f'{{"name": "{c["function"]["name"]}", "arguments": {c["function"]["arguments"]}}}'
                      for c in msg.get("tool_calls") or []]
    texts += ["Error: NameError: name 'x' is not defined", "Correct.", "Incorrect.", "Output: ", "Answer: ",
              "Tools: calc(expression) lookup_order(order_id)"]
    return texts


def _demonstrations(cfg: BaseModelConfig, tok, rng: random.Random) -> list[tuple[list[int], list[int]]]:  # type: ignore[no-untyped-def]
    """The encoded training conversations: the demo task as text, then as `calc` calls, then order lookups."""
    tasks = training_tasks(cfg.n_demos, cfg.seed + 1)
    examples = [encode_chat(tok, demonstration(t, rng, miscopy_p=cfg.miscopy_p)) for t in tasks]
    tool_convs = [calc_demo(t, rng, miscopy_p=cfg.miscopy_p) for t in training_tasks(cfg.calc_demos, cfg.seed + 2)]
    tool_convs += [lookup_demo(rng, miscopy_p=cfg.miscopy_p) for _ in range(cfg.lookup_demos)]
    return examples + [encode_chat(tok, msgs, tools=tools) for msgs, tools in tool_convs]


def _llama_config(cfg: BaseModelConfig, vocab: int, tok) -> LlamaConfig:  # type: ignore[no-untyped-def]
    return LlamaConfig(
        vocab_size=vocab,
        hidden_size=cfg.hidden_size,
        intermediate_size=cfg.intermediate_size,
        num_hidden_layers=cfg.num_layers,
        num_attention_heads=cfg.num_heads,
        num_key_value_heads=cfg.num_kv_heads,
        head_dim=cfg.hidden_size // cfg.num_heads,
        max_position_embeddings=cfg.max_position_embeddings,
        rms_norm_eps=1e-5,
        tie_word_embeddings=False,
        pad_token_id=tok.pad_token_id,
        eos_token_id=tok.eos_token_id,
        bos_token_id=None,
    )


def _save(model: LlamaForCausalLM, tok: PreTrainedTokenizerFast, out_dir: Path, meta: dict[str, Any]) -> Path:
    """Write an HF directory atomically (temp dir + rename)."""
    out_dir = Path(out_dir)
    model.generation_config.eos_token_id = tok.eos_token_id
    model.generation_config.pad_token_id = tok.pad_token_id
    with atomic_dir(out_dir) as tmp:
        model.save_pretrained(tmp, safe_serialization=True)
        tok.save_pretrained(tmp)
        (tmp / "looplift.json").write_text(json.dumps(meta, indent=2, sort_keys=True))
    return out_dir


def write_untrained(out_dir: Path, *, seed: int = 0) -> Path:
    """An untrained tiny model directory (tokenizer + chat template + random weights) that vLLM loads.
    For tests of serving code, where what the model says does not matter."""
    cfg = BaseModelConfig(seed=seed)
    torch.manual_seed(seed)
    tok = build_tokenizer(_tokenizer_corpus(seed), vocab_size=cfg.vocab_size)
    model = LlamaForCausalLM(_llama_config(cfg, len(tok), tok))
    return _save(model, tok, Path(out_dir), {"config": dataclasses.asdict(cfg), "trained": False})


def write_lora_adapter(model_dir: Path, out_dir: Path, *, seed: int = 0, rank: int = 8) -> Path:
    """A peft LoRA adapter for `model_dir` with random non-zero weights (B is zero at init in peft,
    which would make the adapter a no-op; we fill it so the adapter visibly changes outputs)."""
    from peft import LoraConfig, get_peft_model

    torch.manual_seed(seed)
    base = LlamaForCausalLM.from_pretrained(model_dir)
    peft_model = get_peft_model(base, LoraConfig(r=rank, lora_alpha=2 * rank, target_modules=lora_targets(base)))
    with torch.no_grad():
        for name, p in peft_model.named_parameters():
            if "lora_B" in name:
                p.normal_(0.0, 0.5)
    peft_model.save_pretrained(str(out_dir))
    return Path(out_dir)


def base_model_dir(cfg: BaseModelConfig = BaseModelConfig()) -> Path:
    """Where the model for `cfg` is (or will be) cached."""
    return looplift_home() / "models" / f"tiny-{cfg.key()}"


def build_base_model(
    cfg: BaseModelConfig = BaseModelConfig(), *, out_dir: Optional[Path] = None, force: bool = False,
    progress: Optional[Progress] = None,
) -> Path:
    """Build (or reuse the cached) tiny base model; returns its HF directory."""
    out = Path(out_dir) if out_dir is not None else base_model_dir(cfg)
    if out.exists() and (out / "looplift.json").exists() and not force:
        return out
    out.parent.mkdir(parents=True, exist_ok=True)
    t0 = time.monotonic()
    torch.manual_seed(cfg.seed)
    rng = random.Random(cfg.seed)
    tok = build_tokenizer(_tokenizer_corpus(cfg.seed), vocab_size=cfg.vocab_size)
    examples = _demonstrations(cfg, tok, rng)
    model = LlamaForCausalLM(_llama_config(cfg, len(tok), tok))
    loss = train_causal_lm(model, examples, pad_id=tok.pad_token_id, steps=cfg.steps, batch_size=cfg.batch_size,
                           lr=cfg.lr, seed=cfg.seed, progress=progress)
    meta = {"config": dataclasses.asdict(cfg), "trained": True, "final_loss": loss,
            "seconds": round(time.monotonic() - t0, 1), "parameters": sum(p.numel() for p in model.parameters())}
    saved = _save(model, tok, out, meta)
    record_cost("model_build", f"tiny-{cfg.key()} ({cfg.steps} steps)", time.monotonic() - t0)
    return saved
