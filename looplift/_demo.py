"""`looplift demo`: the closed loop on the embedded default, measured on held-out tasks.

    cycle 0: evaluate the base model (policy-v0) on the held-out tasks
    cycle k: roll out the serving policy on fresh training tasks -> collector (anonymized, scored)
             -> `trainer run` (export verified successes -> LoRA SFT -> gate -> publish/hot-swap)
    --algo online-grpo: cycle k spends its rollout budget on online GRPO updates (`trainer.run_cycle`),
             each a new adapter version the next rollouts use, then the same gate and publish (not
             `trainer run --algo grpo`, which trains offline on an export of stored trajectories)

The gate runs on the demo task's eval suite, `envs.arithmetic_suite` (held-out problems, the
suite's budget and sampling), exactly as `trainer run --eval envs:arithmetic_suite` would; every
cycle's record carries the gate's figures (discordant pairs, p-value). The held-out success per cycle
is the gate's report split (about 30 of the 100 tasks, chosen by task id), which never decides a
promotion; the gate decides on the other 70.

The stack (vLLM, gateway, collector) is started in this process on free loopback ports with its own
state directory under `$LOOPLIFT_HOME/demo/<timestamp>`, so a demo never mixes with data from an
earlier run; only the base model is cached across runs. While a candidate is being promoted, a
background "canary" keeps sending requests to the alias; any failed request is counted and reported
(the target is zero).
"""

from __future__ import annotations

import asyncio
import dataclasses
import io
import secrets
import threading
import time
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Optional

import httpx

import sdk
from sdk import looplift_home
from sdk.infra import atomic_write, atomic_write_json
from trainer import BaseModelConfig, GRPOConfig, JobConfig, OnlineConfig, SFTConfig, evaluate, run_job

from ._model import tiny_model
from ._stack import Stack, StackConfig

if TYPE_CHECKING:
    from rich.progress import Progress

    from sandboxes import SandboxPool
    from trainer import OnlineGRPO


#: `DemoConfig.algo` for online GRPO (rollouts during training). Not "grpo": that is `trainer run --algo grpo`,
#: offline GRPO on an export, and one name must not mean both.
ONLINE_GRPO = "online-grpo"
ALGOS = ("sft", ONLINE_GRPO)


@dataclass(frozen=True)
class DemoConfig:
    """The demo's knobs; defaults reproduce the README table."""

    cycles: int = 3
    episodes: int = 256
    """Rollouts per cycle on fresh training tasks."""
    held_out: int = 100
    seed: int = 0
    concurrency: int = 16
    base: BaseModelConfig = field(default_factory=BaseModelConfig)
    sft: SFTConfig = field(default_factory=SFTConfig)
    algo: str = "sft"
    """"sft" (rejection-sampling SFT per cycle) or "online-grpo" (online GRPO updates per cycle)."""
    grpo: GRPOConfig = field(default_factory=GRPOConfig)
    online: OnlineConfig = field(default_factory=lambda: OnlineConfig(app="demo"))
    task_pool: int = 2000
    """GRPO: training tasks the pass-rate sampler draws from (by kind: how many digits a task has)."""
    sandbox_backend: Optional[str] = None
    """"docker" or None (both: Docker, never a fallback), or "local" with `unsafe` (the local backend sees the host,
    so the rollouts and the gate could be passed by reading its files; `envs._pools`)."""
    unsafe: bool = False
    """Allow `sandbox_backend="local"` (`looplift demo --sandbox local --unsafe`)."""
    json_out: Path = Path("bench/results/demo.json")
    chart_out: Optional[Path] = None
    """Default: beside json_out, with a .png suffix."""
    before_stop: Optional[Callable[[dict[str, str]], None]] = None
    """Called with the running stack's `gateway`, `collector`, `admin_token` and `state` after the last cycle and
    before the stack stops (scripts/dashboard_screenshot.py photographs the dashboard there)."""

    def __post_init__(self) -> None:
        if self.algo not in ALGOS:
            raise ValueError(f"DemoConfig.algo must be one of {', '.join(ALGOS)}, not {self.algo!r} (online GRPO is "
                             f"{ONLINE_GRPO!r}; offline GRPO on an export is `trainer run --algo grpo`)")


@dataclass
class CycleRecord:
    cycle: int
    version: str
    held_out_success: float
    """On the gate's report split (tasks that never decide a promotion)."""
    episodes: int
    exported: int
    train_loss: Optional[float]
    promoted: bool
    seconds: float
    rollout_success: Optional[float] = None
    gate: Optional[str] = None
    gate_figures: Optional[dict[str, Any]] = None
    """The gate's test, n, discordant b/c, p-value, alpha, success rates and per-slice table."""
    rollouts_dropped: Optional[int] = None
    """GRPO: rollouts in groups that carried no signal (all rewards equal) or were too stale; never trained on."""
    split_s: Optional[dict[str, float]] = None
    """GRPO: the cycle's wall time by part (generation, environment, training, adapter, other, gate)."""
    updates: Optional[list[dict[str, Any]]] = None


class _Canary:
    """Concurrent traffic to the alias from just before a swap until just after it; counts failures.
    (Only around the flip: steady traffic during training would take CPU from the trainer.)"""

    def __init__(self, base_url: str, alias: str) -> None:
        self._url, self._alias = base_url, alias
        self._stop = threading.Event()
        self.sent = self.failed = 0
        self._lock = threading.Lock()
        self._threads = [threading.Thread(target=self._run, daemon=True) for _ in range(4)]

    def _run(self) -> None:
        with httpx.Client(timeout=30) as c:
            while not self._stop.is_set():
                body = {"model": self._alias, "messages": [{"role": "user", "content": "Compute: 1+1"}],
                        "max_tokens": 8}
                try:
                    r = c.post(self._url + "/v1/chat/completions", json=body)
                    ok = r.status_code == 200
                except httpx.HTTPError:
                    ok = False
                with self._lock:
                    self.sent += 1
                    self.failed += not ok

    def __enter__(self) -> "_Canary":
        for t in self._threads:
            t.start()
        deadline = time.monotonic() + 5
        while self.sent < 3 and time.monotonic() < deadline:  # traffic is in flight before the flip
            time.sleep(0.02)
        return self

    def __exit__(self, *exc: object) -> None:
        time.sleep(1.0)  # and keeps flowing while the old version drains
        self._stop.set()
        for t in self._threads:
            t.join()


def run_demo(config: DemoConfig, *, console: Any = None) -> dict[str, Any]:
    """Run the closed loop; returns (and writes) the JSON result. `console` is a rich Console."""
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    from collector import CollectorSettings
    from sandboxes import EngineUnavailableError, SandboxStartError, make_pool
    from server import GatewaySettings

    from envs import HOST_FIX, HOST_WARNING

    con = console or Console()
    t_start = time.monotonic()
    progress = Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                        console=con, transient=False)
    state = looplift_home() / "demo" / datetime.now(timezone.utc).strftime("%Y%m%dT%H%M%SZ")
    state.mkdir(parents=True)
    model_dir = tiny_model(con, config.base)

    backend = config.sandbox_backend or "docker"  # never a silent fallback to the local backend: it sees the host
    if backend == "local" and not config.unsafe:
        raise SandboxStartError(f"refusing to train and gate on the local sandbox backend: it sees this machine's "
                                f"files; {HOST_FIX}")
    con.print(f"sandboxes: [bold]{backend}[/bold]" + ("" if backend == "docker" else f" [yellow]({HOST_WARNING})[/yellow]"))
    admin_token = secrets.token_urlsafe(24)
    db_url = f"sqlite:///{state / 'collector.db'}"
    stack_config = StackConfig(
        model_dir=model_dir, gateway=GatewaySettings(admin_token=admin_token, state_dir=state / "server"),
        collector=CollectorSettings(db_url=db_url), gateway_port=0, collector_port=0, vllm_log=state / "vllm.log")
    con.print("starting vLLM (CPU build; ~40 s) ...")
    # Every part is a context manager: whatever ends the demo (an error, SIGTERM, Ctrl-C), each is stopped.
    try:
        first_pool = make_pool(backend, size=4)
    except EngineUnavailableError as e:
        raise EngineUnavailableError(f"{e}; the demo never falls back to the local backend: {HOST_FIX}") from e
    loop: Optional[_Loop] = None

    def result(finished: bool) -> dict[str, Any]:
        records = loop.records if loop else []
        return {
            "algo": config.algo,
            "finished": finished,
            "cycles": [r.__dict__ for r in records],
            "swap_requests": loop.canary_sent if loop else 0,
            "swap_failed_requests": loop.canary_failed if loop else 0,
            "sandbox_backend": backend,
            "base_model": str(model_dir),
            "total_seconds": round(time.monotonic() - t_start, 1),
            "state_dir": str(state),
            "json_out": str(config.json_out),
        }

    with first_pool as pool, Stack(stack_config) as stack, \
            sdk.CollectorClient(stack.collector.url, spool_dir=state / "spool") as client:
        con.print(f"gateway {stack.gateway.url}  collector {stack.collector.url}  state {state}")
        # Each finished cycle is written at once (`"finished": false` until the last): a demo stopped by a signal or
        # an error keeps the cycles it completed, and `looplift demo` prints them on the way out.
        loop = _Loop(config, progress, stack.gateway.url, admin_token, db_url, model_dir, state, pool, client,
                     on_cycle=lambda: _write(config, result(finished=False)))
        with progress:
            loop.run()
        if config.before_stop is not None:
            config.before_stop({"gateway": stack.gateway.url, "collector": stack.collector.url,
                                "admin_token": admin_token, "state": str(state)})
    final = result(finished=True)
    _write(config, final)
    return final


def read_partial(json_out: Path, since: float) -> Optional[dict[str, Any]]:
    """The cycles an unfinished demo started at `since` (`time.time()`) wrote to `json_out`; None when it wrote none
    (a file from an earlier run, or a finished one, is not its)."""
    import json

    try:
        if Path(json_out).stat().st_mtime < since:
            return None
        result = json.loads(Path(json_out).read_text())
    except (OSError, ValueError):
        return None
    ok = isinstance(result, dict) and result.get("finished") is False and isinstance(result.get("cycles"), list)
    return result if ok and result["cycles"] else None


@dataclass
class _Loop:
    """The cycles of one demo run on a started stack."""

    config: DemoConfig
    progress: Progress
    gateway_url: str
    admin_token: str
    db_url: str
    model_dir: Path
    state: Path
    pool: SandboxPool
    client: sdk.CollectorClient
    on_cycle: Callable[[], None] = lambda: None
    """Called after each cycle's record is appended (the demo writes its partial result there)."""
    records: list[CycleRecord] = field(default_factory=list)
    canary_sent: int = 0
    canary_failed: int = 0

    def run(self) -> None:
        from envs import arithmetic_suite

        cfg, progress = self.config, self.progress
        suite = arithmetic_suite(cfg.held_out, pool=self.pool)
        suite = dataclasses.replace(suite, sampling=dataclasses.replace(suite.sampling, seed=cfg.seed))
        t0 = time.monotonic()
        bar = progress.add_task("cycle 0: held-out eval", total=len(suite.tasks))
        res = asyncio.run(evaluate("policy", suite, base_url=self.gateway_url + "/v1", concurrency=cfg.concurrency,
                                   on_episode=lambda _t: progress.advance(bar)))
        # Held-out success is measured on the gate's report split throughout (cycles >= 1: `*_report_success`),
        # so that the figure for a promoted version never comes from the tasks that selected it.
        base = res.report_success()
        self.records.append(CycleRecord(0, self._serving(), res.success if base is None else base, 0, 0, None, False,
                                        round(time.monotonic() - t0, 1)))
        self.on_cycle()
        online = self._online(suite) if cfg.algo == ONLINE_GRPO else None
        for cycle in range(1, cfg.cycles + 1):
            self.records.append(self._cycle(cycle, suite, online))
            self.on_cycle()

    def _online(self, suite: sdk.EvalSuite) -> OnlineGRPO:
        """GRPO: one learner for the whole run (RL continues its policy; the gate decides what serves), its
        pass-rate estimates kept in the state directory."""
        from envs import training_tasks
        from server import AdminClient
        from trainer import GRPOLearner, OnlineGRPO, PassRateSampler

        cfg = self.config
        return OnlineGRPO(
            GRPOLearner(self.model_dir, cfg.grpo), pool=training_tasks(cfg.task_pool, seed=cfg.seed * 1000 + 1),
            env_factory=suite.env_factory, verifier=suite.verifier, gateway_url=self.gateway_url,
            admin=AdminClient(self.gateway_url, self.admin_token), adapters_dir=self.state / "grpo-adapters",
            sampler=PassRateSampler(self.state / "pass_rates.json", seed=cfg.seed, kind_of=digits),
            version=self._serving(), config=cfg.online, collector=self.client)

    def _cycle(self, cycle: int, suite: sdk.EvalSuite, online: Optional[OnlineGRPO] = None) -> CycleRecord:
        from envs import training_tasks
        from trainer import run_cycle

        cfg, progress = self.config, self.progress
        t0 = time.monotonic()
        # algo="sft": the job's own step. The online branch trains with `OnlineGRPO.job_step` instead (run_cycle).
        job_config = JobConfig(base_model_dir=self.model_dir, collector_db=self.db_url, gateway_url=self.gateway_url,
                               admin_token=self.admin_token, app="demo", eval="envs:arithmetic_suite",
                               eval_concurrency=cfg.concurrency, sft=cfg.sft, algo="sft", grpo=cfg.grpo,
                               runs_dir=self.state / "runs")
        canary = _Canary(self.gateway_url, "policy")
        grpo: dict[str, Any] = {}
        if online is None:
            tasks = training_tasks(cfg.episodes, seed=cfg.seed * 1000 + cycle)
            bar = progress.add_task(f"cycle {cycle}: rollouts", total=len(tasks))
            trajs = sdk.run(tasks, suite.env_factory, model="policy", verifier=suite.verifier, collector=self.client,
                            app="demo", base_url=self.gateway_url + "/v1", budget=suite.budget,
                            concurrency=cfg.concurrency,
                            sampling=dataclasses.replace(suite.sampling, seed=cfg.seed + cycle),
                            on_episode=lambda _t: progress.advance(bar))
            self.client.flush()
            rollout_success = sum(t.outcome.success for t in trajs if t.outcome) / len(trajs)
            spent = len(trajs)
            gate_bar = progress.add_task(f"cycle {cycle}: train + gate", total=1)
            job = run_job(job_config, suite=suite, trigger=f"demo cycle {cycle}", around_promote=lambda: canary)
        else:
            updates = max(1, cfg.episodes // (cfg.online.tasks_per_update * cfg.online.group_size))
            bar = progress.add_task(f"cycle {cycle}: GRPO updates", total=updates)
            gate_bar = progress.add_task(f"cycle {cycle}: gate", total=1)
            res = run_cycle(online, job_config, updates, suite=suite, around_promote=lambda: canary,
                            on_update=lambda _r: progress.advance(bar), trigger=f"demo cycle {cycle}")
            job, spent, rollout_success = res.job, res.rollouts_spent, res.rollout_success
            grpo = {"rollouts_dropped": res.rollouts_dropped, "split_s": res.split_s,
                    "updates": res.summary()["updates"]}
        progress.update(gate_bar, completed=1, description=f"cycle {cycle}: {job.status} ({job.reason})")
        self.canary_sent += canary.sent
        self.canary_failed += canary.failed
        success = job.candidate_report_success if job.promoted else job.serving_report_success  # not the selecting split
        return CycleRecord(cycle, self._serving(), success if success is not None else self.records[-1].held_out_success,
                           spent, job.exported, job.train_loss, job.promoted, round(time.monotonic() - t0, 1),
                           rollout_success=rollout_success, gate=job.reason, gate_figures=job.gate, **grpo)

    def _serving(self) -> str:
        from server import AdminClient

        return AdminClient(self.gateway_url, self.admin_token).versions().serving


def digits(task: sdk.Task) -> str:
    """The kind of an arithmetic task for the pass-rate sampler: how many digits it must copy."""
    return str(sum(c.isdigit() for c in str(task.data.get("expression", ""))))


def _write(config: DemoConfig, result: dict[str, Any]) -> None:
    out = Path(config.json_out)
    atomic_write_json(out, result)
    chart = Path(config.chart_out) if config.chart_out else out.with_suffix(".png")
    _chart(result, chart)
    result["chart"] = str(chart)


def _chart(result: dict[str, Any], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    cyc = result["cycles"]
    xs = [c["cycle"] for c in cyc]
    ys = [100 * c["held_out_success"] for c in cyc]
    fig, ax = plt.subplots(figsize=(6, 3.6), dpi=120)
    ax.plot(xs, ys, marker="o", color="#2b6cb0")
    for x, y, c in zip(xs, ys, cyc):
        ax.annotate(f"{y:.0f}%\n{c['version']}", (x, y), textcoords="offset points", xytext=(0, 8), ha="center",
                    fontsize=8)
    ax.set_xticks(xs)
    ax.set_ylim(0, 110)
    ax.set_xlabel("cycle (0 = base model)")
    ax.set_ylabel("held-out success (%)")
    ax.set_title(f"looplift demo ({result.get('algo', 'sft')}): held-out success per cycle")
    ax.grid(alpha=0.3)
    fig.tight_layout()
    buf = io.BytesIO()
    fig.savefig(buf, format="png")
    plt.close(fig)
    atomic_write(path, buf.getvalue())
