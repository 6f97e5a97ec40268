"""`trainer` CLI (also `looplift trainer`): the retrain job (`run`), its history (`runs`), the scheduler
(`schedule`), the canary and its watch (`canary`), eval suites (`suite`), the tiny base model (`build-base`) and SFT by hand (`sft`).

Settings come from flags, then `looplift.toml` (`--config`, ./looplift.toml, $LOOPLIFT_HOME/looplift.toml),
then defaults; every failure is one line on stderr and a non-zero exit."""

from __future__ import annotations

import functools
import inspect
import json
from pathlib import Path
from typing import Any, Callable, Optional

import typer
from rich.console import Console
from rich.markup import escape

from sdk.infra import cli_fail, print_table

from . import _defaults as D
from ._canary_cli import canary_app, console

app = typer.Typer(help="Post-train the served model: the retrain job, its history, the scheduler, eval suites, "
                       "the base-model builder, SFT.",
                  no_args_is_help=True, pretty_exceptions_enable=False)


_NPROC = typer.Option(None, "--nproc", help="Train on N processes (one per GPU, or CPU processes with gloo): the train "
                                            "stage runs under `python -m torch.distributed.run --standalone "
                                            "--nproc-per-node N` (default 1, or nproc in looplift.toml).")
_STRATEGY = typer.Option(None, "--strategy", help="With --nproc > 1: ddp (a replica per process) or fsdp (FSDP2, "
                                                  "the model sharded; for models that do not fit one device).")


@app.command("build-base")
def build_base(
    seed: int = typer.Option(0, help="Seed for tasks, miscopies, init and batch order."),
    steps: int = typer.Option(D.BASE_MODEL_STEPS, help="Optimizer steps (the default builds the model `looplift up` "
                                                          "and `looplift demo` use)."),
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
    steps: int = typer.Option(200, help="Optimizer steps."),
    rank: int = typer.Option(8, help="LoRA rank (vLLM accepts 1, 8, 16, 32, 64, ...)."),
    alpha: int = typer.Option(16, help="LoRA alpha."),
    dropout: float = typer.Option(0.0, help="LoRA dropout."),
    lr: float = typer.Option(2e-3, help="Peak learning rate (linear warmup, cosine decay)."),
    batch_size: int = typer.Option(32, "--batch-size", help="Examples per optimizer step, over all processes."),
    seed: int = typer.Option(0, help="Seeds the LoRA init and the batch order."),
    max_len: int = typer.Option(512, "--max-len", help="Tokens kept of each conversation."),
    nproc: Optional[int] = _NPROC,
    strategy: Optional[str] = _STRATEGY,
) -> None:
    """Train one LoRA adapter on an SFT export (on N processes with --nproc: the same adapter, faster)."""
    from ._dist import DistConfig, under_torchrun
    from .errors import TrainerError
    from .sft import SFTConfig, sft_module_args

    if not data.exists():
        cli_fail(f"{data} does not exist; create it with `collector export --format sft --out {data}`", 2)
    try:
        dist_cfg = DistConfig(nproc=1 if nproc is None else nproc, strategy=strategy or "ddp")
        config = SFTConfig(steps=steps, rank=rank, alpha=alpha, dropout=dropout, lr=lr, batch_size=batch_size,
                           seed=seed, max_len=max_len)
    except TrainerError as e:
        cli_fail(str(e), 2)
    if dist_cfg.nproc > 1 and not under_torchrun():
        from ._dist import launch

        # Re-run this very command in N processes; each one lands in the branch below.
        raise typer.Exit(launch(dist_cfg.nproc, sft_module_args(data, base_model, out, config, dist_cfg.strategy)))
    _train_sft(data, base_model, out, config, dist_cfg.strategy)


def _train_sft(data: Path, base_model: Path, out: Path, config: object, strategy: str) -> None:
    from rich.progress import Progress

    from ._dist import Dist
    from .errors import TrainerError
    from .sft import train_sft

    with Dist.from_env(strategy) as dist:
        try:
            # One progress bar, on rank 0 (every rank reports the same all-reduced loss).
            with Progress(console=console, disable=not dist.is_main) as p:
                bar = p.add_task("SFT", total=config.steps)  # type: ignore[attr-defined]
                res = train_sft(base_model, data, out, config, dist=dist,  # type: ignore[arg-type]
                                progress=lambda s, n, loss: p.update(bar, completed=s))
        except TrainerError as e:
            if dist.is_main:
                cli_fail(str(e))
            raise typer.Exit(1) from None
        if dist.is_main:
            print(json.dumps({"adapter_dir": str(res.adapter_dir), "train_loss": res.train_loss,
                              "examples": res.examples, "processes": dist.world_size, "strategy": dist.strategy,
                              "seconds": round(res.seconds, 2)}))


# ---- options shared by `run` and `schedule` (flags win over looplift.toml, which wins over defaults) ----
_CONFIG = typer.Option(None, "--config", help="looplift.toml to read (default: ./looplift.toml, then "
                                              "$LOOPLIFT_HOME/looplift.toml).")
_EVAL = typer.Option(None, "--eval", help="Eval suite the gate runs: PKG.MODULE:ATTR (an sdk.EvalSuite or a function "
                                          "returning one) or a prompt-suite .jsonl. The demo's: envs:arithmetic_suite.")
_ALGO = typer.Option(None, "--algo", help="Training algorithm: sft | dpo | grpo (offline, on the export; the demo's "
                                          "online GRPO is `looplift demo --algo online-grpo`), or PKG.MODULE:ATTR "
                                          "naming a TrainStep.")
_BASE = typer.Option(None, "--base-model", help="Base model the server serves (default: the cached tiny model).")
_DB = typer.Option(None, "--db", help="Collector DB URL (default sqlite:///$LOOPLIFT_HOME/collector.db).")
_GATEWAY = typer.Option(None, "--gateway", help="Gateway URL (default http://127.0.0.1:8000).")
_GATEWAY_WAIT = typer.Option(None, "--gateway-wait", help="How long loading the candidate into the gateway keeps "
                                                         "retrying while it refuses connections, e.g. 30s, 3m; "
                                                         "0 fails at once (default 180s: a restarting `looplift up`).")
_TOKEN = typer.Option(None, "--token", help="Admin token (default $LOOPLIFT_ADMIN_TOKEN or the token file).")
_APP = typer.Option(None, "--app", help="Only train on this app's trajectories.")
_MIN_REWARD = typer.Option(None, "--min-reward", help="Only train on trajectories with at least this reward (1.0).")
_MIN_SCORE = typer.Option(None, "--min-score", help="Instead of --min-reward: train on trajectories whose final score "
                                                    "(verifier and/or user ratings) is at least this (feedback-judged "
                                                    "apps, e.g. 0.75).")
_MIN_EXAMPLES = typer.Option(None, "--min-examples", help="Skip the run when fewer examples are exported (8).")
_HOLDOUT = typer.Option(None, "--holdout", help="Export with this holdout fraction, so a from-holdout suite's tasks "
                                                "never train (default: what the suite file declares).")
_ALPHA = typer.Option(None, "--alpha", help="Gate: one-sided exact McNemar significance level (0.05).")
_SLICE_TOL = typer.Option(None, "--slice-tolerance", help="Gate: largest allowed drop of a slice's success rate (0.05).")
_CANARY = typer.Option(None, "--canary", help="When the gate passes, send this share (0-1) of traffic to the candidate "
                                               "instead of promoting; `trainer canary watch` decides.")
_RUNS_DIR = typer.Option(None, "--runs-dir", help="Run history directory (default $LOOPLIFT_HOME/trainer/runs).")

#: The retrain job's options, which `run` and `schedule` share: parameter -> (type, option). A parameter is
#: named as `job_config`'s keyword, so the flags go to `_job` as they come (`config` and `token` it reads itself).
_JOB_OPTIONS: dict[str, tuple[Any, Any]] = {
    "eval": (Optional[str], _EVAL), "config": (Optional[Path], _CONFIG), "algo": (Optional[str], _ALGO),
    "base_model": (Optional[Path], _BASE), "db": (Optional[str], _DB), "gateway": (Optional[str], _GATEWAY),
    "gateway_wait": (Optional[str], _GATEWAY_WAIT),
    "token": (Optional[str], _TOKEN), "app": (Optional[str], _APP), "min_reward": (Optional[float], _MIN_REWARD),
    "min_score": (Optional[float], _MIN_SCORE), "min_examples": (Optional[int], _MIN_EXAMPLES),
    "holdout": (Optional[float], _HOLDOUT), "alpha": (Optional[float], _ALPHA),
    "slice_tolerance": (Optional[float], _SLICE_TOL), "runs_dir": (Optional[Path], _RUNS_DIR),
    "canary": (Optional[float], _CANARY), "nproc": (Optional[int], _NPROC), "strategy": (Optional[str], _STRATEGY),
}


def _job_options(*, without: tuple[str, ...] = ()) -> Callable[[Callable[..., None]], Callable[..., None]]:
    """Give a command the job's options (`_JOB_OPTIONS` but `without`), listed after its own; the command
    takes them as `**job_flags` and passes them on to `_job`. Typer reads a command's options from its
    signature, so the wrapper's signature is the command's own parameters plus these."""
    shared = [inspect.Parameter(name, inspect.Parameter.KEYWORD_ONLY, default=option, annotation=kind)
              for name, (kind, option) in _JOB_OPTIONS.items() if name not in without]

    def decorate(command: Callable[..., None]) -> Callable[..., None]:
        own = [p for p in inspect.signature(command).parameters.values() if p.kind is not p.VAR_KEYWORD]

        @functools.wraps(command)
        def with_job_options(**flags: Any) -> None:
            command(**flags)

        with_job_options.__signature__ = inspect.Signature([*own, *shared])  # type: ignore[attr-defined]
        return with_job_options

    return decorate


def _job(config: Optional[Path] = None, token: Optional[str] = None, **flags: object) -> tuple[object, object]:
    """(JobConfig, EvalSuite) from the flags and looplift.toml, or a one-line error."""
    from ._config import job_config, load_config
    from ._suites import load_suite
    from .errors import TrainerError

    try:
        job = job_config(load_config(config), admin_token=token,
                         **{k: (str(v) if isinstance(v, Path) else v) for k, v in flags.items()})
        if not (Path(job.base_model_dir) / "config.json").exists() and job.algo == "sft":
            cli_fail(f"no base model at {job.base_model_dir}; pass --base-model DIR or run `trainer build-base`", 2)
        return job, load_suite(job.eval)
    except TrainerError as e:
        cli_fail(str(e), 2)
        raise  # unreachable: cli_fail exits


def _known_errors() -> tuple[type[BaseException], ...]:
    from .errors import TrainerError

    found: list[type[BaseException]] = [TrainerError, OSError]
    for module, name in (("server", "ServerError"), ("collector", "CollectorError"), ("sdk.errors", "LoopliftError")):
        try:
            found.append(getattr(__import__(module, fromlist=[name]), name))
        except ImportError:
            pass
    return tuple(found)


@app.command("run")
@_job_options()
def run_cmd(
    trigger: str = typer.Option("manual", help="Recorded as the run's trigger (e.g. `cron` from a systemd timer)."),
    as_json: bool = typer.Option(False, "--json", help="Print the result as JSON."),
    **job_flags: Any,
) -> None:
    """One idempotent retrain job: export -> train -> gate on the app's eval suite -> publish if better.

    Exits 0 whether the gate promoted, rejected or skipped (see `trainer runs`); SIGTERM stops it with the
    serving version untouched and the run recorded as interrupted (exit 143)."""
    from ._interrupt import StopToken, sigterm_stops
    from ._job import run_job
    from .errors import JobInterrupted

    job, suite = _job(**job_flags)
    stop = StopToken()
    try:
        with sigterm_stops(stop):
            res = run_job(job, suite=suite, trigger=trigger, stop=stop,  # type: ignore[arg-type]
                          status=lambda m: console.print(f"[dim]{escape(m)}[/dim]", highlight=False))
    except JobInterrupted as e:
        cli_fail(f"interrupted by {e}; the serving version is untouched and the run is recorded as interrupted", 143)
    except _known_errors() as e:
        cli_fail(str(e))
    if as_json:
        print(json.dumps(res.to_dict()))
    else:
        console.print(f"run {res.run_id}: [bold]{res.status}[/bold] — {res.reason} (exported {res.exported})",
                      highlight=False)


@app.command("runs")
def runs_cmd(
    run_id: Optional[str] = typer.Argument(None, help="Show this run in full: its gate's per-slice table and record."),
    runs_dir: Optional[Path] = _RUNS_DIR,
    limit: int = typer.Option(20, help="Show the newest N runs (0: all)."),
    as_json: bool = typer.Option(False, "--json", help="Print every field of each run as a JSON list."),
) -> None:
    """The retrain history: run id, start, trigger, status, reason and the gate's figures."""
    from rich.table import Table

    from ._runs import default_runs_dir, list_runs

    runs = list_runs(default_runs_dir(runs_dir))
    if run_id is not None:
        found = [r for r in runs if r.get("run_id", "").startswith(run_id)]
        if len(found) != 1:
            cli_fail(f"{len(found)} runs match {run_id!r} in {default_runs_dir(runs_dir)}; give a longer run id", 2)
        _show_run(found[0], as_json)
        return
    runs = runs[-limit:] if limit > 0 else runs
    if as_json:
        print(json.dumps(runs))
        return

    table = Table(title=f"retrain runs ({default_runs_dir(runs_dir)})")
    for col in ("run", "started", "trigger", "status", "candidate vs serving (gate)", "n", "b/c", "p",
                "held-out (report split)", "reason"):
        table.add_column(col, overflow="fold")
    for r in runs:
        g = r.get("gate") or {}
        cs, ss = r.get("candidate_success"), r.get("serving_success")
        rates = "-" if cs is None or ss is None else f"{r.get('candidate')} {cs:.0%} vs {r.get('serving')} {ss:.0%}"
        rc, rs = r.get("candidate_report_success"), r.get("serving_report_success")
        report = "-" if rc is None or rs is None else f"{rc:.0%} vs {rs:.0%} on {g.get('n_report', '?')}"
        table.add_row(r.get("run_id", "?"), (r.get("started_at") or "")[:19], r.get("trigger") or "-",
                      r.get("status", "?"), rates, str(g.get("n", "-")),
                      f"{g['b']}/{g['c']}" if "b" in g else "-",
                      f"{g['p_value']:.2g}" if "p_value" in g else "-", report, r.get("reason") or "")
    print_table(Console(), table)


def _show_run(run: dict, as_json: bool) -> None:  # type: ignore[type-arg]
    if as_json:
        print(json.dumps(run))
        return
    from rich.table import Table

    g = run.get("gate") or {}
    console.print(f"run {run.get('run_id')}: [bold]{run.get('status')}[/bold] — {escape(str(run.get('reason')))}",
                  highlight=False)
    if g.get("slices"):
        table = Table(title=f"{g['test']}: n={g['n']} b={g['b']} c={g['c']} p={g['p_value']:.3g} alpha={g['alpha']:g}"
                            f" (slice tolerance {g['slice_tolerance']:.0%})")
        for col in ("slice", "n", "candidate", "serving", "delta", "regressed"):
            table.add_column(col, justify="right")
        for r in g["slices"]:
            table.add_row(r["slice"], str(r["n"]), f"{r['candidate']:.0%}", f"{r['serving']:.0%}",
                          f"{100 * r['delta']:+.0f} pts", "yes" if r["regressed"] else "no")
        print_table(Console(), table)


@app.command("schedule")
@_job_options(without=("canary",))  # a scheduled job's canary share comes from looplift.toml
def schedule_cmd(
    cron: Optional[str] = typer.Option(None, "--cron", help="Run on this cron expression (e.g. '0 3 * * *'; local time)."),
    new_data: Optional[int] = typer.Option(None, "--new-data", help="Run after N new scored trajectories of the app."),
    drift: Optional[float] = typer.Option(None, "--drift", help="Run when the serving version's live success falls this "
                                                                "far (0-1) below what its gate measured."),
    drift_window: Optional[str] = typer.Option(None, "--drift-window", help="Live window for --drift (24h)."),
    drift_min_episodes: Optional[int] = typer.Option(None, "--drift-min-episodes",
                                                     help="Fewest live episodes for a drift decision (30)."),
    poll: Optional[str] = typer.Option(None, "--poll", help="How often to check the triggers (30s)."),
    max_runs: Optional[int] = typer.Option(None, "--max-runs", help="Exit after this many jobs (default: run forever)."),
    **job_flags: Any,
) -> None:
    """Run the retrain job whenever a trigger fires: a cron time, N new scored trajectories, or drift.

    Two schedulers (any hosts) never run jobs at once: the job lock serializes them. SIGTERM stops the
    scheduler; a job it was running is recorded as interrupted, the serving version untouched."""
    from ._config import load_config, schedule_config
    from ._interrupt import sigterm_stops
    from ._schedule import Scheduler
    from .errors import JobInterrupted, TrainerError

    config = job_flags["config"]
    try:
        sched = schedule_config(load_config(config), cron=cron, new_data=new_data, drift=drift,
                                drift_window=drift_window, drift_min_episodes=drift_min_episodes, poll=poll)
    except TrainerError as e:
        cli_fail(str(e), 2)
    job, suite = _job(**job_flags)
    scheduler = Scheduler(job, sched, suite,  # type: ignore[arg-type]
                          status=lambda m: console.print(f"[dim]{escape(m)}[/dim]", highlight=False))
    console.print(f"scheduler: cron={sched.cron} new-data={sched.new_data} drift={sched.drift}; polling every "
                  f"{sched.poll_s:g} s", highlight=False)
    watch = _canary_watch(job, config)  # decides the canaries a job with --canary starts, watches promotions
    try:
        with sigterm_stops(scheduler.token):
            scheduler.run(max_runs=max_runs)
    except JobInterrupted as e:
        cli_fail(f"stopped by {e}; a running job was recorded as interrupted, the serving version is untouched", 143)
    finally:
        watch.stop()


def _canary_watch(job: Any, config: Optional[Path]) -> Any:
    """The canary watch (`[canary]` settings) in a thread beside the scheduler."""
    from ._canary import CanaryWatch
    from ._config import canary_config, load_config
    from .errors import TrainerError

    try:
        settings = canary_config(load_config(config))
    except TrainerError as e:
        cli_fail(str(e), 2)
    watch = CanaryWatch.for_job(job, settings,
                                status=lambda m: console.print(f"[dim]canary: {escape(m)}[/dim]", highlight=False))
    watch.start_thread()
    return watch


suite_app = typer.Typer(help="Eval suites: build a prompt suite from held-out production data, check one.",
                        no_args_is_help=True)
app.add_typer(suite_app, name="suite")
app.add_typer(canary_app, name="canary")


@suite_app.command("from-holdout")
def suite_from_holdout_cmd(
    holdout_file: Path = typer.Argument(..., help="FILE.holdout.jsonl from `collector export --format sft --holdout F`."),
    out: Path = typer.Option(..., "--out", help="The prompt-suite JSONL to write (then `trainer run --eval OUT`)."),
    checker: str = typer.Option("exact", help="exact | regex:PATTERN | json:FIELD | PKG.MODULE:FUNCTION."),
    min_reward: float = typer.Option(1.0, help="A record with at least this reward is verified."),
    min_score: Optional[float] = typer.Option(None, help="Also accept records with at least this score (feedback)."),
    slice_by: str = typer.Option("app", help="Slice tasks by app | task | none."),
    name: Optional[str] = typer.Option(None, help="Suite name (default: the file name)."),
    max_tokens: int = typer.Option(128, help="Completion tokens per turn."),
    as_json: bool = typer.Option(False, "--json", help="Print the counts as JSON."),
) -> None:
    """A prompt-only eval suite from production data held out by `collector export --holdout`."""
    from ._from_holdout import suite_from_holdout
    from .errors import TrainerError

    try:
        built = suite_from_holdout(holdout_file, checker=checker, min_reward=min_reward, min_score=min_score,
                                   slice_by=slice_by, name=name, max_tokens=max_tokens)
        built.write(out)
    except (TrainerError, OSError) as e:
        cli_fail(str(e), 2)
    summary = {"out": str(out), "tasks": len(built.cases), "read": built.read, "skipped": built.skipped,
               "holdout": built.header.get("holdout"), "checker": checker}
    if as_json:
        print(json.dumps(summary))
        return
    console.print(f"wrote {len(built.cases)} tasks to {out} ({built.read} records read; skipped: "
                  f"{built.skipped or 'none'})", highlight=False)
    if built.header.get("holdout") is not None:
        console.print(f"the suite records holdout {built.header['holdout']}: `trainer run --eval {out}` exports with it, "
                      "so these tasks never become training data", highlight=False)


@suite_app.command("check")
def suite_check_cmd(
    spec: str = typer.Argument(..., help="PKG.MODULE:ATTR or a prompt-suite .jsonl."),
    as_json: bool = typer.Option(False, "--json", help="Print the summary as JSON."),
) -> None:
    """Load a suite the way `trainer run --eval` does and show its tasks, slices, budget and sampling."""
    from sdk import task_slice

    from ._suites import load_suite
    from .errors import TrainerError

    try:
        suite = load_suite(spec)
    except TrainerError as e:
        cli_fail(str(e), 2)
    slices: dict[str, int] = {}
    for t in suite.tasks:
        slices[task_slice(t, suite.slice_key)] = slices.get(task_slice(t, suite.slice_key), 0) + 1
    summary = {"name": suite.name, "tasks": len(suite.tasks), "slices": slices,
               "budget": {"max_steps": suite.budget.max_steps, "max_tokens": suite.budget.max_tokens,
                          "max_seconds": suite.budget.max_seconds},
               "sampling": {"temperature": suite.sampling.temperature, "max_tokens": suite.sampling.max_tokens,
                            "seed": suite.sampling.seed}}
    print(json.dumps(summary) if as_json else json.dumps(summary, indent=2))


def main() -> None:
    """Entry point of the `trainer` console script."""
    app()


if __name__ == "__main__":  # `python -m trainer._cli`: how torchrun re-launches `trainer sft --nproc N`
    main()
