"""Online GRPO: roll out through the SDK and the gateway, update, publish a new adapter name, repeat.

One update:
    tasks  = sampler.pick(pool, tasks_per_update)                    (pass-rate or uniform)
    trajs  = sdk.arun(each task x group_size, model=<newest version>) (real vLLM behind the gateway)
    groups = trajectories grouped by task, tagged with the policy step that sampled them
    stats  = learner.update(groups)                                  (grpo.py; uniform groups dropped first)
    save the adapter to a new directory, `AdminClient.load` it -> a new version name (never reused: vLLM's
    prefix cache can serve stale blocks for a reloaded name), and the next rollouts ask for that name

`sync` runs these one after another. `async` samples update k+1's rollouts while update k trains (in a
worker thread), with the version loaded when that sampling started; a batch may start only when it will
be at most `max_staleness` updates old when trained, so `max_staleness=0` is the sync loop. The gate and
promotion are not here: `job_step` is a train step of the retrain job (`run_job(..., train_step=)`), which
then gates the final adapter like any candidate, and `adopt` points the next rollouts at the version the
job loaded it as (`run_cycle` does both).

Every finished rollout also goes to the collector when one is given (the data loop keeps its record);
training reads the SDK's trajectories directly, so an anonymizer rewrite can never strip ids the
update needs. Wall time is attributed to generation / environment / training / adapter by a `Timeline`.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, ContextManager, Optional, Sequence

import httpx
import openai

import sdk
from sdk import EvalSuite, Task, Trajectory, Verifier
from sdk.infra import atomic_write_json

from ._job import JobConfig, JobResult, run_job
from ._rollouts import groups_from_trajectories
from ._sampler import Sampler
from ._steps import JobContext, TrainData, Trained, TrainStep
from ._timeline import Timeline, TimedTransport, timed_env
from .errors import ConfigError, PublishError
from .grpo import GRPOLearner, UpdateStats

if TYPE_CHECKING:
    from sdk import CollectorClient, Environment
    from server import AdminClient

MODES = ("sync", "async")
#: Per request; a long generation on a busy CPU server can take a while (the SDK uses the same bound).
REQUEST_TIMEOUT_S = 120.0


@dataclass(frozen=True)
class OnlineConfig:
    """How the online loop samples; written with each run."""

    group_size: int = 8
    """Rollouts per task (the G of GRPO)."""
    tasks_per_update: int = 8
    mode: str = "sync"
    """"sync" (generate, then train) or "async" (generate update k+1 while update k trains)."""
    max_steps: int = 4
    max_tokens: int = 64
    concurrency: int = 16
    app: str = "grpo"
    """App name the rollouts are recorded under in the collector."""


@dataclass
class UpdateRecord:
    """One update of the online loop, as the demo and the bench report it."""

    update: int
    sampled_by: str
    """The version that generated this update's rollouts."""
    rollouts: int
    dropped_uniform: int
    dropped_stale: int
    rollout_success: float
    trained: bool
    published: Optional[str]
    """The version name the new adapter was loaded as (None: not trained, or left to the job's gate)."""
    loss: Optional[float]
    behaviour_gap: Optional[float]
    split_turns: int
    generate_s: float
    train_s: float

    @classmethod
    def of(cls, n: int, version: str, trajs: Sequence[Trajectory], s: UpdateStats, published: Optional[str],
           generate_s: float) -> "UpdateRecord":
        ok = sum(bool(t.outcome and t.outcome.success) for t in trajs)
        return cls(n, version, s.rollouts, s.dropped_uniform, s.dropped_stale, round(ok / max(1, len(trajs)), 4),
                   s.trained, published, s.loss, s.behaviour_gap, s.split_turns, round(generate_s, 3), s.seconds)


class OnlineGRPO:
    """The online loop over one learner; `version` is the newest version the rollouts ask for."""

    def __init__(
        self,
        learner: GRPOLearner,
        *,
        pool: Sequence[Task],
        env_factory: Callable[[], Environment],
        verifier: Verifier,
        gateway_url: str,
        admin: AdminClient,
        adapters_dir: Path,
        sampler: Sampler,
        version: str,
        config: OnlineConfig = OnlineConfig(),
        collector: Optional[CollectorClient] = None,
        timeline: Optional[Timeline] = None,
        api_key: Optional[str] = None,
    ) -> None:
        if config.mode not in MODES:
            raise ConfigError(f"mode must be one of {', '.join(MODES)}, not {config.mode!r}")
        if config.group_size < 2:
            raise ConfigError(f"group_size must be >= 2 (GRPO compares rollouts of one task), got {config.group_size}")
        if len(pool) < config.tasks_per_update:
            raise ConfigError(f"the task pool has {len(pool)} tasks, fewer than tasks_per_update={config.tasks_per_update}")
        self.learner, self.pool, self.verifier, self.admin = learner, list(pool), verifier, admin
        self.config, self.sampler, self.collector = config, sampler, collector
        self.timeline = timeline or Timeline()
        self.env_factory = timed_env(env_factory, self.timeline)
        self.gateway_url, self.api_key = gateway_url.rstrip("/"), api_key
        self.adapters_dir = Path(adapters_dir)
        self._current = (version, learner.step)  # (version name, its policy step), swapped as one value
        self.updates = 0
        self.records: list[UpdateRecord] = []
        """The updates of the last `job_step` run."""

    @property
    def version(self) -> str:
        return self._current[0]

    def job_step(self, updates: int, *, on_update: Optional[Callable[[UpdateRecord], None]] = None) -> TrainStep:
        """The retrain job's train step: `updates` online updates (their rollouts are the run's data, so
        every run is new), then the adapter saved in the run directory, not loaded: the job loads it as
        its candidate, gates it and promotes it or not."""

        def export(ctx: JobContext) -> TrainData:
            plan = ctx.run_dir / "online.json"
            atomic_write_json(plan, {"updates": updates, "sampled_by": self.version, "config": asdict(self.config)})
            return TrainData(plan, updates * self.config.tasks_per_update * self.config.group_size, uuid.uuid4().hex)

        def train(ctx: JobContext, data: TrainData) -> Trained:
            def each(r: UpdateRecord) -> None:
                ctx.check_stop()
                if on_update is not None:
                    on_update(r)

            self.records = asyncio.run(self.run(updates, publish_last=False, on_update=each))
            adapter = self.learner.save(ctx.run_dir / "adapter", updates=self.records)
            losses = [r.loss for r in self.records if r.loss is not None]
            return Trained(adapter, losses[-1] if losses else None, sum(r.rollouts for r in self.records),
                           {"step": self.learner.step})

        return TrainStep("grpo", export, train, config=lambda cfg: cfg.grpo)

    def adopt(self, version: str) -> None:
        """The learner's current weights are served as `version` (the job loaded them): sample with it next."""
        self._current = (version, self.learner.step)

    async def run(self, updates: int, *, publish_last: bool = True,
                  on_update: Optional[Callable[[UpdateRecord], None]] = None) -> list[UpdateRecord]:
        """Run `updates` updates; the last adapter is published only if `publish_last` (a job gates it instead).
        `on_update` is called after each update (e.g. to advance a progress bar)."""
        http = httpx.AsyncClient(transport=TimedTransport(self.timeline), timeout=REQUEST_TIMEOUT_S)
        # openai types `http_client` as an httpx2 client only; it takes an httpx one too (openai/_httpx2.py).
        client = openai.AsyncOpenAI(base_url=self.gateway_url + "/v1", api_key=self.api_key or "looplift-no-key",
                                    http_client=http, max_retries=2)  # type: ignore[arg-type]
        try:
            if self.config.mode == "sync" or self.learner.config.max_staleness == 0:
                out = []
                for k in range(updates):
                    batch = await self._rollouts(client)
                    out.append(self._train(batch, publish_last or k < updates - 1, on_update))
                return out
            return await self._run_async(client, updates, publish_last, on_update)
        finally:
            await client.close()

    async def _run_async(self, client: openai.AsyncOpenAI, updates: int, publish_last: bool,
                         on_update: Optional[Callable[[UpdateRecord], None]]) -> list[UpdateRecord]:
        queue: asyncio.Queue[tuple[str, int, list[Trajectory], float]] = asyncio.Queue()
        done = asyncio.Condition()
        finished = 0
        lag = self.learner.config.max_staleness

        async def produce() -> None:
            for j in range(updates):
                async with done:  # batch j is trained after update j-1; it may be at most `lag` updates old then
                    await done.wait_for(lambda j=j: finished >= j - lag)  # type: ignore[misc]
                await queue.put(await self._rollouts(client))

        producer = asyncio.create_task(produce())
        out = []
        try:
            for k in range(updates):
                getter = asyncio.ensure_future(queue.get())
                await asyncio.wait({getter, producer}, return_when=asyncio.FIRST_COMPLETED)
                if producer.done() and producer.exception() is not None:  # no batch will come: raise its error
                    getter.cancel()
                    producer.result()
                batch = await getter
                out.append(await asyncio.to_thread(self._train, batch, publish_last or k < updates - 1, on_update))
                async with done:
                    finished = k + 1
                    done.notify_all()
            await producer
        finally:
            producer.cancel()
        return out

    async def _rollouts(self, client: openai.AsyncOpenAI) -> tuple[str, int, list[Trajectory], float]:
        cfg = self.config
        version, step = self._current
        tasks = self.sampler.pick(self.pool, cfg.tasks_per_update)
        t0 = time.monotonic()
        trajs = await sdk.arun(
            [t for t in tasks for _ in range(cfg.group_size)], self.env_factory, model=version, verifier=self.verifier,
            collector=self.collector, app=cfg.app, max_steps=cfg.max_steps, concurrency=cfg.concurrency,
            sampling=sdk.Sampling(max_tokens=cfg.max_tokens), client=client, metadata={"policy_step": step},
        )
        self.sampler.observe(trajs)
        return version, step, trajs, time.monotonic() - t0

    def _train(self, batch: tuple[str, int, list[Trajectory], float], publish: bool,
               on_update: Optional[Callable[[UpdateRecord], None]]) -> UpdateRecord:
        version, step, trajs, gen_s = batch
        self.updates += 1
        with self.timeline.busy("training"):
            stats = self.learner.update(groups_from_trajectories(trajs, policy_step=step))
        published = None
        if stats.trained and publish:
            with self.timeline.busy("adapter"):
                published = self.publish()
        record = UpdateRecord.of(self.updates, version, trajs, stats, published, gen_s)
        if on_update is not None:
            on_update(record)
        return record

    def publish(self) -> str:
        """Save the learner's adapter under a new directory and load it as a new version; rollouts use it next."""
        path = self.learner.save(self.adapters_dir / f"step-{self.learner.step:05d}")
        try:
            name: str = self.admin.load(str(path)).name
        except Exception as e:
            raise PublishError(f"the gateway refused the adapter of step {self.learner.step} ({path}): {e}") from e
        self._current = (name, self.learner.step)
        return name



@dataclass
class CycleResult:
    """One gated cycle of the online loop."""

    job: JobResult
    updates: list[UpdateRecord]
    rollouts_spent: int
    rollouts_dropped: int
    """Rollouts that never reached a backward pass: groups with equal rewards, or too stale."""
    rollout_success: float
    split_s: dict[str, float] = field(default_factory=dict)
    """Wall time by part: generation, environment, training, adapter, other (the updates), gate (the job
    after them: load the candidate, evaluate it and the serving version, promote)."""

    def summary(self) -> dict[str, Any]:
        return {"rollouts_spent": self.rollouts_spent, "rollouts_dropped": self.rollouts_dropped,
                "rollout_success": self.rollout_success, "split_s": self.split_s,
                "updates": [asdict(u) for u in self.updates]}


def run_cycle(
    online: OnlineGRPO,
    job: JobConfig,
    updates: int,
    *,
    suite: EvalSuite,
    around_promote: Optional[Callable[[], ContextManager[Any]]] = None,
    on_update: Optional[Callable[[UpdateRecord], None]] = None,
    trigger: str = "online grpo",
) -> CycleResult:
    """`updates` online updates as the train step of one retrain job (`job`), which gates the result on
    `suite` and promotes it or not; the next rollouts then use the version the job loaded it as."""
    t0 = time.monotonic()
    before = online.timeline.snapshot()
    inner = online.job_step(updates, on_update=on_update)
    train_split: dict[str, float] = {}

    def train(ctx: JobContext, data: TrainData) -> Trained:
        out = inner.train(ctx, data)
        train_split.update(online.timeline.split_since(before))
        return out

    step = TrainStep(inner.name, inner.export, train, inner.config)
    result = run_job(job, suite=suite, trigger=trigger, around_promote=around_promote, train_step=step)
    if result.candidate is not None:
        online.adopt(result.candidate)
    recs = online.records
    spent = sum(r.rollouts for r in recs)
    split = {**train_split, "gate": round(time.monotonic() - t0 - sum(train_split.values()), 3)}
    return CycleResult(result, recs, spent, sum(r.dropped_uniform + r.dropped_stale for r in recs),
                       round(sum(r.rollout_success * r.rollouts for r in recs) / max(1, spent), 4), split)
