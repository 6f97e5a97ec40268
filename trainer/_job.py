"""`trainer run`: one idempotent retrain job — lock, export, train, gate, publish.

Cron, a Kubernetes CronJob, `trainer schedule` and the demo call the same function. The pipeline:

    1. lock      one job per collector database (`_lock`); held -> recorded as skipped
    2. export    the train step's data (`TrainStep.export`, SFT: verified successes)
    3. nothing new?  same data + algorithm + its config as a decided run -> skipped (idempotence)
    4. train     `TrainStep.train` -> a LoRA adapter (the only algorithm-specific stage)
    5. load      the adapter into the gateway as a new, unserved version (refused -> PublishError); then the
                 candidates earlier runs left loaded (killed mid-publish, a refused unload) are unloaded
    6. gate      candidate and serving version on the app's eval suite, same tasks and seeds (`_gate`): errored
                 episodes re-run, still erroring -> recorded as failed, naming them (never a decision);
                 else the app's k-th gate (`_gate_ledger`, recorded before any promotion) tests the
                 selection split at alpha_k, and the held-out figures come from the report split
    7. promote   only if the gate says so (with `canary` set: start a canary of that share of the traffic
                 instead; the canary watch, `_canary`, then promotes or drops it from live outcomes); a rejected
                 candidate is unloaded from the gateway (a failed unload is a warning and a note in the reason,
                 never the run's failure: the decision stands)

A run's state lives in `<runs>/<run_id>/` (see `_runs`): the resolved config, the data, the adapter and
`result.json`, written last with the status, the reason and every gate figure. A stop request (SIGTERM,
a stopping scheduler) before the alias flip leaves the serving version untouched and the run recorded
as interrupted; its inputs count as new again, so the next trigger redoes it. A crash is recorded as
failed with the error, and re-raised.

A full disk is a failure like any other, recorded as failed with "disk full: ..." (the path, the bytes free
there). So that the disk that just filled up still takes that record, each run sets `RESULT_RESERVE_BYTES`
aside when it starts and gives them back just before writing its result. Should even the result not fit, the
job logs that and raises its own error, never the one from writing the record; the run lock (`_lock.RunLock`)
it drops on the way out then tells `trainer runs` that the run is not running any more.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import errno
import hashlib
import json
import logging
import os
import re
import secrets
import socket
import time
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, ContextManager, Optional

from sdk.infra import atomic_write_json

from . import _defaults as D
from . import _eval_cache as eval_cache
from ._eval import EvalResult, evaluate, suite_seed
from ._gate import GateConfig, gate
from ._gate_ledger import GateLedger
from ._interrupt import StopToken
from ._dist import DistConfig
from ._json import jsonable
from ._lock import JobLock, RunLock
from ._lora import free_space
from ._runs import default_runs_dir, last_decided, left_loaded, publish_run
from sdk import EvalSuite
from ._steps import JobContext, TrainStep
from ._train_steps import resolve_train_step
from .errors import DiskSpaceError, JobInterrupted, PublishError
from .dpo import DPOConfig
from .grpo import GRPOConfig
from .sft import SFTConfig

if TYPE_CHECKING:
    import openai

    from server import AdminClient, VersionsView

Status = Callable[[str], None]

#: Room a run sets aside when it starts (`result.reserve` in its directory) and gives back just before writing its
#: result, so that a disk that filled up meanwhile still takes the record of why the run failed. A result with its
#: gate's per-slice table takes a few KiB.
RESULT_RESERVE_BYTES = 256 << 10

log = logging.getLogger("looplift.trainer")


@dataclass(frozen=True)
class JobConfig:
    """Everything one retrain job needs; written as `config.json` in the run directory."""

    base_model_dir: Path
    """The HF directory vLLM serves as the base (the adapter is trained on top of it)."""
    collector_db: str
    """SQLAlchemy URL of the collector's database (the job reads the curated export from it)."""
    gateway_url: str = D.GATEWAY_URL
    gateway_wait_s: float = D.GATEWAY_CONNECT_WAIT_S
    """How long loading into and promoting on the gateway keep retrying while it refuses connections (a
    `looplift up` restarting); 0 fails at once."""
    admin_token: Optional[str] = field(default=None, repr=False)
    """Gateway admin token; default `$LOOPLIFT_ADMIN_TOKEN`, then `$LOOPLIFT_HOME/admin.token`. Never written."""
    alias: str = D.ALIAS
    app: Optional[str] = None
    """Only train on trajectories of this app (None: all apps)."""
    eval: Optional[str] = None
    """The eval suite: `PKG.MODULE:ATTR` or a prompt-suite JSONL file (recorded; `run_job(suite=)` overrides)."""
    algo: str = D.ALGO
    """The train step: a name in `TRAIN_STEPS` or `PKG.MODULE:ATTR`."""
    min_reward: float = D.MIN_REWARD
    """Rejection sampling: only trajectories with at least this reward are trained on."""
    min_score: Optional[float] = None
    """Instead of `min_reward`: only trajectories whose final score (verifier reward and/or user ratings, see
    `collector._score`) is at least this — what an app judged by its users' feedback trains on."""
    min_examples: int = D.MIN_EXAMPLES
    """Skip the run when fewer examples are exported."""
    holdout: Optional[float] = None
    """Export with this holdout fraction, so the tasks a from-holdout suite was built on never train."""
    gate: GateConfig = field(default_factory=GateConfig)
    eval_seed: Optional[int] = None
    """Sampling seed of the gate; default the suite's, else 0."""
    eval_concurrency: int = D.EVAL_CONCURRENCY
    sft: SFTConfig = field(default_factory=SFTConfig)
    dpo: DPOConfig = field(default_factory=DPOConfig)
    grpo: GRPOConfig = field(default_factory=GRPOConfig)
    runs_dir: Optional[Path] = None
    """Default `$LOOPLIFT_HOME/trainer/runs`."""
    canary: Optional[float] = None
    """When the gate passes, send this share (0-1) of the alias's traffic to the candidate instead of promoting
    it (status "canary"); the canary watch decides from live outcomes."""
    dist: DistConfig = field(default_factory=DistConfig)
    """Processes the train stage runs on (torchrun when > 1) and how the model is spread over them."""


@dataclass(frozen=True)
class JobResult:
    """What a run did; `result.json` in its directory and one row of `trainer runs`."""

    run_id: str
    status: str
    """"promoted", "canary" (gate passed, now a canary), "rejected" (the gate said no), "skipped", "interrupted"
    or "failed" (a crash, re-raised; or eval episodes that kept erroring, so the gate could not decide: recorded,
    not raised, and redone by the next trigger)."""
    reason: str
    trigger: str = "manual"
    algo: str = D.ALGO
    suite: Optional[str] = None
    started_at: Optional[str] = None
    finished_at: Optional[str] = None
    seconds: float = 0.0
    exported: int = 0
    exported_at: Optional[str] = None
    """When the export snapshot was taken, by this host's clock."""
    exported_mark: Optional[int] = None
    """The collector's ingest mark just before the export (`Store.ingest_mark`): the new-data trigger counts the
    trajectories stored after it."""
    data_sha256: Optional[str] = None
    input_key: Optional[str] = None
    """sha256 of (data, algorithm, its config): the same key as a decided run means nothing new."""
    train_loss: Optional[float] = None
    candidate: Optional[str] = None
    candidate_success: Optional[float] = None
    """On the gate's selection split (its n, b, c): the figure that selected, biased upward for a promoted one."""
    serving: Optional[str] = None
    serving_success: Optional[float] = None
    """On the gate's selection split."""
    gate: Optional[dict[str, Any]] = None
    """The gate's test, n, b/c, p-value, alpha and alpha_k (the app's k-th gate), success rates on both splits,
    per-slice table and errored tasks (`GateDecision.to_dict`), the seed, and errors/re-runs per version."""
    candidate_report_success: Optional[float] = None
    """On the report split, which never decides: the held-out success to report for the candidate."""
    serving_report_success: Optional[float] = None
    """On the report split: the held-out success to report for the serving version."""

    @property
    def promoted(self) -> bool:
        """Whether this run's candidate now serves."""
        return self.status == "promoted"

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready dict."""
        return dataclasses.asdict(self)


def _ingest_mark(db_url: str) -> int:
    from collector import open_store

    store = open_store(db_url)
    try:
        return store.ingest_mark()
    finally:
        store.close()


def _now() -> str:
    return datetime.now(timezone.utc).isoformat()


_RUN_ID_TIME_FORMAT = "%Y%m%dT%H%M%S%fZ"
_RUN_ID = re.compile(r"(\d{8}T\d{12}Z)-[0-9a-f]+")


def _input_key(step: TrainStep, config: JobConfig, data_sha: str) -> str:
    what = {"data": data_sha, "algo": step.name, "config": jsonable(step.config(config)),
            "base_model": str(config.base_model_dir)}
    return hashlib.sha256(json.dumps(what, sort_keys=True, default=str).encode()).hexdigest()


def _new_run_dir(runs: Path) -> tuple[str, Path]:
    runs.mkdir(parents=True, exist_ok=True)
    # Sortable by time, and after every run before it even when the clock was set back since (the newest run
    # is the one that sorts last: the new-data trigger, `trainer runs` and the unload of candidates read it
    # so); the suffix keeps two hosts starting in the same microsecond apart.
    at = datetime.now(timezone.utc)
    newest = max((m.group(1) for p in runs.iterdir() if (m := _RUN_ID.fullmatch(p.name))), default=None)
    if newest is not None:
        last = datetime.strptime(newest, _RUN_ID_TIME_FORMAT).replace(tzinfo=timezone.utc)
        at = max(at, last + timedelta(microseconds=1))
    run_id = at.strftime(_RUN_ID_TIME_FORMAT) + "-" + secrets.token_hex(2)
    run_dir = runs / run_id
    run_dir.mkdir()
    return run_id, run_dir


def _full_disk(e: BaseException) -> Optional[BaseException]:
    """`e`, or the error it was raised from or while handling, that says the disk is full (or the quota spent)."""
    seen: set[int] = set()
    cur: Optional[BaseException] = e
    while cur is not None and id(cur) not in seen:
        seen.add(id(cur))
        if isinstance(cur, DiskSpaceError) or (isinstance(cur, OSError) and cur.errno in (errno.ENOSPC, errno.EDQUOT)):
            return cur
        cur = cur.__cause__ or cur.__context__
    return None


def failure_reason(e: BaseException, where: Path) -> str:
    """What a failed run records about `e`: for a full disk "disk full: ..." with the path and the bytes free on
    its disk (`where` stands in for the path when the error names none: a write to an open file), so the operator
    knows what to free; otherwise the error's type and message."""
    full = _full_disk(e)
    if full is None:
        return f"{type(e).__name__}: {e}"
    if isinstance(full, DiskSpaceError):  # refused before writing (`_lora.ensure_room`): it names path and room
        return f"disk full: {full}"
    filename = getattr(full, "filename", None)
    path = Path(os.fsdecode(filename)) if isinstance(filename, (str, bytes)) else where
    try:
        disk, free = free_space(path)
        room = f"{free} bytes free on the disk holding {disk}"
    except OSError:
        room = "free space unknown"
    return (f"disk full: writing {path} failed ({getattr(full, 'strerror', None) or full}); {room}; free space "
            "there (old adapters, exports, logs under $LOOPLIFT_HOME) and the next trigger redoes this run")


class _Recorder:
    """Writes a run's records (see `_runs`). Created when the run starts: `run.json`, `config.json` and the
    room its result will need (`result.reserve`); a disk too full for them raises `DiskSpaceError` and leaves
    no run directory behind. `record(result)` writes `result.json` into that room; when even that fails it
    logs why and returns, so that the caller raises its own error, not this one."""

    def __init__(self, config: JobConfig, run_dir: Path, started: dict[str, Any]) -> None:
        self.config, self.run_dir, self.t0 = config, run_dir, time.monotonic()
        self._reserve = run_dir / "result.reserve"
        try:
            atomic_write_json(run_dir / "run.json", started)
            atomic_write_json(run_dir / "config.json", jsonable(config))
            _set_aside(self._reserve, RESULT_RESERVE_BYTES)
        except OSError as e:
            import shutil

            shutil.rmtree(run_dir, ignore_errors=True)  # no half-started run for `trainer runs` to show
            if _full_disk(e) is None:
                raise
            raise DiskSpaceError(f"cannot start a retrain run: {failure_reason(e, run_dir)}") from e

    def record(self, result: JobResult) -> JobResult:
        """Write `result` (with its end time) as the run's `result.json` and hand it to the collector."""
        result = dataclasses.replace(result, finished_at=_now(), seconds=round(time.monotonic() - self.t0, 2))
        with contextlib.suppress(OSError):
            self._reserve.unlink(missing_ok=True)  # its room is where the result goes on a full disk
        try:
            atomic_write_json(self.run_dir / "result.json", result.to_dict())
        except OSError as e:
            log.error("could not record run %s as %s (%s): %s; `trainer runs` shows it as failed once this job "
                      "has ended", result.run_id, result.status, result.reason, e)
        publish_run(self.config.collector_db, result.to_dict())
        return result


def _set_aside(path: Path, size: int) -> None:
    """Take `size` bytes of the disk as the file `path` (allocated, not just sized: a sparse file reserves nothing)."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        try:
            os.posix_fallocate(fd, 0, size)
        except OSError as e:
            if e.errno in (errno.ENOSPC, errno.EDQUOT):
                raise
            os.write(fd, bytes(size))  # a file system without fallocate
    finally:
        os.close(fd)


def run_job(
    config: JobConfig,
    *,
    suite: Optional[EvalSuite] = None,
    trigger: str = "manual",
    status: Optional[Status] = None,
    around_promote: Optional[Callable[[], ContextManager[Any]]] = None,
    stop: Optional[StopToken] = None,
    train_step: Optional[TrainStep] = None,
    admin: Optional[AdminClient] = None,
    chat_client: Optional[openai.AsyncOpenAI] = None,
) -> JobResult:
    """Run one retrain job and record it (see the module docstring); returns what it did.

    `suite` is the eval suite (default: loaded from `config.eval`). `trigger` is recorded ("manual",
    "cron '0 3 * * *'", "new-data: 512 new", "drift: ..."). `around_promote` wraps the alias flip (the demo
    keeps traffic flowing through it). `stop` is checked at every safe point. `train_step` overrides
    `config.algo`; `admin` (a `server.AdminClient`) and `chat_client` (an `openai.AsyncOpenAI`) replace
    the ones made from `config.gateway_url` (tests fake the gateway at their transport).

    Raises:
        PublishError: the gateway refused the adapter, or could not be reached (the message names the run).
        SuiteError / ConfigError: the suite or the algorithm cannot be loaded.
        JobInterrupted: a stop was requested; the run is recorded as interrupted first.
        DiskSpaceError: the disk has no room for even the run's start records (nothing is left behind).
        Any other error of a stage is re-raised as it is, after the run is recorded as failed (on a full
        disk as "disk full: ..."); an error writing that record is logged, never raised in its place.
    """
    say = status or (lambda msg: None)
    token = stop or StopToken()
    step = train_step or resolve_train_step(config.algo)
    if suite is None:
        from ._suites import load_suite

        suite = load_suite(config.eval)
    runs = default_runs_dir(config.runs_dir)
    run_id, run_dir = _new_run_dir(runs)
    base = JobResult(run_id, "running", "", trigger=trigger, algo=step.name, suite=suite.name, started_at=_now())
    with RunLock(run_dir) as alive:  # held until the job ends, whether or not its result could be written
        rec = _Recorder(config, run_dir, {"run_id": run_id, "started_at": base.started_at, "trigger": trigger,
                                          "algo": step.name, "suite": suite.name, "host": socket.gethostname(),
                                          "pid": os.getpid(), "run_lock": alive.held})
        lock = JobLock(config.collector_db, runs)
        if not lock.try_acquire():
            return rec.record(dataclasses.replace(base, status="skipped", reason=f"another retrain job is running "
                                                  f"({lock.description}, held by {lock.holder()})"))
        run = _Run(JobContext(config=config, run_id=run_id, run_dir=run_dir, say=say, check_stop=token.check), step,
                   suite, base, token, admin, chat_client, around_promote)
        with lock:
            try:
                token.check()
                result = run.pipeline()
            except (JobInterrupted, KeyboardInterrupt) as e:
                rec.record(dataclasses.replace(run.partial, status="interrupted",
                                               reason=f"interrupted by {e or type(e).__name__} while {run.stage}; the "
                                                      "serving version is untouched and the next trigger redoes this run"))
                raise
            except Exception as e:
                rec.record(dataclasses.replace(run.partial, status="failed", reason=failure_reason(e, run_dir)))
                raise
            return rec.record(result)  # inside the job lock: the next job sees this run decided


@dataclass
class _Run:
    """One run between taking the lock and recording its result; `partial` is what it has done so far
    (recorded as it is when the run is interrupted or fails), `stage` what it is doing now."""

    ctx: JobContext
    step: TrainStep
    suite: EvalSuite
    partial: JobResult
    token: StopToken
    admin: Optional[AdminClient]
    chat_client: Optional[openai.AsyncOpenAI]
    around_promote: Optional[Callable[[], ContextManager[Any]]]
    stage: str = "starting"

    def _enter(self, stage: str, **done: Any) -> None:
        self.token.check()
        self.stage = stage
        self.partial = dataclasses.replace(self.partial, **done)
        self.ctx.say(stage)

    def pipeline(self) -> JobResult:
        cfg, ctx = self.ctx.config, self.ctx
        admin = self.admin or _admin(cfg)  # a missing admin token fails here, not after training
        self._enter(f"exporting training data ({self.step.name})")
        exported_at, mark = _now(), _ingest_mark(cfg.collector_db)
        data = self.step.export(ctx)
        key = _input_key(self.step, cfg, data.sha256)
        self.partial = dataclasses.replace(self.partial, exported=data.count, exported_at=exported_at,
                                           exported_mark=mark,
                                           data_sha256=data.sha256, input_key=key)
        last = last_decided(default_runs_dir(cfg.runs_dir), key)
        if last is not None:
            return dataclasses.replace(self.partial, status="skipped",
                                       reason=f"no new data since run {last['run_id']} ({last['status']})")
        if data.count < cfg.min_examples:
            return dataclasses.replace(self.partial, status="skipped",
                                       reason=f"only {data.count} examples (< {cfg.min_examples})")

        self._enter(f"training ({self.step.name}) on {data.count} examples")
        trained = self.step.train(ctx, data)
        self._enter("loading the candidate into the gateway", train_loss=trained.train_loss)
        try:
            loaded = admin.load(str(trained.adapter_dir))
            view = admin.versions()
        except Exception as e:
            raise PublishError(f"could not load the adapter from run {ctx.run_id} into the gateway "
                               f"({trained.adapter_dir}): {e}") from e
        candidate, serving = loaded.name, view.serving
        self._unload_left_behind(admin, view)
        weights = {v.name: v.adapter_path or f"base:{cfg.base_model_dir}" for v in view.versions}

        self._enter(f"gate: {candidate} vs {serving} on {len(self.suite.tasks)} tasks of suite {self.suite.name!r}",
                    candidate=candidate, serving=serving)
        cand, serv = asyncio.run(self._evaluate_both(candidate, serving, weights))
        ledger = GateLedger(default_runs_dir(cfg.runs_dir), cfg.app)
        with ledger.locked() as k:
            decision = gate(cand.outcomes, serv.outcomes, slices=cand.slices, config=cfg.gate, k=k,
                            candidate_errors=cand.errored, serving_errors=serv.errored)
            if decision.tested:  # spent before any promotion (`_gate_ledger`)
                ledger.record(decision, ctx.run_id)
        self.partial = dataclasses.replace(
            self.partial, candidate_success=decision.candidate_success, serving_success=decision.serving_success,
            candidate_report_success=decision.candidate_report_success,
            serving_report_success=decision.serving_report_success,
            gate=decision.to_dict() | {"seed": cand.seed, "errors": {"candidate": cand.errors, "serving": serv.errors},
                                       "retried": {"candidate": cand.retried, "serving": serv.retried}})
        if decision.errored:  # no decision: not "rejected", so the next trigger redoes the run
            return dataclasses.replace(self.partial, status="failed", reason=f"gate could not decide: {decision.reason}")
        if not decision.promote:
            return dataclasses.replace(self.partial, status="rejected",
                                       reason=decision.reason + self._unload_rejected(admin, candidate))
        if cfg.canary is not None:
            self._enter(f"starting a canary of {candidate} at {cfg.canary:.0%}")
            admin.start_canary(candidate, cfg.canary)
            return dataclasses.replace(self.partial, status="canary",
                                       reason=f"gate passed; canary at {cfg.canary:.0%} of live traffic: {decision.reason}")
        self._enter(f"promoting {candidate}")
        with self.token.critical(), (self.around_promote() if self.around_promote else contextlib.nullcontext()):
            admin.promote(candidate)
        return dataclasses.replace(self.partial, status="promoted", reason=decision.reason)

    def _unload_left_behind(self, admin: AdminClient, view: VersionsView) -> None:
        """Unload the candidates earlier runs left loaded (`_runs.left_loaded`: a run killed mid-publish, a failed
        unload), so killed retrains do not pile adapters up in vLLM. Tidying never fails the run: a warning."""
        for name, run_id, status in left_loaded(default_runs_dir(self.ctx.config.runs_dir), view):
            self.ctx.say(f"unloading {name}, which run {run_id} ({status}) left loaded")
            try:
                admin.unload(name)
            except Exception as e:  # noqa: BLE001 - the next run tries again
                log.warning("run %s: could not unload %s (left loaded by run %s): %s", self.ctx.run_id, name, run_id, e)

    def _unload_rejected(self, admin: AdminClient, candidate: str) -> str:
        """Unload the rejected candidate from the gateway (its evaluation is over), else every rejected retrain would
        keep an adapter loaded in vLLM. Returns a note for the run's reason: empty when it is unloaded."""
        self.ctx.say(f"unloading the rejected candidate {candidate}")  # no stop check: the decision is made
        try:
            admin.unload(candidate)
        except Exception as e:  # noqa: BLE001 - the gate's decision stands whatever the gateway answers
            log.warning("run %s: could not unload the rejected candidate %s from the gateway: %s",
                        self.ctx.run_id, candidate, e)
            return (f"; the rejected candidate {candidate} is still loaded in the gateway (unloading it failed: {e}); "
                    f"unload it with `looplift server unload {candidate}`")
        return ""

    async def _evaluate_both(self, candidate: str, serving: str, weights: dict[str, str]) -> tuple[EvalResult, EvalResult]:
        cfg = self.ctx.config
        base_url = cfg.gateway_url.rstrip("/") + "/v1"
        runs = default_runs_dir(cfg.runs_dir)
        seed = suite_seed(self.suite, cfg.eval_seed)

        def tick(_t: Any) -> None:
            self.token.check()

        async def measure(version: str) -> EvalResult:
            key = eval_cache.cache_key(version, weights.get(version, ""), self.suite, seed)
            cached = eval_cache.load(runs, key)
            if cached is not None:  # gated before on this suite and seed (usually: last run's candidate)
                return cached
            # One version after the other: each gets the whole machine, and a stop lands between them too.
            res = await evaluate(version, self.suite, base_url=base_url, seed=seed, concurrency=cfg.eval_concurrency,
                                 on_episode=tick, client=self.chat_client, retries=cfg.gate.retries)
            eval_cache.save(runs, key, res)  # keeps nothing when a task errored: measured again next time
            return res

        return await measure(candidate), await measure(serving)


def _admin(config: JobConfig) -> AdminClient:
    from server import AdminClient

    return AdminClient(config.gateway_url, config.admin_token, connect_wait_s=config.gateway_wait_s)
