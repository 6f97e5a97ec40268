"""`looplift status`: the loop at a glance, for a terminal or a script (`--json`).

What it reads, each from the part that owns it (the composition root may ask every part):

- what serves and since when: the gateway's admin API (`/admin/versions`: the alias, its history);
- the gate figures of the serving version: the trainer's run history (the newest run that measured it; its
  held-out success from the gate's report split, which no gate selected on);
- live success over the last hour: the collector's database (`Store.window_stats`, by served version);
- pending data since the last retrain: scored trajectories ingested after the newest run's export;
- the next scheduled run: `[schedule]` in looplift.toml (cron via croniter, new-data, drift);
- anything unhealthy: gateway/vLLM `/health`, collector `/health`, failed or interrupted runs, live success far
  below what the gate measured, the Langfuse export dropping items (the collector's dashboard data).

A part that cannot be reached is one line saying which part and why; the rest is still reported. The exit
code is 0 when nothing is unhealthy, 1 otherwise (so `looplift status --json || alert` works).
Deliberately not here: history beyond the newest figures (`trainer runs`, the dashboard) and any write.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import TYPE_CHECKING, Any, Optional

import httpx

from sdk import wire

if TYPE_CHECKING:
    from collector import Store

#: Live success this far below the gate's measurement is reported as a problem (when no drift is configured).
LIVE_DROP = 0.10
#: Fewer live episodes than this: no comparison with the gate.
LIVE_MIN_EPISODES = 20


@dataclass(frozen=True)
class StatusOptions:
    gateway: str
    collector: str
    db: Optional[str]
    token: Optional[str]
    runs_dir: Optional[Path]
    config: Optional[Path]
    window_s: float = 3600.0


def default_options(gateway: Optional[str], collector: Optional[str], db: Optional[str], token: Optional[str],
                    runs_dir: Optional[Path], config: Optional[Path]) -> StatusOptions:
    """Flags, else the environment, else the `looplift up` defaults."""
    return StatusOptions(
        gateway=(gateway or os.environ.get("LOOPLIFT_GATEWAY_URL") or "http://127.0.0.1:8000").rstrip("/"),
        collector=(collector or os.environ.get("LOOPLIFT_COLLECTOR_URL") or "http://127.0.0.1:8100").rstrip("/"),
        db=db, token=token, runs_dir=runs_dir, config=config)


def _iso(dt: datetime | str | None) -> Optional[str]:
    if dt is None:
        return None
    if isinstance(dt, str):
        dt = datetime.fromisoformat(dt.replace("Z", "+00:00"))
    if dt.tzinfo is None:
        dt = dt.replace(tzinfo=timezone.utc)
    return dt.astimezone(timezone.utc).isoformat(timespec="seconds").replace("+00:00", "Z")


def _hide_password(url: str) -> str:
    try:
        import sqlalchemy as sa

        return str(sa.make_url(url).render_as_string(hide_password=True))
    except Exception:  # noqa: BLE001 - an unparsable URL is shown as given minus nothing secret to hide
        return url


def _short(e: BaseException) -> str:
    return f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}".strip()


class _Status:
    def __init__(self, opts: StatusOptions) -> None:
        self.o = opts
        self.out: dict[str, Any] = {"now": _iso(datetime.now(timezone.utc)), "problems": [], "unreachable": {}}

    def problem(self, text: str) -> None:
        self.out["problems"].append(text)

    def unreachable(self, part: str, why: str) -> None:
        self.out["unreachable"][part] = why
        self.problem(f"{part} not reachable: {why}")

    # -- parts -------------------------------------------------------------------------------------
    def config(self) -> tuple[dict[str, Any], dict[str, Any]]:
        try:
            from trainer import load_config

            cfg = load_config(self.o.config)
            return cfg.trainer, cfg.schedule
        except ImportError:
            return {}, {}
        except Exception as e:  # a bad looplift.toml is reported, not fatal
            self.problem(f"looplift.toml: {_short(e)}")
            return {}, {}

    def token(self) -> Optional[str]:
        if self.o.token:
            return self.o.token
        from sdk.infra import read_secret

        return read_secret("LOOPLIFT_ADMIN_TOKEN", "admin.token")

    def gateway(self) -> None:
        g: dict[str, Any] = {"url": self.o.gateway}
        self.out["gateway"] = g
        try:
            r = httpx.get(self.o.gateway + "/health", timeout=3)
            body = r.json()
            g.update(status=body.get("status"), vllm=body.get("vllm"), serving=body.get("serving"))
            if r.status_code != 200:
                self.problem(f"gateway unhealthy: vLLM {body.get('vllm')}")
        except (httpx.HTTPError, ValueError) as e:
            self.unreachable("gateway", f"{self.o.gateway}: {_short(e)}")
            return
        token = self.token()
        if not token:
            self.problem("no admin token: cannot read the gateway's versions (set LOOPLIFT_ADMIN_TOKEN or --token)")
            return
        try:
            from server import AdminClient, ServerError
        except ImportError as e:
            self.problem(f"cannot read the gateway's versions without the [server] extra ({e})")
            return
        try:
            with AdminClient(self.o.gateway, token, timeout=5) as admin:
                view = admin.versions()
                canary = admin.canary().canary
        except ServerError as e:
            self.unreachable("gateway admin API", str(e).splitlines()[0])
            return
        since: Optional[datetime] = None
        by: Optional[str] = None
        for h in view.history:
            if h.version == view.serving and h.action in ("promote", "rollback", "restore"):
                since, by = h.at, h.action
        if since is None:
            v = next((v for v in view.versions if v.name == view.serving), None)
            since, by = (v.created_at if v else None), "start"
        g.update(alias=view.alias, serving=view.serving, serving_since=_iso(since), serving_by=by,
                 versions=len(view.versions), in_flight=sum(v.in_flight for v in view.versions),
                 last_event=view.history[-1].model_dump(mode="json") if view.history else None,
                 canary=canary.model_dump(mode="json") if canary else None)

    def runs(self, trainer_cfg: dict[str, Any]) -> list[dict[str, Any]]:
        try:
            from trainer import list_runs
        except ImportError:
            self.out["runs"] = {"error": "the [trainer] extra is not installed"}
            return []
        from sdk import looplift_home

        runs_dir = self.o.runs_dir or (Path(trainer_cfg["runs_dir"]) if trainer_cfg.get("runs_dir")
                                       else looplift_home() / "trainer" / "runs")
        runs = list_runs(runs_dir)
        last = runs[-1] if runs else None
        self.out["runs"] = {"dir": str(runs_dir), "count": len(runs),
                            "last": {k: last.get(k) for k in ("run_id", "status", "reason", "trigger", "finished_at")}
                            if last else None}
        if last and last.get("status") in ("failed", "interrupted"):
            self.problem(f"last retrain run {last.get('run_id')} {last.get('status')}: {last.get('reason')}")
        return runs

    def gate(self, runs: list[dict[str, Any]]) -> None:
        serving = (self.out.get("gateway") or {}).get("serving")
        for rec in reversed(runs):
            side = "candidate" if rec.get("candidate") == serving else "serving" if rec.get("serving") == serving else None
            g = rec.get("gate") or {}
            if side and rec.get(f"{side}_success") is not None and not g.get("errored"):  # errored: measured nothing whole
                # The report split's figure: the selection split's is what promoted it (biased upward).
                report = rec.get(f"{side}_report_success")
                self.out["gate"] = {"version": serving, "success": rec[f"{side}_success"] if report is None else report,
                                    "as": side, "split": None if report is None else "report", "n_report": g.get("n_report"),
                                    "n": None if g.get("n") is None else g["n"] + (g.get("n_report") or 0),
                                    "b": g.get("b"), "c": g.get("c"), "p_value": g.get("p_value"),
                                    "run_id": rec.get("run_id"), "status": rec.get("status"),
                                    "finished_at": rec.get("finished_at")}
                return
        self.out["gate"] = None

    def collector(self, trainer_cfg: dict[str, Any], runs: list[dict[str, Any]]) -> None:
        c: dict[str, Any] = {"url": self.o.collector}
        self.out["collector"] = c
        try:
            r = httpx.get(self.o.collector + "/health", timeout=3)
            c["status"] = r.json().get("status")
            if r.status_code != 200:
                self.problem(f"collector unhealthy: {wire.error_message(r.json()) or r.text[:200]}")
        except (httpx.HTTPError, ValueError) as e:
            self.unreachable("collector", f"{self.o.collector}: {_short(e)}")
        token = self.token()
        if token and "collector" not in self.out["unreachable"]:
            try:
                h = httpx.get(self.o.collector + "/v1/dashboard/health", headers={"Authorization": f"Bearer {token}"},
                              timeout=5)
                if h.status_code == 200:
                    lf = h.json().get("langfuse") or {}
                    c["langfuse"] = lf
                    if lf.get("dropped"):
                        self.problem(f"Langfuse export dropped {lf['dropped']} items (queue of {lf.get('queue_size')})")
            except (httpx.HTTPError, ValueError):
                pass
        try:
            from collector import CollectorSettings, open_store

            db = self.o.db or trainer_cfg.get("db") or CollectorSettings.from_env().db_url
            c["db"] = _hide_password(db)
            path = db.split("sqlite:///", 1)[1] if db.startswith("sqlite:///") else None
            if path is not None and not Path(path).expanduser().exists():
                self.unreachable("collector database", f"no database at {path} (pass --db, or set LOOPLIFT_HOME)")
                return
            store = open_store(db, migrate_schema=False)  # status reads; it never creates or migrates
        except Exception as e:
            self.unreachable("collector database", _short(e))
            return
        try:
            self._live(store, trainer_cfg, runs)
        finally:
            store.close()

    def _live(self, store: Store, trainer_cfg: dict[str, Any], runs: list[dict[str, Any]]) -> None:
        now = datetime.now(timezone.utc)
        since = now - timedelta(seconds=self.o.window_s)
        serving = (self.out.get("gateway") or {}).get("serving")
        live: dict[str, Any] = {"window_s": self.o.window_s}
        for key, version in (("all", None), ("serving", serving)):
            if key == "serving" and not serving:
                continue
            w = store.window_stats(served_version=version, since=since)
            live[key] = {"version": version, "episodes": w.total, "with_outcome": w.with_outcome,
                         "success_rate": w.success_rate, "with_feedback": w.with_feedback,
                         "mean_feedback": w.mean_feedback}
        self.out["live"] = live
        gate = self.out.get("gate")
        s = live.get("serving")
        if gate and s and s["with_outcome"] >= LIVE_MIN_EPISODES and s["success_rate"] is not None \
                and s["success_rate"] < gate["success"] - LIVE_DROP:
            self.problem(f"{serving} live success {s['success_rate']:.0%} over {s['with_outcome']} episodes is more "
                         f"than {LIVE_DROP:.0%} below its gate figure {gate['success']:.0%}")
        last_export = next((r.get("exported_at") for r in reversed(runs)
                            if r.get("status") != "interrupted" and r.get("exported_at")), None)
        since_export = datetime.fromisoformat(last_export) if last_export else None
        w = store.window_stats(app=trainer_cfg.get("app"), since=since_export)
        self.out["pending"] = {"since": _iso(since_export), "app": trainer_cfg.get("app"), "scored": w.scored,
                               "trajectories": w.total}

    def schedule(self, sched: dict[str, Any]) -> None:
        nxt: dict[str, Any] = {k: sched.get(k) for k in ("cron", "new_data", "drift") if sched.get(k) is not None}
        if sched.get("cron"):
            try:
                from croniter import croniter

                nxt["cron_next"] = _iso(croniter(sched["cron"], datetime.now().astimezone()).get_next(datetime))
            except Exception as e:  # noqa: BLE001 - a bad expression is reported, not fatal
                self.problem(f"[schedule].cron {sched['cron']!r}: {_short(e)}")
        if sched.get("new_data") is not None and self.out.get("pending"):
            nxt["new_data_left"] = max(0, int(sched["new_data"]) - int(self.out["pending"]["scored"]))
        self.out["schedule"] = nxt or None


def gather(opts: StatusOptions) -> dict[str, Any]:
    """Everything `looplift status` prints, as a JSON-ready dict (`problems` lists what is unhealthy)."""
    st = _Status(opts)
    trainer_cfg, sched = st.config()
    st.gateway()
    runs = st.runs(trainer_cfg)
    st.gate(runs)
    st.collector(trainer_cfg, runs)
    st.schedule(sched)
    st.out["healthy"] = not st.out["problems"]
    return st.out


def _pct(x: Optional[float]) -> str:
    return "-" if x is None else f"{x:.0%}"


def render(s: dict[str, Any]) -> list[str]:
    """The status as lines of rich markup (values escaped)."""
    from rich.markup import escape

    lines = []
    g = s.get("gateway") or {}
    if g.get("serving"):
        by = {"promote": "promoted", "rollback": "rolled back to", "restore": "restored", "start": "serving since start"}
        lines.append(f"[bold]serving[/]    {g['serving']} since {g.get('serving_since') or '?'} "
                     f"({by.get(g.get('serving_by') or '', '')}; {g.get('versions', '?')} versions, "
                     f"{g.get('in_flight', 0)} requests in flight)")
    c = g.get("canary")
    if c:
        lines.append(f"[bold]canary[/]     {c['version']} answers {c['fraction']:.0%} of the alias since {c['started_at']} "
                     f"({c['routed_candidate']} requests vs {c['routed_serving']}; `trainer canary status`)")
    gate = s.get("gate")
    if gate:
        p = "-" if gate.get("p_value") is None else format(gate["p_value"], ".2g")
        how = (f"as the candidate of run {gate['run_id']}, {gate['status']}" if gate["as"] == "candidate" else
               f"as the serving version in run {gate['run_id']}, whose candidate was {gate['status']}")
        on = (f"{gate.get('n_report')} report-split tasks (of {gate.get('n') or '?'})" if gate.get("split") == "report"
              else f"{gate.get('n') or '?'} tasks")
        lines.append(f"[bold]gate[/]       {_pct(gate['success'])} held-out success on {on}, "
                     f"measured {how} (b={gate.get('b')} c={gate.get('c')} p={p})")
    elif g.get("serving"):
        lines.append(f"[bold]gate[/]       no run measured {g['serving']} yet")
    live = s.get("live") or {}
    for key in ("serving", "all"):
        w = live.get(key)
        if w:
            fb = f"; feedback {w['mean_feedback']:+.2f} over {w['with_feedback']}" if w.get("with_feedback") else ""
            who = w["version"] or "all versions"
            lines.append(f"[bold]live (1h)[/]  {who}: {_pct(w['success_rate'])} success over {w['with_outcome']} "
                         f"verified of {w['episodes']} episodes{fb}")
    pending = s.get("pending")
    if pending:
        lines.append(f"[bold]pending[/]    {pending['scored']} scored trajectories since "
                     f"{'the last retrain export ' + pending['since'] if pending['since'] else 'the start (no retrain yet)'}")
    sched = s.get("schedule")
    if sched:
        parts = []
        if sched.get("cron"):
            parts.append(f"cron '{sched['cron']}' next at {sched.get('cron_next')}")
        if sched.get("new_data") is not None:
            parts.append(f"new-data after {sched['new_data']} ({sched.get('new_data_left', '?')} to go)")
        if sched.get("drift") is not None:
            parts.append(f"drift > {sched['drift']:.0%}")
        lines.append("[bold]next run[/]   " + "; ".join(parts))
    else:
        lines.append("[bold]next run[/]   not scheduled (no \\[schedule] in looplift.toml)")
    r = (s.get("runs") or {}).get("last")
    if r:
        lines.append(f"[bold]last run[/]   {r['run_id']} {r['status']} ({escape(str(r.get('trigger')))}): "
                     f"{escape(str(r.get('reason')))}")
    lf = (s.get("collector") or {}).get("langfuse")
    health = [f"gateway {g.get('status', 'unreachable')}" + (f" (vLLM {g['vllm']})" if g.get("vllm") else ""),
              f"collector {(s.get('collector') or {}).get('status', 'unreachable')}"]
    if lf is not None:
        health.append(f"Langfuse {lf.get('traces', 0)} traces, {lf.get('dropped', 0)} dropped" if lf.get("enabled")
                      else "Langfuse off")
    lines.append("[bold]health[/]     " + " · ".join(health))
    probs = s.get("problems") or []
    lines.append("[bold]problems[/]   " + ("[green]none[/]" if not probs else f"[red]{len(probs)}[/]"))
    lines += [f"  [red]-[/] {escape(p)}" for p in probs]
    return lines
