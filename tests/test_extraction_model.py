"""The extraction family's base model (issue 32): its demonstrations (`careless`: the oracle with one careless reader's
mistake on a share of the tasks), its config and cache key, and one tiny build through the real tokenizer."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import pytest

import sdk
from envs import careless_extraction, extraction_family, family_sources

LEVEL1 = 24  # level-1 training reports the policy tests run on (~0.1 s each to build, cached per module)


@pytest.fixture(scope="module")
def fam() -> sdk.EnvFamily:
    return extraction_family(1)


@pytest.fixture(scope="module")
def tasks(fam: sdk.EnvFamily) -> list[sdk.Task]:
    return fam.tasks("train", LEVEL1, 0)


def _run(fam: sdk.EnvFamily, tasks: list[sdk.Task], policy: sdk.Policy) -> list[sdk.Trajectory]:
    return sdk.run(tasks, fam.env_factory, verifier=fam.verifier, budget=fam.budget, policy=policy,
                   system_prompt=fam.system_prompt, concurrency=2)


def test_careless_at_rate_0_is_the_oracle(fam: sdk.EnvFamily, tasks: list[sdk.Task]) -> None:
    assert all(t.outcome is not None and t.outcome.success for t in _run(fam, tasks, careless_extraction(0.0)))


def test_careless_at_rate_1_makes_one_traps_mistake_in_every_answer(fam: sdk.EnvFamily,
                                                                   tasks: list[sdk.Task]) -> None:
    """Catches: a mistake never made, one the verifier does not recognise as a trap (it would say "wrong"), more than
    one field off (two only for a swap), a kind never drawn."""
    seen: Counter[str] = Counter()
    for t in _run(fam, tasks, careless_extraction(1.0)):
        assert t.outcome is not None and not t.outcome.success
        errors = t.outcome.details["errors"]
        kinds = set(errors.values())
        assert (len(errors), kinds) in ((1, {"scale"}), (1, {"period"}), (2, {"swapped"})), errors
        seen.update(kinds)
    assert set(seen) == {"scale", "period", "swapped"}, seen


def test_careless_chooses_its_tasks_by_id_and_seed(fam: sdk.EnvFamily, tasks: list[sdk.Task]) -> None:
    """Catches: a share ignored (rate 0.5 must fail some and pass some), a choice that changes between runs of the
    same seed (the demonstrations would not be reproducible), a seed that changes nothing."""
    def failed(seed: int) -> list[str]:
        return [t.task_id for t in _run(fam, tasks, careless_extraction(0.5, seed)) if not t.outcome.success]  # type: ignore[union-attr]

    first = failed(0)
    assert 0 < len(first) < len(tasks) and failed(0) == first and failed(1) != first
    with pytest.raises(ValueError, match="rate"):
        careless_extraction(1.5)


def test_the_families_sources_are_its_package() -> None:
    names = {p.name for p in family_sources("extraction")}
    assert {"__init__.py", "_policies.py", "_truth.py", "_verify.py"} <= names
    with pytest.raises(KeyError):
        family_sources("nope")


def test_the_config_says_what_to_change_and_keys_what_determines_the_model() -> None:
    from trainer import ConfigError, ExtractionModelConfig, extraction_model_dir

    for bad, needle in ((dict(level=4), "level"), (dict(family="llama"), "family"), (dict(wrong=1.5), "0..1"),
                        (dict(steps=0), "1 or more"), (dict(size="huge"), "size")):
        with pytest.raises(ConfigError, match=needle):
            ExtractionModelConfig(**bad).check()  # type: ignore[arg-type]
    base = ExtractionModelConfig()
    keys = {base.key()} | {ExtractionModelConfig(**change).key()  # type: ignore[arg-type]
                          for change in (dict(level=2), dict(wrong=0.3), dict(steps=601), dict(family="mistral"))}
    assert len(keys) == 5 and base.key() == ExtractionModelConfig().key()
    assert extraction_model_dir(base).name == f"extraction-qwen-l1-{base.key()}"


@pytest.mark.slow
@pytest.mark.model_build
def test_a_tiny_build_trains_on_whole_tool_call_episodes(tmp_path: Path) -> None:
    """Four episodes, two steps: the directory is a model of the family (its tokenizer and template), and what it
    trained on are whole episodes in the family's tool-call format, each ending in its `submit_answer` call."""
    from transformers import AutoConfig, AutoTokenizer

    from trainer import ExtractionModelConfig, build_extraction_model
    from trainer._extraction_model import extraction_demonstrations

    cfg = ExtractionModelConfig(episodes=4, steps=2)
    tools, convs = extraction_demonstrations(cfg)
    assert [t["function"]["name"] for t in tools] == ["read_page", "get_table", "search", "submit_answer"]
    assert len(convs) == 4 and all(c[0]["role"] == "system" and c[1]["role"] == "user" for c in convs)
    assert all(c[-1]["tool_calls"][-1]["function"]["name"] == "submit_answer" for c in convs)
    said: list[str] = []
    out = build_extraction_model(cfg, out_dir=tmp_path / "m", say=said.append)
    meta = json.loads((out / "looplift.json").read_text())
    assert meta["env"] == "extraction" and meta["config"]["level"] == 1 and meta["key"] == cfg.key()
    assert meta["demonstrations"] + meta["left_out_too_long"] == 4 and meta["demonstrations"] >= 2
    assert AutoConfig.from_pretrained(out).architectures == ["Qwen2ForCausalLM"]
    tok = AutoTokenizer.from_pretrained(out)
    assert "<tool_call>" in tok.apply_chat_template(convs[0], tools=tools, tokenize=False)
    assert len(said) == 3 and build_extraction_model(cfg, out_dir=out) == out  # built: read back, not rebuilt


@pytest.mark.parametrize(("argv", "needle"), [
    (["--family", "qwen"], "--out is required"),
    (["--family", "qwen", "--env", "coding"], "--env must be extraction"),
    (["--family", "qwen", "--env", "extraction", "--level", "5"], "level must be 1, 2 or 3"),
    (["--family", "llama", "--env", "extraction"], "unknown model family 'llama'"),
])
def test_model_build_for_an_env_refuses_bad_input_in_one_line(argv: list[str], needle: str, tmp_path: Path) -> None:
    """Catches: a traceback, an error that does not say what to change, or a build started before the check."""
    from typer.testing import CliRunner

    from looplift._model_cli import app

    r = CliRunner().invoke(app, ["build", *argv], env={"LOOPLIFT_HOME": str(tmp_path)})
    assert r.exit_code == 2 and needle in r.output.strip().splitlines()[-1] and "Traceback" not in r.output, r.output
    assert not (tmp_path / "models").exists()


def test_a_build_into_a_directory_holding_files_is_refused_before_anything_runs(tmp_path: Path) -> None:
    """Catches: a library build replacing someone's files unasked (`build_family_model` refuses the same)."""
    from trainer import ConfigError, ExtractionModelConfig, build_extraction_model

    (tmp_path / "theirs.txt").write_text("keep me")
    said: list[str] = []
    with pytest.raises(ConfigError, match="exists and is not empty"):
        build_extraction_model(ExtractionModelConfig(episodes=2, steps=1), out_dir=tmp_path, say=said.append)
    assert said == [] and (tmp_path / "theirs.txt").read_text() == "keep me"
