"""Which vLLM tool-call parser a model needs, read from its chat template.

vLLM only answers `tools` with `tool_choice` auto / required / named (and streams tool-call deltas) when it
is started with `--enable-auto-tool-choice --tool-call-parser NAME`, and NAME must match the format the
model's chat template teaches it to write. The template says which: each tool-calling model family marks
its calls with its own tokens. `detect_tool_parser` looks for those markers in the template
(`tokenizer_config.json`'s `chat_template`, `chat_template.jinja` or `chat_template.json`):

    marker in the template                  parser          families
    <tool_call> + <function=                qwen3_coder     Qwen3-Coder
    <tool_call>                             hermes          Qwen2.5 / Qwen3, Hermes 2/3, looplift's tiny model
    <|python_tag|>                          llama3_json     Llama 3.1 / 3.2 / 3.3 (JSON tool calls)
    [TOOL_CALLS]                            mistral         Mistral / Mixtral instruct
    <|tool_call|>                           granite         Granite 3.x
    <｜tool▁calls▁begin｜>                  deepseek_v3     DeepSeek V3 / R1
    "[func_name1(" (pythonic example)       pythonic        Llama 3.2 pythonic templates, ToolACE

A template that mentions `tools` but matches no row gets no parser (tools requests then answer 400 as vLLM
says), and the caller is told to pass `--tool-call-parser NAME` (vLLM's list: `vllm serve --help`); a model
without tool support in its template gets none either. The user's explicit choice always wins.

`detect_tokenizer_mode` does the same for vLLM's `--tokenizer-mode`: a directory that carries one of Mistral's own
tokenizer files (`tekken.json`, `tokenizer.model.v3`, ...) is served with `mistral_common` ("mistral"), which
renders chats and tool calls itself; vLLM's own "auto" only does that for a `consolidated*.safetensors` checkpoint,
not for an HF-format one like those `looplift model build` writes.

Deliberately not here: reasoning parsers, and checking that vLLM knows the parser name (vLLM refuses an
unknown one at start with its own message).
"""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Optional

log = logging.getLogger("looplift.server.vllm")

#: (marker, parser), first match wins: more specific markers come first.
_MARKERS: tuple[tuple[tuple[str, ...], str], ...] = (
    (("<tool_call>", "<function="), "qwen3_coder"),
    (("<tool_call>",), "hermes"),
    (("<|python_tag|>",), "llama3_json"),
    (("[TOOL_CALLS]",), "mistral"),
    (("<|tool_call|>",), "granite"),
    (("<｜tool▁calls▁begin｜>",), "deepseek_v3"),
    (("[func_name1(",), "pythonic"),
)


def chat_template(model_dir: Path) -> Optional[str]:
    """The model's chat template text (all named templates joined), or None when it ships none."""
    model_dir = Path(model_dir)
    jinja = model_dir / "chat_template.jinja"
    if jinja.is_file():
        return jinja.read_text(errors="replace")
    for name, key in (("chat_template.json", "chat_template"), ("tokenizer_config.json", "chat_template")):
        path = model_dir / name
        if not path.is_file():
            continue
        try:
            value = json.loads(path.read_text(errors="replace")).get(key)
        except (ValueError, AttributeError):
            continue
        if isinstance(value, list):  # [{"name": "default", "template": "..."}, {"name": "tool_use", ...}]
            value = "\n".join(str(t.get("template", "")) for t in value if isinstance(t, dict))
        if isinstance(value, str) and value:
            return value
    return None


def detect_tool_parser(model_dir: Path) -> Optional[str]:
    """The `--tool-call-parser` for the model in `model_dir` (see the module docstring), or None."""
    template = chat_template(model_dir)
    if template is None:
        return None
    for markers, parser in _MARKERS:
        if all(m in template for m in markers):
            return parser
    if "tools" in template:
        log.warning("the chat template of %s renders tools in a format looplift does not recognize; tool calls stay "
                    "off. Pass --tool-call-parser NAME (VLLMConfig.tool_call_parser) with the parser vLLM has for "
                    "this model family", model_dir)
    return None


def mistral_tokenizer_file(model_dir: Path) -> Optional[Path]:
    """The Mistral tokenizer file (`tekken.json` or `tokenizer.model.v*`) in `model_dir`, or None."""
    model_dir = Path(model_dir)
    tekken = model_dir / "tekken.json"
    if tekken.is_file():
        return tekken
    found = sorted(p for p in model_dir.glob("tokenizer.model.v*") if p.is_file())
    return found[-1] if found else None


def detect_tokenizer_mode(model_dir: Path) -> Optional[str]:
    """The `--tokenizer-mode` for the model in `model_dir`: "mistral" when it carries a Mistral tokenizer
    file, else None (vLLM's default, the HF tokenizer)."""
    return "mistral" if mistral_tokenizer_file(model_dir) is not None else None


def resolve_tool_parser(choice: Optional[str], model_dir: Path) -> Optional[str]:
    """`choice` as `VLLMConfig.tool_call_parser` holds it: "auto" detects, None / "" / "none" turns tool calls
    off, anything else is the parser name passed to vLLM as it is."""
    if choice == "auto":
        return detect_tool_parser(model_dir)
    if not choice or choice == "none":
        return None
    return choice
