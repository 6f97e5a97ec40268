"""The doctor's checks after the conversation ones: generation_config (which sampling fields vLLM would apply),
lora_targets (built on the meta device), lora_serve (an adapter trained a few steps and served by a real vLLM) and
tokenizer_round_trip (environment text and samples through the tokenizers). torch, transformers, vLLM's server,
`trainer` and `envs` are imported inside the functions that use them.
"""

from __future__ import annotations

import json
import tempfile
import time
from pathlib import Path
from typing import Any, Callable, Iterator, Mapping, Optional, Sequence

from ._doctor_checks import Check, DoctorOptions, _fail, _first_line, _ok, _skip
from ._doctor_render import _NO_MODEL, _TOOLS, _USER, _conversation, _HFRenderer, _Model, served_text

#: vLLM's neutral sampling (`--generation-config vllm`): a field at this value leaves the distribution alone.
_NEUTRAL = {"temperature": 1.0, "top_p": 1.0, "top_k": 0, "min_p": 0.0, "repetition_penalty": 1.0,
            "presence_penalty": 0.0, "frequency_penalty": 0.0}
_TEXT_SAMPLES = (
    "0 1 12 123 -45 3.14159 1e-9 2**31-1 1,234,567.89 0x1F",
    "def f(x):\n\treturn {'a': [x, None], \"b\": x ** 2}  # tab, quotes, braces\n",
    "  leading and trailing spaces  ", "line one\n\nline three\r\nend",
    "café naïve Ærøskøbing São Paulo Zürich", "東京の天気は晴れです。北京欢迎你。서울", "emoji 🙂🚀👩‍💻 and ✓ ∑ ≤ ≥ €",
    "Ελληνικά Русский عربى हिन्दी",
)


# ---- generation config, LoRA, tokenizer ---------------------------------------------------------------------------

def _sampling_fields(d: Path) -> Optional[dict[str, Any]]:
    """The fields of generation_config.json vLLM applies under `--generation-config auto`, where they are not
    neutral; None when there is no file. Raises ValueError for a file that is not a JSON object."""
    path = d / "generation_config.json"
    if not path.is_file():
        return None
    cfg = json.loads(path.read_text())
    if not isinstance(cfg, dict):
        raise ValueError("not a JSON object")
    out = {k: v for k, v in cfg.items() if k in _NEUTRAL and v is not None and v != _NEUTRAL[k]
           and not (k == "top_k" and v == -1)}
    if cfg.get("max_new_tokens") is not None:
        out["max_tokens"] = cfg["max_new_tokens"]
    return out


def _generation_config(d: Path, how: str) -> Check:
    name = "generation_config"
    try:
        fields = _sampling_fields(d)
    except (ValueError, UnicodeDecodeError) as e:
        return _fail(name, f"{d / 'generation_config.json'} is not a JSON object ({_first_line(e)})",
                     "restore generation_config.json from the checkpoint, or delete it")
    listed = ", ".join(f"{k}={v}" for k, v in (fields or {}).items())
    if fields is None:
        return _ok(name, "no generation_config.json: requests sample with vLLM's neutral defaults either way")
    if how == "vllm":
        return _ok(name, "served with --generation-config vllm: requests sample neutrally unless they say otherwise; "
                   + (f"generation_config.json would have set {listed}" if fields
                      else "generation_config.json sets no sampling field"), fields=fields)
    return _ok(name, f"served with --generation-config {how}: vLLM applies "
               + (f"{listed} to every request that leaves them out (recorded per captured turn; GRPO skips such turns)"
                  if fields else "no sampling field (the file sets none)"), fields=fields)


def _lora_targets(d: Path) -> Check:
    name = "lora_targets"
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    from trainer import NoLoraTargets, lora_targets

    try:
        config = AutoConfig.from_pretrained(str(d))
    except (ValueError, KeyError, OSError) as e:
        model_type = _model_type(d)
        known = f"model_type {model_type!r} is not an architecture this transformers knows" if model_type else ""
        return _fail(name, f"config.json: {known or _first_line(e)}",
                     "use a model whose model_type transformers supports (or upgrade transformers)")
    try:
        with torch.device("meta"):  # the architecture without its weights: no memory, no time
            model = AutoModelForCausalLM.from_config(config)
        targets = lora_targets(model)
    except NoLoraTargets as e:
        return _fail(name, str(e).split(": use")[0], "use a causal LM whose layers project with nn.Linear "
                     "(Llama, Mistral, Qwen, ...)")
    except (ValueError, TypeError) as e:
        return _fail(name, f"transformers cannot build a causal LM from config.json: {_first_line(e)}",
                     "use a causal-LM checkpoint (AutoModelForCausalLM)")
    return _ok(name, ", ".join(targets), targets=targets)


def _model_type(d: Path) -> Optional[str]:
    try:
        value = json.loads((d / "config.json").read_text()).get("model_type")
    except (OSError, ValueError, AttributeError):
        return None
    if not isinstance(value, str):
        return None
    from transformers import CONFIG_MAPPING

    return None if value in CONFIG_MAPPING else value


def _train_adapter(d: Path, tok: Any, out: Path, steps: int = 3) -> tuple[float, float]:
    """A rank-8 adapter trained `steps` AdamW steps on the rendered tool conversation; (first, last) loss."""
    import torch

    from trainer import lora_model, save_adapter

    device = "cuda" if torch.cuda.is_available() else None
    model = lora_model(d, rank=8, alpha=16, device=device,
                       dtype=torch.bfloat16 if device else torch.float32)
    ids = torch.tensor([_HFRenderer(tok, set()).ids(_conversation(), _TOOLS, False)], device=device)  # (1, T)
    opt = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=1e-3)
    losses = []
    for _ in range(steps):
        loss = model(input_ids=ids, labels=ids).loss
        loss.backward()
        opt.step()
        opt.zero_grad()
        losses.append(float(loss.detach()))
    save_adapter(model, out, "doctor", {"steps": steps, "losses": losses})
    del model, opt
    if device:
        torch.cuda.empty_cache()  # vLLM starts next, on the same GPU
    return losses[0], losses[-1]


def _lora_serve(m: Optional[_Model], options: DoctorOptions, targets_ok: bool) -> Check:
    name = "lora_serve"
    if not options.serve:
        return _skip(name, "--no-serve: vLLM was not started")
    if m is None:
        return _skip(name, _NO_MODEL)
    if not targets_ok:
        return _skip(name, "needs LoRA targets (lora_targets failed)")
    with tempfile.TemporaryDirectory(prefix="looplift-doctor-") as tmp:
        t0 = time.monotonic()
        first, last = _train_adapter(m.dir, m.tok, Path(tmp) / "adapter")
        trained_s = time.monotonic() - t0
        return _serve_adapter(m, options, Path(tmp) / "adapter", f"trained 3 steps (loss {first:.2f} -> {last:.2f}) "
                              f"in {trained_s:.0f} s")


def _serve_adapter(m: _Model, options: DoctorOptions, adapter: Path, trained: str) -> Check:
    import httpx

    from server import VLLMConfig, VLLMStartError, start_vllm

    name, lora = "lora_serve", "doctor-adapter"
    try:
        server = start_vllm(VLLMConfig(model_dir=m.dir, tool_call_parser=options.tool_call_parser,
                                       generation_config=options.generation_config))
    except VLLMStartError as e:
        return _fail(name, f"{trained}; vLLM did not start: {e.reason} (log: {e.log_path})",
                     "read the log's last error; `looplift up --model DIR` would fail the same way")
    with server, httpx.Client(base_url=server.url, timeout=600) as http:  # stops vLLM on every way out
        r = http.post("/v1/load_lora_adapter", json={"lora_name": lora, "lora_path": str(adapter)})
        if r.status_code != 200:
            return _fail(name, f"{trained}; vLLM refused the adapter: HTTP {r.status_code} {r.text[:200]}",
                         f"check the adapter against vLLM's LoRA support for this architecture (log: {server.log_path})")
        t0 = time.monotonic()
        r = http.post("/v1/chat/completions", json={"model": lora, "max_tokens": 8,
                                                    "messages": [{"role": "user", "content": _USER}]})
        answered = r.status_code == 200 and bool(r.json().get("choices"))
        if not answered:
            return _fail(name, f"{trained}; a chat completion with model={lora} failed: HTTP {r.status_code} "
                         f"{r.text[:200]}", f"read vLLM's log: {server.log_path}")
        return _ok(name, f"{trained}; vLLM started in {server.startup_s:.0f} s, loaded it and answered as {lora} in "
                   f"{time.monotonic() - t0:.1f} s", vllm_start_s=round(server.startup_s, 1))


def _env_texts() -> tuple[list[str], list[str]]:
    """Text from every task family in this install (prompts, system prompts, task data such as code and schemas),
    and the families read."""
    from envs import env_families

    texts, read = [], []
    for family, load in env_families().items():
        try:
            fam = load()
        except Exception:  # a family whose optional dependencies are missing fails alone
            continue
        try:
            for task in fam.tasks("train", 2, 0):
                texts.append(task.prompt)
                texts += list(_strings(task.data))
            texts += [fam.system_prompt] if fam.system_prompt else []
            read.append(family)
        finally:
            if fam.close is not None:
                fam.close()
    return texts, read


def _strings(value: Any) -> Iterator[str]:
    if isinstance(value, str):
        yield value
    elif isinstance(value, Mapping):
        for v in value.values():
            yield from _strings(v)
    elif isinstance(value, (list, tuple)):
        for v in value:
            yield from _strings(v)


def _lost(tok: Any, samples: Sequence[str], encode: Callable[[str], list[int]]) -> list[tuple[str, str]]:
    unk = getattr(tok, "unk_token_id", None)
    lost = []
    for s in samples:
        ids = encode(s)
        back = served_text(tok, ids)
        if back != s or (unk is not None and unk in ids):
            lost.append((s, back))
    return lost


def _tokenizer_round_trip(m: _Model) -> Check:
    name = "tokenizer_round_trip"
    texts, families = _env_texts()
    samples = [*texts, *_TEXT_SAMPLES]
    tokenizers: list[tuple[str, Any, Callable[[str], list[int]]]] = [
        ("HF", m.tok, lambda s: list(m.tok.encode(s, add_special_tokens=False)))]
    if m.mode == "mistral" and m.vtok is not None:
        tokenizers.append(("vLLM mistral", m.vtok, lambda s: list(m.vtok.encode(s, add_special_tokens=False))))
    for label, tok, encode in tokenizers:
        lost = _lost(tok, samples, encode)
        if lost:
            s, back = lost[0]
            return _fail(name, f"{len(lost)} of {len(samples)} samples lost text through the {label} tokenizer, e.g. "
                         f"{s[:40]!r} -> {back[:40]!r}", "use the model family's own tokenizer (byte-level BPE or byte "
                         "fallback covers any text)", lost=len(lost), samples=len(samples))
    return _ok(name, f"{len(samples)} samples round-trip (task families: {', '.join(families) or 'none'}; numbers, "
               "code, accents, CJK, emoji)", lost=0, samples=len(samples))
