"""`looplift up --retrain CRON`: the retrain scheduler inside the stack, stopped with it.

`plan_retrain` runs before anything starts, so a bad cron expression, a `--eval` that does not import
or a suite without tasks is one line and nothing was started. `retrain_in_stack` then runs
`trainer.Scheduler` in a thread against the started gateway and collector; on the way out (Ctrl-C,
SIGTERM, an error) it asks a running job to stop — it stops at its next safe point with the serving
version untouched and the run recorded as interrupted — and waits for the thread before the stack
stops. The scheduler also runs when `looplift.toml` declares triggers under [schedule].

Beside it runs the canary watch (`trainer.CanaryWatch`, settings from `[canary]`): it promotes or drops a
canary started with `POST /admin/canary` from live outcomes, and rolls back a promotion whose live signal
falls below what the gate measured (see trainer/_canary.py for the rule and its defaults).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Callable, Optional

if TYPE_CHECKING:
    from sdk import EvalSuite
    from trainer import CanaryConfig, LoopliftConfig, ScheduleConfig, Scheduler

#: Seconds the stack waits for a running retrain job to stop (it stops at its next optimizer step or episode).
STOP_GRACE_S = 60.0


@dataclass(frozen=True)
class RetrainPlan:
    """What the scheduler will run, checked before the stack starts."""

    config: LoopliftConfig
    schedule: ScheduleConfig
    suite: EvalSuite
    """The suite the gate runs."""
    eval_spec: str
    canary: CanaryConfig
    """The canary watch's settings."""


def plan_retrain(config_path: Optional[Path], cron: Optional[str], eval_spec: Optional[str]) -> Optional[RetrainPlan]:
    """The retrain plan from `--retrain`, `--eval`, `--config` and looplift.toml; None when no trigger is set.
    Raises `trainer.TrainerError` (one line) for a bad cron, suite or config."""
    from trainer import canary_config, load_config, load_suite, schedule_config

    cfg = load_config(config_path)
    if cron is None and not any(cfg.schedule.get(k) is not None for k in ("cron", "new_data", "drift")):
        return None
    sched = schedule_config(cfg, cron=cron)
    spec = eval_spec if eval_spec is not None else cfg.trainer.get("eval")
    suite = load_suite(spec)  # raises SuiteError when no suite is named
    assert spec is not None
    return RetrainPlan(cfg, sched, suite, spec, canary_config(cfg))


@contextlib.contextmanager
def retrain_in_stack(plan: Optional[RetrainPlan], *, gateway_url: str, db_url: str, admin_token: str, model_dir: Path,
                     say: Callable[[str], None], grace_s: Optional[float] = None) -> Iterator[Optional[Scheduler]]:
    """Run the plan's scheduler in a thread for the block (nothing when `plan` is None); yields the Scheduler."""
    if plan is None:
        yield None
        return
    from trainer import CanaryWatch, Scheduler, job_config

    job = job_config(plan.config, admin_token=admin_token, eval=plan.eval_spec, gateway=gateway_url, db=db_url,
                     base_model=str(model_dir))
    scheduler = Scheduler(job, plan.schedule, plan.suite, status=lambda m: say(f"retrain: {m}"))
    thread = scheduler.start_thread()
    watch = CanaryWatch.for_job(job, plan.canary, status=lambda m: say(f"canary: {m}"))
    watch_thread = watch.start_thread()
    say(f"retrain: scheduler on (cron={plan.schedule.cron} new-data={plan.schedule.new_data} "
        f"drift={plan.schedule.drift}; suite {plan.suite.name!r}; history: `trainer runs`)")
    try:
        yield scheduler
    finally:
        watch.stop()
        scheduler.stop("the stack is stopping")
        watch_thread.join(grace_s if grace_s is not None else STOP_GRACE_S)
        thread.join(grace_s if grace_s is not None else STOP_GRACE_S)
        if thread.is_alive():
            say("retrain: the running job did not stop in time; it is left to the stack shutdown")
