"""GPU benchmark (issue 18): one LoRA update of looplift's trainer against plain HF + PEFT doing the same update, on
a ~0.5B-parameter model of one family built from its config (no hub, no vLLM, random weights).

Run where a GPU is: `python bench/families_gpu.py [--out bench/results/families_gpu.json]` (a few minutes on one
H200). `--smoke` runs the same code on the CPU with a tiny config in well under a minute (what the tests run here);
without `--smoke` and without a CUDA device it stops with one line.

The model: `Qwen2ForCausalLM` with Qwen2.5-0.5B's shape (hidden 896, 24 layers, 14 heads, 2 KV heads, intermediate
4864, vocabulary 151,936, tied embeddings), built by `bench/rl_gpu.py`'s `build_model`, trained in bf16. LoRA rank 8,
alpha 16, on the modules `trainer._lora.lora_targets` resolves for it, in both implementations.

What one update is, given token ids (no generation: `bench/rl_gpu.py` measures rollouts + update end to end):
  sft   256 random sequences of 128-512 tokens, loss on their second half, minibatches of 16, AdamW, gradient
        clipping at 1. Ours: `trainer._lora.lora_model` + `trainer._data.train_causal_lm` (what `train_sft` runs).
        HF + PEFT: `peft.get_peft_model` + a hand-written loop (`pad_sequence`, the model's own `labels` loss).
        Both draw the same minibatches (`trainer._data.minibatches`, same seeds): the same tokens, the same steps.
  grpo  8 groups x 8 episodes of a 256-token prompt + 256 sampled tokens with their behaviour logprobs (the
        untrained model's, as vLLM would return them), rewards split within every group (no group is dropped),
        2 epochs of minibatches of 16 = 8 optimizer steps. Ours: `GRPOLearner.update` on `Group`s (the clipped,
        dual-clipped token-mean loss of `trainer/grpo.py`). HF + PEFT: the PPO-clip loss on the completion
        logprobs, written out as usual (`rl_gpu._completion_logprobs`).
Reported per update kind and implementation: tokens/s (non-pad tokens through forward + backward, over every epoch)
and seconds per optimizer step, after unmeasured warm-up steps; and ours / HF + PEFT (above 1: ours is faster).

Needs only torch, transformers and peft (the GPU machine has no vLLM); the table is plain text for that reason.
This script did not run on a GPU in the session that wrote it (none was lent): only `--smoke` ran, on the CPU.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import math
import platform
import random
import sys
import tempfile
import time
import types
from dataclasses import replace
from pathlib import Path
from typing import Any, Callable

import torch

_BENCH = Path(__file__).resolve().parent
FAMILY = "qwen2"
RANK, ALPHA = 8, 16
SFT_LR, GRPO_LR = 1e-4, 1e-5
FULL = {"sft": {"n": 256, "lo": 128, "hi": 512, "batch": 16, "warmup": 2, "steps": 16},
        "grpo": {"groups": 8, "group": 8, "prompt": 256, "completion": 256, "minibatch": 16, "epochs": 2,
                 "warmup": 1, "updates": 3}}
SMOKE = {"sft": {"n": 16, "lo": 8, "hi": 32, "batch": 4, "warmup": 1, "steps": 2},
         "grpo": {"groups": 2, "group": 4, "prompt": 8, "completion": 8, "minibatch": 4, "epochs": 1,
                  "warmup": 1, "updates": 1}}


def _load_rl_gpu() -> types.ModuleType:
    """bench/rl_gpu.py, whose model builder and helpers this script shares (by path: bench/ is no package, and
    putting it on sys.path would let bench/sandboxes.py shadow the `sandboxes` package)."""
    spec = importlib.util.spec_from_file_location("bench_rl_gpu", _BENCH / "rl_gpu.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


rl = _load_rl_gpu()


def _trainer() -> types.SimpleNamespace:
    """The trainer pieces one update uses (rl_gpu's `_trainer_core` puts the repository on sys.path first)."""
    core = rl._trainer_core()
    from trainer._data import minibatches
    from trainer._lora import lora_model, lora_targets

    return types.SimpleNamespace(**vars(core), lora_model=lora_model, lora_targets=lora_targets, minibatches=minibatches)


def _hf_peft(model_dir: Path, targets: list[str], device: str, dtype: torch.dtype) -> Any:
    """The baseline's model: the base from its directory and `peft.get_peft_model`, nothing of looplift's."""
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM

    # transformers' `to` stub does not bind `self` (as in trainer/_lora.py): a false positive.
    base = AutoModelForCausalLM.from_pretrained(model_dir, dtype=dtype).to(device)  # type: ignore[arg-type]
    return get_peft_model(base, LoraConfig(r=RANK, lora_alpha=ALPHA, target_modules=targets, task_type="CAUSAL_LM"))


def _empty_cache() -> None:
    if torch.cuda.is_available():
        torch.cuda.empty_cache()


def _figures(tokens: int, seconds: float, steps: int) -> dict[str, float]:
    return {"tokens_per_s": round(tokens / seconds, 1), "s_per_step": round(seconds / steps, 5),
            "seconds": round(seconds, 4), "tokens": tokens, "steps": steps}


# ---- SFT ---------------------------------------------------------------------------------------------------------
def sft_ours(tr: Any, model_dir: Path, ex: list[Any], s: dict[str, int], device: str, dtype: torch.dtype) -> float:
    """Seconds for `steps` minibatches of `train_causal_lm` (seed 1) after a warm-up call (seed 0)."""
    model = tr.lora_model(model_dir, rank=RANK, alpha=ALPHA, dtype=dtype, device=device)
    tr.train_causal_lm(model, ex, pad_id=0, steps=s["warmup"], batch_size=s["batch"], lr=SFT_LR, seed=0)
    rl._sync()
    t0 = time.perf_counter()
    tr.train_causal_lm(model, ex, pad_id=0, steps=s["steps"], batch_size=s["batch"], lr=SFT_LR, seed=1)
    rl._sync()
    return time.perf_counter() - t0


def sft_hf_peft(tr: Any, model_dir: Path, ex: list[Any], s: dict[str, int], device: str, dtype: torch.dtype,
                targets: list[str]) -> float:
    """The same minibatches through a hand-written loop: pad, the model's own loss, AdamW, clip; seconds for the
    `steps` measured ones."""
    from torch.nn.utils.rnn import pad_sequence

    model = _hf_peft(model_dir, targets, device, dtype)
    params = [p for p in model.parameters() if p.requires_grad]
    opt = torch.optim.AdamW(params, lr=SFT_LR, weight_decay=0.0)
    model.train()
    batches = [*tr.minibatches(len(ex), s["batch"], s["warmup"], 0), *tr.minibatches(len(ex), s["batch"], s["steps"], 1)]
    t0 = 0.0
    for k, idx in enumerate(batches):
        if k == s["warmup"]:
            rl._sync()
            t0 = time.perf_counter()
        ids = pad_sequence([torch.tensor(ex[i][0]) for i in idx], batch_first=True, padding_value=0).to(device)  # (B, T)
        labels = pad_sequence([torch.tensor(ex[i][1]) for i in idx], batch_first=True, padding_value=-100).to(device)
        attn = pad_sequence([torch.ones(len(ex[i][0]), dtype=torch.long) for i in idx], batch_first=True).to(device)
        loss = model(input_ids=ids, attention_mask=attn, labels=labels).loss  # shifted, -100 masked, token mean
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(params, 1.0)
        opt.step()
    rl._sync()
    return time.perf_counter() - t0


# ---- GRPO --------------------------------------------------------------------------------------------------------
def grpo_data(s: dict[str, int], vocab: int) -> tuple[list[list[int]], list[list[int]], list[float]]:
    """(prompt ids, completion ids, reward) per episode, group after group; every group has both rewards."""
    rng = random.Random(2)
    prompts, completions, rewards = [], [], []
    for _ in range(s["groups"]):
        prompt = [rng.randrange(10, vocab) for _ in range(s["prompt"])]
        solved = rng.randrange(1, s["group"])  # 1..G-1 of the G episodes succeed
        for k in range(s["group"]):
            prompts.append(prompt)
            completions.append([rng.randrange(10, vocab) for _ in range(s["completion"])])
            rewards.append(float(k < solved))
    return prompts, completions, rewards


def behaviour_logprobs(model: Any, prompts: list[list[int]], completions: list[list[int]], device: str,
                       chunk: int) -> list[list[float]]:
    """The sampled tokens' logprobs under `model` (the base: what a fresh adapter computes), as vLLM returns them."""
    out: list[list[float]] = []
    model.eval()
    with torch.no_grad():
        for i in range(0, len(prompts), chunk):
            full = torch.tensor([p + c for p, c in zip(prompts[i:i + chunk], completions[i:i + chunk])], device=device)
            out += rl._completion_logprobs(model, full, len(completions[i])).float().tolist()  # (B, completion)
    return out


def _probe(tr: Any, model_dir: Path, g: dict[str, int], device: str,
           dtype: torch.dtype) -> tuple[dict[str, Any], list[str], tuple[Any, ...]]:
    """The model's description, its LoRA targets as `lora_targets` resolves them (on the plain model: a peft-wrapped
    one has lora_A/lora_B layers of its own), and the GRPO data with the base model's behaviour logprobs."""
    from transformers import AutoModelForCausalLM

    base = AutoModelForCausalLM.from_pretrained(model_dir, dtype=dtype).to(device)  # type: ignore[arg-type]
    cfg = base.config
    info = {"architecture": type(base).__name__, "parameters": sum(p.numel() for p in base.parameters()),
            "hidden": cfg.hidden_size, "layers": cfg.num_hidden_layers, "heads": cfg.num_attention_heads,
            "kv_heads": cfg.num_key_value_heads, "intermediate": cfg.intermediate_size, "vocab": cfg.vocab_size,
            "tied_embeddings": bool(cfg.tie_word_embeddings), "lora_targets": tr.lora_targets(base)}
    prompts, completions, rewards = grpo_data(g, cfg.vocab_size)
    behaviour = behaviour_logprobs(base, prompts, completions, device, g["minibatch"])
    return info, info["lora_targets"], (prompts, completions, rewards, behaviour)


def grpo_ours(tr: Any, model_dir: Path, data: Any, s: dict[str, int], device: str, dtype: torch.dtype) -> float:
    """Seconds of the measured `GRPOLearner.update`s (after the warm-up ones); checks they were the full updates."""
    prompts, completions, rewards, behaviour = data
    learner = tr.GRPOLearner(model_dir, tr.GRPOConfig(rank=RANK, alpha=ALPHA, lr=GRPO_LR, epochs=s["epochs"],
                                                      minibatch=s["minibatch"]), device=device, dtype=dtype)
    g = s["group"]
    groups = [tr.Group(f"t{j}", tuple(
        tr.Episode(f"t{j}-{k}", rewards[j * g + k], (tr.Turn(tuple(prompts[j * g + k]), tuple(completions[j * g + k]),
                                                             tuple(behaviour[j * g + k])),))
        for k in range(g))) for j in range(s["groups"])]
    seconds = 0.0
    for u in range(s["warmup"] + s["updates"]):
        fresh = [tr.Group(gr.task_id, tuple(replace(e, policy_step=learner.step) for e in gr.episodes)) for gr in groups]
        rl._sync()
        t0 = time.perf_counter()
        stats = learner.update(fresh)
        rl._sync()
        if stats.dropped_uniform or stats.dropped_stale or stats.optimizer_steps != _grpo_steps(s):
            raise RuntimeError(f"ours did not make the full update: {stats}")
        if u >= s["warmup"]:
            seconds += time.perf_counter() - t0
    return seconds


def grpo_hf_peft(model_dir: Path, data: Any, s: dict[str, int], device: str, dtype: torch.dtype,
                 targets: list[str]) -> float:
    """The same updates as usually hand-written: group-normalized advantages, PPO-clip on the completion logprobs
    against the behaviour ones, token mean, AdamW, clip; seconds of the measured updates."""
    prompts, completions, rewards, behaviour = data
    model = _hf_peft(model_dir, targets, device, dtype)
    params = [p for p in model.parameters() if p.requires_grad]
    opt = torch.optim.AdamW(params, lr=GRPO_LR, weight_decay=0.0)
    gen = torch.Generator().manual_seed(0)
    n, mb, comp = len(prompts), s["minibatch"], s["completion"]
    seconds = 0.0
    for u in range(s["warmup"] + s["updates"]):
        rl._sync()
        t0 = time.perf_counter()
        full = torch.tensor([p + c for p, c in zip(prompts, completions)], device=device)  # (N, P+C)
        old = torch.tensor(behaviour, device=device)  # (N, C)
        r = torch.tensor(rewards, device=device).view(-1, s["group"])  # (groups, G)
        adv = ((r - r.mean(1, keepdim=True)) / (r.std(1, keepdim=True, unbiased=False) + 1e-4)).view(-1, 1)  # (N, 1)
        model.train()
        for _ in range(s["epochs"]):
            order = torch.randperm(n, generator=gen)
            for i in range(0, n, mb):
                idx = order[i:i + mb].to(device)
                ratio = torch.exp(rl._completion_logprobs(model, full[idx], comp) - old[idx])  # (B, C)
                a = adv[idx]  # (B, 1)
                loss = -torch.minimum(ratio * a, ratio.clamp(0.8, 1.28) * a).mean()
                opt.zero_grad(set_to_none=True)
                loss.backward()
                torch.nn.utils.clip_grad_norm_(params, 1.0)
                opt.step()
        rl._sync()
        if u >= s["warmup"]:
            seconds += time.perf_counter() - t0
    return seconds


def _grpo_steps(s: dict[str, int]) -> int:
    return s["epochs"] * math.ceil(s["groups"] * s["group"] / s["minibatch"])


# ---- the run -----------------------------------------------------------------------------------------------------
def run(smoke: bool, device: str) -> dict[str, Any]:
    import peft
    import transformers

    dtype = torch.bfloat16 if device == "cuda" else torch.float32
    sizes = SMOKE if smoke else FULL
    tr = _trainer()
    out: dict[str, Any] = {
        "device": torch.cuda.get_device_name(0) if device == "cuda" else platform.processor() or "cpu",
        "torch": torch.__version__, "transformers": transformers.__version__, "peft": peft.__version__,
        "dtype": str(dtype).removeprefix("torch."), "smoke": smoke, "family": FAMILY, "sizes": sizes,
        "lora": {"rank": RANK, "alpha": ALPHA},
    }
    with tempfile.TemporaryDirectory() as tmp:
        model_dir = rl.build_model(Path(tmp) / "model", smoke)
        model_info, targets, data = _probe(tr, model_dir, sizes["grpo"], device, dtype)
        out["model"] = model_info
        _empty_cache()
        s, g = sizes["sft"], sizes["grpo"]
        vocab = model_info["vocab"]

        ex = rl.sft_examples(s["n"], vocab, s["lo"], s["hi"])
        sft_tokens = sum(len(ex[i][0]) for idx in tr.minibatches(len(ex), s["batch"], s["steps"], 1) for i in idx)
        grpo_tokens = g["updates"] * g["epochs"] * g["groups"] * g["group"] * (g["prompt"] + g["completion"])
        grpo_steps = g["updates"] * _grpo_steps(g)
        runs: dict[tuple[str, str], tuple[int, int, Callable[[], float]]] = {
            ("sft", "ours"): (sft_tokens, s["steps"], lambda: sft_ours(tr, model_dir, ex, s, device, dtype)),
            ("sft", "hf_peft"): (sft_tokens, s["steps"],
                                 lambda: sft_hf_peft(tr, model_dir, ex, s, device, dtype, targets)),
            ("grpo", "ours"): (grpo_tokens, grpo_steps, lambda: grpo_ours(tr, model_dir, data, g, device, dtype)),
            ("grpo", "hf_peft"): (grpo_tokens, grpo_steps,
                                  lambda: grpo_hf_peft(model_dir, data, g, device, dtype, targets)),
        }
        for (kind, impl), (tokens, steps, measure) in runs.items():
            out.setdefault(kind, {})[impl] = _figures(tokens, measure(), steps)
            _empty_cache()  # the run's model is gone with its function's frame
            print(kind, impl, out[kind][impl], flush=True)
    for kind in ("sft", "grpo"):
        row = out[kind]
        row["ours_vs_hf_peft"] = round(row["ours"]["tokens_per_s"] / row["hf_peft"]["tokens_per_s"], 3)
    return out


def table(out: dict[str, Any]) -> str:
    m = out["model"]
    lines = [f"{m['architecture']} ({m['parameters'] / 1e6:.1f} M parameters, {out['dtype']}), LoRA r={RANK} on "
             f"{', '.join(m['lora_targets'])}; {out['device']}, torch {out['torch']}"
             + (" [smoke: tiny model on the CPU, measures nothing]" if out["smoke"] else ""),
             f"{'update':<6} {'implementation':<15} {'tokens/s':>12} {'s/step':>10} {'vs HF+PEFT':>11}"]
    for kind in ("sft", "grpo"):
        for impl, label in (("ours", "looplift"), ("hf_peft", "HF + PEFT")):
            f = out[kind][impl]
            ratio = out[kind]["ours_vs_hf_peft"] if impl == "ours" else 1.0
            lines.append(f"{kind:<6} {label:<15} {f['tokens_per_s']:>12,.0f} {f['s_per_step']:>10.4f} {ratio:>10.2f}x")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument("--smoke", action="store_true", help="tiny model on the CPU: checks the script, measures nothing")
    ap.add_argument("--out", type=Path, default=_BENCH / "results" / "families_gpu.json", help="where the JSON goes")
    args = ap.parse_args(argv)
    if not args.smoke and not torch.cuda.is_available():
        print("families_gpu.py: no CUDA device here (torch.cuda.is_available() is False); run it on a GPU machine, "
              "or pass --smoke for the tiny CPU check", file=sys.stderr)
        return 2
    out = run(args.smoke, "cpu" if args.smoke else "cuda")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(out, indent=2) + "\n")
    print(table(out))
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
