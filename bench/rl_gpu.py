"""GPU benchmark: LoRA SFT and GRPO update throughput of looplift's trainer against plain HF + PEFT and
TRL, on a ~0.5B-parameter Qwen2-style model built from a config with random weights (no hub, no vLLM).

Run where a GPU is: `python bench/rl_gpu.py [--json-out bench/results/rl_gpu.json]` (a few minutes);
`--smoke` runs the same code on the CPU with a tiny config (what CI-less checks here use).
Needs only torch, transformers and peft (trl for its rows; they are skipped without it): the trainer's
training core (`trainer/grpo.py`, `_tokens.py`, `_rollouts.py`, `_lora.py`, `_data.py`) imports nothing of
the HTTP stack (httpx, openai, pydantic) that the rest of looplift needs.

GRPO, one update = generate 8 prompts x 8 completions (HF `generate`, sampling, 128 new tokens: a
random-weight model never stops early) + the policy-gradient step, LoRA r=8, bf16:
  plain   HF + PEFT as usually written: generate, a no-grad forward for the old logprobs, then the loss
          on all 64 sequences (zero-advantage ones included).
  trl     TRL `GRPOTrainer.train` for the same number of steps, same sizes (its own generate).
  ours    generate with the sampled tokens' logprobs taken from `generate`'s own logits (vLLM returns
          them the same way, so no extra forward), then `GRPOLearner.update`, which drops groups whose
          rewards are all equal before any forward pass.
Rewards are synthetic: task i succeeds with probability p_i, p_i spread like a policy midway through
training (a quarter of the tasks always solved, a quarter never), so some groups carry no signal, as
in real runs. Reported: seconds per update split into generation and training, and ours' speed-up.

SFT: tokens/s of LoRA SFT on 256 random sequences (128-512 tokens, loss on the second half), batch 16:
ours (`_data.train_causal_lm`: dynamic padding per minibatch), plain HF + PEFT (`transformers.Trainer`),
TRL `SFTTrainer`.

Target (from the issue): ours >= 1.3x faster per GRPO update than plain HF + PEFT. This script did not run in
the session that wrote it (no GPU was lent to it); its JSON says on what it ran.
"""

from __future__ import annotations

import argparse
import json
import platform
import random
import sys
import tempfile
import time
import types
from pathlib import Path
from typing import Any, Callable

import torch

_ROOT = Path(__file__).resolve().parent.parent


def _trainer_core() -> types.SimpleNamespace:
    """The trainer's training modules. `import trainer` is lazy and these modules import the SDK only where
    they write files, so torch, transformers and peft are all they need."""
    if str(_ROOT) not in sys.path:
        sys.path.insert(0, str(_ROOT))
    from trainer._data import train_causal_lm
    from trainer._rollouts import Episode, Group, Turn
    from trainer.grpo import GRPOConfig, GRPOLearner

    return types.SimpleNamespace(GRPOLearner=GRPOLearner, GRPOConfig=GRPOConfig, Episode=Episode, Turn=Turn, Group=Group,
                                 train_causal_lm=train_causal_lm)


LORA_TARGETS = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]


def build_model(out: Path, smoke: bool) -> Path:
    """A Qwen2-style model with random weights (Qwen2-0.5B's shape, or a tiny one for --smoke) and a small
    byte-level tokenizer (only its pad token matters here), saved as an HF directory."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast, Qwen2Config, Qwen2ForCausalLM

    cfg = Qwen2Config(vocab_size=151_936, hidden_size=896, intermediate_size=4864, num_hidden_layers=24,
                      num_attention_heads=14, num_key_value_heads=2, max_position_embeddings=2048,
                      tie_word_embeddings=True) if not smoke else \
        Qwen2Config(vocab_size=512, hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=2,
                    num_key_value_heads=1, max_position_embeddings=1024, tie_word_embeddings=True)
    torch.manual_seed(0)
    model = Qwen2ForCausalLM(cfg)
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    tok.train_from_iterator(["abcdefghijklmnopqrstuvwxyz "], trainers.BpeTrainer(
        vocab_size=258, special_tokens=["<pad>", "<eos>"], initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False))  # bytes only: one token per character, so a text prompt has a known length
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, pad_token="<pad>", eos_token="<eos>")
    model.config.pad_token_id = fast.pad_token_id
    model.save_pretrained(out)
    fast.save_pretrained(out)
    return out


def _sync() -> None:
    if torch.cuda.is_available():
        torch.cuda.synchronize()


def _peft(model_dir: Path, device: str, dtype: torch.dtype) -> Any:
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM

    base = AutoModelForCausalLM.from_pretrained(model_dir, dtype=dtype).to(device)
    return get_peft_model(base, LoraConfig(r=8, lora_alpha=16, target_modules=LORA_TARGETS, task_type="CAUSAL_LM"))


# ---- GRPO ------------------------------------------------------------------------------------------


class Tasks:
    """Synthetic tasks: random lowercase prompts (as text for TRL, as ids for the others) with a fixed
    success probability each."""

    def __init__(self, n: int, prompt_len: int, tokenizer: Any, seed: int = 0) -> None:
        rng = random.Random(seed)
        self.texts = ["".join(rng.choice("abcdefghijklmnopqrstuvwxyz ") for _ in range(prompt_len)) for _ in range(n)]
        self.prompts = [tokenizer.encode(t, add_special_tokens=False) for t in self.texts]
        self.p = [1.0 if i % 4 == 0 else 0.0 if i % 4 == 1 else rng.uniform(0.2, 0.8) for i in range(n)]
        self.rng = rng

    def reward(self, i: int) -> float:
        return float(self.rng.random() < self.p[i])


def _generate(model: Any, prompts: list[list[int]], group: int, new: int, pad: int, device: str,
              with_logprobs: bool) -> tuple[torch.Tensor, torch.Tensor, Any]:
    ids = torch.tensor([p for p in prompts for _ in range(group)], device=device)  # (B*G, P), equal lengths: no padding
    model.eval()
    with torch.no_grad():
        out = model.generate(input_ids=ids, attention_mask=torch.ones_like(ids), do_sample=True, temperature=1.0, top_k=0,
                             top_p=1.0, max_new_tokens=new, min_new_tokens=new, pad_token_id=pad, output_logits=with_logprobs,
                             return_dict_in_generate=True)
    comp = out.sequences[:, ids.shape[1]:]  # (N, new)
    lps = None
    if with_logprobs:  # one (N, V) step at a time: stacking would hold N x new x V floats (GBs at 150k vocab)
        lps = torch.stack([step.float().gather(-1, comp[:, t:t + 1]).squeeze(-1) - torch.logsumexp(step.float(), -1)
                           for t, step in enumerate(out.logits)], 1)  # (N, new)
    return ids, comp, lps


def grpo_plain(model_dir: Path, tasks: Tasks, sizes: dict[str, int], device: str, dtype: torch.dtype) -> dict[str, float]:
    """Plain HF + PEFT GRPO: generate, old logprobs by a second forward, loss on every sequence."""
    model = _peft(model_dir, device, dtype)
    opt = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=1e-5)
    gen_s = train_s = 0.0
    for step in range(sizes["warmup"] + sizes["updates"]):
        t0 = time.perf_counter()
        picks = random.Random(step).sample(range(len(tasks.prompts)), sizes["prompts"])
        ids, comp, _ = _generate(model, [tasks.prompts[i] for i in picks], sizes["group"], sizes["new"], 0, device, False)
        _sync()
        t1 = time.perf_counter()
        r = torch.tensor([tasks.reward(i) for i in picks for _ in range(sizes["group"])], device=device).view(-1, sizes["group"])
        adv = ((r - r.mean(1, keepdim=True)) / (r.std(1, keepdim=True) + 1e-4)).view(-1, 1)  # (N, 1)
        full = torch.cat([ids, comp], 1)  # (N, P+new)
        model.train()
        with torch.no_grad():
            old = _completion_logprobs(model, full, comp.shape[1])  # (N, new)
        for i in range(0, full.shape[0], sizes["minibatch"]):
            lp = _completion_logprobs(model, full[i:i + sizes["minibatch"]], comp.shape[1])
            ratio = torch.exp(lp - old[i:i + sizes["minibatch"]])
            a = adv[i:i + sizes["minibatch"]]
            loss = -torch.minimum(ratio * a, ratio.clamp(0.8, 1.2) * a).mean()
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
        _sync()
        if step >= sizes["warmup"]:
            gen_s += t1 - t0
            train_s += time.perf_counter() - t1
    n = sizes["updates"]
    return {"generate_s": round(gen_s / n, 3), "train_s": round(train_s / n, 3), "update_s": round((gen_s + train_s) / n, 3)}


def _completion_logprobs(model: Any, full: torch.Tensor, n: int) -> torch.Tensor:
    logits = model(input_ids=full).logits[:, -n - 1:-1].float()  # (B, n, V)
    return logits.gather(-1, full[:, -n:].unsqueeze(-1)).squeeze(-1) - torch.logsumexp(logits, -1)  # (B, n)


def grpo_ours(core: Any, model_dir: Path, tasks: Tasks, sizes: dict[str, int], device: str,
              dtype: torch.dtype) -> dict[str, float]:
    """Ours: behaviour logprobs from generate's logits; `GRPOLearner.update` (uniform groups never forwarded)."""
    learner = core.GRPOLearner(model_dir, core.GRPOConfig(lr=1e-5, epochs=1, minibatch=sizes["minibatch"]),
                               device=device, dtype=dtype)
    gen_s = train_s = 0.0
    dropped = 0
    for step in range(sizes["warmup"] + sizes["updates"]):
        t0 = time.perf_counter()
        picks = random.Random(step).sample(range(len(tasks.prompts)), sizes["prompts"])
        ids, comp, lps = _generate(learner.model, [tasks.prompts[i] for i in picks], sizes["group"], sizes["new"], 0,
                                   device, True)
        _sync()
        t1 = time.perf_counter()
        g = sizes["group"]
        ids_l, comp_l, lps_l = ids.tolist(), comp.tolist(), lps.tolist()
        groups = [core.Group(f"t{i}", tuple(
            core.Episode(f"t{i}-{k}", tasks.reward(i), (core.Turn(tuple(ids_l[j * g + k]), tuple(comp_l[j * g + k]),
                                                                  tuple(lps_l[j * g + k])),), policy_step=learner.step)
            for k in range(g))) for j, i in enumerate(picks)]
        stats = learner.update(groups)
        _sync()
        if step >= sizes["warmup"]:
            gen_s += t1 - t0
            train_s += time.perf_counter() - t1
            dropped += stats.dropped_uniform
    n = sizes["updates"]
    return {"generate_s": round(gen_s / n, 3), "train_s": round(train_s / n, 3), "update_s": round((gen_s + train_s) / n, 3),
            "dropped_uniform_fraction": round(dropped / (n * sizes["prompts"] * sizes["group"]), 3)}


def grpo_trl(model_dir: Path, tasks: Tasks, sizes: dict[str, int], device: str) -> dict[str, Any]:
    """TRL GRPOTrainer for warmup + updates steps; seconds per step after the warm-up."""
    try:
        from datasets import Dataset
        from peft import LoraConfig
        from transformers import AutoTokenizer, TrainerCallback
        from trl import GRPOConfig, GRPOTrainer
    except (ImportError, RuntimeError) as e:  # trl's lazy modules raise RuntimeError for a missing dependency
        return {"skipped": f"trl not importable: {e}"}
    tok = AutoTokenizer.from_pretrained(model_dir)
    ds = Dataset.from_list([{"prompt": t, "task": i} for i, t in enumerate(tasks.texts)])
    times: list[float] = []

    class Clock(TrainerCallback):  # type: ignore[misc]
        def on_step_begin(self, *a: Any, **k: Any) -> None:
            _sync()
            self.t = time.perf_counter()

        def on_step_end(self, *a: Any, **k: Any) -> None:
            _sync()
            times.append(time.perf_counter() - self.t)

    args = GRPOConfig(output_dir=tempfile.mkdtemp(), per_device_train_batch_size=sizes["prompts"] * sizes["group"],
                      num_generations=sizes["group"], max_completion_length=sizes["new"], learning_rate=1e-5,
                      max_steps=sizes["warmup"] + sizes["updates"], report_to=[], save_strategy="no", beta=0.0,
                      bf16=device == "cuda", use_cpu=device == "cpu", logging_steps=1000, disable_tqdm=True,
                      temperature=1.0, top_k=0, generation_kwargs={"min_new_tokens": sizes["new"]})
    trainer = GRPOTrainer(model=str(model_dir), reward_funcs=lambda prompts, completions, task, **_: [tasks.reward(i) for i in task],
                          args=args, train_dataset=ds, processing_class=tok, callbacks=[Clock()],
                          peft_config=LoraConfig(r=8, lora_alpha=16, target_modules=LORA_TARGETS, task_type="CAUSAL_LM"))
    trainer.train()
    steady = times[sizes["warmup"]:]
    return {"update_s": round(sum(steady) / len(steady), 3)}


# ---- SFT -------------------------------------------------------------------------------------------


def sft_examples(n: int, vocab: int, lo: int, hi: int) -> list[tuple[list[int], list[int]]]:
    rng = random.Random(1)
    out = []
    for _ in range(n):
        ids = [rng.randrange(10, vocab) for _ in range(rng.randint(lo, hi))]
        half = len(ids) // 2
        out.append((ids, [-100] * half + ids[half:]))
    return out


def sft_ours(core: Any, model_dir: Path, ex: list[Any], sft: dict[str, int], device: str, dtype: torch.dtype) -> float:
    """Seconds for `steps` minibatches of `train_causal_lm`, after a warm-up call."""
    model = _peft(model_dir, device, dtype)
    core.train_causal_lm(model, ex, pad_id=0, steps=sft["warmup"], batch_size=sft["batch"], lr=1e-4, seed=0)
    _sync()
    t0 = time.perf_counter()
    core.train_causal_lm(model, ex, pad_id=0, steps=sft["steps"], batch_size=sft["batch"], lr=1e-4, seed=1)
    _sync()
    return time.perf_counter() - t0


def sft_hf(model_dir: Path, ex: list[Any], sft: dict[str, int], device: str, dtype: torch.dtype, trl: bool) -> float:
    """Seconds for `steps` optimizer steps of `transformers.Trainer` (or TRL's `SFTTrainer`) after `warmup` steps."""
    from datasets import Dataset
    from transformers import AutoTokenizer, DataCollatorForSeq2Seq, Trainer, TrainerCallback, TrainingArguments

    model = _peft(model_dir, device, dtype)
    tok = AutoTokenizer.from_pretrained(model_dir)
    ds = Dataset.from_list([{"input_ids": i, "labels": lab, "attention_mask": [1] * len(i)} for i, lab in ex])
    marks: list[float] = []

    class Clock(TrainerCallback):  # type: ignore[misc]
        def on_step_end(self, *a: Any, **k: Any) -> None:
            _sync()
            marks.append(time.perf_counter())

    common = dict(output_dir=tempfile.mkdtemp(), per_device_train_batch_size=sft["batch"], learning_rate=1e-4,
                  max_steps=sft["warmup"] + sft["steps"], report_to=[], save_strategy="no", logging_steps=1000,
                  disable_tqdm=True, bf16=device == "cuda", use_cpu=device == "cpu", remove_unused_columns=False)
    if trl:
        from trl import SFTConfig, SFTTrainer

        trainer: Any = SFTTrainer(model=model, args=SFTConfig(**common, max_length=None), train_dataset=ds,
                                  processing_class=tok, callbacks=[Clock()])
    else:
        trainer = Trainer(model=model, args=TrainingArguments(**common), train_dataset=ds, callbacks=[Clock()],
                          data_collator=DataCollatorForSeq2Seq(tok, padding=True))
    trainer.train()
    return marks[-1] - marks[sft["warmup"] - 1]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--smoke", action="store_true", help="tiny model on the CPU: checks the script, measures nothing")
    ap.add_argument("--json-out", type=Path, default=Path("bench/results/rl_gpu.json"))
    args = ap.parse_args(argv)
    device = "cuda" if torch.cuda.is_available() and not args.smoke else "cpu"
    dtype = torch.bfloat16 if device == "cuda" else torch.float32
    core = _trainer_core()
    sizes = {"prompts": 8, "group": 8, "new": 128, "prompt_len": 64, "minibatch": 16, "warmup": 2, "updates": 5}
    sft = {"n": 256, "steps": 16, "warmup": 2, "batch": 16, "lo": 128, "hi": 512}
    if args.smoke:
        sizes.update(new=8, prompt_len=8, warmup=1, updates=1)
        sft.update(n=32, steps=2, warmup=1, batch=4, lo=8, hi=32)
    out: dict[str, Any] = {"device": torch.cuda.get_device_name(0) if device == "cuda" else platform.processor() or "cpu",
                           "torch": torch.__version__, "smoke": args.smoke, "sizes": sizes, "sft_sizes": sft}
    with tempfile.TemporaryDirectory() as tmp:
        model_dir = build_model(Path(tmp) / "model", args.smoke)
        vocab = 512 if args.smoke else 151_936
        out["parameters"] = sum(p.numel() for p in __import__("transformers").AutoModelForCausalLM.from_pretrained(model_dir).parameters())
        from transformers import AutoTokenizer

        tasks = Tasks(64, sizes["prompt_len"], AutoTokenizer.from_pretrained(model_dir))
        runs: dict[str, Callable[[], Any]] = {
            "plain": lambda: grpo_plain(model_dir, tasks, sizes, device, dtype),
            "ours": lambda: grpo_ours(core, model_dir, tasks, sizes, device, dtype),
            "trl": lambda: grpo_trl(model_dir, tasks, sizes, device),
        }
        out["grpo"] = {}
        for name, fn in runs.items():
            out["grpo"][name] = fn()
            print(name, out["grpo"][name], flush=True)
        ex = sft_examples(sft["n"], vocab, sft["lo"], sft["hi"])
        tokens = sum(len(i) for i, _ in ex) / len(ex) * sft["batch"] * sft["steps"]  # expected: all three shuffle
        out["sft_tokens_per_s"] = {}
        for name, fn2 in (("ours", lambda: sft_ours(core, model_dir, ex, sft, device, dtype)),
                          ("plain_hf_trainer", lambda: sft_hf(model_dir, ex, sft, device, dtype, False)),
                          ("trl_sft", lambda: sft_hf(model_dir, ex, sft, device, dtype, True))):
            try:
                out["sft_tokens_per_s"][name] = round(tokens / fn2())
            except (ImportError, RuntimeError) as e:
                out["sft_tokens_per_s"][name] = f"skipped: {e}"
            print("sft", name, out["sft_tokens_per_s"][name], flush=True)
    g = out["grpo"]
    out["ours_speedup_vs_plain"] = round(g["plain"]["update_s"] / g["ours"]["update_s"], 3)
    if "update_s" in g.get("trl", {}):
        out["ours_speedup_vs_trl"] = round(g["trl"]["update_s"] / g["ours"]["update_s"], 3)
    out["target_1_3x_met"] = out["ours_speedup_vs_plain"] >= 1.3
    args.json_out.parent.mkdir(parents=True, exist_ok=True)
    args.json_out.write_text(json.dumps(out, indent=2) + "\n")
    print(json.dumps({k: out[k] for k in ("grpo", "sft_tokens_per_s", "ours_speedup_vs_plain")}, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
