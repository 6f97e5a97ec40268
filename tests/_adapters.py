"""A minimal peft-style LoRA adapter directory that passes `server.validate_adapter`, written without torch
(the safetensors layout by hand: u64 header length, JSON header, data), for tests that never load it into
vLLM. Tests that do load adapters use the `looplift_new_adapter` fixture (real weights for the tiny model).
"""

from __future__ import annotations

import json
import struct
from pathlib import Path


def write_adapter(d: Path, r: int = 8, tensors: tuple[str, ...] = ("base_model.model.layers.0.q_proj.lora_A.weight",)) -> Path:
    """Write `adapter_config.json` (rank `r`) and `adapter_model.safetensors` (float32 zeros, `r` x 16 each) to `d`."""
    d.mkdir(parents=True)
    (d / "adapter_config.json").write_text(json.dumps({"peft_type": "LORA", "r": r, "target_modules": ["q_proj"]}))
    size = r * 16 * 4
    header = json.dumps({name: {"dtype": "F32", "shape": [r, 16], "data_offsets": [i * size, (i + 1) * size]}
                         for i, name in enumerate(tensors)}).encode()
    header += b" " * (-len(header) % 8)
    (d / "adapter_model.safetensors").write_bytes(struct.pack("<Q", len(header)) + header + bytes(size * len(tensors)))
    return d
