"""`looplift server ...`: start vLLM + the gateway, and drive the admin API.

Commands: `start` (foreground: vLLM and the gateway; `--replicas N` local vLLMs, `--upstream URL` (repeatable) vLLMs
started elsewhere, or the gateway alone over those; Ctrl-C stops everything cleanly), `versions`, `replicas`, `load`,
`unload`, `promote`, `rollback`.
Admin commands take `--url` and `--token` (default: `$LOOPLIFT_ADMIN_TOKEN` or the token file), print
a table or `--json`, and on error print the message (no traceback) and exit 1.
This module only parses flags and prints; the work is in `_vllm`, `_serve` and `_admin`.
"""

from __future__ import annotations

import dataclasses
import json
import threading
from pathlib import Path
from typing import Any, Callable, Optional, TypeVar

import typer
from pydantic import BaseModel
from rich.console import Console
from rich.table import Table

from sdk.infra import Shutdown, cli_fail, print_table, shutdown_on_signals

from . import _defaults as D
from ._admin import AdminClient
from ._models import SwapResult, VersionInfo, VersionsView
from .errors import ServerError

app = typer.Typer(help="The OpenAI-compatible gateway over vLLM: start it, load/unload/promote/roll back versions.",
                  no_args_is_help=True)
out = Console(soft_wrap=True)
T = TypeVar("T")

URL = typer.Option(D.GATEWAY_URL, "--url", help="Gateway base URL.")
TOKEN = typer.Option(None, "--token", help=f"Admin token (default: ${D.ADMIN_TOKEN_ENV} or $LOOPLIFT_HOME/admin.token).")
JSON = typer.Option(False, "--json", help="Print JSON for machines.")


def _run(fn: Callable[[], T]) -> T:
    try:
        return fn()
    except ServerError as e:
        cli_fail(e.message, 1)


def _emit(result: BaseModel, as_json: bool, render: Callable[[Any], None]) -> None:
    if as_json:
        out.print_json(json.dumps(result.model_dump(mode="json")))
    else:
        render(result)


@app.command()
def start(
    model: Optional[Path] = typer.Option(None, "--model", help="HF model directory vLLM serves as version 0 (this "
                                                               "command starts vLLM: --replicas of them)."),
    upstream: Optional[list[str]] = typer.Option(None, "--upstream", help="URL of a vLLM started elsewhere (a GPU node, "
                                                 "a Kubernetes service); repeatable, and added to the local ones with "
                                                 "--model. It must serve the base model as <alias>-v0 "
                                                 "(--served-model-name policy-v0) with runtime LoRA enabled and "
                                                 "--generation-config vllm (else pass the one it has), and read "
                                                 "adapter paths as the gateway names them (a shared volume)."),
    replicas: int = typer.Option(1, "--replicas", min=1, help="With --model: local vLLM servers to start, each on its "
                                 "own cores (or GPUs). With more than one upstream in all, the gateway routes among "
                                 "them (least busy; same X-Looplift-Session, same replica), retries a request a dying "
                                 "one failed, restarts a local one that dies, and loads every version on all."),
    port: int = typer.Option(D.GATEWAY_PORT, "--port", help="Gateway port."),
    vllm_port: int = typer.Option(D.VLLM_PORT, "--vllm-port", help="vLLM port (0: a free one; with --replicas > 1 "
                                                                    "every replica takes a free one)."),
    alias: str = typer.Option(D.ALIAS, "--alias", help="Alias clients request; versions are <alias>-v<N>."),
    host: str = typer.Option(D.HOST, "--host", help="Gateway bind address."),
    max_model_len: int = typer.Option(D.MAX_MODEL_LEN, "--max-model-len", help="vLLM --max-model-len."),
    max_lora_rank: int = typer.Option(D.MAX_LORA_RANK, "--max-lora-rank", help="vLLM --max-lora-rank."),
    kv_cache_gib: float = typer.Option(D.CPU_KVCACHE_GIB, "--kv-cache-gib", help="VLLM_CPU_KVCACHE_SPACE (CPU only)."),
    timeout: float = typer.Option(D.VLLM_START_TIMEOUT_S, "--timeout", help="Seconds to wait for vLLM to be healthy."),
    tool_call_parser: str = typer.Option(D.TOOL_CALL_PARSER, "--tool-call-parser",
                                         help="vLLM tool-call parser (hermes, pythonic, llama3_json, mistral, ...); "
                                              "'auto' reads it from the model's chat template, 'none' turns it off."),
    generation_config: str = typer.Option(D.GENERATION_CONFIG, "--generation-config",
                                          help="vLLM --generation-config: 'vllm' samples what a request leaves out "
                                               "with vLLM's neutral defaults (temperature 1, top_p 1), whose logprobs "
                                               "GRPO can train on; 'auto' (or a directory) uses the model's "
                                               "generation_config.json. With --upstream: the one those were started "
                                               "with. Captured turns record it."),
    capture: bool = typer.Option(False, "--capture", help="Capture every chat exchange into the collector "
                                                          "(needs --collector-url or $LOOPLIFT_COLLECTOR_URL)."),
    collector_url: Optional[str] = typer.Option(None, "--collector-url",
                                                help="Collector for capture and feedback (key: "
                                                     "$LOOPLIFT_COLLECTOR_KEY or $LOOPLIFT_HOME/collector.key)."),
    insecure: bool = typer.Option(False, "--insecure", help="Allow a non-loopback --host without API keys."),
) -> None:
    """Start vLLM and the gateway in the foreground (or only the gateway, with --upstream alone); Ctrl-C or SIGTERM
    stops everything."""
    from ._auth import check_bind
    from ._settings import GatewaySettings, version_name
    from ._vllm import VLLMConfig

    upstreams = [u.rstrip("/") for u in upstream or ()]
    if model is None and not upstreams:
        cli_fail("give --model DIR (start vLLM here), --upstream URL (a vLLM started elsewhere; repeatable), or both", 2)
    if model is None and replicas > 1:
        cli_fail("--replicas starts local vLLMs: it needs --model DIR", 2)
    overrides: dict[str, Any] = {"alias": alias, "max_lora_rank": max_lora_rank, "generation_config": generation_config}
    if collector_url:
        overrides["collector_url"] = collector_url
    settings = _run(lambda: GatewaySettings.from_env(**overrides))
    if capture:
        settings = dataclasses.replace(settings, capture=True)
    if (settings.capture or settings.capture_key_ids) and not settings.collector_url:
        cli_fail("--capture needs a collector: pass --collector-url or set $LOOPLIFT_COLLECTOR_URL", 2)
    _run(lambda: check_bind(host, settings.api_keys, insecure=insecure))  # before the ~40 s of vLLM
    cfg = None if model is None else VLLMConfig(
        model_dir=model, served_model_name=version_name(alias, 0), port=vllm_port if replicas == 1 else 0,
        max_model_len=max_model_len, max_lora_rank=max_lora_rank, kv_cache_gib=kv_cache_gib, start_timeout_s=timeout,
        tool_call_parser=tool_call_parser, generation_config=settings.generation_config,
    )
    # From the first line: SIGTERM (a supervisor), SIGINT (Ctrl-C, also when a shell started us in the
    # background with SIGINT ignored) and SIGHUP raise `Shutdown` here, during vLLM's start included, and
    # the `with` blocks below stop the gateway and vLLM's whole process group on the way out.
    with shutdown_on_signals():
        try:
            if cfg is not None and replicas == 1 and not upstreams:
                _serve(settings, cfg, host, port, alias, insecure)
            elif cfg is None and len(upstreams) == 1:
                # The registry reconciles with that vLLM when it first answers (at startup or the first request).
                _gateway(settings, upstreams[0], host, port, alias, threading.Event(), insecure)
            else:
                _serve_replicas(settings, cfg, replicas, upstreams, host, port, alias, insecure)
        except Shutdown as s:
            out.print(f"stopped ({s})")


def _serve_replicas(settings: Any, cfg: Any, n: int, upstreams: list[str], host: str, port: int, alias: str,
                    insecure: bool = False) -> None:
    """Several upstreams: `n` local vLLMs (none without `cfg`) and `upstreams`; the gateway restarts local ones."""
    from ._replicas import start_local_replicas

    local: list[Any] = []
    try:
        if cfg is not None:
            with out.status(f"starting {n} vLLM replica(s)…") as status:
                local = _run(lambda: start_local_replicas(cfg, n, progress=lambda s, line: status.update(
                    f"starting vLLM replicas… {s:.0f} s  [dim]{line[-90:]}[/dim]")))
            for r in local:
                out.print(f"vLLM replica ready at {r.url} (pid {r.pid}, log: {r.server.log_path})")
        _gateway(settings, [*local, *upstreams], host, port, alias, threading.Event(), insecure)
    finally:
        for r in local:
            r.stop()


def _serve(settings: Any, cfg: Any, host: str, port: int, alias: str, insecure: bool = False) -> None:
    from ._vllm import start_vllm

    with out.status("starting vLLM…") as status:
        vllm = _run(lambda: start_vllm(cfg, progress=lambda s, line: status.update(
            f"starting vLLM… {s:.0f} s  [dim]{line[-90:]}[/dim]")))
    with vllm:
        out.print(f"vLLM ready at {vllm.url} in {vllm.startup_s:.1f} s (log: {vllm.log_path})")
        died = threading.Event()
        vllm.start_watchdog(on_death=lambda e: died.set())
        _gateway(settings, vllm.url, host, port, alias, died, insecure)
    if vllm.died is not None:
        cli_fail(vllm.died.message, 1)


def _gateway(settings: Any, upstreams: Any, host: str, port: int, alias: str, stop: threading.Event,
             insecure: bool = False) -> None:
    """Serve the gateway over `upstreams` (a URL, or a list of URLs and `LocalReplica`s) until `stop` is set (or a
    signal raises `Shutdown`)."""
    from sdk import looplift_home

    from ._serve import start_gateway_in_thread

    over = upstreams if isinstance(upstreams, str) else ", ".join(u if isinstance(u, str) else u.url for u in upstreams)
    with _run(lambda: start_gateway_in_thread(settings, upstreams, host, port, insecure=insecure)) as gw:
        out.print(f"gateway at {gw.url}/v1 over {over}  (alias [bold]{alias}[/bold] -> "
                  f"{gw.app.registry.serving})")
        out.print(f"admin token: ${D.ADMIN_TOKEN_ENV} or {looplift_home() / D.ADMIN_TOKEN_FILE}; Ctrl-C to stop")
        while not stop.wait(0.5):
            if not gw.running:
                cli_fail("the gateway thread exited", 1)
        out.print("stopping…")


def _versions_table(v: VersionsView) -> None:
    t = Table(title=f"alias {v.alias} -> {v.serving}")
    for col in ("version", "state", "serving", "in flight", "created", "adapter"):
        t.add_column(col)
    for x in v.versions:
        t.add_row(x.name, x.state, "*" if x.serving else "", str(x.in_flight),
                  x.created_at.strftime("%Y-%m-%d %H:%M:%S"), x.adapter_path or "(base model)")
    print_table(out, t)


def _swap(r: SwapResult) -> None:
    out.print(f"{r.alias} -> [bold]{r.serving}[/bold] (was {r.previous}; flip took {r.swap_ms:.1f} ms)")


def _loaded(v: VersionInfo) -> None:
    out.print(f"loaded [bold]{v.name}[/bold] from {v.adapter_path} (not serving yet: "
              f"`looplift server promote {v.name}`)")


@app.command()
def versions(url: str = URL, token: Optional[str] = TOKEN, as_json: bool = JSON) -> None:
    """List versions and what the alias serves."""
    _emit(_run(lambda: AdminClient(url, token).versions()), as_json, _versions_table)


@app.command()
def replicas(url: str = URL, token: Optional[str] = TOKEN, as_json: bool = JSON) -> None:
    """List the gateway's vLLM upstreams: healthy, in flight, versions loaded, restarts."""
    rows = _run(lambda: AdminClient(url, token).replicas())
    if as_json:
        out.print_json(json.dumps([r.model_dump(mode="json") for r in rows]))
        return
    t = Table(title=f"{sum(r.healthy for r in rows)} of {len(rows)} replicas healthy")
    for col in ("url", "pid", "healthy", "in flight", "restarts", "versions", "detail"):
        t.add_column(col)
    for r in rows:
        t.add_row(r.url, str(r.pid or ""), "yes" if r.healthy else "[red]no[/red]", str(r.in_flight), str(r.restarts),
                  ", ".join(r.versions), r.detail or "")
    print_table(out, t)


@app.command()
def load(
    path: Path = typer.Argument(..., help="Adapter directory (peft save_pretrained output), or a full HF checkpoint "
                                "(config.json + weights): a full-weight version, started blue/green on promote."),
    name: Optional[str] = typer.Option(None, "--name", help="Version name (default: the next <alias>-v<N>)."),
    url: str = URL, token: Optional[str] = TOKEN, as_json: bool = JSON,
) -> None:
    """Validate and load an adapter (or register a full checkpoint) as a new version (does not promote it)."""
    _emit(_run(lambda: AdminClient(url, token).load(str(path.expanduser().resolve()), name)), as_json, _loaded)


def _unloaded(v: VersionInfo) -> None:
    out.print(f"[bold]{v.name}[/bold] is {v.state} (still listed; `looplift server promote {v.name}` loads it again)")


@app.command()
def unload(
    version: str = typer.Argument(..., help="Version whose adapter to unload from vLLM (not the serving one)."),
    url: str = URL, token: Optional[str] = TOKEN, as_json: bool = JSON,
) -> None:
    """Unload VERSION's adapter from vLLM once its requests in flight are done (it stays listed, unloaded)."""
    _emit(_run(lambda: AdminClient(url, token).unload(version)), as_json, _unloaded)


@app.command()
def promote(
    version: str = typer.Argument(..., help="Version to serve under the alias."),
    url: str = URL, token: Optional[str] = TOKEN, as_json: bool = JSON,
) -> None:
    """Point the alias at VERSION (the previous version drains, then unloads)."""
    _emit(_run(lambda: AdminClient(url, token).promote(version)), as_json, _swap)


@app.command()
def rollback(url: str = URL, token: Optional[str] = TOKEN, as_json: bool = JSON) -> None:
    """Serve the previously serving version again."""
    _emit(_run(lambda: AdminClient(url, token).rollback()), as_json, _swap)


def main() -> None:
    """Entry point for running this group on its own (`python -m server.cli`)."""
    app()


if __name__ == "__main__":
    main()
