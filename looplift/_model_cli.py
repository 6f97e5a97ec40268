"""`looplift model …`: build a small model of a real family (its tokenizer, chat and tool-call format; weights
initialised and trained here), and list the families.

    looplift model list [--json]
    looplift model build --family NAME --out DIR [--size tiny|small] [--steps N] [--seed S] [--force]
    looplift model build --family NAME --env extraction [--level 1|2|3] [--out DIR] [--steps N] [--seed S]

`build` writes a complete Hugging Face directory that vLLM serves as it is (`looplift up --model DIR`):
config.json, model.safetensors, the tokenizer files, chat_template.jinja, generation_config.json and
looplift.json (what was built, how long it took). `list` names each family's tokenizer, vocabulary size, chat
format, vLLM tool parser, tokenizer mode and architecture. What the families are: `trainer` (`FAMILIES`).

Bad input (an unknown family or size, an `--out` that holds files, without `--force`) is a one-line error with
exit code 2. Deliberately not here: building the embedded default model (`looplift up` does, `_model.py`).
Importing this module does not import torch; running a command does.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Optional

import typer
from rich.console import Console

from sdk.infra import cli_fail, print_table

app = typer.Typer(help="Small models of real families: build one here, list the families.",
                  no_args_is_help=True, add_completion=False)
_out = Console()
_err = Console(stderr=True)

#: `cli_fail`'s code for bad input, as documented above.
_BAD_INPUT = 2


@app.command("list")
def list_cmd(as_json: bool = typer.Option(False, "--json", help="One JSON object per line.")) -> None:
    """List the model families: tokenizer, vocabulary, chat format, vLLM tool parser and tokenizer mode."""
    from trainer import FAMILIES

    rows: list[dict[str, Any]] = [fam.info() for fam in FAMILIES.values()]
    if as_json:
        for r in rows:
            print(json.dumps(r))
        return
    from rich.table import Table
    from rich.text import Text

    table = Table("family", "tokenizer", "vocab", "chat format", "tool parser", "tokenizer mode", "architecture")
    for r in rows:  # Text: the formats hold "[INST]"-like brackets that rich would read as markup
        table.add_row(*(Text(str(v)) for v in (r["family"], r["tokenizer"], f"{r['vocab_size']:,}", r["chat_format"],
                                                r["tool_parser"], r["tokenizer_mode"], r["architecture"])))
    print_table(_out, table)


@app.command("build")
def build_cmd(
    family: str = typer.Option(..., "--family", help="Which family (see `looplift model list`)."),
    out: Optional[Path] = typer.Option(None, "--out", help="The model directory to write (must not hold files "
                                                           "without --force); with --env, default: the cache."),
    env: Optional[str] = typer.Option(None, "--env", help="extraction: train on the extraction family's episodes at "
                                                          "--level (its base model, cached by a hash of what "
                                                          "determines it) instead of the default demonstrations."),
    level: int = typer.Option(1, "--level", help="With --env extraction: 1 (the income statement), 2 (the "
                                                 "statements) or 3 (the whole report)."),
    size: str = typer.Option("tiny", "--size", help="tiny (2 layers, hidden 128) | small (4 layers, hidden 256)."),
    steps: Optional[int] = typer.Option(None, "--steps", min=0, help="Training steps (default: a short run, about "
                                                                      "a minute here; 0: untrained random weights)."),
    seed: int = typer.Option(0, "--seed", help="Seeds the weights, the demonstrations and their order."),
    force: bool = typer.Option(False, "--force", help="Replace --out if it holds files."),
) -> None:
    """Build a model of FAMILY into OUT: the family's real tokenizer and formats, weights trained here."""
    if env is not None:
        _build_for_env(env, family, out, level, size, steps, seed, force)
        return
    if out is None:
        cli_fail("--out is required (the model directory to write); only --env builds into the cache", _BAD_INPUT)
    from trainer import DEFAULT_STEPS, ConfigError, build_family_model, check_build

    n = DEFAULT_STEPS if steps is None else steps
    try:
        check_build(family, out, size=size, steps=n, force=force)
    except ConfigError as e:
        cli_fail(str(e), _BAD_INPUT)
    _err.print(f"building a {size} {family} model into {out} ({n} training steps) ...", soft_wrap=True,
               markup=False, highlight=False)
    with _training_bar(disable=n == 0) as bar:
        task = bar.add_task(f"training {family}", total=n, loss="-")
        model = build_family_model(family, out, size=size, steps=n, seed=seed, force=force,
                                   progress=lambda s, _total, loss: bar.update(task, completed=s, loss=f"{loss:.3f}"))
    meta = json.loads((model / "looplift.json").read_text())
    _out.print(f"wrote {model}: {meta['family']} {meta['size']}, {meta['parameters']:,} parameters, vocabulary "
               f"{meta['vocab_size']:,}, {meta['steps']} steps in {meta['seconds']} s; serve it with "
               f"`looplift up --model {model}` (vLLM tool parser {meta['tool_parser']}, tokenizer mode "
               f"{meta['tokenizer_mode']})", soft_wrap=True, markup=False, highlight=False)


def _training_bar(disable: bool = False) -> Any:
    """The progress bar of a build on stderr: steps done, running loss, time."""
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    return Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                    TextColumn("loss {task.fields[loss]}"), TimeElapsedColumn(), console=_err, disable=disable)


def _build_for_env(env: str, family: str, out: Optional[Path], level: int, size: str, steps: Optional[int], seed: int,
                   force: bool) -> None:
    """`--env extraction`: the family's base model for one extraction level (`trainer.build_extraction_model`)."""
    if env != "extraction":
        cli_fail(f"--env must be extraction (the one family with a base model of its own so far), not {env!r}",
                 _BAD_INPUT)
    from trainer import ConfigError, ExtractionModelConfig, build_extraction_model, extraction_model_dir

    cfg = ExtractionModelConfig(family=family, level=level, size=size, seed=seed,
                                **({} if steps is None else {"steps": steps}))
    try:
        cfg.check(out, force)
    except ConfigError as e:
        cli_fail(str(e), _BAD_INPUT)
    where = out or extraction_model_dir(cfg)
    if (where / "looplift.json").is_file() and not force:
        _err.print(f"cached: {where}", soft_wrap=True, markup=False, highlight=False)
    with _training_bar() as bar:
        task = bar.add_task(f"training {family} on extraction level {level}", total=cfg.steps, loss="-")
        model = build_extraction_model(cfg, out_dir=out, force=force, say=lambda text: bar.console.print(text),
                                       progress=lambda s, _t, loss: bar.update(task, completed=s, loss=f"{loss:.3f}"))
    meta = json.loads((model / "looplift.json").read_text())
    _out.print(f"wrote {model}: {meta['family']} {meta['size']} for extraction level {level}, "
               f"{meta['demonstrations']} demonstrations, {meta['config']['steps']} steps in {meta['seconds']} s; "
               f"serve it with `looplift up --model {model}`", soft_wrap=True, markup=False, highlight=False)
