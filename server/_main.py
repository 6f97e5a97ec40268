"""The `looplift` command: `up` (the whole stack in the foreground), `demo` (the closed loop), and the
component groups `server`, `collector`, `trainer`, `sandbox`.

A group whose extra is not installed is still listed; using it says which extra to install.
"""

from __future__ import annotations

import json
import signal
import socket
import threading
from pathlib import Path
from typing import Optional

import typer
from rich.console import Console

console = Console(stderr=True)
app = typer.Typer(
    help="looplift: agents that get better from their own work. Start with `looplift up` or `looplift demo`.",
    no_args_is_help=True, pretty_exceptions_enable=False,
)


def _mount(module: str, attr: str, name: str, extra: str, help_text: str) -> None:
    try:
        mod = __import__(module, fromlist=[attr])
        app.add_typer(getattr(mod, attr), name=name, help=help_text)
    except ImportError as e:
        reason = str(e)  # `e` is unbound after the except block; the callback runs later
        missing = typer.Typer(help=f"{help_text} (needs `pip install looplift[{extra}]`)")

        @missing.callback(invoke_without_command=True)
        def _unavailable() -> None:
            console.print(f"[red]error:[/red] `looplift {name}` needs the [{extra}] extra: {reason}. "
                          f"Install it with `pip install 'looplift[{extra}]'`.")
            raise typer.Exit(2)

        app.add_typer(missing, name=name)


_mount("server._cli", "app", "server", "server", "Gateway over vLLM: start, versions, load, promote, rollback.")
_mount("collector._cli", "app", "collector", "collector", "Collector: serve, export, score, stats, purge, anonymize.")
_mount("trainer._cli", "app", "trainer", "trainer", "Trainer: build the base model, SFT, the retrain job.")
_mount("sandboxes._cli", "app", "sandbox", "sandboxes", "Sandboxes: build the image, exec a command.")


def _secret(env_var: str, filename: str) -> str:
    """The secret from the environment, else from `$LOOPLIFT_HOME/filename`, else a new one saved there (0600)."""
    from sdk._home import ensure_secret

    return ensure_secret(env_var, filename)


def _port_free(host: str, port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        try:
            sock.bind((host, port))
        except OSError:
            return False
    return True


@app.command()
def up(
    model: Optional[Path] = typer.Option(None, help="Any local HF causal-LM directory (default: the tiny model "
                                                    "looplift builds and caches)."),
    gateway_port: int = typer.Option(8000, help="Gateway port on 127.0.0.1."),
    collector_port: int = typer.Option(8100, help="Collector port on 127.0.0.1."),
    host: str = typer.Option("127.0.0.1", help="Interface to bind the gateway and collector to."),
    sandbox: Optional[str] = typer.Option(None, help="docker | local (default: Docker when an engine answers)."),
) -> None:
    """Start vLLM, the gateway and the collector on this machine and keep them running until Ctrl-C."""
    from collector import CollectorError, CollectorSettings, serve_in_thread
    from rich.progress import Progress
    from sandboxes import detect_backend
    from sdk import looplift_home
    from server import GatewaySettings, VLLMConfig, start_gateway_in_thread, start_vllm
    from server.errors import ServerError
    from trainer._base_model import BaseModelConfig, build_base_model

    for flag, port in (("--gateway-port", gateway_port), ("--collector-port", collector_port)):
        if not _port_free(host, port):  # fail before building a model and the ~40 s vLLM start, not after it
            console.print(f"[red]error:[/red] {host}:{port} is already in use; pass another {flag} "
                          "or stop what listens there")
            raise typer.Exit(2)
    home = looplift_home()
    if model is None:
        cfg = BaseModelConfig()
        with Progress(console=console) as p:
            bar = p.add_task("tiny base model (cached after the first build)", total=cfg.steps)
            model = build_base_model(cfg, progress=lambda s, n, loss: p.update(bar, completed=s))
            p.update(bar, completed=cfg.steps)
    elif not (model / "config.json").exists():
        console.print(f"[red]error:[/red] {model} is not a Hugging Face model directory (no config.json)")
        raise typer.Exit(2)
    collector_key = _secret("LOOPLIFT_COLLECTOR_KEY", "collector.key")
    backend = sandbox or detect_backend()
    console.print(f"sandboxes: [bold]{backend}[/bold]"
                  + ("" if backend == "docker" else " (no Docker engine with the sandbox image answered; "
                                                    "see `looplift sandbox info`)"))
    console.print("starting vLLM ...")
    try:
        vllm = start_vllm(VLLMConfig(model_dir=model, port=0, log_path=home / "logs" / "vllm.log"))
    except ServerError as e:
        console.print(f"[red]error:[/red] {e}")
        raise typer.Exit(1) from None
    stop = threading.Event()
    gw = col = None
    try:
        gw = start_gateway_in_thread(GatewaySettings.from_env(), vllm.url, host, gateway_port)
        col = serve_in_thread(CollectorSettings.from_env(api_keys=(collector_key,)), host, collector_port)
        info = {"gateway": gw.url + "/v1", "collector": col.url, "model": str(model), "sandbox": backend,
                "admin_token_file": str(home / "admin.token"), "collector_key_file": str(home / "collector.key"),
                "home": str(home)}
        console.print_json(json.dumps(info))
        console.print("[green]ready[/green] — Ctrl-C to stop")
        signal.signal(signal.SIGTERM, lambda *_: stop.set())
        while not stop.wait(1.0):
            if not vllm.alive:
                console.print(f"[red]vLLM exited[/red]; last log lines:\n{vllm.log_tail()}")
                raise typer.Exit(1)
    except KeyboardInterrupt:
        pass
    except (ServerError, CollectorError) as e:  # e.g. a port already in use: say so, no traceback
        console.print(f"[red]error:[/red] {e}")
        raise typer.Exit(1) from None
    finally:
        for h in (gw, col):
            if h is not None:
                h.stop()
        vllm.stop()
        console.print("stopped")


@app.command()
def demo(
    cycles: int = typer.Option(3, min=1, help="Train/gate/publish cycles after the base-model eval."),
    episodes: int = typer.Option(256, min=8, help="Rollouts per cycle."),
    held_out: int = typer.Option(100, min=10, help="Held-out tasks (never trained on)."),
    json_out: Path = typer.Option(Path("bench/results/demo.json"), help="Where to write the per-cycle JSON."),
    chart: Optional[Path] = typer.Option(None, help="PNG chart path (default: beside --json-out)."),
    sandbox: Optional[str] = typer.Option(None, help="docker | local (default: Docker when an engine answers)."),
    seed: int = typer.Option(0),
) -> None:
    """Run the closed loop on the embedded default and show held-out success per cycle."""
    from rich.table import Table

    from trainer._demo import DemoConfig, run_demo

    if sandbox not in (None, "docker", "local"):
        console.print(f"[red]error:[/red] --sandbox must be docker or local, not {sandbox!r}")
        raise typer.Exit(2)
    result = run_demo(DemoConfig(cycles=cycles, episodes=episodes, held_out=held_out, json_out=json_out,
                                 chart_out=chart, sandbox_backend=sandbox, seed=seed), console=console)
    table = Table(title="held-out success per cycle")
    for col in ("cycle", "version", "held-out success", "episodes", "exported", "train loss", "promoted", "seconds"):
        table.add_column(col, justify="right")
    for c in result["cycles"]:
        table.add_row(str(c["cycle"]), c["version"], f"{c['held_out_success']:.0%}", str(c["episodes"]),
                      str(c["exported"]), "-" if c["train_loss"] is None else f"{c['train_loss']:.3f}",
                      "yes" if c["promoted"] else "no", f"{c['seconds']:.0f}")
    Console(width=max(100, Console().width)).print(table)
    console.print(f"failed requests during swaps: {result['swap_failed_requests']} of {result['swap_requests']}")
    console.print(f"wrote {json_out} and chart {result.get('chart')}  (total {result['total_seconds']:.0f} s)")


def main() -> None:
    """Entry point of the `looplift` console script."""
    app()
