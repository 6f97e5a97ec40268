"""The tiny model's tokenizer: byte-level BPE, one token per digit, a chat template vLLM can apply.

Digits are split one per token so that copying a number is the same operation wherever it appears
(`Compute: 37` and `print(37` tokenize the digits identically), which is what lets a 2-layer model
learn to copy. The vocabulary stays around 300 tokens: 256 bytes, a few dozen merges, the specials.
"""

from __future__ import annotations

from typing import Iterable

from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
from transformers import PreTrainedTokenizerFast

PAD, END = "<|pad|>", "<|end|>"
ROLE_TOKENS = {"system": "<|system|>", "user": "<|user|>", "assistant": "<|assistant|>", "tool": "<|tool|>"}
SPECIAL_TOKENS = [PAD, END, *ROLE_TOKENS.values()]

# Each message is `<|role|>content<|end|>`; `<|end|>` is also EOS, so generation stops at the end of a turn.
# Tool calls (none in the demo task) are rendered as JSON so a larger model still sees them.
CHAT_TEMPLATE = (
    "{% for m in messages %}"
    "{{ '<|' + m['role'] + '|>' }}"
    "{% if m['content'] %}{{ m['content'] }}{% endif %}"
    "{% if m.get('tool_calls') %}{{ m['tool_calls'] | tojson }}{% endif %}"
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
