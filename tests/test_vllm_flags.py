"""Every flag looplift passes to vLLM is one the installed vLLM's own CLI parser accepts, with the value we meant.

`server._vllm.build_command` writes the argv of `python -m vllm.entrypoints.openai.api_server`; a flag vLLM renamed
or dropped, or a value outside its choices, would only show as a vLLM that exits ~20 s into a start with an argparse
line in its log. Here each argv goes through what that module's `main()` runs before it loads anything:
`make_arg_parser(FlexibleArgumentParser()).parse_args(argv)` and `validate_parsed_serve_args` (vllm 0.32 keeps them in
`vllm.entrypoints.launchers.cli_args` and `vllm.utils.argparse_utils`), and the values come back from the namespace.
The same goes for the other places that write a vLLM command line: the deploy manifests (compose, Kubernetes) and
the serve commands the examples tell a user to run.

Two names the parser takes as free text are checked against the registries vLLM resolves them in at start: the
tool-call parsers `server._tools._MARKERS` can pick (`ToolParserManager`) and the tokenizer mode
`detect_tokenizer_mode` emits (`TokenizerRegistry`).

No vLLM server is started. vLLM's parser is read in one helper process per module (importing vLLM takes ~20 s and
changes process-wide state: logging, torch), which parses every argv the tests send it.
"""

from __future__ import annotations

import ast
import json
import re
import shlex
import subprocess
import sys
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Callable, Iterator, Optional

import pytest
import yaml

from server import _defaults as D
from server._tools import _MARKERS, detect_tokenizer_mode, detect_tool_parser
from server._vllm import VLLMConfig, build_command, replica_env

pytestmark = [pytest.mark.vllm, pytest.mark.slow]

REPO = Path(__file__).resolve().parents[1]
MODULE = "vllm.entrypoints.openai.api_server"
PORT = 41234

# The helper process: one JSON request per line on stdin, one JSON answer per line on the original stdout (whatever
# vLLM prints goes to stderr, so it cannot corrupt an answer).
_PARSER_PROCESS = r"""
import contextlib, io, json, os, sys
answers = os.fdopen(os.dup(1), "w")
os.dup2(2, 1)
from vllm.entrypoints.launchers.cli_args import make_arg_parser, validate_parsed_serve_args
from vllm.tokenizers.registry import TokenizerRegistry
from vllm.tool_parsers import ToolParserManager
from vllm.utils.argparse_utils import FlexibleArgumentParser

parser = make_arg_parser(FlexibleArgumentParser())
lora_rank = next(a for a in parser._actions if "--max-lora-rank" in a.option_strings)
answers.write(json.dumps({"tool_parsers": ToolParserManager.list_registered(),
                          "tokenizer_modes": sorted(TokenizerRegistry.tokenizers),
                          "lora_ranks": sorted(lora_rank.choices or [])}) + "\n")
answers.flush()
for line in sys.stdin:
    err = io.StringIO()
    try:
        with contextlib.redirect_stderr(err):
            args = parser.parse_args(json.loads(line))
        validate_parsed_serve_args(args)
        answer = {"ok": True, "args": vars(args)}
    except SystemExit:
        answer = {"ok": False, "error": err.getvalue().strip().splitlines()[-1]}
    except Exception as e:
        answer = {"ok": False, "error": f"{type(e).__name__}: {e}"}
    answers.write(json.dumps(answer, default=str) + "\n")
    answers.flush()
"""


@dataclass(frozen=True)
class Parsed:
    ok: bool
    args: dict[str, Any]
    error: str = ""


class VLLMCli:
    """The installed vLLM's serve-argument parser, in its own process (see the module docstring)."""

    def __init__(self, log: Path) -> None:
        self.log = log
        self._log_file = log.open("w")
        self.proc = subprocess.Popen([sys.executable, "-c", _PARSER_PROCESS], stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, stderr=self._log_file, text=True)
        info = self._read()
        self.tool_parsers: set[str] = set(info["tool_parsers"])
        self.tokenizer_modes: set[str] = set(info["tokenizer_modes"])
        self.lora_ranks: set[int] = set(info["lora_ranks"])

    def _read(self) -> dict[str, Any]:
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline()
        if not line:
            self.proc.wait(10)
            raise RuntimeError(f"the vLLM parser process exited ({self.proc.returncode}):\n"
                               + self.log.read_text()[-3000:])
        answer: dict[str, Any] = json.loads(line)
        return answer

    def parse(self, argv: list[str]) -> Parsed:
        """Parse `argv` (the arguments after `-m vllm.entrypoints.openai.api_server`) as vLLM's `main()` does."""
        assert self.proc.stdin is not None
        self.proc.stdin.write(json.dumps(argv) + "\n")
        self.proc.stdin.flush()
        answer = self._read()
        return Parsed(answer["ok"], answer.get("args", {}), answer.get("error", ""))

    def close(self) -> None:
        self.proc.kill()  # it only parses: nothing to flush (an orderly exit spends seconds in vLLM's atexit hooks)
        self.proc.wait()
        self._log_file.close()


@pytest.fixture(scope="module")
def vllm_cli(tmp_path_factory: pytest.TempPathFactory) -> Iterator[VLLMCli]:
    cli = VLLMCli(tmp_path_factory.mktemp("vllm_cli") / "parser.log")
    yield cli
    cli.close()


def accepted(cli: VLLMCli, argv: list[str]) -> dict[str, Any]:
    parsed = cli.parse(argv)
    assert parsed.ok, f"the installed vLLM refuses {shlex.join(argv)}: {parsed.error}"
    return parsed.args


# ---- model directories -----------------------------------------------------------------------------------------
QWEN_TEMPLATE = "{% for m in messages %}<|im_start|>{{ m.role }}{% endfor %}{% if tools %}<tool_call>{% endif %}"
CODER_TEMPLATE = QWEN_TEMPLATE + "<function=name>"


def model_dir(root: Path, name: str, *, template: Optional[str] = None, files: tuple[str, ...] = ()) -> Path:
    """A minimal HF directory: config.json, optionally chat_template.jinja and other (empty) files."""
    d = root / name
    d.mkdir()
    (d / "config.json").write_text(json.dumps({"model_type": "qwen2", "architectures": ["Qwen2ForCausalLM"]}))
    if template is not None:
        (d / "chat_template.jinja").write_text(template)
    for f in files:
        (d / f).write_bytes(b"")
    return d


@dataclass(frozen=True)
class Variant:
    """A config the supervisor may start vLLM with, and what vLLM must end up with."""

    make: Callable[[Path], VLLMConfig]
    on_gpu: bool = False
    #: The tool-call parser vLLM must get (None: tool calls off, no `--enable-auto-tool-choice`).
    parser: Optional[str] = None
    #: vLLM's tokenizer mode ("auto": we passed none).
    mode: str = "auto"
    #: Further namespace values an `extra_args` variant must produce.
    extra: tuple[tuple[str, Any], ...] = ()


def _plain(tmp: Path, **kw: Any) -> VLLMConfig:
    return VLLMConfig(model_dir=model_dir(tmp, "m"), **kw)


def _qwen(tmp: Path, **kw: Any) -> VLLMConfig:
    return VLLMConfig(model_dir=model_dir(tmp, "m", template=QWEN_TEMPLATE), **kw)


def _mistral(tmp: Path, **kw: Any) -> VLLMConfig:
    return VLLMConfig(model_dir=model_dir(tmp, "m", files=("tokenizer.model.v3",)), **kw)


def _blue_green(tmp: Path) -> VLLMConfig:
    # What the replica code derives from the config the set was started with: start_local_replicas adds the
    # replica's own cores/GPUs (env only), start_base a new checkpoint served under the new version's name on a
    # free port, LocalReplica.restart the same flags warmed up.
    first = VLLMConfig(model_dir=model_dir(tmp, "m", template=QWEN_TEMPLATE), max_loras=2)
    return replace(first, model_dir=model_dir(tmp, "ckpt-3", template=QWEN_TEMPLATE), served_model_name="policy-v3",
                   port=0, warm_up=True, env={**first.env, **replica_env(1, 2)})


VARIANTS: dict[str, Variant] = {
    # Defaults: dtype float32 on the CPU build, "auto" on a GPU (a renamed --dtype choice, or a default dtype vLLM
    # does not know, is refused).
    "cpu-defaults": Variant(_plain),
    "gpu-defaults": Variant(_plain, on_gpu=True),
    "cpu-dtype-bfloat16": Variant(lambda t: _plain(t, dtype="bfloat16")),
    "gpu-dtype-float16": Variant(lambda t: _plain(t, dtype="float16"), on_gpu=True),
    # Tool calls: detected from the chat template, explicit, off.
    "tools-auto-hermes": Variant(_qwen, parser="hermes"),
    "tools-auto-qwen3-coder": Variant(lambda t: VLLMConfig(model_dir=model_dir(t, "m", template=CODER_TEMPLATE)),
                                      on_gpu=True, parser="qwen3_coder"),
    "tools-explicit-pythonic": Variant(lambda t: _plain(t, tool_call_parser="pythonic"), parser="pythonic"),
    "tools-explicit-wins-over-template": Variant(lambda t: _qwen(t, tool_call_parser="llama3_json"),
                                                 parser="llama3_json"),
    "tools-none": Variant(lambda t: _qwen(t, tool_call_parser="none")),
    "tools-off-as-the-stack-says": Variant(lambda t: _qwen(t, tool_call_parser=None)),
    # Tokenizer mode: "mistral" detected from a Mistral tokenizer file, or given.
    "tokenizer-auto-mistral": Variant(_mistral, mode="mistral"),
    "tokenizer-explicit-hf": Variant(lambda t: _mistral(t, tokenizer_mode="hf"), mode="hf"),
    # Generation config: vLLM's neutral defaults (the default), the model's own, or a directory.
    "generation-config-auto": Variant(lambda t: _plain(t, generation_config="auto")),
    "generation-config-dir": Variant(lambda t: _plain(t, generation_config=str(t))),
    # The server CLI's knobs (`looplift server start --alias coder --max-model-len ... --max-lora-rank ...`).
    "server-cli-options": Variant(lambda t: _qwen(t, served_model_name="coder-v0", host="0.0.0.0", max_model_len=4096,
                                                  max_lora_rank=64, max_loras=1), on_gpu=True, parser="hermes"),
    # Replicas: the blue/green set and restarted replicas reuse the first set's flags.
    "replica-blue-green": Variant(_blue_green, parser="hermes"),
    # extra_args go through verbatim and come out in the namespace; one that names --tokenizer-mode or
    # --tool-call-parser replaces ours (in either spelling) rather than contradicting it.
    "extra-args": Variant(lambda t: _qwen(t, extra_args=("--seed", "3", "--enforce-eager")), parser="hermes",
                          extra=(("seed", 3), ("enforce_eager", True))),
    "extra-tokenizer-mode-equals": Variant(lambda t: _mistral(t, extra_args=("--tokenizer-mode=hf",)), mode="hf"),
    "extra-tool-parser-spaced": Variant(lambda t: _qwen(t, extra_args=("--tool-call-parser", "pythonic")),
                                        extra=(("tool_call_parser", "pythonic"), ("enable_auto_tool_choice", False))),
    "extra-tool-parser-equals": Variant(lambda t: _qwen(t, extra_args=("--tool-call-parser=pythonic",)),
                                        extra=(("tool_call_parser", "pythonic"), ("enable_auto_tool_choice", False))),
}


def supervisor_argv(cfg: VLLMConfig, on_gpu: bool) -> list[str]:
    argv, _ = build_command(cfg, PORT, on_gpu)
    assert argv[:3] == [cfg.python, "-m", MODULE]
    return argv[3:]


@pytest.mark.parametrize("name", list(VARIANTS))
def test_vllm_accepts_the_supervisor_argv_and_reads_back_every_value(name: str, tmp_path: Path,
                                                                     vllm_cli: VLLMCli) -> None:
    # Catches: a flag vLLM renamed or dropped (--max-lora-rank -> --max-lora-ranks), a value outside its choices
    # (--dtype fp32, a --max-lora-rank vLLM has no kernel for), a value build_command drops or mangles (the port,
    # the served name, the model path), --enable-auto-tool-choice without --tool-call-parser, and extra_args that
    # contradict the flags we add.
    v = VARIANTS[name]
    cfg = v.make(tmp_path)
    args = accepted(vllm_cli, supervisor_argv(cfg, v.on_gpu))
    expected = {
        "model": str(cfg.model_dir), "served_model_name": [cfg.served_model_name],
        "dtype": cfg.dtype or (D.GPU_DTYPE if v.on_gpu else D.CPU_DTYPE), "max_model_len": cfg.max_model_len,
        "host": cfg.host, "port": PORT, "enable_lora": True, "max_lora_rank": cfg.max_lora_rank,
        "max_loras": cfg.max_loras, "generation_config": cfg.generation_config, "tool_call_parser": v.parser,
        "enable_auto_tool_choice": v.parser is not None, "tokenizer_mode": v.mode, **dict(v.extra),
    }
    assert {k: args[k] for k in expected} == expected


def test_every_parser_the_template_detection_picks_is_registered_in_vllm(tmp_path: Path, vllm_cli: VLLMCli) -> None:
    # Catches: a `_MARKERS` row naming a parser vLLM does not have (renamed upstream, e.g. qwen3_coder -> qwen3_xml
    # only, or misspelt): the parser accepts any name, vLLM refuses it at start ("invalid tool call parser").
    for i, (markers, name) in enumerate(_MARKERS):
        d = model_dir(tmp_path, f"m{i}", template="{% if tools %}" + " ".join(markers) + "{% endif %}")
        assert detect_tool_parser(d) == name
        assert name in vllm_cli.tool_parsers, f"vLLM has no tool-call parser {name!r} (markers {markers})"
        args = accepted(vllm_cli, supervisor_argv(VLLMConfig(model_dir=d), on_gpu=False))
        assert (args["tool_call_parser"], args["enable_auto_tool_choice"]) == (name, True)


@pytest.mark.parametrize("tokenizer_file", ["tekken.json", "tokenizer.model.v3", "tokenizer.model.v7"])
def test_the_detected_tokenizer_mode_is_one_vllm_loads(tokenizer_file: str, tmp_path: Path,
                                                       vllm_cli: VLLMCli) -> None:
    # Catches: detect_tokenizer_mode emitting a mode vLLM has no tokenizer for (the parser takes any string for
    # --tokenizer-mode; vLLM's TokenizerRegistry refuses an unknown one when the engine starts).
    d = model_dir(tmp_path, "m", files=(tokenizer_file,))
    mode = detect_tokenizer_mode(d)
    assert mode in vllm_cli.tokenizer_modes
    assert accepted(vllm_cli, supervisor_argv(VLLMConfig(model_dir=d), on_gpu=False))["tokenizer_mode"] == mode


def test_the_default_lora_rank_is_one_vllm_offers(vllm_cli: VLLMCli) -> None:
    # Catches: a default --max-lora-rank outside vLLM's fixed set (1, 8, 16, 32, ...), which it refuses.
    assert D.MAX_LORA_RANK in vllm_cli.lora_ranks


# ---- the other places that write a vLLM command line ------------------------------------------------------------
def _compose_vars(text: str) -> str:
    """docker compose's ${VAR:-default} -> default, ${VAR:?message} / ${VAR} -> a placeholder."""
    text = re.sub(r"\$\{[A-Z_]+:-([^}]*)\}", r"\1", text)
    return re.sub(r"\$\{[A-Z_]+(:\?[^}]*)?\}", "PLACEHOLDER", text)


def _manifest_argv(kind: str) -> tuple[list[str], list[str]]:
    """(entrypoint, arguments) of the vLLM container in a deploy manifest."""
    if kind == "compose":
        svc = yaml.safe_load(_compose_vars((REPO / "deploy/docker-compose.yml").read_text()))["services"]["vllm"]
        return svc["entrypoint"], [str(a) for a in svc["command"]]
    (pod,) = [d for d in yaml.safe_load_all((REPO / "deploy/kubernetes/vllm.yaml").read_text())
              if d and d.get("kind") in ("Deployment", "StatefulSet")]
    (container,) = [c for c in pod["spec"]["template"]["spec"]["containers"] if c["name"] == "vllm"]
    return container["command"], [str(a) for a in container["args"]]


@pytest.mark.parametrize("kind", ["compose", "kubernetes"])
def test_deploy_manifests_start_vllm_with_flags_it_accepts(kind: str, vllm_cli: VLLMCli) -> None:
    # Catches: a manifest flag vLLM renamed or dropped, and a manifest that drifts from what the gateway expects of
    # the vLLM it fronts: the base model served as <alias>-v0, LoRA on, vLLM's neutral generation config (which the
    # gateway records on captured turns).
    entrypoint, argv = _manifest_argv(kind)
    assert entrypoint == ["python3", "-m", MODULE]
    args = accepted(vllm_cli, argv)
    assert args["served_model_name"] == [f"{D.ALIAS}{D.VERSION_SUFFIX}0"]
    assert args["enable_lora"] is True and args["max_lora_rank"] in vllm_cli.lora_ranks
    assert args["generation_config"] == D.GENERATION_CONFIG


def _example_commands() -> list[Any]:
    """A pytest param (example, arguments) for every vLLM serve command an example's docstring tells the user to
    run (`vllm serve MODEL ...` or `python -m vllm.entrypoints.openai.api_server ...`, `\\`-continued lines)."""
    out = []
    for path in sorted((REPO / "examples").glob("*.py")):
        doc = (ast.get_docstring(ast.parse(path.read_text())) or "").replace("\\\n", " ")
        for cmd in re.findall(r"^\s*((?:vllm serve|python -m vllm\.\S+) .*)$", doc, re.M):
            words = shlex.split(cmd)
            out.append(pytest.param(path.name, words[2:] if words[0] == "vllm" else words[3:], id=path.stem))
    return out


def test_examples_found_their_vllm_commands() -> None:
    # Catches: the extraction below silently finding nothing (the examples' commands then go unchecked).
    assert len(_example_commands()) >= 3


@pytest.mark.parametrize("example,argv", _example_commands())
def test_example_serve_commands_are_ones_vllm_accepts(example: str, argv: list[str], vllm_cli: VLLMCli) -> None:
    # Catches: an example telling the user to pass a flag or tool-call parser the vLLM they install does not have.
    args = accepted(vllm_cli, argv)
    assert args["tool_call_parser"] in vllm_cli.tool_parsers and args["enable_auto_tool_choice"] is True


def test_the_supervisor_samples_with_vllm_defaults_and_raw_logprobs(tmp_path: Path, vllm_cli: VLLMCli) -> None:
    # Catches: the supervisor dropping --generation-config vllm (the model's generation_config.json would then set
    # temperature/top_p for requests that leave them out) and an installed vLLM whose default logprobs mode is not
    # raw_logprobs: vLLM 0.32 returns the model's own logprobs, before temperature and top-k/top-p, which is what
    # GRPO's behaviour logprobs must be (trainer/_rollouts).
    d = model_dir(tmp_path, "m", template="<tool_call>{{ tools }}</tool_call>")
    argv, _ = build_command(VLLMConfig(model_dir=d, tool_call_parser="hermes"), 1234, on_gpu=False)
    assert argv[1:3] == ["-m", "vllm.entrypoints.openai.api_server"]
    args = accepted(vllm_cli, argv[3:])
    assert {k: args[k] for k in ("generation_config", "logprobs_mode", "tool_call_parser", "enable_lora")} == {
        "generation_config": "vllm", "logprobs_mode": "raw_logprobs", "tool_call_parser": "hermes",
        "enable_lora": True}
