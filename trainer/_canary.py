"""The canary watch: decide a running canary from live outcomes, and roll back a promotion whose live signal falls.

The gateway only routes (`POST /admin/canary` sends a share of `policy` traffic to a candidate, sticky per
`X-Looplift-Session`); this loop decides. It runs here, in the trainer, because the trainer is the one
component that owns both signals the decisions compare — the collector's live outcomes per served version
(`Store.window_stats`, as the scheduler's drift trigger reads them) and what the offline gate measured for
each version (the run history, `_runs.measured_success`) — and it already talks to the gateway's admin API.
The gateway would need a collector read API and the gate's figures pushed to it; the collector imports
neither server nor trainer. Layers stay as they are: trainer -> server (AdminClient), collector.

Each `tick()` (every `poll_s`, in `trainer canary watch`, `looplift up`, or the retrain scheduler):

| state                                      | rule (defaults)                                             | action           |
|--------------------------------------------|-------------------------------------------------------------|------------------|
| canary running, either side < min_samples  | wait (30 episodes per side since the canary started)        | —                |
| candidate better, one-sided Fisher p<=alpha| exact test on successes/episodes of the two sides (0.05)    | promote          |
| candidate worse, one-sided Fisher p<=alpha | the same test, the other side                               | drop             |
| both sides >= max_samples, undecided       | not shown better live (400 per side)                        | drop             |
| promoted < watch.window_s ago (any)        | live success since the promotion < baseline - tolerance,    | rollback         |
|                                            | over >= watch.min_samples episodes (1 h, 30, 0.10)          |                  |

The signal of a side is its verifier success (episodes with an outcome) when both sides have outcomes,
else user ratings: a rating r in [-1, 1] counts as (r + 1) / 2 of a success (exact for thumbs up/down).
The watch's baseline is what the gate measured for the promoted version (the newest run that evaluated
it), else the candidate's live rate the canary promoted it on. Every decision goes to the gateway
(`POST /admin/canary/decision`) with its figures, which records it as a `canary` history event (the admin
API, `looplift status` and the dashboard show it); a decision about a state that changed meanwhile is
refused there (409) and simply re-judged on the next tick.

Deliberately left out: sequential-testing corrections (each tick tests again, so the real false-promotion
rate is above alpha; `max_samples` bounds how often it looks, and the offline gate has already passed),
per-slice live comparisons, and ramping the fraction up (start a new canary with a larger one).
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Literal, Optional

from sdk import fisher_p

from . import _defaults as D
from ._interrupt import StopToken
from ._runs import default_runs_dir, measured_success

if TYPE_CHECKING:
    from ._job import JobConfig
from .errors import ConfigError

Decision = Literal["promote", "drop", "rollback", "wait"]
Status = Callable[[str], None]


@dataclass(frozen=True)
class WatchConfig:
    """The watch after a promotion: for `window_s` seconds, roll back once `min_samples` episodes were served
    since the promotion and their live success is more than `tolerance` (absolute, 0-1) below the baseline."""

    window_s: float = D.CANARY_WATCH_S
    min_samples: int = D.CANARY_WATCH_MIN_SAMPLES
    tolerance: float = D.CANARY_WATCH_TOLERANCE

    def __post_init__(self) -> None:
        if self.window_s < 0 or self.min_samples < 1 or not 0.0 <= self.tolerance < 1.0:
            raise ConfigError(f"canary watch needs window_s >= 0, min_samples >= 1 and tolerance in [0, 1), got "
                              f"{self.window_s}, {self.min_samples}, {self.tolerance}")


@dataclass(frozen=True)
class CanaryConfig:
    """How the canary watch decides; `[canary]` in `looplift.toml`, flags of `trainer canary watch`.

    alpha: one-sided level of the live exact Fisher test (promote: better with p <= alpha; drop: worse);
    min_samples: episodes each side needs before any decision; max_samples: both sides this large and still
    undecided drops the candidate; watch: the rollback watch after a promotion; poll_s: seconds between ticks.
    """

    alpha: float = D.CANARY_ALPHA
    min_samples: int = D.CANARY_MIN_SAMPLES
    max_samples: int = D.CANARY_MAX_SAMPLES
    watch: WatchConfig = field(default_factory=WatchConfig)
    poll_s: float = D.CANARY_POLL_S

    def __post_init__(self) -> None:
        if not 0.0 < self.alpha < 1.0:
            raise ConfigError(f"canary alpha must be in (0, 1), got {self.alpha}")
        if not 1 <= self.min_samples <= self.max_samples:
            raise ConfigError(f"canary needs 1 <= min_samples <= max_samples, got {self.min_samples} and "
                              f"{self.max_samples}")
        if self.poll_s <= 0:
            raise ConfigError(f"canary poll_s must be > 0, got {self.poll_s}")


@dataclass(frozen=True)
class LiveSignal:
    """One version's live outcomes over a window: `successes` of `n` episodes by `signal`."""

    version: str
    signal: Literal["success", "feedback"]
    successes: int
    n: int

    @property
    def rate(self) -> Optional[float]:
        """successes / n, or None without episodes."""
        return self.successes / self.n if self.n else None


def live_signals(*windows: tuple[str, Any]) -> list[LiveSignal]:
    """`(version, collector.WindowStats)` pairs -> one `LiveSignal` each, all on the same signal: verifier
    success when every window has outcomes, else ratings mapped from [-1, 1] to a share of successes."""
    if all(w.with_outcome for _, w in windows):
        return [LiveSignal(v, "success", int(w.successes), int(w.with_outcome)) for v, w in windows]
    out = []
    for v, w in windows:
        n = int(w.with_feedback) if w.mean_feedback is not None else 0
        out.append(LiveSignal(v, "feedback", round((w.mean_feedback + 1) / 2 * n) if n else 0, n))
    return out


@dataclass(frozen=True)
class Verdict:
    """What the watch decided and the figures it decided on (sent to the gateway's history)."""

    decision: Decision
    version: str
    reason: str
    figures: dict[str, Any] = field(default_factory=dict)


def _pct(x: Optional[float]) -> str:
    return "n/a" if x is None else f"{x:.0%}"


def judge_canary(candidate: LiveSignal, serving: LiveSignal, config: CanaryConfig = CanaryConfig()) -> Verdict:
    """Promote, drop or wait on a running canary (the rule table in the module docstring)."""
    n_min = min(candidate.n, serving.n)
    figures: dict[str, Any] = {
        "test": "exact Fisher, one-sided", "signal": candidate.signal, "serving": serving.version,
        "candidate_successes": candidate.successes, "candidate_n": candidate.n, "candidate_rate": candidate.rate,
        "serving_successes": serving.successes, "serving_n": serving.n, "serving_rate": serving.rate,
        "alpha": config.alpha, "min_samples": config.min_samples, "max_samples": config.max_samples,
    }
    live = (f"live {candidate.signal} {_pct(candidate.rate)} of {candidate.n} vs {_pct(serving.rate)} of {serving.n} "
            f"on {serving.version}")
    if n_min < config.min_samples:
        return Verdict("wait", candidate.version, f"{live}: waiting for {config.min_samples} episodes per side", figures)
    p_better = fisher_p(candidate.successes, candidate.n, serving.successes, serving.n)
    p_worse = fisher_p(serving.successes, serving.n, candidate.successes, candidate.n)
    figures |= {"p_better": p_better, "p_worse": p_worse}
    tested = f"{live}, p(better)={p_better:.2g} p(worse)={p_worse:.2g} (alpha {config.alpha:g}, exact Fisher)"
    if p_better <= config.alpha:
        return Verdict("promote", candidate.version, f"canary better: {tested}", figures)
    if p_worse <= config.alpha:
        return Verdict("drop", candidate.version, f"canary worse: {tested}", figures)
    if n_min >= config.max_samples:
        return Verdict("drop", candidate.version,
                       f"canary not better after {config.max_samples} episodes per side: {tested}", figures)
    return Verdict("wait", candidate.version, f"undecided: {tested}", figures)


def judge_watch(live: LiveSignal, baseline: float, baseline_from: str,
                config: CanaryConfig = CanaryConfig()) -> Verdict:
    """Roll back or keep a promoted version by its live signal since the promotion (module docstring)."""
    watch = config.watch
    floor = baseline - watch.tolerance
    figures: dict[str, Any] = {"signal": live.signal, "live_successes": live.successes, "live_n": live.n,
                               "live_rate": live.rate, "baseline": baseline, "baseline_from": baseline_from,
                               "tolerance": watch.tolerance, "floor": floor, "min_samples": watch.min_samples}
    what = (f"live {live.signal} {_pct(live.rate)} of {live.n} since the promotion vs {baseline:.0%} measured by "
            f"{baseline_from} (floor {floor:.0%})")
    if live.n < watch.min_samples or live.rate is None:
        return Verdict("wait", live.version, f"{what}: waiting for {watch.min_samples} episodes", figures)
    if live.rate < floor:
        return Verdict("rollback", live.version, f"watch: {what}", figures)
    return Verdict("wait", live.version, f"holding: {what}", figures)


class CanaryWatch:
    """The decision loop (see the module docstring) against one gateway and one collector database."""

    def __init__(self, db_url: str, admin: Callable[[], Any], *, app: Optional[str] = None,
                 runs_dir: Optional[Path] = None, config: CanaryConfig = CanaryConfig(),
                 status: Optional[Status] = None, now: Callable[[], datetime] = lambda: datetime.now(timezone.utc)) -> None:
        """`admin` makes a `server.AdminClient` (closed after each tick); `app` limits the live episodes to one app."""
        self.db_url, self._admin, self.app = db_url, admin, app
        self.runs_dir = default_runs_dir(runs_dir)
        self.config = config
        self._say = status or (lambda msg: None)
        self._now = now
        self.token = StopToken()
        self.decisions: list[Verdict] = []
        self._store: Any = None
        self._last_wait = ""

    @classmethod
    def for_job(cls, job: "JobConfig", config: CanaryConfig, status: Optional[Status] = None) -> "CanaryWatch":
        """The watch beside a retrain job: its collector database, gateway, admin token, app and run history."""
        from ._job import _admin

        return cls(job.collector_db, lambda: _admin(job), app=job.app, runs_dir=job.runs_dir, config=config,
                   status=status)

    def _window(self, version: str, since: datetime) -> Any:
        if self._store is None:
            from collector import open_store

            self._store = open_store(self.db_url)
        return self._store.window_stats(app=self.app, served_version=version, since=since)

    def tick(self) -> Optional[Verdict]:
        """Judge the running canary, else the newest promotion's watch; act on a decision. Returns the verdict
        (decisions acted on are also appended to `decisions`), or None when there is nothing to judge."""
        admin = self._admin()
        try:
            view = admin.canary()
            verdict = self._judge_running(view) if view.canary is not None else self._judge_promotion(admin, view)
            if verdict is None or verdict.decision == "wait":
                if verdict is not None and verdict.reason != self._last_wait:
                    self._last_wait = verdict.reason
                    self._say(f"{verdict.version}: {verdict.reason}")
                return verdict
            admin.decide_canary(verdict.version, verdict.decision, verdict.reason, verdict.figures)
        finally:
            admin.close()
        self.decisions.append(verdict)
        self._say(f"{verdict.decision} {verdict.version}: {verdict.reason}")
        return verdict

    def _judge_running(self, view: Any) -> Verdict:
        c = view.canary
        cand, serv = live_signals((c.version, self._window(c.version, c.started_at)),
                                  (view.serving, self._window(view.serving, c.started_at)))
        verdict = judge_canary(cand, serv, self.config)
        verdict.figures["fraction"] = c.fraction
        return verdict

    def _judge_promotion(self, admin: Any, view: Any) -> Optional[Verdict]:
        history = admin.versions().history
        flip = next((h for h in reversed(history) if h.action in ("promote", "rollback", "restore")), None)
        if flip is None or flip.action != "promote" or flip.version != view.serving:
            return None
        if self._now() - flip.at > timedelta(seconds=self.config.watch.window_s):
            return None  # the watch window is over
        baseline = self._baseline(view.serving, history)
        if baseline is None:
            return None
        [live] = live_signals((view.serving, self._window(view.serving, flip.at)))
        verdict = judge_watch(live, baseline[0], baseline[1], self.config)
        verdict.figures["promoted_at"] = flip.at.isoformat()
        return verdict

    def _baseline(self, version: str, history: list[Any]) -> Optional[tuple[float, str]]:
        measured = measured_success(self.runs_dir, version)
        if measured is not None:
            return measured[0], f"the gate (run {measured[1]})"
        for h in reversed(history):
            if h.action == "canary" and h.canary == "promote" and h.version == version and h.figures:
                rate = h.figures.get("candidate_rate")
                if isinstance(rate, (int, float)):
                    return float(rate), "the canary"
        return None

    # ---- running -----------------------------------------------------------------------------------
    def run(self, *, max_decisions: Optional[int] = None) -> None:
        """Tick every `poll_s` until `stop()` (or until `max_decisions` decisions were acted on)."""
        try:
            while not self.token.requested:
                try:
                    self.tick()
                except Exception as e:  # a gateway or collector that is down must not end the watch
                    self._say(f"could not judge the canary: {type(e).__name__}: {e}")
                if max_decisions is not None and len(self.decisions) >= max_decisions:
                    return
                self.token.wait(self.config.poll_s)
        finally:
            self.close()

    def stop(self) -> None:
        """Ask the loop to end after its current tick."""
        self.token.request("the canary watch stopped")

    def start_thread(self) -> threading.Thread:
        """Run the loop in a daemon thread (stop it with `stop()` and join the thread)."""
        thread = threading.Thread(target=self.run, name="looplift-canary", daemon=True)
        thread.start()
        return thread

    def close(self) -> None:
        """Close the collector connection (the next tick reopens it)."""
        if self._store is not None:
            self._store.close()
            self._store = None
