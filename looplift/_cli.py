"""The `looplift` command: `up` (the whole stack in the foreground), `demo` (the closed loop), and the
component groups `server`, `collector`, `trainer`, `sandbox`, `env`.

A group whose extra is not installed is still listed; using it says which extra to install. The groups
are imported only when used or listed (`looplift up` does not import the trainer's CLI or torch).
`main()` turns SIGTERM/SIGINT/SIGHUP into `Shutdown` (`sdk.infra.shutdown_on_signals`) before any command
runs; `up` and `demo` stop everything they started on the way out (`_stack`), and print one line,
never a traceback, when something fails or a signal stops them. The processes they start are tied to this
one (`sdk.infra.spawn_tied`), so even a SIGKILL leaves nothing behind.
"""

from __future__ import annotations

import dataclasses
import json
import signal
import socket
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Optional

import typer
from rich.console import Console
from rich.markup import escape
from typer.core import TyperGroup

from sdk.infra import Shutdown, cli_fail, print_table, record_cost, shutdown_on_signals

if TYPE_CHECKING:
    from typer import _click as click  # typer's own copy of click: the types its TyperGroup uses

console = Console(stderr=True, soft_wrap=True)  # soft_wrap: an error stays one line in a log


# Each group's typer app, from the package's public `cli` module; imported only when the group is used,
# here in a function so that the import stays visible to the import contracts and to mypy.
def _server_cli() -> typer.Typer:
    from server.cli import app as group

    return group


def _collector_cli() -> typer.Typer:
    from collector.cli import app as group

    return group


def _trainer_cli() -> typer.Typer:
    from trainer.cli import app as group

    return group


def _sandbox_cli() -> typer.Typer:
    from sandboxes.cli import app as group

    return group


def _env_cli() -> typer.Typer:
    from ._env_cli import app as group

    return group


def _model_cli() -> typer.Typer:
    from ._model_cli import app as group

    return group


#: name -> (loader of its typer app, extra, help). Loaded when the group is used (`_LazyGroups`).
GROUPS: dict[str, tuple[Callable[[], typer.Typer], str, str]] = {
    "server": (_server_cli, "server", "Gateway over vLLM: start, versions, load, promote, rollback."),
    "collector": (_collector_cli, "collector", "Collector: serve, export, score, stats, purge, anonymize."),
    "trainer": (_trainer_cli, "trainer", "Trainer: build the base model, SFT, the retrain job."),
    "sandbox": (_sandbox_cli, "sandboxes", "Sandboxes: build the image, exec a command."),
    "env": (_env_cli, "sandboxes", "Task families: list them, try one with a reference policy."),
    "model": (_model_cli, "trainer", "Model families (Qwen, Mistral, ...): build a small one here, list them."),
}


class _LazyGroups(TyperGroup):
    """The root command: `up` and `demo` are its own; the component groups are imported when named (or
    listed by --help), so `looplift up` starts without importing the trainer's torch or the others' CLIs."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        return [*super().list_commands(ctx), *(g for g in GROUPS if g not in self.commands)]

    def get_command(self, ctx: click.Context, cmd_name: str) -> Optional[click.Command]:
        if cmd_name in GROUPS and cmd_name not in self.commands:
            self.add_command(_load_group(cmd_name), cmd_name)
        return super().get_command(ctx, cmd_name)


def _load_group(name: str) -> click.Command:
    """The click group of component `name`, or one that says which extra to install."""
    load, extra, help_text = GROUPS[name]
    try:
        sub = load()
    except ImportError as e:
        reason = str(e)  # `e` is unbound after the except block; the callback runs later
        sub = typer.Typer(help=f"{help_text} (needs `pip install looplift[{extra}]`)")

        @sub.callback(invoke_without_command=True)
        def _unavailable() -> None:
            cli_fail(f"`looplift {name}` needs the [{extra}] extra: {reason}. "
                     f"Install it with `pip install 'looplift[{extra}]'`.", 2)

    group = typer.main.get_command(sub)
    group.name, group.help, group.short_help = name, help_text, None
    return group


app = typer.Typer(
    help="looplift: agents that get better from their own work. Start with `looplift up` or `looplift demo`.",
    no_args_is_help=True, pretty_exceptions_enable=False, cls=_LazyGroups,
)


def _port_free(host: str, port: int) -> bool:
    """Whether our servers could listen on host:port: bound with SO_REUSEADDR, as they bind, so connections of a
    stopped server still in TIME_WAIT do not count (a restart right after a stop is not refused), while a socket
    that listens there does."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((host, port))
        except OSError:
            return False
    return True


#: (module, name) of the error bases a command reports as one line. Only modules already imported are
#: consulted: an error cannot come from a package that was never imported (and importing `trainer` here
#: would cost seconds of torch).
_ERROR_BASES = (("server", "ServerError"), ("collector", "CollectorError"), ("trainer", "TrainerError"),
                ("sandboxes", "SandboxError"), ("sdk.errors", "LoopliftError"), ("sdk.infra", "ServerThreadError"),
                ("looplift._stack", "StackError"))


def _known(e: BaseException) -> bool:
    """Whether `e` is an expected failure (printed as one line) rather than a bug (which keeps its traceback)."""
    if isinstance(e, OSError):
        return True
    for module, name in _ERROR_BASES:
        base = getattr(sys.modules.get(module), name, None)
        if isinstance(base, type) and isinstance(e, base):
            return True
    return False


def _one_line(e: BaseException) -> str:
    """The error as one line. A vLLM start failure becomes its reason, the log line that says why, and the
    log's path (the full command and log tail are in the log)."""
    start_error = getattr(sys.modules.get("server"), "VLLMStartError", None)
    if isinstance(start_error, type) and isinstance(e, start_error):
        err: Any = e
        if getattr(err, "returncode", None) == -signal.SIGKILL:  # killed while starting: loading weights, often OOM
            return "vLLM did not start: " + _vllm_exited(err.returncode, err.log_tail, err.log_path)
        why = _log_cause(err.log_tail)
        return f"vLLM did not start: {err.reason}" + (f": {why}" if why else "") + f" (log: {err.log_path})"
    text = str(e) or type(e).__name__
    return " ".join(line.strip() for line in text.splitlines() if line.strip())


def _log_cause(tail: str) -> str:
    """The most telling line of a vLLM log tail: the last exception line, else the last non-empty line."""
    lines = [line.strip() for line in tail.splitlines() if line.strip() and not line.startswith("$ ")]
    for line in reversed(lines):
        head = line.split(":", 1)[0]
        if head.endswith(("Error", "Exception")) and " " not in head:
            return line[:300]
    return lines[-1][:300] if lines else ""


def _vllm_exited(returncode: Optional[int], log_tail: str, log_path: Path) -> str:
    """`looplift up`'s line for a vLLM that exited: its code and the log's telling line (`_log_cause`). Not for a
    SIGKILL: a killed process writes nothing more, so its log ends wherever it was, and the last exception line
    there (a warning logged at start-up) is no cause; the line says it was killed, and by what it could be."""
    if returncode == -signal.SIGKILL:
        return (f"vLLM was killed (SIGKILL: out of memory, or killed by another process); `dmesg` names the OOM "
                f"killer's victims (log: {log_path})")
    why = _log_cause(log_tail)
    return f"vLLM exited with code {returncode}" + (f": {why}" if why else "") + f" (log: {log_path})"


def build_tiny_model() -> Path:
    """The cached tiny base model (built the first time, with a progress bar); needs the [trainer] extra."""
    try:
        from ._model import tiny_model
    except ImportError as e:
        cli_fail(f"building the default model needs the [trainer] extra ({e}); install it with "
                 "`pip install 'looplift[trainer]'` or pass --model DIR", 2)
    return tiny_model(console)


@app.command()
def up(
    model: Optional[Path] = typer.Option(None, help="Any local HF causal-LM directory (default: the tiny model "
                                                    "looplift builds and caches)."),
    gateway_port: int = typer.Option(8000, help="Gateway port."),
    collector_port: int = typer.Option(8100, help="Collector port."),
    host: str = typer.Option("127.0.0.1", help="Interface to bind the gateway and collector to."),
    sandbox: Optional[str] = typer.Option(None, help="docker | local (default: Docker when an engine answers)."),
    retrain: Optional[str] = typer.Option(None, "--retrain", help="Run the retrain scheduler inside the stack on this "
                                                                  "cron expression (e.g. '0 3 * * *'); also on when "
                                                                  "looplift.toml has [schedule] triggers."),
    eval_spec: Optional[str] = typer.Option(None, "--eval", help="Eval suite the retrain gate runs (PKG.MODULE:ATTR or "
                                                                 "a prompt-suite .jsonl; default [trainer].eval)."),
    config: Optional[Path] = typer.Option(None, "--config", help="looplift.toml (default ./looplift.toml, then "
                                                                 "$LOOPLIFT_HOME/looplift.toml)."),
    capture: bool = typer.Option(False, "--capture", help="Capture every /v1/chat/completions exchange as collector data "
                                                          "(sessions stitched by X-Looplift-Session; feedback by "
                                                          "response id at POST /v1/feedback)."),
    capture_key: list[str] = typer.Option([], "--capture-key", help="Capture only the traffic of this API key id "
                                                                     "(k-..., printed at start; repeatable)."),
    tool_call_parser: str = typer.Option("auto", "--tool-call-parser", help="vLLM tool-call parser (hermes, pythonic, "
                                                                            "llama3_json, mistral, ...); 'auto' reads it "
                                                                            "from the model's chat template, 'none' "
                                                                            "turns tool calls off."),
    generation_config: str = typer.Option("vllm", "--generation-config",
                                          help="vLLM --generation-config: 'vllm' samples what a request leaves out "
                                               "with vLLM's neutral defaults (temperature 1, top_p 1), whose logprobs "
                                               "GRPO can train on; 'auto' (or a directory) uses the model's "
                                               "generation_config.json. With --upstream: the one those were started "
                                               "with. Captured turns record it."),
    insecure: bool = typer.Option(False, "--insecure", help="Allow a non-loopback --host without API keys "
                                                            "(anyone who reaches it can use the model and teach it)."),
    replicas: int = typer.Option(1, "--replicas", min=0, help="Local vLLM servers to start. With more than one upstream "
                                 "in all, the gateway routes each request to the least busy healthy one (same "
                                 "X-Looplift-Session, same replica), retries a request a dying replica failed, restarts "
                                 "a local one that dies, and loads every version on all of them."),
    upstream: Optional[list[str]] = typer.Option(None, "--upstream", help="URL of a vLLM started elsewhere (repeatable), "
                                                 "added to the local ones. It must serve the base model as policy-v0 "
                                                 "with runtime LoRA updating on and --generation-config as given here, "
                                                 "and read adapter paths as the gateway "
                                                 "names them (a shared volume). A vLLM with its own data parallelism or "
                                                 "a router (vllm-router, llm-d) is one upstream."),
) -> None:
    """Start vLLM, the gateway and the collector on this machine and keep them running until Ctrl-C / SIGTERM.

    A --host other than loopback needs API keys ($LOOPLIFT_API_KEYS, comma-separated) or --insecure: captured
    traffic and feedback become training data."""
    if sandbox not in (None, "docker", "local"):
        cli_fail(f"--sandbox must be docker or local, not {sandbox!r}", 2)
    upstreams = tuple(u.rstrip("/") for u in upstream or ())
    for u in upstreams:
        if not u.startswith(("http://", "https://")):
            cli_fail(f"--upstream {u!r} must be a URL like http://gpu-node:8001 (vLLM's address, no /v1)", 2)
    if replicas == 0 and not upstreams:
        cli_fail("--replicas 0 needs at least one --upstream URL (nothing would serve)", 2)
    for flag, port in (("--gateway-port", gateway_port), ("--collector-port", collector_port)):
        if not _port_free(host, port):  # fail before building a model and the ~40 s vLLM start, not after it
            cli_fail(f"{host}:{port} is already in use; pass another {flag} or stop what listens there", 2)
    if model is not None and not (model / "config.json").is_file():
        cli_fail(f"{model} is not a Hugging Face model directory (no config.json)", 2)
    if model is not None:  # a static check of the files, template and parser before the ~40 s vLLM start
        from ._doctor import preflight

        problems = preflight(model, tool_call_parser)
        for problem in problems[:-1]:
            console.print(f"error: {problem}", highlight=False, markup=False)
        if problems:
            cli_fail(f"{problems[-1]} (`looplift doctor --model {model}` checks more)", 2)
    opts = _UpOptions(capture=capture, capture_keys=tuple(capture_key), tool_call_parser=tool_call_parser,
                      insecure=insecure, generation_config=generation_config)
    try:
        gateway_settings = _gateway_settings(host, opts)  # an open endpoint is refused before anything starts
        plan = _plan_retrain(config, retrain, eval_spec)  # a bad cron or suite fails before anything starts
        _up(model, host, gateway_port, collector_port, sandbox, plan, gateway_settings, opts, replicas, upstreams)
    except Shutdown as s:
        console.print(f"stopped ({s}); everything `looplift up` started has exited", highlight=False)
    except Exception as e:
        if not _known(e):
            raise
        cli_fail(_one_line(e))


@dataclass(frozen=True)
class _UpOptions:
    capture: bool = False
    capture_keys: tuple[str, ...] = ()
    tool_call_parser: str = "auto"
    insecure: bool = False
    generation_config: str = "vllm"


def _gateway_settings(host: str, opts: _UpOptions) -> Any:
    """The gateway's settings for `up`; raises `server.InsecureBindError` for an open, keyless endpoint and
    exits (`cli_fail`, code 2) for a capture key id that is not one of the configured keys'."""
    from server import GatewaySettings, check_bind, key_id

    settings = GatewaySettings.from_env()
    check_bind(host, settings.api_keys, insecure=opts.insecure)
    ids = {key_id(k) for k in settings.api_keys}
    unknown = [k for k in opts.capture_keys if k not in ids]
    if unknown:
        cli_fail(f"--capture-key {unknown[0]} is not the id of a configured API key (ids: "
                 f"{', '.join(sorted(ids)) or 'none: set LOOPLIFT_API_KEYS'})", 2)
    return dataclasses.replace(settings, capture=settings.capture or opts.capture,
                               capture_key_ids=settings.capture_key_ids | set(opts.capture_keys),
                               generation_config=opts.generation_config)


def _plan_retrain(config: Optional[Path], retrain: Optional[str], eval_spec: Optional[str]) -> Any:
    """The checked retrain plan (None: no scheduler), or a one-line error before anything starts."""
    try:
        from ._retrain import plan_retrain

        return plan_retrain(config, retrain, eval_spec)
    except ImportError as e:
        if retrain is None and eval_spec is None and config is None:
            return None  # no [trainer] extra and nothing asked for: `up` serves without a scheduler
        cli_fail(f"--retrain needs the [trainer] extra ({e}); install it with `pip install 'looplift[trainer]'`", 2)
    except Exception as e:
        if not _known(e):
            raise
        cli_fail(_one_line(e), 2)


def _up(model: Optional[Path], host: str, gateway_port: int, collector_port: int, sandbox: Optional[str],
        plan: Any, gateway_settings: Any, opts: _UpOptions, replicas: int = 1, upstreams: tuple[str, ...] = ()) -> None:
    import time

    from sdk import looplift_home
    from server import key_id

    from ._stack import Stack, StackConfig

    home = looplift_home()
    record_cost("stack", "looplift up")
    model = model or build_tiny_model()
    collector_settings: Any = None
    try:
        from collector import CollectorSettings
        from sdk.infra import ensure_secret

        key = ensure_secret("LOOPLIFT_COLLECTOR_KEY", "collector.key")
        collector_settings = CollectorSettings.from_env(api_keys=(key,))
    except ImportError as e:
        console.print(f"[yellow]no collector[/yellow] ({e}); install `looplift[collector]` to store episodes")
    backend = sandbox or _detect_sandbox()
    console.print("starting vLLM ...")
    if (gateway_settings.capture or gateway_settings.capture_key_ids) and collector_settings is None:
        cli_fail("--capture needs the collector (install `looplift[collector]`): captured traffic is stored there", 2)
    config = StackConfig(model_dir=model, gateway=gateway_settings, collector=collector_settings, host=host,
                         gateway_port=gateway_port, collector_port=collector_port,
                         vllm_log=home / "logs" / "vllm.log", replicas=replicas, upstreams=upstreams,
                         tool_call_parser=opts.tool_call_parser,
                         insecure=opts.insecure)
    if plan is not None and collector_settings is None:
        cli_fail("--retrain needs the collector (install `looplift[collector]`): the job trains on its data", 2)
    from ._retrain import retrain_in_stack

    with Stack(config) as stack, retrain_in_stack(
            plan, gateway_url=stack.gateway.url, db_url=collector_settings.db_url if plan else "",
            admin_token=config.gateway.admin_token, model_dir=model,
            say=lambda m: console.print(f"[dim]{escape(m)}[/dim]", highlight=False)):
        info = {"gateway": stack.gateway.url + "/v1", "collector": stack.collector.url if stack.collector else None,
                "dashboard": stack.collector.url + "/dashboard" if stack.collector else None,
                "model": str(model), "sandbox": backend, "admin_token_file": str(home / "admin.token"),
                "collector_key_file": str(home / "collector.key"), "home": str(home),
                "replicas": [r.url for r in stack.local] + list(upstreams),
                "capture": "all" if gateway_settings.capture else sorted(gateway_settings.capture_key_ids) or "off",
                "api_key_ids": [key_id(k) for k in gateway_settings.api_keys],
                "tool_call_parser": _parser_in(stack.vllm.command) if stack.vllm is not None else None,
                "generation_config": gateway_settings.generation_config}
        console.print_json(json.dumps(info))
        if stack.collector:  # the token travels in the fragment, which the browser never sends to a server
            console.print(f"dashboard: {stack.collector.url}/dashboard#token={config.gateway.admin_token}", highlight=False,
                          soft_wrap=True)
        console.print("[green]ready[/green] — Ctrl-C to stop")
        while True:
            time.sleep(1.0)
            # One vLLM: its death ends `up`. Several: the gateway takes a dead one out and restarts it.
            if stack.gateway.app.replicas is None and stack.vllm is not None and not stack.vllm.alive:
                cli_fail(_vllm_exited(stack.vllm.process.returncode, stack.vllm.log_tail(), stack.vllm.log_path))
            if not stack.gateway.running:
                cli_fail("the gateway thread exited")


def _parser_in(argv: list[str]) -> Optional[str]:
    """The `--tool-call-parser` vLLM was started with (`--flag V` or `--flag=V`, the last one wins, as in vLLM)."""
    found = None
    for i, a in enumerate(argv):
        if a == "--tool-call-parser" and i + 1 < len(argv):
            found = argv[i + 1]
        elif a.startswith("--tool-call-parser="):
            found = a.split("=", 1)[1]
    return found


def _detect_sandbox() -> str:
    try:
        from sandboxes import detect_backend
    except ImportError:
        return "none (install looplift[sandboxes])"
    backend = detect_backend()
    if backend != "docker":
        console.print("sandboxes: [bold]local[/bold] (no Docker engine with the sandbox image answered; "
                      "see `looplift sandbox info`)")
    else:
        console.print("sandboxes: [bold]docker[/bold]")
    return backend


@app.command()
def demo(
    cycles: int = typer.Option(3, min=1, help="Train/gate/publish cycles after the base-model eval."),
    episodes: Optional[int] = typer.Option(None, min=8, help="Rollouts per cycle (default: 256 for sft; 1024 for "
                                           "online-grpo, which needs ~650-1150 rollouts to reach 90% and whose gate only "
                                           "promotes a significant gain, so the first cycle must carry most of it)."),
    held_out: int = typer.Option(100, min=10, help="Held-out tasks (never trained on)."),
    json_out: Path = typer.Option(Path("bench/results/demo.json"), help="Where to write the per-cycle JSON."),
    chart: Optional[Path] = typer.Option(None, help="PNG chart path (default: beside --json-out)."),
    sandbox: Optional[str] = typer.Option(None, help="docker (default; never a fallback) | local (needs --unsafe)."),
    unsafe: bool = typer.Option(False, "--unsafe", help="With --sandbox local: train and gate on the local backend, "
                                                        "which sees this machine's files."),
    seed: int = typer.Option(0, help="Seed for the rollout tasks and sampling."),
    algo: str = typer.Option("sft", help="sft: rejection-sampling SFT per cycle | online-grpo: the cycle's "
                                         "rollouts spent on online GRPO updates (a new adapter version each). "
                                         "Offline GRPO on stored data is `trainer run --algo grpo`."),
) -> None:
    """Run the closed loop on the embedded default and show held-out success per cycle."""
    if sandbox not in (None, "docker", "local"):
        cli_fail(f"--sandbox must be docker or local, not {sandbox!r}", 2)
    if sandbox == "local" and not unsafe:
        cli_fail("refusing to train and gate on the local sandbox backend: it sees this machine's files (the checkout, "
                 "installed packages and their data); start Docker (`scripts/setup_docker.sh`, then `looplift sandbox "
                 "build-image`), or, knowing this, pass --sandbox local --unsafe", 2)
    if unsafe and sandbox != "local":
        cli_fail("--unsafe goes with --sandbox local", 2)
    if algo == "grpo":  # its old name: refused, not read as either, since `trainer run --algo grpo` is offline
        cli_fail("the demo's online GRPO is `--algo online-grpo` (rollouts during training); `--algo grpo` is "
                 "`trainer run --algo grpo`, offline GRPO on an export of stored trajectories", 2)
    if algo not in ("sft", "online-grpo"):
        cli_fail(f"--algo must be sft or online-grpo, not {algo!r} (DPO trains from feedback: "
                 "`trainer run --algo dpo`)", 2)
    try:
        from ._demo import DemoConfig, read_partial, run_demo
    except ImportError as e:
        cli_fail(f"`looplift demo` needs the whole stack ({e}); install it with `pip install 'looplift[cpu]'`", 2)
    started = time.time()  # the JSON a signal finds in --json-out is this run's only if written after this
    try:
        if episodes is None:
            episodes = 1024 if algo == "online-grpo" else 256
        record_cost("stack", f"looplift demo --algo {algo} --cycles {cycles} --episodes {episodes}")
        result = run_demo(DemoConfig(cycles=cycles, episodes=episodes, held_out=held_out, json_out=json_out,
                                     chart_out=chart, sandbox_backend=sandbox, unsafe=unsafe, seed=seed,
                                     algo=algo), console=console)
    except Shutdown as s:
        partial = read_partial(json_out, started)
        if partial is not None:  # what the demo finished before the signal, as it wrote it
            print_table(Console(), demo_table(partial))
            console.print(f"wrote {json_out} with the {len(partial['cycles'])} cycle(s) done (\"finished\": false)")
        cli_fail(f"interrupted by {s}; everything the demo started has exited", 128 + s.signum)
    except Exception as e:
        if not _known(e):
            raise
        cli_fail(_one_line(e))
    _print_demo(result)


def _print_demo(result: dict[str, Any]) -> None:
    # Whole in a log too (rich cuts a table to 80 columns when stdout is not a terminal).
    print_table(Console(), demo_table(result))
    console.print(f"failed requests during swaps: {result['swap_failed_requests']} of {result['swap_requests']}")
    console.print(f"wrote {result['json_out']} and chart {result.get('chart')}  (total {result['total_seconds']:.0f} s)")


def demo_table(result: dict[str, Any]) -> Any:
    """The demo's final table (a rich `Table`): one row per cycle of `result["cycles"]`."""
    from rich.table import Table

    table = Table(title="held-out success per cycle")
    for col in ("cycle", "version", "held-out success", "episodes", "dropped", "exported", "train loss", "promoted",
                "gate b/c, p", "seconds"):
        table.add_column(col, justify="right")
    for c in result["cycles"]:
        g = c.get("gate_figures")
        figures = "-" if not g else f"{g['b']}/{g['c']}, p={g['p_value']:.2g}"
        table.add_row(str(c["cycle"]), c["version"], f"{c['held_out_success']:.0%}", str(c["episodes"]),
                      "-" if c.get("rollouts_dropped") is None else str(c["rollouts_dropped"]),
                      str(c["exported"]), "-" if c["train_loss"] is None else f"{c['train_loss']:.3f}",
                      "yes" if c["promoted"] else "no", figures, f"{c['seconds']:.0f}")
    return table


def _doctor_command() -> Callable[..., None]:
    from ._doctor import doctor  # light: the checks import torch and vLLM when they run

    return doctor


app.command("doctor")(_doctor_command())


@app.command()
def status(
    gateway: Optional[str] = typer.Option(None, help="Gateway URL (default $LOOPLIFT_GATEWAY_URL or http://127.0.0.1:8000)."),
    collector: Optional[str] = typer.Option(None, help="Collector URL (default $LOOPLIFT_COLLECTOR_URL or "
                                                       "http://127.0.0.1:8100)."),
    db: Optional[str] = typer.Option(None, "--db", help="Collector database URL (default: [trainer].db, "
                                                        "$LOOPLIFT_COLLECTOR_DB, sqlite:///$LOOPLIFT_HOME/collector.db)."),
    token: Optional[str] = typer.Option(None, "--token", help="Admin token (default $LOOPLIFT_ADMIN_TOKEN or "
                                                              "$LOOPLIFT_HOME/admin.token)."),
    runs_dir: Optional[Path] = typer.Option(None, "--runs-dir", help="Retrain history (default [trainer].runs_dir or "
                                                                     "$LOOPLIFT_HOME/trainer/runs)."),
    config: Optional[Path] = typer.Option(None, "--config", help="looplift.toml (default ./looplift.toml, then "
                                                                 "$LOOPLIFT_HOME/looplift.toml)."),
    as_json: bool = typer.Option(False, "--json", help="Print one JSON object (for scripts)."),
) -> None:
    """What serves and since when, its gate figures, live success over the last hour, pending data, the next
    retrain, and anything unhealthy. Exit code 1 when something is unhealthy or unreachable."""
    from ._status import default_options, gather, render

    result = gather(default_options(gateway, collector, db, token, runs_dir, config))
    if as_json:
        typer.echo(json.dumps(result, indent=2, default=str))
    else:
        out = Console(soft_wrap=True)
        for line in render(result):
            out.print(line, highlight=False)
    if not result["healthy"]:
        raise typer.Exit(1)


def _run(command: Callable[[], object]) -> None:
    # Signals are handled from here on, before a command imports what it needs (seconds for torch):
    # SIGTERM at any moment stops what was started and exits with one line.
    with shutdown_on_signals():
        try:
            command()
        except Shutdown as s:  # outside `up`/`demo`, which report it themselves
            console.print(f"interrupted by {s}", highlight=False)
            sys.exit(128 + s.signum)


def main() -> None:
    """Entry point of the `looplift` console script."""
    _run(app)


def collector_main() -> None:
    """Entry point of the `collector` console script: `looplift collector`, which names the extra to install
    when it is missing (the `collector` package itself cannot even be imported then)."""
    _run(lambda: _load_group("collector")(prog_name="collector"))


def trainer_main() -> None:
    """Entry point of the `trainer` console script (`looplift trainer`; see `collector_main`)."""
    _run(lambda: _load_group("trainer")(prog_name="trainer"))
