"""The doctor's report types (`Check`, `DoctorReport`, `DoctorOptions`, the row helpers) and its static checks:
the files of a model directory, the tool-call parser against the template, the projections in the safetensors
headers, and `preflight`, the subset `looplift up --model DIR` runs before starting vLLM. No torch and no vLLM here.

The checks themselves are listed in looplift/_doctor.py, which runs them and holds the command.
"""

from __future__ import annotations

import json
import struct
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, Mapping, Optional

Status = Literal["pass", "fail", "skip"]
Message = dict[str, Any]

_HF_TOKENIZER_FILES = ("tokenizer.json", "tokenizer.model", "vocab.json", "vocab.txt", "spiece.model")
_WEIGHT_GLOBS = ("*.safetensors", "pytorch_model*.bin", "*.safetensors.index.json", "pytorch_model.bin.index.json")
#: Parsers that read the same format as the one `server._tools` detects (vLLM keeps several names for some).
_SAME_FORMAT = {"qwen3_coder": {"qwen3_coder", "qwen3_xml"}, "llama3_json": {"llama3_json", "llama4_json"},
                "pythonic": {"pythonic", "llama4_pythonic"}}
_FIX_TEMPLATE = ("use the model family's own tool-calling chat template (an instruct checkpoint's chat_template.jinja), "
                 "or serve with --tool-call-parser none")


@dataclass(frozen=True)
class Check:
    """One row of the report."""

    name: str
    status: Status
    detail: str
    fix: Optional[str] = None
    """What to change; set on every failure."""
    figures: Mapping[str, Any] = field(default_factory=dict)
    """Numbers for scripts (drift counts, seconds, targets)."""
    seconds: float = 0.0

    def as_dict(self) -> dict[str, Any]:
        return {"name": self.name, "status": self.status, "detail": self.detail, "fix": self.fix,
                "figures": dict(self.figures), "seconds": round(self.seconds, 2)}


@dataclass(frozen=True)
class DoctorReport:
    model: str
    checks: tuple[Check, ...]

    @property
    def ok(self) -> bool:
        """No check failed (skips do not count either way)."""
        return not any(c.status == "fail" for c in self.checks)

    def as_dict(self) -> dict[str, Any]:
        """The `--json` object: model, checks, ok."""
        return {"model": self.model, "checks": [c.as_dict() for c in self.checks], "ok": self.ok}


@dataclass(frozen=True)
class DoctorOptions:
    model_dir: Path
    tool_call_parser: str = "auto"
    """As `looplift up --tool-call-parser`: auto reads it from the template, none turns tool calls off."""
    serve: bool = True
    """Run `lora_serve` (starts vLLM); False reports it as skip."""
    generation_config: str = "vllm"
    """How the model will be served (`looplift up --generation-config`)."""


def _ok(name: str, detail: str, **figures: Any) -> Check:
    return Check(name, "pass", detail, figures=figures)


def _fail(name: str, detail: str, fix: str, **figures: Any) -> Check:
    return Check(name, "fail", detail, fix, figures=figures)


def _skip(name: str, detail: str) -> Check:
    return Check(name, "skip", detail)


def _first_line(e: BaseException) -> str:
    lines = [line.strip() for line in str(e).splitlines() if line.strip()]
    return (lines[0] if lines else type(e).__name__)[:300]


# ---- static checks: the files (also `preflight`, so this module imports no torch and no vLLM) ---------------------

def _config_check(d: Path) -> Check:
    path = d / "config.json"
    if not path.is_file():
        return _fail("config", f"config.json is missing in {d}",
                     "copy config.json from the checkpoint the model came from (model.save_pretrained(DIR) writes it)")
    try:
        cfg = json.loads(path.read_text())
    except (ValueError, UnicodeDecodeError) as e:
        return _fail("config", f"{path} is not JSON ({_first_line(e)})", "restore config.json from the checkpoint")
    if not isinstance(cfg, dict):
        return _fail("config", f"{path} is not a JSON object", "restore config.json from the checkpoint")
    return _ok("config", f"model_type {cfg.get('model_type')!r}, {', '.join(cfg.get('architectures') or ['?'])}")


def _weight_files(d: Path) -> list[Path]:
    return sorted({p for g in _WEIGHT_GLOBS for p in d.glob(g) if p.is_file()})


def _weights_check(d: Path) -> Check:
    files = _weight_files(d)
    if not files:
        return _fail("weights", f"no weights in {d} (*.safetensors or pytorch_model*.bin)",
                     "save the model with model.save_pretrained(DIR), or copy the checkpoint's weight files")
    size = sum(p.stat().st_size for p in files)
    return _ok("weights", f"{', '.join(p.name for p in files[:3])}{' ...' if len(files) > 3 else ''} "
               f"({size / 1e6:.1f} MB)")


def _tokenizer_files(d: Path) -> list[str]:
    from server import mistral_tokenizer_file

    found = [n for n in _HF_TOKENIZER_FILES if (d / n).is_file()]
    mistral = mistral_tokenizer_file(d)
    return found + ([mistral.name] if mistral is not None else [])


def _tokenizer_files_check(d: Path) -> Check:
    from server import detect_tokenizer_mode

    found = _tokenizer_files(d)
    if not found:
        return _fail("tokenizer", f"no tokenizer in {d} (tokenizer.json, tokenizer.model, vocab.json, or Mistral's "
                     "tekken.json / tokenizer.model.v*)",
                     "save the base model's tokenizer there (tokenizer.save_pretrained(DIR)) or copy its files")
    mode = detect_tokenizer_mode(d)
    return _ok("tokenizer", ", ".join(found) + (" (vLLM: --tokenizer-mode mistral)" if mode else ""))


def _template_check(d: Path) -> Check:
    from server import chat_template

    template = chat_template(d)
    if template is None:
        return _fail("chat_template", f"no chat template in {d} (chat_template.jinja, chat_template.json or "
                     "chat_template in tokenizer_config.json)",
                     "copy the instruct checkpoint's chat_template.jinja, or set tokenizer.chat_template and save")
    return _ok("chat_template", f"{len(template)} characters, {'renders' if 'tools' in template else 'never reads'} "
               "`tools`")


def _file_checks(d: Path) -> list[Check]:
    return [_config_check(d), _weights_check(d), _tokenizer_files_check(d), _template_check(d)]


def _parser_problem(d: Path, choice: str) -> Optional[Check]:
    """A static mismatch: an explicit --tool-call-parser other than the one the template's markers name."""
    from server import chat_template, detect_tool_parser

    template = chat_template(d)
    if template is None or choice in ("auto", "none", ""):
        return None
    if "tools" not in template:
        return _fail("tool_round_trip", f"the chat template of {d} cannot render tools (it never reads `tools`), "
                     f"so --tool-call-parser {choice} has no tool calls to parse", _FIX_TEMPLATE)
    detected = detect_tool_parser(d)
    if detected is None or choice in _SAME_FORMAT.get(detected, {detected}):
        return None
    return _fail("tool_round_trip", f"--tool-call-parser {choice} does not match the chat template of {d}, which "
                 f"writes {detected}-format tool calls", f"pass --tool-call-parser {detected} (or auto)")


def _safetensors_shapes(path: Path) -> dict[str, list[int]]:
    """Tensor name -> shape from a safetensors file's JSON header (8-byte length, then the header): no torch."""
    with path.open("rb") as f:
        (n,) = struct.unpack("<Q", f.read(8))
        if n > 100_000_000:
            raise ValueError(f"{path.name} has a {n}-byte header; not a safetensors file")
        header = json.loads(f.read(n))
    return {k: list(v.get("shape") or []) for k, v in header.items() if k != "__metadata__" and isinstance(v, dict)}


def weight_projections(d: Path) -> Optional[list[str]]:
    """The short names of the 2-D weight matrices inside repeated layers (`layers.0.self_attn.q_proj.weight` ->
    q_proj), read from the safetensors headers: what `trainer`'s `lora_targets` finds as nn.Linear / Conv1D modules,
    without torch. None when the directory holds no safetensors (pytorch_model.bin needs torch to read)."""
    files = sorted(d.glob("*.safetensors"))
    if not files:
        return None
    names: list[str] = []
    for path in files:
        for tensor, shape in _safetensors_shapes(path).items():
            parts = tensor.split(".")
            if len(parts) >= 3 and parts[-1] == "weight" and len(shape) == 2 and any(p.isdigit() for p in parts[:-2]):
                if parts[-2] not in names:
                    names.append(parts[-2])
    return names


def _projection_problem(d: Path) -> Optional[Check]:
    try:
        names = weight_projections(d)
    except (OSError, ValueError, struct.error) as e:
        return _fail("lora_targets", f"cannot read the safetensors header in {d}: {_first_line(e)}",
                     "re-save the weights with model.save_pretrained(DIR)")
    if names is None or names:
        return None
    return _fail("lora_targets", f"the weights in {d} have no projection matrices inside repeated layers: the "
                 "architecture gives a LoRA adapter nothing to target",
                 "use a causal LM whose layers project with nn.Linear (Llama, Mistral, Qwen, ...)")


def preflight(model_dir: Path, tool_call_parser: str = "auto") -> list[str]:
    """The problems `looplift up --model DIR` refuses to start vLLM with, one line each (naming the file and the
    fix): no config, weights, tokenizer or chat template, a template that cannot render tools, a parser that does
    not match the template, weights without projections. Empty when none. No torch, no vLLM."""
    d = Path(model_dir)
    checks: list[Optional[Check]] = [*_file_checks(d)]
    from server import chat_template

    template = chat_template(d)
    if template is not None and "tools" not in template and tool_call_parser not in ("none", ""):
        checks.append(_fail("template_render", f"the chat template of {d} cannot render tools (it never reads "
                            "`tools`)", _FIX_TEMPLATE))
    else:
        checks.append(_parser_problem(d, tool_call_parser))
    checks.append(_projection_problem(d))
    return [f"{c.detail}; {c.fix}" for c in checks if c is not None and c.status == "fail"]
