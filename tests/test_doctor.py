"""`looplift doctor` and `preflight` (looplift/_doctor.py) on the tiny untrained model and broken copies of it.

One broken property per case; each test names in a comment the broken variant of the doctor it catches. The serve
check (a real vLLM, ~1-2 min) is one test, marked `vllm`.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
from pathlib import Path
from typing import Any, Callable

import pytest
from typer.testing import CliRunner

from looplift._cli import app
from looplift._doctor import preflight

CHECKS = ["config", "weights", "tokenizer", "chat_template", "template_render", "vllm_render", "tool_round_trip",
          "prefix_drift", "generation_config", "lora_targets", "lora_serve", "tokenizer_round_trip"]
NO_TOOLS_TEMPLATE = ("{% for m in messages %}{{ '<|' + m['role'] + '|>' }}{{ m['content'] or '' }}<|end|>{% endfor %}"
                     "{% if add_generation_prompt %}<|assistant|>{% endif %}")


def _edit_json(path: Path, **changes: Any) -> None:
    data = json.loads(path.read_text())
    data.update(changes)
    path.write_text(json.dumps(data))


def _no_tokenizer(d: Path) -> None:
    (d / "tokenizer.json").unlink()


def _no_template(d: Path) -> None:
    (d / "chat_template.jinja").unlink()
    cfg = json.loads((d / "tokenizer_config.json").read_text())
    cfg.pop("chat_template", None)
    (d / "tokenizer_config.json").write_text(json.dumps(cfg))


def _template_without_tools(d: Path) -> None:
    (d / "chat_template.jinja").write_text(NO_TOOLS_TEMPLATE)


def _trimming_template(d: Path) -> None:
    # Renders assistant content trimmed: a model that writes a trailing newline sees its next prompt without it.
    template = (d / "chat_template.jinja").read_text()
    assert "{{ m['content'] }}" in template
    (d / "chat_template.jinja").write_text(template.replace("{{ m['content'] }}", "{{ m['content'] | trim }}"))


def _no_projections(d: Path) -> None:
    # A real architecture (Llama) with no decoder layers: nothing inside repeated blocks for LoRA, in the config
    # and in the weights alike.
    from transformers import LlamaConfig, LlamaForCausalLM

    cfg = LlamaConfig.from_pretrained(d)
    cfg.num_hidden_layers = 0
    (d / "model.safetensors").unlink()
    LlamaForCausalLM(cfg).save_pretrained(d)


def _unknown_model_type(d: Path) -> None:
    _edit_json(d / "config.json", model_type="notamodel")


def _lossy_tokenizer(d: Path) -> None:
    # Lowercases everything it encodes: "Compute" comes back as "compute".
    _edit_json(d / "tokenizer.json", normalizer={"type": "Lowercase"})


def _mistral_tokenizer(d: Path) -> None:
    # A Mistral tokenizer file next to the tiny model's HF tokenizer: vLLM then renders with mistral_common.
    import mistral_common

    shutil.copy(Path(mistral_common.__file__).parent / "data" / "tekken_240911.json", d / "tekken.json")


@pytest.fixture
def model_copy(looplift_model_dir: Path, tmp_path: Path) -> Callable[[Callable[[Path], None]], Path]:
    """`model_copy(breakage)`: a copy of the tiny model with `breakage` applied to it."""

    def copy(breakage: Callable[[Path], None]) -> Path:
        d = tmp_path / breakage.__name__.strip("_")
        shutil.copytree(looplift_model_dir, d)
        breakage(d)
        return d

    return copy


def _doctor(d: Path, *args: str) -> tuple[int, dict[str, Any]]:
    result = CliRunner().invoke(app, ["doctor", "--model", str(d), "--json", *args])
    assert result.exception is None or isinstance(result.exception, SystemExit), result.exception
    return result.exit_code, json.loads(result.stdout)


def _check(report: dict[str, Any], name: str) -> dict[str, Any]:
    return next(c for c in report["checks"] if c["name"] == name)


@pytest.mark.slow
def test_a_good_model_passes_without_serving(looplift_model_dir: Path) -> None:
    # Catches: --no-serve reported as pass; a check missing from the report or out of order; exit code 1 on a
    # clean report; a drift counter that finds drift in the tiny model's exact template.
    code, report = _doctor(looplift_model_dir, "--no-serve")
    assert code == 0, report
    assert set(report) == {"model", "checks", "ok"} and report["ok"] is True
    assert report["model"] == str(looplift_model_dir.resolve())
    assert [c["name"] for c in report["checks"]] == CHECKS
    for c in report["checks"]:
        assert set(c) == {"name", "status", "detail", "fix", "figures", "seconds"}
        assert c["status"] in ("pass", "skip") and c["fix"] is None, c
    assert _check(report, "lora_serve")["status"] == "skip"
    assert _check(report, "vllm_render")["status"] == "skip"  # tokenizer mode hf: nothing to compare
    drift = _check(report, "prefix_drift")["figures"]
    assert drift["drifted"] == 0 and drift["transitions"] > 0 and drift["rows"] == drift["episodes"]
    assert "hermes" in _check(report, "tool_round_trip")["detail"]


BROKEN = [
    # (breakage, --tool-call-parser, the check that fails, words its detail must hold)
    (_no_tokenizer, "auto", "tokenizer", ["no tokenizer in", "tokenizer.json"]),
    (_no_template, "auto", "chat_template", ["no chat template in", "chat_template.jinja"]),
    (_template_without_tools, "auto", "template_render", ["template cannot render tools"]),
    (_no_projections, "auto", "lora_targets", ["LlamaForCausalLM has no linear projections"]),
    (_unknown_model_type, "auto", "lora_targets", ["model_type 'notamodel' is not an architecture"]),
    (_lossy_tokenizer, "auto", "tokenizer_round_trip", ["lost text", "'Compute"]),
    (lambda d: None, "mistral", "tool_round_trip", ["--tool-call-parser mistral", "hermes-format"]),
]


@pytest.mark.slow
@pytest.mark.parametrize("breakage, parser, failing, words", BROKEN,
                         ids=["no-tokenizer", "no-template", "template-without-tools", "no-projections",
                              "unknown-model-type", "lossy-tokenizer", "parser-mismatch"])
def test_each_broken_model_fails_its_check(model_copy: Callable[[Callable[[Path], None]], Path],
                                           breakage: Callable[[Path], None], parser: str, failing: str,
                                           words: list[str]) -> None:
    # Catches: a check that passes (or skips) its broken input; a failure without a fix; a multi-line detail;
    # exit code 0 with a failed check.
    code, report = _doctor(model_copy(breakage), "--no-serve", "--tool-call-parser", parser)
    check = _check(report, failing)
    assert code == 1 and report["ok"] is False
    assert check["status"] == "fail", check
    assert all(w in check["detail"] for w in words), check["detail"]
    assert check["fix"] and "\n" not in check["detail"] + check["fix"]


PREFLIGHT = [
    (_no_tokenizer, "auto", "no tokenizer in"),
    (_no_template, "auto", "no chat template in"),
    (_template_without_tools, "auto", "cannot render tools"),
    (_no_projections, "auto", "no projection matrices"),
    (lambda d: None, "mistral", "which writes hermes-format tool calls; pass --tool-call-parser hermes"),
]


@pytest.mark.parametrize("breakage, parser, words", PREFLIGHT,
                         ids=["no-tokenizer", "no-template", "template-without-tools", "no-projections",
                              "parser-mismatch"])
def test_preflight_names_the_problem_and_the_fix(model_copy: Callable[[Callable[[Path], None]], Path],
                                                 breakage: Callable[[Path], None], parser: str, words: str) -> None:
    # Catches: a static check that misses its broken input, or reports it without the file or the fix.
    d = model_copy(breakage)
    problems = preflight(d, parser)
    assert len(problems) == 1 and words in problems[0] and str(d) in problems[0], problems
    assert "; " in problems[0] and "\n" not in problems[0]


def test_preflight_passes_a_good_model(looplift_model_dir: Path) -> None:
    # Catches: a static check that flags the tiny model (its parser, its projections read from the header).
    assert preflight(looplift_model_dir) == []
    assert preflight(looplift_model_dir, "hermes") == []


@pytest.mark.slow
def test_preflight_imports_neither_torch_nor_vllm(looplift_model_dir: Path) -> None:
    # Catches: preflight importing torch or vLLM, which `looplift up` would pay for in seconds and memory.
    code = ("import sys; from looplift._doctor import preflight; assert preflight(sys.argv[1]) == []; "
            "heavy = [m for m in ('torch', 'vllm', 'transformers') if m in sys.modules]; assert not heavy, heavy")
    subprocess.run([sys.executable, "-c", code, str(looplift_model_dir)], check=True, timeout=120)


@pytest.mark.slow
def test_drift_counts_a_trimming_template(model_copy: Callable[[Callable[[Path], None]], Path]) -> None:
    # Catches: measuring drift from the template's own rendering of the assistant turn (which trims too, so it would
    # see none) instead of what the model wrote; calling drift a failure; rows that drop a drifted turn's ids.
    code, report = _doctor(model_copy(_trimming_template), "--no-serve")
    drift = _check(report, "prefix_drift")
    assert drift["status"] == "pass" and code == 0, drift
    assert drift["figures"]["drifted"] >= 1
    assert drift["figures"]["rows"] == drift["figures"]["episodes"] + drift["figures"]["drifted"]
    assert "keep every sampled id" in drift["detail"]


@pytest.mark.slow
def test_mistral_mode_compares_vllms_rendering(model_copy: Callable[[Callable[[Path], None]], Path]) -> None:
    # Catches: comparing the template with itself in tokenizer mode mistral (no drift found); a round trip through
    # the template instead of mistral_common; a parser failure that does not name the parser that works.
    code, report = _doctor(model_copy(_mistral_tokenizer), "--no-serve")
    assert code == 1
    assert "vLLM: --tokenizer-mode mistral" in _check(report, "tokenizer")["detail"]
    render = _check(report, "vllm_render")
    assert render["status"] == "fail" and "drift" in render["detail"], render
    tools = _check(report, "tool_round_trip")
    assert tools["status"] == "fail" and tools["fix"] == "pass --tool-call-parser mistral", tools


def test_generation_config_names_what_it_would_change(tmp_path: Path) -> None:
    # Catches: listing neutral fields as changes; saying the file applies under --generation-config vllm, or not
    # under auto.
    from looplift._doctor import _generation_config

    (tmp_path / "generation_config.json").write_text(json.dumps({"temperature": 0.6, "top_k": 20, "top_p": 1.0,
                                                                 "eos_token_id": 2}))
    neutral = _generation_config(tmp_path, "vllm")
    assert neutral.status == "pass" and "would have set temperature=0.6, top_k=20" in neutral.detail
    assert dict(neutral.figures["fields"]) == {"temperature": 0.6, "top_k": 20}
    applied = _generation_config(tmp_path, "auto")
    assert "vLLM applies temperature=0.6, top_k=20" in applied.detail


def test_a_missing_directory_is_bad_input(tmp_path: Path) -> None:
    # Catches: exit code 1 (a failed check) for input that is not a model directory at all.
    result = CliRunner().invoke(app, ["doctor", "--model", str(tmp_path / "nope"), "--no-serve"])
    assert result.exit_code == 2 and "is not a directory" in result.stderr


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_up_refuses_a_broken_model_before_starting(model_copy: Callable[[Callable[[Path], None]], Path]) -> None:
    # Catches: preflight not wired into `looplift up --model` (vLLM would start and fail ~40 s later, or serve a
    # model whose tool calls are never parsed).
    d = model_copy(_template_without_tools)
    result = CliRunner().invoke(app, ["up", "--model", str(d), "--gateway-port", str(_free_port()),
                                      "--collector-port", str(_free_port())])
    assert result.exit_code == 2
    assert "error: the chat template of" in result.stderr and "cannot render tools" in result.stderr
    assert "starting vLLM" not in result.stderr


@pytest.mark.vllm
@pytest.mark.model_build
@pytest.mark.slow
def test_serve_trains_loads_and_answers_with_an_adapter(looplift_model_dir: Path) -> None:
    # Catches: lora_serve passing without a chat completion from the adapter; vLLM left running after the check.
    before = {p for p in os.listdir("/proc") if p.isdigit()}
    code, report = _doctor(looplift_model_dir)
    serve = _check(report, "lora_serve")
    assert serve["status"] == "pass" and code == 0, serve
    assert "answered as doctor-adapter" in serve["detail"]
    left = [p for p in set(os.listdir("/proc")) - before if p.isdigit() and _is_vllm(p)]
    assert not left, left


def _is_vllm(pid: str) -> bool:
    """A vLLM process (API server, engine core, worker) that this test process started, or that was orphaned to
    init; not one of another job on the machine (a soak running beside the suite counted here once)."""
    try:
        cmd = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return False
    if b"vllm.entrypoints" not in cmd and not cmd.startswith(b"VLLM::"):
        return False
    me, p = str(os.getpid()), pid
    for _ in range(64):  # up the parent chain
        try:
            parent = Path(f"/proc/{p}/stat").read_text().rsplit(")", 1)[1].split()[1]
        except (OSError, IndexError):
            return False
        if parent == me:
            return True
        if parent in ("0", "1"):
            return p == pid
        p = parent
    return False


@pytest.mark.model_build
@pytest.mark.slow
def test_served_text_reads_a_mistral_tokenizer_as_vllm_serves_it(tmp_path: Path) -> None:
    """Broken variant: `decode` on vLLM's Mistral tokenizer, which with transformers 5.19 keeps SentencePiece's "▁"
    ('▁Compute:▁98-6-66'), so the doctor failed the tool round trip and every tokenizer sample of a Mistral model
    that serves fine."""
    from vllm.tokenizers import get_tokenizer

    from looplift._doctor import served_text
    from trainer import build_family_model

    model = build_family_model("mistral", tmp_path / "mistral", steps=0)
    vtok = get_tokenizer(str(model), tokenizer_mode="mistral")
    for text in ["Compute: 98-6-66", "def f(x):\n    return x  # é 中文"]:
        assert served_text(vtok, vtok.encode(text, add_special_tokens=False), skip_special_tokens=True) == text
