"""How the served model sees a conversation, and the doctor checks on that: the conversation the checks render,
the renderers (the chat template, or mistral_common under vLLM's tokenizer mode mistral), `_Model` (what the checks
share) and `_load_model` (the tokenizer check), template_render, vllm_render, and tool_round_trip through the parser
vLLM uses (`served_text`: ids as vLLM's serving detokenizer writes them). transformers, vLLM and mistral_common are
imported inside the functions that use them.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping, Optional, Sequence

from ._doctor_checks import (
    _FIX_TEMPLATE,
    Check,
    Message,
    _fail,
    _first_line,
    _ok,
    _parser_problem,
    _skip,
    _tokenizer_files_check,
)

#: The parsers of the families `server._tools` detects, tried in turn to name the one that reads a failed round trip.
_CANDIDATE_PARSERS = ("hermes", "qwen3_coder", "llama3_json", "mistral", "granite", "deepseek_v3", "pythonic")

# The conversation the template checks render. Distinct strings, so each part is found in the rendering; a 9-character
# alphanumeric call id, which Mistral's format requires.
_SYSTEM = "You are a support agent. Use the tools."
_USER = "Where is my last order?"
_CALL_ID = "call00001"
_CALL_NAME, _CALL_ARGS = "lookup_order", {"order_id": "QX-48213"}
_RESULT = "shipped on 2024-05-02"
_ANSWER = "It shipped on May 2."
_TOOLS: list[Message] = [{"type": "function", "function": {
    "name": _CALL_NAME, "description": "Look up the status of an order by its id.",
    "parameters": {"type": "object", "properties": {"order_id": {"type": "string"}}, "required": ["order_id"]}}}]
#: Stands for an assistant's content while the template renders its turn, so that the content the model wrote is
#: put back verbatim (a template that trims or rewrites content shows as drift, as it does for sampled text).
_PLACEHOLDER = "DOCTORCONTENT7F3A"


# ---- the conversation pieces -----------------------------------------------------------------------------------

def _call_message(call_id: str, name: str, arguments: Mapping[str, Any], content: Optional[str] = None) -> Message:
    return {"role": "assistant", "content": content, "tool_calls": [
        {"id": call_id, "type": "function", "function": {"name": name, "arguments": json.dumps(arguments)}}]}


def _conversation() -> list[Message]:
    """system, user, assistant tool call, tool result, assistant answer (OpenAI wire form: arguments as JSON text)."""
    return [{"role": "system", "content": _SYSTEM}, {"role": "user", "content": _USER},
            _call_message(_CALL_ID, _CALL_NAME, _CALL_ARGS),
            {"role": "tool", "tool_call_id": _CALL_ID, "content": _RESULT},
            {"role": "assistant", "content": _ANSWER}]


def _hf_messages(messages: Sequence[Message]) -> list[Message]:
    """Messages as vLLM hands them to an HF chat template: tool-call arguments parsed into objects."""
    out = []
    for msg in messages:
        m = dict(msg)
        if m.get("tool_calls"):
            m["tool_calls"] = [{**c, "function": {**c["function"], "arguments": _json_object(c["function"]["arguments"])}}
                               for c in m["tool_calls"]]
        out.append(m)
    return out


def _json_object(text: Any) -> Any:
    if not isinstance(text, str):
        return text
    try:
        value = json.loads(text) if text else {}
    except ValueError:
        return text
    return value if isinstance(value, dict) else text


def _cut(ids: Sequence[int], stops: set[int]) -> list[int]:
    """`ids` up to and including the first stop token: where generation ends (vLLM returns that token too)."""
    for i, t in enumerate(ids):
        if t in stops:
            return list(ids[: i + 1])
    return list(ids)


def _stop_ids(d: Path, eos: Optional[int]) -> set[int]:
    """The tokenizer's EOS and generation_config.json's eos_token_id(s): vLLM stops on any of them."""
    stops = {eos} if isinstance(eos, int) else set()
    try:
        extra = json.loads((d / "generation_config.json").read_text()).get("eos_token_id")
    except (OSError, ValueError, AttributeError):
        extra = None
    stops |= {extra} if isinstance(extra, int) else {int(i) for i in extra or [] if isinstance(i, int)}
    return stops


class _RenderError(Exception):
    """The template (or mistral_common) refused or broke on a conversation: an outcome, reported as a failure."""


# ---- renderers: how the served model sees a conversation -----------------------------------------------------------

class _HFRenderer:
    """vLLM's HF path (and the trainer's): the chat template rendered to text, the text tokenized without adding
    special tokens."""

    name = "the chat template"

    def __init__(self, tok: Any, stops: set[int]) -> None:
        self.tok, self.stops = tok, stops

    def text(self, messages: Sequence[Message], tools: Sequence[Message], gen: bool) -> str:
        try:
            out = self.tok.apply_chat_template(_hf_messages(messages), tools=list(tools) or None, tokenize=False,
                                               add_generation_prompt=gen)
        except Exception as e:  # the template is the model's code: whatever it raises is a finding
            raise _RenderError(f"{type(e).__name__}: {_first_line(e)}") from None
        return str(out)

    def ids(self, messages: Sequence[Message], tools: Sequence[Message], gen: bool) -> list[int]:
        return list(self.tok.encode(self.text(messages, tools, gen), add_special_tokens=False))

    def completion(self, history: Sequence[Message], reply: Message, tools: Sequence[Message]) -> list[int]:
        """The ids the model writes for `reply` after `history`: the rendering past the generation prompt, with
        `reply` the last turn (as the model generates it), its content verbatim, up to the stop token."""
        prompt = self.text(history, tools, True)
        content = reply.get("content")
        shown = {**reply, "content": _PLACEHOLDER} if isinstance(content, str) and content else reply
        full = self.text([*history, shown], tools, False)
        if not full.startswith(prompt):
            raise _RenderError("the rendering of an assistant turn does not start with the generation prompt")
        written = full[len(prompt):]
        if shown is not reply:
            written = written.replace(_PLACEHOLDER, str(content))
        return _cut(self.tok.encode(written, add_special_tokens=False), self.stops)


class _MistralRenderer:
    """vLLM's tokenizer mode mistral: mistral_common renders the request itself; the template is not used."""

    name = "vLLM's Mistral tokenizer (mistral_common)"

    def __init__(self, vtok: Any, stops: set[int]) -> None:
        self.vtok, self.stops = vtok, stops

    def ids(self, messages: Sequence[Message], tools: Sequence[Message], gen: bool) -> list[int]:
        try:
            return list(self.vtok.apply_chat_template([dict(m) for m in messages], tools=list(tools) or None,
                                                      add_generation_prompt=gen))
        except Exception as e:  # mistral_common validates with asserts and its own exceptions
            raise _RenderError(f"{type(e).__name__}: {_first_line(e)}") from None

    def completion(self, history: Sequence[Message], reply: Message, tools: Sequence[Message]) -> list[int]:
        """As `_HFRenderer.completion`: mistral_common's encoding of the assistant message, which is what its
        rendering of the conversation holds after the prompt (serving renders no final assistant turn itself)."""
        from mistral_common.protocol.instruct.request import ChatCompletionRequest as MistralRequest

        try:
            message = MistralRequest.from_openai([dict(reply)]).messages[-1]
            ids = self.vtok.instruct.encode_assistant_message(message, False)
        except Exception as e:  # mistral_common validates with asserts and its own exceptions
            raise _RenderError(f"{type(e).__name__}: {_first_line(e)}") from None
        return _cut(ids, self.stops)


Renderer = _HFRenderer | _MistralRenderer


@dataclass
class _Model:
    """What the checks share: the directory, the trainer's HF tokenizer, and vLLM's view of the model."""

    dir: Path
    tok: Any
    mode: Optional[str]
    """"mistral" when vLLM will be started with --tokenizer-mode mistral, else None."""
    choice: str
    parser: Optional[str]
    vtok: Any = None
    """vLLM's own tokenizer (its Mistral wrapper in mistral mode); None when vLLM is not installed."""
    vllm_missing: Optional[str] = None

    @property
    def hf(self) -> _HFRenderer:
        return _HFRenderer(self.tok, _stop_ids(self.dir, self.tok.eos_token_id))

    def served(self) -> Renderer:
        """How vLLM renders a request for this model."""
        if self.mode == "mistral":
            return _MistralRenderer(self.vtok, _stop_ids(self.dir, self.vtok.eos_token_id))
        return self.hf


def _load_model(d: Path, choice: str) -> tuple[Optional[_Model], Check]:
    """The shared pieces and the tokenizer check (files + transformers loads them)."""
    from server import detect_tokenizer_mode, resolve_tool_parser

    files = _tokenizer_files_check(d)
    if files.status == "fail":
        return None, files
    from transformers import AutoTokenizer

    try:
        tok = AutoTokenizer.from_pretrained(str(d))
    except Exception as e:  # a broken tokenizer file raises whatever its backend raises
        return None, _fail("tokenizer", f"transformers cannot load the tokenizer in {d}: {_first_line(e)}",
                           "save the base model's tokenizer there again (tokenizer.save_pretrained(DIR))")
    mode = detect_tokenizer_mode(d)
    model = _Model(d, tok, mode, choice, resolve_tool_parser(choice, d))
    try:
        from vllm.tokenizers import get_tokenizer

        model.vtok = get_tokenizer(str(d), tokenizer_mode=mode or "auto")
    except ImportError as e:
        model.vllm_missing = f"vllm is not installed ({e}); install looplift[cpu] or [gpu]"
    except Exception as e:  # vLLM's tokenizer loading is what vLLM will do at start: its failure is a finding
        return model, _fail("tokenizer", f"vLLM cannot load the tokenizer in {d} (tokenizer mode {mode or 'auto'}): "
                            f"{_first_line(e)}", "ship the tokenizer files vLLM reads for this family")
    return model, Check("tokenizer", "pass", files.detail + f"; loads as {type(tok).__name__}")


_NO_MODEL = "needs a tokenizer and a chat template that load"


# ---- template checks ----------------------------------------------------------------------------------------------

def _template_render(m: _Model) -> Check:
    name, hf, conv = "template_render", m.hf, _conversation()
    try:
        text = hf.text(conv, _TOOLS, False)
        with_tools = hf.text(conv[:2], _TOOLS, True)
        without = hf.text(conv[:2], [], True)
    except _RenderError as e:
        return _fail(name, f"the chat template fails on a tool conversation: {e}", _FIX_TEMPLATE)
    after_user = text[text.find(_USER) + len(_USER):] if _USER in text else ""
    missing = [part for part, there in (
        ("system", _SYSTEM in text), ("user", _USER in text), ("tools", with_tools != without and _CALL_NAME in with_tools),
        ("tool calls", _CALL_NAME in after_user and _CALL_ARGS["order_id"] in after_user),
        ("tool results", _RESULT in text), ("assistant", _ANSWER in text)) if not there]
    if "tools" in missing:
        return _fail(name, "template cannot render tools: the same conversation renders identically with and "
                     "without `tools`" + (f" (nor: {', '.join(p for p in missing if p != 'tools')})"
                                          if len(missing) > 1 else ""), _FIX_TEMPLATE)
    if missing:
        return _fail(name, f"the chat template does not render {', '.join(missing)}", _FIX_TEMPLATE)
    return _ok(name, f"renders system, user, assistant, tools, tool calls and tool results ({len(text)} characters)")


def _first_difference(a: Sequence[int], b: Sequence[int]) -> int:
    return next((i for i, (x, y) in enumerate(zip(a, b)) if x != y), min(len(a), len(b)))


def _vllm_render(m: _Model) -> Check:
    name = "vllm_render"
    if m.mode != "mistral":
        return _skip(name, "tokenizer mode hf: vLLM renders with this same chat template")
    if m.vtok is None:
        return _skip(name, m.vllm_missing or "vLLM's tokenizer did not load")
    conv = _conversation()[:4]  # up to the tool result: the prompt of the next turn
    try:
        hf_ids, v_ids = m.hf.ids(conv, _TOOLS, True), m.served().ids(conv, _TOOLS, True)
    except _RenderError as e:
        return _fail(name, f"a tool conversation does not render: {e}", _FIX_TEMPLATE)
    if hf_ids == v_ids:
        return _ok(name, f"the chat template and mistral_common render the same {len(v_ids)} ids")
    at = _first_difference(hf_ids, v_ids)
    return _fail(name, f"drift: the chat template (the trainer's text exports) and vLLM's mistral_common rendering "
                 f"differ from token {at} (template {m.tok.decode(hf_ids[at:at + 8])!r}, vLLM "
                 f"{m.vtok.decode(v_ids[at:at + 8])!r}; {len(hf_ids)} vs {len(v_ids)} ids)",
                 "use a chat template that renders as mistral_common does (`looplift model build --family mistral` "
                 "writes one), or serve with --tokenizer-mode hf", first_difference=at)


# ---- tool calls through the parser vLLM uses -----------------------------------------------------------------------

def served_text(tok: Any, ids: Sequence[int], *, skip_special_tokens: bool = False) -> str:
    """`ids` as vLLM's serving detokenizer writes them: a HF fast tokenizer decodes; any other (vLLM's Mistral
    tokenizer) goes through its tokens, as vLLM's slow incremental detokenizer does. Not `decode` there: with
    transformers 5.19 vLLM 0.32's `MistralTokenizer.decode` keeps SentencePiece's "▁" ('▁Compute:▁98'), which
    serving never shows."""
    from transformers import PreTrainedTokenizerFast

    if isinstance(tok, PreTrainedTokenizerFast) or not hasattr(tok, "convert_tokens_to_string"):
        return str(tok.decode(list(ids), skip_special_tokens=skip_special_tokens))
    return str(tok.convert_tokens_to_string(tok.convert_ids_to_tokens(list(ids), skip_special_tokens=skip_special_tokens)))


@dataclass
class _Reader:
    """The tool-call parser vLLM will use, instantiated in process over vLLM's own tokenizer."""

    name: str
    cls: Any
    vtok: Any

    def read(self, completion: Sequence[int], history: Sequence[Message], tools: Sequence[Message],
             stops: set[int]) -> tuple[str, Any]:
        """(text, ExtractedToolCallInformation) for completion ids, decoded as vLLM does for this request."""
        from vllm.entrypoints.openai.chat_completion.protocol import ChatCompletionRequest

        parser = self.cls(self.vtok)
        request = ChatCompletionRequest.model_validate({"model": "doctor", "messages": list(history),
                                                        "tools": list(tools) or None})
        request = parser.adjust_request(request)  # e.g. hermes keeps special tokens so its markers survive
        ids = list(completion[:-1]) if completion and completion[-1] in stops else list(completion)
        text = served_text(self.vtok, ids, skip_special_tokens=bool(request.skip_special_tokens))
        return text, parser.extract_tool_calls(text, request)


def _reader(m: _Model) -> tuple[Optional[_Reader], Optional[Check]]:
    """The served parser, or the check row that says why there is none."""
    name = "tool_round_trip"
    if m.choice == "none":
        return None, _skip(name, "tool calls are off (--tool-call-parser none)")
    if m.parser is None:
        from server import chat_template

        if "tools" not in (chat_template(m.dir) or ""):
            return None, _fail(name, "template cannot render tools, so vLLM gets no tool-call parser", _FIX_TEMPLATE)
        return None, _fail(name, "no tool-call parser matches the chat template's tool-call format (auto found none)",
                           "pass --tool-call-parser NAME with vLLM's parser for this family (`vllm serve --help`)")
    if m.vtok is None:
        return None, _skip(name, m.vllm_missing or "vLLM's tokenizer did not load")
    from vllm.tool_parsers import ToolParserManager

    try:
        cls = ToolParserManager.get_tool_parser(m.parser)
        cls(m.vtok)
    except KeyError:
        return None, _fail(name, f"vLLM has no tool-call parser named {m.parser!r}",
                           "pass one of vLLM's --tool-call-parser names (`vllm serve --help`), or auto")
    except Exception as e:  # vLLM refuses the same pair at start (ParserManager.validate_parser_tokenizer)
        return None, _fail(name, f"the {m.parser} parser cannot be used with this tokenizer: {_first_line(e)}",
                           "pass the --tool-call-parser of this model family, or auto")
    return _Reader(m.parser, cls, m.vtok), None


def _parsed(info: Any) -> str:
    calls = list(getattr(info, "tool_calls", None) or [])
    return ", ".join(f"{c.function.name}({c.function.arguments})" for c in calls) or "no tool call"


def _tool_round_trip(m: _Model) -> Check:
    name = "tool_round_trip"
    problem = _parser_problem(m.dir, m.choice)
    reader, why = _reader(m)
    if reader is None:
        return problem or why or _skip(name, "no parser")
    renderer, history = m.served(), _conversation()[:2]
    try:
        ids = renderer.completion(history, _conversation()[2], _TOOLS)
    except _RenderError as e:
        return _fail(name, f"{renderer.name} cannot render an assistant tool call: {e}", _FIX_TEMPLATE)
    text, info = reader.read(ids, history, _TOOLS, renderer.stops)
    calls = list(info.tool_calls or [])
    if _round_trips(info):
        return _ok(name, f"{reader.name} reads back {_CALL_NAME}({json.dumps(_CALL_ARGS)}) from {text[:90]!r}",
                   parser=reader.name)
    if len(calls) == 1 and calls[0].function.name == _CALL_NAME:
        return _fail(name, f"the {reader.name} parser reads back {_parsed(info)}, not {_CALL_NAME}("
                     f"{json.dumps(_CALL_ARGS)}): the arguments change between the rendering and vLLM's decoded text",
                     "use the model family's own tokenizer (see tokenizer_round_trip)", parser=reader.name)
    said = f"the {reader.name} parser does not read back the tool call {renderer.name} makes the model write " \
           f"({_parsed(info)} from {text[:100]!r})"
    better = _parser_that_reads(m, ids, history, renderer.stops, besides=reader.name)
    if better is not None:
        return _fail(name, f"{said}; the {better} parser does", f"pass --tool-call-parser {better}", parser=reader.name)
    return problem or _fail(name, said, "pass the --tool-call-parser that reads this format (`vllm serve --help` "
                            "lists vLLM's)", parser=reader.name)


def _round_trips(info: Any) -> bool:
    calls = list(getattr(info, "tool_calls", None) or [])
    return (len(calls) == 1 and calls[0].function.name == _CALL_NAME
            and _json_object(calls[0].function.arguments) == _CALL_ARGS)


def _parser_that_reads(m: _Model, ids: Sequence[int], history: Sequence[Message], stops: set[int],
                       besides: str) -> Optional[str]:
    """The first of the families' parsers that reads the tool call back, to name in the fix; None when none does."""
    from vllm.tool_parsers import ToolParserManager

    for name in _CANDIDATE_PARSERS:
        if name == besides:
            continue
        try:
            _, info = _Reader(name, ToolParserManager.get_tool_parser(name), m.vtok).read(ids, history, _TOOLS, stops)
        except Exception:  # a parser that cannot work with this tokenizer is simply not the one
            continue
        if _round_trips(info):
            return name
    return None
