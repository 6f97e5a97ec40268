"""`trainer canary`: start, show and end a canary on the gateway, and run the watch that decides it.

`start` / `status` / `stop` are thin calls of the gateway's admin API (`server.AdminClient`); `watch` runs
`_canary.CanaryWatch` (promote or drop the running canary from live outcomes, roll back a promotion whose
live signal falls) until SIGTERM / Ctrl-C, or once with `--once`. Settings: flags, then `[canary]` in
looplift.toml, then the defaults (`_defaults.CANARY_*`). Errors are one line and a non-zero exit.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Callable, Optional, TypeVar

import typer
from rich.console import Console
from rich.markup import escape

from sdk.infra import cli_fail

if TYPE_CHECKING:
    from server import AdminClient, CanaryView

_T = TypeVar("_T")

canary_app = typer.Typer(help="Canary: send a share of the alias's traffic to a candidate, and let the watch promote "
                              "or drop it from live outcomes (and roll back a promotion whose live signal falls).",
                         no_args_is_help=True)
#: The trainer CLI's stderr console (also `trainer/_cli.py`'s: it imports this module).
console = Console(stderr=True)

_GATEWAY = typer.Option(None, "--gateway", help="Gateway URL (default: looplift.toml [trainer].gateway, then "
                                                "http://127.0.0.1:8000).")
_TOKEN = typer.Option(None, "--token", help="Admin token (default $LOOPLIFT_ADMIN_TOKEN or the token file).")
_CONFIG = typer.Option(None, "--config", help="looplift.toml to read (default: ./looplift.toml, then $LOOPLIFT_HOME).")
_JSON = typer.Option(False, "--json", help="Print JSON for machines.")


def _admin(gateway: Optional[str], token: Optional[str], config: Optional[Path]) -> AdminClient:
    from server import AdminClient

    from ._config import load_config
    from ._defaults import GATEWAY_URL

    url = gateway or load_config(config).trainer.get("gateway", GATEWAY_URL)
    return AdminClient(url, token)


def _call(what: Callable[[], _T]) -> _T:
    """Run `what()`, turning the packages' errors into one line."""
    from server import ServerError

    from .errors import TrainerError

    try:
        return what()
    except (ServerError, TrainerError) as e:
        cli_fail(str(e), 2)


def _show(view: CanaryView, as_json: bool) -> None:
    if as_json:
        print(json.dumps(view.model_dump(mode="json"), indent=2))
        return
    c = view.canary
    out = Console()
    if c is None:
        out.print(f"no canary running; {view.alias!r} serves {view.serving}")
    else:
        out.print(f"canary {c.version}: {c.fraction:.0%} of {view.alias!r} (serving {view.serving}) since "
                  f"{c.started_at:%Y-%m-%d %H:%M:%S}; routed {c.routed_candidate} / {c.routed_serving}", highlight=False)
    for h in view.decisions[-10:]:
        out.print(f"  {h.at:%Y-%m-%d %H:%M:%S} {h.canary or '':8} {h.version}: {h.detail or ''}", highlight=False)


@canary_app.command("start")
def start_cmd(version: str = typer.Argument(..., help="A loaded version (see `looplift server versions`)."),
              fraction: float = typer.Option(0.1, "--fraction", help="Share of the alias's traffic, 0 < f < 1."),
              gateway: Optional[str] = _GATEWAY, token: Optional[str] = _TOKEN, config: Optional[Path] = _CONFIG,
              as_json: bool = _JSON) -> None:
    """Send FRACTION of the alias's requests to VERSION (sticky per X-Looplift-Session)."""
    with _call(lambda: _admin(gateway, token, config)) as admin:
        _show(_call(lambda: admin.start_canary(version, fraction)), as_json)


@canary_app.command("status")
def status_cmd(gateway: Optional[str] = _GATEWAY, token: Optional[str] = _TOKEN, config: Optional[Path] = _CONFIG,
               as_json: bool = _JSON) -> None:
    """The running canary and the recent canary decisions with their figures."""
    with _call(lambda: _admin(gateway, token, config)) as admin:
        _show(_call(admin.canary), as_json)


@canary_app.command("stop")
def stop_cmd(gateway: Optional[str] = _GATEWAY, token: Optional[str] = _TOKEN, config: Optional[Path] = _CONFIG,
             as_json: bool = _JSON) -> None:
    """End the running canary by hand (its candidate is drained, then unloaded)."""
    with _call(lambda: _admin(gateway, token, config)) as admin:
        _show(_call(admin.stop_canary), as_json)


@canary_app.command("watch")
def watch_cmd(
    alpha: Optional[float] = typer.Option(None, "--alpha", help="Error level: decide when the always-valid e-value "
                                                               "reaches 1/alpha (0.05)."),
    min_samples: Optional[int] = typer.Option(None, "--min-samples", help="Live episodes per side before deciding (30)."),
    max_samples: Optional[int] = typer.Option(None, "--max-samples", help="Per side; still undecided: drop (400)."),
    watch: Optional[str] = typer.Option(None, "--watch", help="Rollback watch after a promotion (1h)."),
    watch_min_samples: Optional[int] = typer.Option(None, "--watch-min-samples", help="Episodes before a rollback (30)."),
    watch_tolerance: Optional[float] = typer.Option(None, "--watch-tolerance",
                                                    help="Roll back when live success is shown to be more than "
                                                         "this below the replaced version's (0.10)."),
    poll: Optional[str] = typer.Option(None, "--poll", help="How often to look (15s)."),
    once: bool = typer.Option(False, "--once", help="Judge once, act if decided, print the verdict and exit."),
    db: Optional[str] = typer.Option(None, "--db", help="Collector DB URL (default: [trainer].db, then "
                                                       "sqlite:///$LOOPLIFT_HOME/collector.db)."),
    app_name: Optional[str] = typer.Option(None, "--app", help="Only count this app's episodes (default: [trainer].app)."),
    runs_dir: Optional[Path] = typer.Option(None, "--runs-dir", help="Run history with the gate's figures."),
    gateway: Optional[str] = _GATEWAY, token: Optional[str] = _TOKEN, config: Optional[Path] = _CONFIG,
    as_json: bool = _JSON,
) -> None:
    """Decide the running canary from live outcomes, and roll back a promotion whose live signal falls."""
    from ._canary import CanaryWatch
    from server import AdminClient

    from ._config import canary_config, collector_db_url, load_config
    from ._defaults import GATEWAY_URL
    from ._interrupt import sigterm_stops

    cfg = _call(lambda: load_config(config))
    settings = _call(lambda: canary_config(cfg, alpha=alpha, min_samples=min_samples, max_samples=max_samples,
                                           watch=watch, watch_min_samples=watch_min_samples,
                                           watch_tolerance=watch_tolerance, poll=poll))
    gateway_url = gateway or cfg.trainer.get("gateway", GATEWAY_URL)  # resolved once, not at every poll
    w = CanaryWatch(db or collector_db_url(cfg.trainer), lambda: AdminClient(gateway_url, token), app=app_name or cfg.trainer.get("app"),
                    runs_dir=runs_dir or (Path(cfg.trainer["runs_dir"]) if cfg.trainer.get("runs_dir") else None),
                    config=settings, status=lambda m: console.print(f"[dim]{escape(m)}[/dim]", highlight=False))
    if once:
        verdict = _call(w.tick)
        w.close()
        if as_json:
            print(json.dumps(None if verdict is None else {"decision": verdict.decision, "version": verdict.version,
                                                           "reason": verdict.reason, "figures": verdict.figures}))
        else:
            Console().print("nothing to judge" if verdict is None else f"{verdict.decision}: {verdict.reason}",
                            highlight=False)
        return
    console.print(f"canary watch: alpha {settings.alpha:g}, {settings.min_samples}-{settings.max_samples} episodes per "
                  f"side, rollback watch {settings.watch.window_s:g} s at -{settings.watch.tolerance:.0%}; polling "
                  f"every {settings.poll_s:g} s", highlight=False)
    with sigterm_stops(w.token):
        w.run()
