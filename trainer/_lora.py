"""The LoRA pieces every algorithm shares: a peft model over the base weights, and saving an adapter.

SFT starts each run from a fresh adapter (a retrain is a pure function of base, data and config);
GRPO continues the adapter that generated its rollouts (`init_adapter`), because its importance ratio
compares the policy being trained with the one that sampled, and DPO by default continues the serving
adapter, its reference (`DPOConfig.reference`). Either way the result is a plain peft directory that
vLLM loads as it is, written atomically with the resolved config beside it (`looplift_<algo>.json`).
Deliberately not here: quantized bases, DoRA, multi-GPU sharding.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Optional

import torch

from .errors import ConfigError, DiskSpaceError

#: Free space a job needs beyond its adapter's weights (the config beside them, the file system's own blocks).
ROOM_MARGIN_BYTES = 4 << 20

#: The projections of a Llama-style decoder layer (Llama, Mistral, Qwen2/3, ...): what `lora_targets` finds there.
LORA_TARGETS = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]


class NoLoraTargets(ConfigError):
    """The architecture has no linear projections in its decoder layers that a LoRA adapter could target."""


def lora_targets(model: Any) -> list[str]:
    """The module names a LoRA adapter targets in `model`, read from its architecture instead of assumed: the
    short names of the linear layers (and GPT-2-style `Conv1D`s) inside its repeated decoder blocks, in order
    of first appearance (e.g. Llama's q/k/v/o and gate/up/down projections, GPT-2's c_attn/c_proj/c_fc,
    Phi-3's qkv_proj/gate_up_proj). The embeddings and the output head are never targets.
    Raises `NoLoraTargets` naming the architecture when there are none."""
    from torch import nn

    names: list[str] = []
    for full, module in model.named_modules():
        parts = full.split(".")
        # Inside a repeated block: a numeric index in the path (layers.0.self_attn.q_proj, h.3.attn.c_attn).
        if not any(p.isdigit() for p in parts[:-1]):
            continue
        if isinstance(module, nn.Linear) or type(module).__name__ == "Conv1D":
            if parts[-1] not in names:
                names.append(parts[-1])
    if not names:
        arch = ",".join(getattr(getattr(model, "config", None), "architectures", None) or [type(model).__name__])
        raise NoLoraTargets(f"{arch} has no linear projections in its decoder layers for a LoRA adapter to target: "
                            "use a causal LM whose layers project with nn.Linear (Llama, Mistral, Qwen, ...)")
    return names


def lora_model(
    base_model_dir: Path,
    *,
    rank: int,
    alpha: int,
    dropout: float = 0.0,
    init_adapter: Optional[Path] = None,
    dtype: torch.dtype = torch.float32,
    device: Optional[str] = None,
) -> Any:
    """A trainable peft model over `base_model_dir` on `device` (default: CPU): a new rank-`rank` adapter,
    or `init_adapter` loaded trainable (its own rank and alpha then apply)."""
    from peft import LoraConfig, PeftModel, get_peft_model
    from transformers import AutoModelForCausalLM

    base = AutoModelForCausalLM.from_pretrained(base_model_dir, dtype=dtype)
    if device is not None:
        # transformers decorates `to` with functools.wraps, whose stub does not bind `self`: a false positive.
        base = base.to(device)  # type: ignore[arg-type]
    if init_adapter is not None:
        return PeftModel.from_pretrained(base, str(init_adapter), is_trainable=True)
    cfg = LoraConfig(r=rank, lora_alpha=alpha, lora_dropout=dropout, target_modules=lora_targets(base),
                     task_type="CAUSAL_LM")
    return get_peft_model(base, cfg)


def free_space(path: Path) -> tuple[Path, int]:
    """The nearest existing directory at or above `path` (which need not exist yet) and the bytes free on its disk:
    what a message about room names. Raises OSError when even that cannot be read."""
    import shutil

    where = Path(path).absolute()
    while not where.exists() and where != where.parent:
        where = where.parent
    return where, shutil.disk_usage(where).free


def ensure_room(model: Any, out_dir: Path) -> None:
    """Refuse, before any training, a job whose adapter the disk at `out_dir` cannot hold: its trainable weights
    plus `ROOM_MARGIN_BYTES` (`atomic_dir` writes it beside `out_dir`, then renames). Raises `DiskSpaceError`."""
    need = sum(p.numel() * p.element_size() for p in model.parameters() if p.requires_grad) + ROOM_MARGIN_BYTES
    where, free = free_space(out_dir)
    if free < need:
        raise DiskSpaceError(
            f"not enough free space to write the adapter to {out_dir}: it needs about {need / 2**20:.1f} MiB and "
            f"{free / 2**20:.1f} MiB are free on the disk holding {where}; free space there (old adapters, exports, "
            "logs under $LOOPLIFT_HOME) or write elsewhere. Nothing was trained")


def save_adapter(model: Any, out_dir: Path, algo: str, meta: dict[str, Any]) -> Path:
    """Write the adapter and `looplift_<algo>.json` (`meta`, dataclasses and paths made JSON) atomically."""
    from ._json import jsonable

    from sdk.infra import atomic_dir  # here, not at import: the training core runs where only torch & co. are

    out_dir = Path(out_dir)
    with atomic_dir(out_dir) as tmp:
        model.save_pretrained(tmp)
        (tmp / f"looplift_{algo}.json").write_text(json.dumps(jsonable(meta), indent=2))
    return out_dir
