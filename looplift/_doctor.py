"""`looplift doctor --model DIR`: does this model directory work with looplift (serving, tool calls, training)?

Any local Hugging Face causal-LM directory, not only the ones looplift builds. Each check is one row of the report
(name, pass | fail | skip, a one-line detail, and on a failure the fix):

    check                 what it does
    config                config.json is there and is JSON
    weights               *.safetensors or pytorch_model*.bin (or their index)
    tokenizer             HF tokenizer files or Mistral's tekken.json / tokenizer.model.v*, and transformers loads it
    chat_template         a chat template (chat_template.jinja / .json, tokenizer_config.json)
    template_render       the template renders system, user, assistant, tools, tool calls and tool results
    vllm_render           tokenizer mode mistral only (skip otherwise): vLLM renders chats with mistral_common, not
                          with the template; the ids of the two renderings must agree, since the trainer's text
                          exports use the template
    tool_round_trip       the tool call as the served rendering makes the model write it (the turn after the
                          generation prompt, up to its stop token) is parsed back by the parser vLLM will use, in
                          process, to the same name and arguments
    prefix_drift          multi-turn episodes (tool calls, code, arithmetic) replayed as vLLM serves them: each turn's
                          completion ids -> text -> the app's next request -> prompt ids. Counts the turns whose next
                          prompt does not extend prompt + completion (a measurement, not a failure), then builds the
                          trainer's token rows (`trainer.episode_rows`) and fails if a sampled id is lost
    generation_config     which sampling fields generation_config.json sets, and whether vLLM applies them
                          (`--generation-config vllm`, looplift's default: no; `auto`: yes, recorded per turn)
    lora_targets          the projections a LoRA adapter targets, read from the architecture (built on the meta device)
    lora_serve            an adapter trained a few steps, a real vLLM started on the model, the adapter loaded, and a
                          chat completion with model=<adapter> answering; vLLM is stopped afterwards, always
    tokenizer_round_trip  decode(encode(x)) == x without an unknown token, for environment text (all task families),
                          numbers, code, accents, CJK and emoji

A check that needs what a failed one lacks is `skip`, and so is lora_serve under `--no-serve`: a skip never counts as
a pass. Exit code 0 when no check failed, 1 when one did, 2 when --model is not a directory.

`preflight` is the static subset `looplift up --model DIR` runs before starting vLLM: the files, whether the
template can render tools, whether `--tool-call-parser` matches the template, and whether the weights have
projections inside their repeated layers (read from the safetensors headers). It imports neither torch nor vLLM.

Deliberately not here: quality (what the model answers is not judged), reasoning parsers, multimodal templates,
sampling completions from the model itself (the drift replay uses the template's own rendering of demonstrations,
so it is deterministic and needs no weights), and remote-code architectures (`trust_remote_code` stays off).

The code, by concern (this module runs the checks and holds the command; the names importers use are re-exported
here): `looplift._doctor_checks`, the report types, the file checks and `preflight`; `looplift._doctor_render`, the
conversation, the renderers, the model and tokenizer loading, template_render, vllm_render and tool_round_trip;
`looplift._doctor_drift`, prefix_drift; `looplift._doctor_serve`, generation_config, lora_targets, lora_serve and
tokenizer_round_trip.
"""

from __future__ import annotations

import contextlib
import json
import sys
import time
from pathlib import Path
from typing import Any, Callable, Iterator, Optional, Sequence

import typer
from rich.console import Console
from rich.markup import escape

from sdk.infra import cli_fail, print_table

from ._doctor_checks import _config_check, _skip, _template_check, _weights_check
from ._doctor_drift import _prefix_drift
from ._doctor_render import _NO_MODEL, _load_model, _Model, _template_render, _tool_round_trip, _vllm_render
from ._doctor_serve import _lora_serve, _lora_targets, _tokenizer_round_trip

# Re-exported (redundant aliases, which mypy and ruff read as exports): the public names, and the ones importers use
# (looplift._cli: preflight; the tests: preflight, _generation_config, served_text).
from ._doctor_checks import Check as Check
from ._doctor_checks import DoctorOptions as DoctorOptions
from ._doctor_checks import DoctorReport as DoctorReport
from ._doctor_checks import Message as Message
from ._doctor_checks import Status as Status
from ._doctor_checks import preflight as preflight
from ._doctor_checks import weight_projections as weight_projections
from ._doctor_render import Renderer as Renderer
from ._doctor_render import served_text as served_text
from ._doctor_serve import _generation_config as _generation_config


# ---- the run --------------------------------------------------------------------------------------------------------

def _timed(fn: Callable[[], Check]) -> Check:
    t0 = time.monotonic()
    check = fn()
    return Check(check.name, check.status, check.detail, check.fix, check.figures, time.monotonic() - t0)


def run_doctor(options: DoctorOptions, say: Callable[[str], None] = lambda _: None) -> DoctorReport:
    """Run every check on `options.model_dir` (see the module docstring); `say(check name)` before each."""
    d = options.model_dir
    say("tokenizer")
    t0 = time.monotonic()
    loaded, tokenizer = _load_model(d, options.tool_call_parser)
    tokenizer = Check(tokenizer.name, tokenizer.status, tokenizer.detail, tokenizer.fix, tokenizer.figures,
                      time.monotonic() - t0)
    checks = [_config_check(d), _weights_check(d), tokenizer, _template_check(d)]
    m = loaded if tokenizer.status == "pass" and checks[-1].status == "pass" else None
    for name, fn in _plan(m, options, checks):
        say(name)
        checks.append(_timed(fn))
    return DoctorReport(str(d), tuple(checks))


def _plan(m: Optional[_Model], options: DoctorOptions, done: Sequence[Check]) -> list[tuple[str, Callable[[], Check]]]:
    """The checks after the files, in order; one whose prerequisite failed returns its skip. `done` grows as they
    run (lora_serve reads lora_targets' outcome)."""
    d = options.model_dir

    def with_model(name: str, fn: Callable[[_Model], Check]) -> Callable[[], Check]:
        return (lambda: fn(m)) if m is not None else (lambda: _skip(name, _NO_MODEL))

    def passed(check: str) -> bool:
        return any(c.name == check and c.status == "pass" for c in done)

    config_ok = done[0].status == "pass"
    return [
        ("template_render", with_model("template_render", _template_render)),
        ("vllm_render", with_model("vllm_render", _vllm_render)),
        ("tool_round_trip", with_model("tool_round_trip", _tool_round_trip)),
        ("prefix_drift", with_model("prefix_drift", lambda model: _prefix_drift(model, passed("tool_round_trip")))),
        ("generation_config", lambda: _generation_config(d, options.generation_config)),
        ("lora_targets", (lambda: _lora_targets(d)) if config_ok else (lambda: _skip("lora_targets", "needs config.json"))),
        ("lora_serve", lambda: _lora_serve(m, options, passed("lora_targets"))),
        ("tokenizer_round_trip", with_model("tokenizer_round_trip", _tokenizer_round_trip)),
    ]


# ---- the command ----------------------------------------------------------------------------------------------------

_STYLE = {"pass": "[green]pass[/green]", "fail": "[red]fail[/red]", "skip": "[yellow]skip[/yellow]"}


def report_table(report: DoctorReport) -> Any:
    """The report as a rich `Table`: check, status, seconds, detail, fix."""
    from rich.table import Table

    table = Table(title=f"looplift doctor: {report.model}")
    for col in ("check", "status", "s", "detail", "fix"):
        table.add_column(col, justify="right" if col == "s" else "left")
    for c in report.checks:
        table.add_row(c.name, _STYLE[c.status], f"{c.seconds:.1f}", escape(c.detail), escape(c.fix or ""))
    return table


@contextlib.contextmanager
def _quiet_stdout() -> Iterator[None]:
    """vLLM and transformers log to stdout; while the checks run, that goes to stderr, so stdout holds the report."""
    with contextlib.redirect_stdout(sys.stderr):
        yield


def doctor(
    model: Path = typer.Option(..., "--model", help="The model directory to check (any local HF causal LM)."),
    as_json: bool = typer.Option(False, "--json", help="Print one JSON object: model, checks, ok."),
    tool_call_parser: str = typer.Option("auto", "--tool-call-parser", help="The vLLM tool-call parser the model will "
                                         "be served with, as `looplift up`: 'auto' reads it from the chat template, "
                                         "'none' turns tool calls off."),
    no_serve: bool = typer.Option(False, "--no-serve", help="Skip the check that starts vLLM (lora_serve: reported as "
                                                            "skip, never pass)."),
    generation_config: str = typer.Option("vllm", "--generation-config", help="How the model will be served, as "
                                          "`looplift up --generation-config`: 'vllm' (neutral sampling) or 'auto' "
                                          "(the model's generation_config.json)."),
) -> None:
    """Check that a model directory works with looplift: files, chat template, tool calls, re-tokenization drift,
    generation config, LoRA (trained, served by vLLM) and tokenizer. Exit code 0 when no check failed, 1 when one
    did, 2 when --model is not a directory."""
    if not model.is_dir():
        cli_fail(f"--model {model} is not a directory; pass a local Hugging Face model directory", 2)
    options = DoctorOptions(model.resolve(), tool_call_parser, not no_serve, generation_config)
    err = Console(stderr=True, soft_wrap=True)
    with _quiet_stdout(), err.status("looplift doctor ...") as status:
        report = run_doctor(options, say=lambda name: status.update(f"looplift doctor: {name} ..."))
    if as_json:
        typer.echo(json.dumps(report.as_dict(), indent=2))
    else:
        print_table(Console(), report_table(report))
        counts = {s: sum(c.status == s for c in report.checks) for s in ("pass", "fail", "skip")}
        err.print(f"{counts['pass']} passed, {counts['fail']} failed, {counts['skip']} skipped", highlight=False)
    raise typer.Exit(0 if report.ok else 1)
