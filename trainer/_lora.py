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

LORA_TARGETS = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]


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
    cfg = LoraConfig(r=rank, lora_alpha=alpha, lora_dropout=dropout, target_modules=LORA_TARGETS, task_type="CAUSAL_LM")
    return get_peft_model(base, cfg)


def save_adapter(model: Any, out_dir: Path, algo: str, meta: dict[str, Any]) -> Path:
    """Write the adapter and `looplift_<algo>.json` (`meta`, dataclasses and paths made JSON) atomically."""
    from ._json import jsonable

    from sdk.infra import atomic_dir  # here, not at import: the training core runs where only torch & co. are

    out_dir = Path(out_dir)
    with atomic_dir(out_dir) as tmp:
        model.save_pretrained(tmp)
        (tmp / f"looplift_{algo}.json").write_text(json.dumps(jsonable(meta), indent=2))
    return out_dir
