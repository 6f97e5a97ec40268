"""`trainer schedule`: run the retrain job when a trigger fires — a cron time, enough new data, drift.

Every `poll` seconds the scheduler looks at its triggers, in this order, and runs one job for the first
that fires (the job's record names it):

- **cron**: the next time of the cron expression (croniter; local time) has passed.
- **new data**: at least `new_data` scored trajectories of the app were ingested since the newest
  run's export snapshot (interrupted runs do not count: they are redone), counted in the collector's
  ingest order (`Store.ingest_mark`), so no clock step, of this host or the collector's, stalls or
  repeats it.
- **drift**: the serving version's live success rate — trajectories it served in the last
  `drift_window`, ingested since the newest run, with a verifier outcome, else the user ratings mapped
  from [-1, 1] to [0, 1] — is more than `drift` below what its gate measured (the newest run that
  evaluated that version), over at least `drift_min_episodes` episodes.

Jobs never overlap: `run_job` takes the job lock (`_lock`), so two schedulers (or a scheduler and a
cron-driven `trainer run`) on different hosts still run one job at a time; the loser records a
skipped run. `Scheduler.start_thread()` runs it beside a stack (`looplift up --retrain`); `stop()`
interrupts a running job at its next safe point (the serving version is left untouched).
Deliberately not here: catch-up of cron times missed while nothing ran (the next one is enough) and
backoff after failures (a failed run resets the new-data count; cron fires as written).
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from typing import TYPE_CHECKING, Any, Callable, Mapping, Optional

from . import _defaults as D
from ._interrupt import StopToken
from ._job import JobConfig, JobResult, failure_reason, run_job
from ._runs import default_runs_dir, last_export_mark, last_export_time, measured_success
from sdk import EvalSuite
from .errors import ConfigError, JobInterrupted

if TYPE_CHECKING:
    from collector import Store
    from server import AdminClient

Status = Callable[[str], None]


@dataclass(frozen=True)
class ScheduleConfig:
    """When to retrain; `[schedule]` in `looplift.toml`. At least one trigger must be set."""

    cron: Optional[str] = None
    """A cron expression (5 fields, croniter syntax, local time)."""
    new_data: Optional[int] = None
    """Retrain after this many new scored trajectories of the app."""
    drift: Optional[float] = None
    """Retrain when live success falls this far (absolute, 0-1) below the gate's measurement."""
    drift_window_s: float = D.DRIFT_WINDOW_S
    drift_min_episodes: int = D.DRIFT_MIN_EPISODES
    poll_s: float = D.POLL_S

    def __post_init__(self) -> None:
        if self.cron is None and self.new_data is None and self.drift is None:
            raise ConfigError("no trigger: pass --cron, --new-data or --drift (or set them under [schedule])")
        if self.cron is not None:
            check_cron(self.cron)
        if self.new_data is not None and self.new_data < 1:
            raise ConfigError(f"--new-data must be >= 1, got {self.new_data}")
        if self.drift is not None and not 0 < self.drift < 1:
            raise ConfigError(f"--drift must be in (0, 1) (a drop in success rate), got {self.drift}")


def check_cron(expr: str) -> None:
    """Raise `ConfigError` (one line, with an example) when `expr` is not a cron expression croniter parses."""
    from croniter import croniter

    if not croniter.is_valid(expr) or len(expr.split()) not in (5, 6):
        raise ConfigError(f"cron expression {expr!r} does not parse; write 5 fields: minute hour day-of-month month "
                          "day-of-week, e.g. '0 3 * * *' (03:00 daily) or '*/30 * * * *' (every 30 minutes)")


class Scheduler:
    """Watches the triggers and runs `run_job(job, suite=...)` when one fires (see the module docstring)."""

    def __init__(self, job: JobConfig, schedule: ScheduleConfig, suite: EvalSuite, *,
                 status: Optional[Status] = None, around_promote: Optional[Callable[[], Any]] = None,
                 now: Callable[[], datetime] = lambda: datetime.now().astimezone(),
                 admin: Optional[Callable[[], AdminClient]] = None, job_kwargs: Optional[Mapping[str, Any]] = None) -> None:
        """`now` is the clock the cron trigger reads; `admin` makes the `server.AdminClient` the drift
        trigger asks for the serving version; `job_kwargs` go to every `run_job` call (tests pass a
        gateway faked at its transport through both)."""
        self.job, self.schedule, self.suite = job, schedule, suite
        self._say = status or (lambda msg: None)
        self._around_promote = around_promote
        self._now = now
        self._admin = admin or self._default_admin
        self._job_kwargs = dict(job_kwargs or {})
        self.token = StopToken()
        self.results: list[JobResult] = []
        self._store: Optional[Store] = None
        self._next_cron: Optional[datetime] = self._cron_after(now()) if schedule.cron else None

    # ---- triggers ----------------------------------------------------------------------------------
    def _cron_after(self, t: datetime) -> datetime:
        from croniter import croniter

        assert self.schedule.cron is not None
        return croniter(self.schedule.cron, t).get_next(datetime)

    def _open_store(self) -> Store:
        if self._store is None:
            from collector import open_store

            self._store = open_store(self.job.collector_db)
        return self._store

    def _since_last_run(self) -> Optional[datetime]:
        return last_export_time(default_runs_dir(self.job.runs_dir))

    def new_data_count(self) -> int:
        """Scored trajectories of the app ingested since the newest run's export."""
        mark, since = last_export_mark(default_runs_dir(self.job.runs_dir))
        return int(self._open_store().window_stats(app=self.job.app, since=since, after_mark=mark).scored)

    def _default_admin(self) -> AdminClient:
        from server import AdminClient

        return AdminClient(self.job.gateway_url, self.job.admin_token)

    def drift_reading(self) -> Optional[dict[str, Any]]:
        """The drift figures (serving version, measured, live, episodes), or None when there is nothing to compare."""
        admin = self._admin()
        try:
            serving = admin.versions().serving
        finally:
            admin.close()
        measured = measured_success(default_runs_dir(self.job.runs_dir), serving)
        if measured is None:
            return None
        since = datetime.now(timezone.utc) - timedelta(seconds=self.schedule.drift_window_s)
        last = self._since_last_run()
        if last is not None and last > since:
            since = last  # what a run after the drift already looked at does not fire again
        w = self._open_store().window_stats(app=self.job.app, served_version=serving, since=since)
        if w.with_outcome >= self.schedule.drift_min_episodes:
            live, n, signal = w.success_rate, w.with_outcome, "success"
        elif w.with_feedback >= self.schedule.drift_min_episodes and w.mean_feedback is not None:
            live, n, signal = (w.mean_feedback + 1) / 2, w.with_feedback, "feedback"
        else:
            return None
        return {"serving": serving, "measured": measured[0], "run_id": measured[1], "live": live, "n": n,
                "signal": signal}

    def due(self) -> Optional[str]:
        """The trigger that fires now (its description), or None. Advances the cron clock when it fires."""
        now = self._now()
        if self._next_cron is not None and now >= self._next_cron:
            self._next_cron = self._cron_after(now)
            return f"cron '{self.schedule.cron}'"
        if self.schedule.new_data is not None:
            n = self.new_data_count()
            if n >= self.schedule.new_data:
                return f"new-data: {n} new scored trajectories (>= {self.schedule.new_data})"
        if self.schedule.drift is not None:
            d = self.drift_reading()
            if d is not None and d["live"] < d["measured"] - self.schedule.drift:
                return (f"drift: {d['serving']} live {d['signal']} {d['live']:.0%} over {d['n']} episodes < gate "
                        f"{d['measured']:.0%} (run {d['run_id']}) - {self.schedule.drift:.0%}")
        return None

    # ---- running -----------------------------------------------------------------------------------
    def tick(self) -> bool:
        """Look at the triggers once and run the job if one fires; returns whether a job ran. Its result is
        appended to `results`; a job that raised is reported by its own error ("disk full: ..." for a full disk),
        and `trainer runs` shows it as failed (recorded, or, when the disk took not even that, by its run lock)."""
        try:
            trigger = self.due()
        except Exception as e:  # a collector or gateway that is down must not kill the scheduler
            self._say(f"could not check the triggers: {type(e).__name__}: {e}")
            return False
        if trigger is None:
            return False
        self._say(f"trigger {trigger}: starting a retrain job")
        try:
            result = run_job(self.job, suite=self.suite, trigger=trigger, status=self._say, stop=self.token,
                             around_promote=self._around_promote, **self._job_kwargs)
        except JobInterrupted:
            raise
        except Exception as e:
            self._say(f"the retrain job failed: {failure_reason(e, default_runs_dir(self.job.runs_dir))} "
                      "(see `trainer runs`)")
            return True
        self.results.append(result)
        self._say(f"run {result.run_id}: {result.status} — {result.reason}")
        return True

    def run(self, *, max_runs: Optional[int] = None) -> None:
        """Tick every `poll_s` until `stop()` (or until `max_runs` jobs ran)."""
        ran = 0
        try:
            while not self.token.requested:
                ran += self.tick()
                if max_runs is not None and ran >= max_runs:
                    return
                self.token.wait(self.schedule.poll_s)
        finally:
            if self._store is not None:
                self._store.close()
                self._store = None

    def stop(self, reason: str = "the scheduler stopped") -> None:
        """Ask the loop to end and a running job to stop at its next safe point."""
        self.token.request(reason)

    def start_thread(self) -> "threading.Thread":
        """Run the loop in a daemon thread (stop it with `stop()` and join the thread)."""

        def loop() -> None:
            try:
                self.run()
            except JobInterrupted:
                pass

        thread = threading.Thread(target=loop, name="looplift-retrain", daemon=True)
        thread.start()
        return thread
