"""The tiny model's tokenizer: byte-level BPE, one token per digit, a chat template vLLM can apply (tools
and tool calls included).

Digits are split one per token so that copying a number is the same operation wherever it appears
(`Compute: 37` and `print(37` tokenize the digits identically), which is what lets a 2-layer model
learn to copy. The vocabulary stays around 300 tokens: 256 bytes, a few dozen merges, the specials.
"""

from __future__ import annotations

from typing import Iterable

from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers, trainers
from transformers import PreTrainedTokenizerFast

PAD, END = "<|pad|>", "<|end|>"
ROLE_TOKENS = {"system": "<|system|>", "user": "<|user|>", "assistant": "<|assistant|>", "tool": "<|tool|>"}
SPECIAL_TOKENS = [PAD, END, *ROLE_TOKENS.values()]

# Each message is `<|role|>content<|end|>`; `<|end|>` is also EOS, so generation stops at the end of a turn.
# Tools and tool calls use the Hermes format, which vLLM parses with `--tool-call-parser hermes`: the tool
# list is one system line naming each function and its parameters (a 2-layer model cannot use descriptions,
# and the context is 512 tokens), and an assistant's tool call is `<tool_call>{"name": ..., "arguments":
# {...}}</tool_call>`. Hermes rather than pythonic because vLLM answers a named or `required` tool_choice by
# constraining the output to JSON arguments: with Hermes that JSON is exactly what the model learned to
# write inside its calls. `arguments` arrive as a JSON string (OpenAI) or an object (vLLM parses them for
# templates); both render as the same JSON text `json.dumps` writes.
TOOL_CALL_START, TOOL_CALL_END = "<tool_call>", "</tool_call>"
CHAT_TEMPLATE = (
    "{% if tools %}<|system|>Tools:"
    "{% for t in tools %}{% set f = t['function'] if t['function'] is defined else t %}"
    " {{ f['name'] }}({{ (f['parameters']['properties'] if f['parameters'] is defined and f['parameters'] "
    "and f['parameters']['properties'] is defined else {}) | join(', ') }})"
    "{% endfor %}<|end|>{% endif %}"
    "{% for m in messages %}"
    "{{ '<|' + m['role'] + '|>' }}"
    "{% if m['content'] %}{{ m['content'] }}{% endif %}"
    "{% if m.get('tool_calls') %}{% for tc in m['tool_calls'] %}{% set a = tc['function']['arguments'] %}"
    "{{ '<tool_call>{\"name\": ' + (tc['function']['name'] | tojson) + ', \"arguments\": ' }}"
    "{{ a if a is string else (a | tojson) }}{{ '}</tool_call>' }}"
    "{% endfor %}{% endif %}"
    "{{ '<|end|>' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|assistant|>' }}{% endif %}"
)


def build_tokenizer(corpus: Iterable[str], *, vocab_size: int = 320) -> PreTrainedTokenizerFast:
    """Train a byte-level BPE on `corpus` (deterministic for the same corpus) and wrap it for transformers."""
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.Sequence(
        [pre_tokenizers.Digits(individual_digits=True), pre_tokenizers.ByteLevel(add_prefix_space=False)]
    )
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=SPECIAL_TOKENS,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(corpus, trainer=trainer)
    # Whole tokens, but not "special": vLLM's Hermes parser reads them in the output text.
    tok.add_tokens([AddedToken(TOOL_CALL_START, normalized=False), AddedToken(TOOL_CALL_END, normalized=False)])
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tok,
        pad_token=PAD,
        eos_token=END,
        bos_token=None,
        unk_token=None,
        additional_special_tokens=list(ROLE_TOKENS.values()),
    )
    fast.chat_template = CHAT_TEMPLATE
    return fast
