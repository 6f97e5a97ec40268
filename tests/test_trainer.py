"""Trainer: tokenizer, loss masking, the base-model builder's determinism, LoRA SFT (the gate: test_gate.py)."""

from __future__ import annotations

import hashlib
import json
import random
from pathlib import Path

import pytest
from _models import SMALL_TRAINED_FIELDS
from safetensors.torch import load_file

from envs._arithmetic import demonstration, held_out_tasks, training_tasks
from trainer._base_model import BaseModelConfig, _tokenizer_corpus, build_base_model
from trainer._data import IGNORE, encode_chat
from trainer._tokenizer import build_tokenizer
from trainer.errors import TrainingDataError
from trainer.sft import SFTConfig, train_sft

TINY = BaseModelConfig(**SMALL_TRAINED_FIELDS)  # the session's `looplift_small_trained_model`


@pytest.fixture(scope="module")
def tok():  # type: ignore[no-untyped-def]
    return build_tokenizer(_tokenizer_corpus(0))


@pytest.fixture(scope="module")
def tiny_model(looplift_small_trained_model: Path) -> Path:
    return looplift_small_trained_model


def test_tokenizer_splits_digits_and_round_trips(tok) -> None:  # type: ignore[no-untyped-def]
    text = "print(37+58*2)"
    ids = tok.encode(text, add_special_tokens=False)
    assert tok.decode(ids) == text
    pieces = [tok.decode([i]) for i in ids]
    assert "3" in pieces and "7" in pieces and "37" not in pieces
    assert tok.eos_token == "<|end|>" and len(tok) < 400


def test_chat_mask_covers_only_assistant_turns(tok) -> None:  # type: ignore[no-untyped-def]
    msgs = [{"role": "user", "content": "Compute: 1+2"}, {"role": "assistant", "content": "A1"},
            {"role": "user", "content": "Output: 3"}, {"role": "assistant", "content": "Answer: 3"}]
    ids, labels = encode_chat(tok, msgs)
    trained = tok.decode([i for i, lab in zip(ids, labels) if lab != IGNORE])
    assert trained == "A1<|end|>Answer: 3<|end|>"
    assert "Output" not in trained and "Compute" not in trained
    # Mutant: the weight ignored (a message the application wrote, which the export weighs 0, trained on).
    ids, labels = encode_chat(tok, [msgs[0], {**msgs[1], "weight": 0}, *msgs[2:]])
    assert tok.decode([i for i, lab in zip(ids, labels) if lab != IGNORE]) == "Answer: 3<|end|>"


def test_held_out_never_in_training_tasks() -> None:
    held = {t.id for t in held_out_tasks(100)}
    assert len(held) == 100
    for seed in (1, 2, 3):
        assert held.isdisjoint(t.id for t in training_tasks(2000, seed))


def test_demonstrations_miscopy_at_the_configured_rate() -> None:
    rng = random.Random(0)
    tasks = training_tasks(1000, 5)
    wrong = sum(f"print({t.data['expression']})" not in demonstration(t, rng, miscopy_p=0.7)[1]["content"]
                for t in tasks)
    assert 0.65 < wrong / len(tasks) < 0.75


def _digest(model_dir: Path) -> str:
    weights = load_file(str(model_dir / "model.safetensors"))
    h = hashlib.sha256()
    for k in sorted(weights):
        h.update(weights[k].numpy().tobytes())
    return h.hexdigest()


def test_base_model_is_deterministic_for_a_seed(tiny_model: Path, tmp_path: Path) -> None:
    again = build_base_model(TINY, out_dir=tmp_path / "again")
    other = build_base_model(BaseModelConfig(n_demos=300, steps=30, batch_size=16, seed=1), out_dir=tmp_path / "o")
    assert _digest(again) == _digest(tiny_model)
    assert _digest(other) != _digest(tiny_model)
    meta = json.loads((tiny_model / "looplift.json").read_text())
    assert meta["trained"] and meta["config"]["steps"] == 30
    cfg = json.loads((tiny_model / "config.json").read_text())
    assert cfg["head_dim"] == 64 and cfg["model_type"] == "llama"
    from transformers import AutoTokenizer

    loaded = AutoTokenizer.from_pretrained(tiny_model)
    rendered = loaded.apply_chat_template([{"role": "user", "content": "hi"}], tokenize=False,
                                          add_generation_prompt=True)
    assert rendered == "<|user|>hi<|end|><|assistant|>"


def test_cached_build_is_reused(tiny_model: Path) -> None:
    before = (tiny_model / "model.safetensors").stat().st_mtime_ns
    assert build_base_model(TINY, out_dir=tiny_model) == tiny_model
    assert (tiny_model / "model.safetensors").stat().st_mtime_ns == before


def _sft_file(path: Path, n: int) -> Path:
    rng = random.Random(1)
    with open(path, "w") as f:
        for t in training_tasks(n, 9):
            f.write(json.dumps({"messages": demonstration(t, rng, miscopy_p=0.0)}) + "\n")
    return path


def test_sft_trains_an_adapter_and_lowers_the_loss(tiny_model: Path, tmp_path: Path) -> None:
    data = _sft_file(tmp_path / "sft.jsonl", 64)
    losses: list[float] = []
    res = train_sft(tiny_model, data, tmp_path / "adapter", SFTConfig(steps=30, batch_size=16),
                    progress=lambda s, n, loss: losses.append(loss))
    assert res.examples == 64 and len(losses) == 30
    assert sum(losses[-5:]) / 5 < sum(losses[:5]) / 5
    cfg = json.loads((res.adapter_dir / "adapter_config.json").read_text())
    assert cfg["r"] == 8 and set(cfg["target_modules"]) >= {"q_proj", "v_proj"}
    assert (res.adapter_dir / "adapter_model.safetensors").exists()
    assert json.loads((res.adapter_dir / "looplift_sft.json").read_text())["config"]["steps"] == 30
    assert not (tmp_path / "adapter.tmp").exists()


def test_sft_refuses_empty_or_malformed_data(tiny_model: Path, tmp_path: Path) -> None:
    empty = tmp_path / "empty.jsonl"
    empty.write_text("")
    with pytest.raises(TrainingDataError, match="no training examples"):
        train_sft(tiny_model, empty, tmp_path / "a")
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"messages": [{"role": "user", "content": "hi"}]}\n{"oops": 1}\n')
    with pytest.raises(TrainingDataError, match="bad.jsonl:1"):
        train_sft(tiny_model, bad, tmp_path / "a")
