"""`trainer` CLI (also `looplift trainer`): build the tiny base model, run one retrain job, SFT by hand."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Optional

import typer
from rich.console import Console

app = typer.Typer(help="Post-train the served model: base-model builder, SFT, the retrain job.",
                  no_args_is_help=True, pretty_exceptions_enable=False)
console = Console(stderr=True)


def _fail(msg: str, code: int = 1) -> None:
    console.print(f"[red]error:[/red] {msg}")
    raise typer.Exit(code)


@app.command("build-base")
def build_base(
    seed: int = typer.Option(0, help="Seed for tasks, miscopies, init and batch order."),
    steps: int = typer.Option(800, help="Optimizer steps."),
    force: bool = typer.Option(False, help="Rebuild even if cached."),
    out: Optional[Path] = typer.Option(None, help="Output directory (default: cached under $LOOPLIFT_HOME/models)."),
) -> None:
    """Build (or reuse) the tiny base model and print its directory."""
    from rich.progress import Progress

    from ._base_model import BaseModelConfig, build_base_model

    cfg = BaseModelConfig(seed=seed, steps=steps)
    with Progress(console=console) as p:
        bar = p.add_task("training base model", total=steps)
        path = build_base_model(cfg, out_dir=out, force=force, progress=lambda s, n, loss: p.update(bar, completed=s))
        p.update(bar, completed=steps)
    print(path)


@app.command("sft")
def sft_cmd(
    data: Path = typer.Argument(..., help="SFT JSONL from `collector export --format sft`."),
    base_model: Path = typer.Option(..., "--base-model", help="HF directory of the base model."),
    out: Path = typer.Option(..., help="Where to write the LoRA adapter."),
    steps: int = typer.Option(200),
    rank: int = typer.Option(8),
    lr: float = typer.Option(2e-3),
) -> None:
    """Train one LoRA adapter on an SFT export."""
    from rich.progress import Progress

    from .errors import TrainerError
    from .sft import SFTConfig, train_sft

    if not data.exists():
        _fail(f"{data} does not exist; create it with `collector export --format sft --out {data}`", 2)
    try:
        with Progress(console=console) as p:
            bar = p.add_task("SFT", total=steps)
            res = train_sft(base_model, data, out, SFTConfig(steps=steps, rank=rank, lr=lr),
                            progress=lambda s, n, loss: p.update(bar, completed=s))
    except TrainerError as e:
        _fail(str(e))
    print(json.dumps({"adapter_dir": str(res.adapter_dir), "train_loss": res.train_loss, "examples": res.examples}))


@app.command("run")
def run_cmd(
    base_model: Optional[Path] = typer.Option(None, "--base-model",
                                              help="Base model the server serves (default: the cached tiny model)."),
    db: Optional[str] = typer.Option(None, help="Collector DB URL (default sqlite:///$LOOPLIFT_HOME/collector.db)."),
    gateway: str = typer.Option("http://127.0.0.1:8000", help="Gateway URL."),
    token: Optional[str] = typer.Option(None, help="Admin token (default $LOOPLIFT_ADMIN_TOKEN or the token file)."),
    app_name: Optional[str] = typer.Option(None, "--app", help="Only train on this app's trajectories."),
    min_reward: float = typer.Option(1.0, help="Only train on trajectories with at least this reward."),
    min_examples: int = typer.Option(8, help="Skip when fewer examples are exported."),
    algo: str = typer.Option("sft", help="sft (verified successes) | dpo (preference pairs, corrections as "
                                         "chosen) | grpo (groups of rollouts; continues the serving adapter)."),
    as_json: bool = typer.Option(False, "--json", help="Print the result as JSON."),
) -> None:
    """One idempotent retrain job: export -> LoRA SFT/DPO/GRPO -> eval gate on held-out tasks -> publish."""
    from sdk import looplift_home

    from ._algos import ALGOS
    from ._base_model import base_model_dir
    from ._job import JobConfig, run_job
    from .errors import TrainerError

    if algo not in ALGOS:
        _fail(f"--algo must be one of {', '.join(ALGOS)}, not {algo!r}", 2)
    model_dir = base_model or base_model_dir()
    if not (Path(model_dir) / "config.json").exists():
        _fail(f"no base model at {model_dir}; pass --base-model DIR or run `trainer build-base`", 2)
    cfg = JobConfig(base_model_dir=Path(model_dir), collector_db=db or f"sqlite:///{looplift_home() / 'collector.db'}",
                    gateway_url=gateway, admin_token=token, app=app_name, min_reward=min_reward,
                    min_examples=min_examples, algo=algo)
    try:
        res = run_job(cfg, status=lambda m: console.print(f"[dim]{m}[/dim]"))
    except (TrainerError, OSError) as e:
        _fail(str(e))
    except Exception as e:  # server/collector errors carry their own messages
        _fail(f"{type(e).__name__}: {e}")
    if as_json:
        print(json.dumps(res.__dict__, default=str))
    else:
        console.print(f"run {res.run_id}: [bold]{res.status}[/bold] — {res.reason} (exported {res.exported})")


def main() -> None:
    """Entry point of the `trainer` console script."""
    app()
