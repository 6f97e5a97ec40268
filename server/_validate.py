"""Check a LoRA adapter directory before vLLM ever sees it.

A broken adapter should be refused with a message naming the problem, and nothing in the registry
or in vLLM should change. This checks what is cheap and certain: the directory, `adapter_config.json`
(parses, is LoRA, rank within `--max-lora-rank`), and a weights file whose safetensors header is
intact and whose size matches it (catches truncated copies). It does not load tensors or compare
shapes with the base model; vLLM does that, and its refusal is reported as it comes.

`version_kind` tells the two kinds of version directory apart (an adapter has `adapter_config.json`; a full
checkpoint has `config.json` and weights), and `validate_checkpoint` checks a full one as cheaply.

The path comes from an admin request, so whatever it names is an answer, never a crash: a `~name` of no user,
a name too long for the file system, a directory the gateway may not read are refused like a missing file.
"""

from __future__ import annotations

import json
import struct
from pathlib import Path
from typing import Literal

from .errors import AdapterInvalidError

_WEIGHTS = ("adapter_model.safetensors", "adapter_model.bin")
_FULL_WEIGHTS = ("*.safetensors", "pytorch_model*.bin")

VersionKind = Literal["adapter", "full"]


def version_kind(path: str) -> VersionKind:
    """"full" for a directory with `config.json` and no `adapter_config.json` (a whole HF checkpoint), else
    "adapter" (whose validation then names what is missing)."""
    p = _expand(path)
    try:
        return "full" if (p / "config.json").is_file() and not (p / "adapter_config.json").exists() else "adapter"
    except OSError:
        return "adapter"  # unreadable: `validate_adapter` says why


def _expand(path: str) -> Path:
    try:
        return Path(path).expanduser()
    except RuntimeError:  # `~name` of no user here
        raise AdapterInvalidError(path, "its '~' names no user on the gateway host; give the full path") from None


def _cannot_read(e: OSError) -> str:
    return f"the gateway cannot read it ({e.strerror or e})"


def validate_checkpoint(path: str) -> Path:
    """A full checkpoint's directory as an absolute path, or `AdapterInvalidError` (worded for a checkpoint):
    `config.json` must parse and name a `model_type`, and a weights file must be there (safetensors: header and
    size intact)."""
    try:
        return _checkpoint_dir(path)
    except OSError as e:
        raise AdapterInvalidError(path, _cannot_read(e), "checkpoint") from None
    except AdapterInvalidError as e:
        raise AdapterInvalidError(path, e.problem, "checkpoint") from None


def _checkpoint_dir(path: str) -> Path:
    p = _expand(path)
    try:
        cfg = json.loads((p / "config.json").read_text())
    except (OSError, json.JSONDecodeError, UnicodeDecodeError) as e:
        raise AdapterInvalidError(path, f"config.json is unreadable ({e})") from None
    if not isinstance(cfg, dict) or "model_type" not in cfg:
        raise AdapterInvalidError(path, "config.json names no model_type; is this a Hugging Face checkpoint?")
    weights = sorted(w for pat in _FULL_WEIGHTS for w in p.glob(pat))
    if not weights:
        raise AdapterInvalidError(path, "no weights file (*.safetensors or pytorch_model*.bin) next to config.json")
    for w in weights:
        if w.suffix == ".safetensors":
            _safetensors_header(path, w)
    return p.resolve()


def validate_adapter(path: str, max_lora_rank: int) -> Path:
    """Return the adapter directory as an absolute path, or raise `AdapterInvalidError` naming the problem."""
    try:
        return _adapter_dir(path, max_lora_rank)
    except OSError as e:
        raise AdapterInvalidError(path, _cannot_read(e)) from None


def _adapter_dir(path: str, max_lora_rank: int) -> Path:
    p = _expand(path)
    if not p.exists():
        raise AdapterInvalidError(path, "the directory does not exist")
    if not p.is_dir():
        raise AdapterInvalidError(path, "it is not a directory")
    cfg_path = p / "adapter_config.json"
    if not cfg_path.is_file():
        raise AdapterInvalidError(path, "adapter_config.json is missing")
    try:
        cfg = json.loads(cfg_path.read_text())
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise AdapterInvalidError(path, f"adapter_config.json is not valid JSON ({e})") from None
    if not isinstance(cfg, dict):
        raise AdapterInvalidError(path, "adapter_config.json is not a JSON object")
    peft_type = cfg.get("peft_type", "LORA")
    if str(peft_type).upper() != "LORA":
        raise AdapterInvalidError(path, f"adapter_config.json has peft_type {peft_type!r}; only LORA can be served")
    rank = cfg.get("r")
    if not isinstance(rank, int) or isinstance(rank, bool) or rank <= 0:
        raise AdapterInvalidError(path, f"adapter_config.json has no positive integer rank 'r' (got {rank!r})")
    if rank > max_lora_rank:
        raise AdapterInvalidError(
            path, f"rank r={rank} exceeds the server's --max-lora-rank {max_lora_rank}; "
            "retrain with a smaller rank or restart vLLM with a larger --max-lora-rank"
        )
    weights = next((p / w for w in _WEIGHTS if (p / w).is_file()), None)
    if weights is None:
        raise AdapterInvalidError(path, f"no adapter weights file ({' or '.join(_WEIGHTS)})")
    if weights.stat().st_size == 0:
        raise AdapterInvalidError(path, f"{weights.name} is empty")
    if weights.suffix == ".safetensors":
        _check_safetensors(path, weights)
    return p.resolve()


def _check_safetensors(path: str, weights: Path) -> None:
    tensors = _safetensors_header(path, weights)
    if not any("lora_" in k for k in tensors):
        raise AdapterInvalidError(path, f"{weights.name} has no lora_A/lora_B tensors")


def _safetensors_header(path: str, weights: Path) -> dict[str, object]:
    """The tensors of an intact safetensors file (header parses, offsets match the size)."""
    # Format: u64 little-endian header length, JSON header {name: {dtype, shape, data_offsets}}, data.
    size = weights.stat().st_size
    with weights.open("rb") as f:
        head = f.read(8)
        if len(head) < 8:
            raise AdapterInvalidError(path, f"{weights.name} is truncated (no header)")
        (n,) = struct.unpack("<Q", head)
        if n <= 0 or 8 + n > size:
            raise AdapterInvalidError(path, f"{weights.name} is corrupt (header length {n} for a {size}-byte file)")
        try:
            header = json.loads(f.read(n))
        except (json.JSONDecodeError, UnicodeDecodeError):
            raise AdapterInvalidError(path, f"{weights.name} is corrupt (header is not JSON)") from None
    if not isinstance(header, dict):
        raise AdapterInvalidError(path, f"{weights.name} is corrupt (header is not an object)")
    tensors = {k: v for k, v in header.items() if k != "__metadata__"}
    if not tensors:
        raise AdapterInvalidError(path, f"{weights.name} holds no tensors")
    try:
        end = max(int(v["data_offsets"][1]) for v in tensors.values())
    except (KeyError, TypeError, ValueError, IndexError):
        raise AdapterInvalidError(path, f"{weights.name} is corrupt (bad tensor offsets)") from None
    if 8 + n + end != size:
        raise AdapterInvalidError(
            path, f"{weights.name} is truncated or padded ({size} bytes, header says {8 + n + end})"
        )
    return tensors
