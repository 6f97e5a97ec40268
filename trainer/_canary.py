"""The canary watch: decide a running canary from live outcomes, and roll back a promotion whose live signal falls.

The gateway only routes (`POST /admin/canary` sends a share of `policy` traffic to a candidate, sticky per
`X-Looplift-Session`); this loop decides. It runs here, in the trainer, because the trainer is the one
component that owns both signals the decisions compare — the collector's live outcomes per served version
(`Store.window_stats`, as the scheduler's drift trigger reads them) and what the offline gate measured for
each version (the run history, `_runs.measured_success`) — and it already talks to the gateway's admin API.
The gateway would need a collector read API and the gate's figures pushed to it; the collector imports
neither server nor trainer. Layers stay as they are: trainer -> server (AdminClient), collector.

Each `tick()` (every `poll_s`, in `trainer canary watch`, `looplift up`, or the retrain scheduler):

| state                                       | rule (defaults)                                             | action           |
|---------------------------------------------|-------------------------------------------------------------|------------------|
| canary running, either side < min_samples   | wait (30 episodes per side since the canary started)        | —                |
| candidate better: E(better) >= 1/alpha      | always-valid e-value against "candidate <= serving" (20)    | promote          |
| candidate worse: E(worse) >= 1/alpha        | the same test against "candidate >= serving"                | drop             |
| both sides >= max_samples, undecided        | not shown better live (400 per side)                        | drop             |
| promoted < watch.window_s ago:              | always-valid e-value against "live since the promotion >=   | rollback         |
| E(fell) >= 1/alpha, live n >= min_samples   | reference - tolerance" (1 h, 30 episodes, 0.10)             |                  |

The e-values are `_sequential.log_e_greater` on the cumulative counts (its docstring has the rule and the
proof): a uniform prior on "the first rate is higher" over the likelihood maximised under the null. They
are valid at every look, so polling every 15 s costs nothing in error rate:

* an equal or worse candidate is promoted with probability <= alpha (0.05), whatever the cadence;
* an equal or better candidate is dropped *as worse* with probability <= alpha (the drop at `max_samples`
  claims only "not shown better", and is the price of stopping);
* a promoted version whose live rate is at most `tolerance` below the reference is rolled back with
  probability <= alpha.

Simulated at one look per episode (`bench/canary_sim.py`, docs/scheduling.md has the table): the
false-promotion and false-drop rates stay far below alpha at base rates 0.2, 0.5 and 0.8, where the
repeated Fisher test this replaced promoted an equal candidate about one time in five. The price is
power: a +10-point candidate is often not shown better within 400 episodes per side.

**The watch's reference** is the replaced version's live signal in the `watch.window_s` before the
promotion: the same live traffic, the version a rollback would restore, and data that did not decide the
promotion when the gate promoted directly (after a canary, the serving side's counts were part of the
decision; a promotion is likelier when they came out low, which biases the watch against rolling back,
never towards it). It is compared with the promoted version's live signal since the promotion: roll back
when the evidence that the live rate is more than `tolerance` below the reference reaches 1/alpha. The
tolerance is exact (`Fraction('0.1')`): 21/30 against 24/30 is within 10 points, not below by float
noise. What the gate measured offline (another population: the eval suite) is shown in the figures
(`gate_success`) and decides nothing live. The guarantee assumes the rates are steady over the two
windows; a traffic mix that shifts at the promotion moves both comparisons.

The signal of a side is its verifier success (episodes with an outcome) when both sides have outcomes,
else user ratings: a rating r in [-1, 1] counts as (r + 1) / 2 of a success (exact for thumbs up/down;
for other ratings the Bernoulli model, and so the guarantee, is an approximation). Every decision goes to
the gateway (`POST /admin/canary/decision`) with its figures (counts, rates, e-values, the anytime-valid
p-values 1/E as `p_better` / `p_worse`), which records it as a `canary` history event (the admin API,
`looplift status` and the dashboard show it); a decision about a state that changed meanwhile is refused
there (409) and simply re-judged on the next tick.

Deliberately left out: per-slice live comparisons, ramping the fraction up (start a new canary with a larger
one), and spending part of alpha on a final fixed-n test at `max_samples` (more power there, a second rule).
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from fractions import Fraction
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Literal, Optional

from . import _defaults as D
from ._interrupt import StopToken
from ._runs import default_runs_dir, measured_success
from ._sequential import e_figure, exact_margin, log_e_greater, log_threshold, p_figure

if TYPE_CHECKING:
    from collector import Store, WindowStats
    from server import AdminClient, CanaryView

    from ._job import JobConfig
from .errors import ConfigError

Decision = Literal["promote", "drop", "rollback", "wait"]
Status = Callable[[str], None]


@dataclass(frozen=True)
class WatchConfig:
    """The rollback watch after a promotion (the module docstring's rule).

    window_s: how long after a promotion it watches, and the length of the reference window before it (the
    replaced version's live episodes in the `window_s` before the promotion); min_samples: live episodes of
    the promoted version since the promotion before it may roll back; tolerance: how far (absolute, 0-1,
    read as the decimal written: 0.1 is exactly 1/10) the live rate may fall below the reference before a
    fall counts as evidence.
    """

    window_s: float = D.CANARY_WATCH_S
    min_samples: int = D.CANARY_WATCH_MIN_SAMPLES
    tolerance: float = D.CANARY_WATCH_TOLERANCE

    def __post_init__(self) -> None:
        if self.window_s < 0 or self.min_samples < 1 or not 0.0 <= self.tolerance < 1.0:
            raise ConfigError(f"canary watch needs window_s >= 0, min_samples >= 1 and tolerance in [0, 1), got "
                              f"{self.window_s}, {self.min_samples}, {self.tolerance}: set `watch`, `watch_min_samples` "
                              f"and `watch_tolerance` under [canary] in looplift.toml (or the --watch* flags)")


@dataclass(frozen=True)
class CanaryConfig:
    """How the canary watch decides; `[canary]` in `looplift.toml`, flags of `trainer canary watch`.

    alpha: error level of the always-valid tests (promote, drop as worse and roll back when the e-value
    reaches 1/alpha; each error has probability <= alpha at any polling cadence); min_samples: episodes each
    side needs before any decision; max_samples: both sides this large and still undecided drops the
    candidate; watch: the rollback watch after a promotion; poll_s: seconds between ticks.
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


def live_signals(*windows: tuple[str, WindowStats]) -> list[LiveSignal]:
    """`(version, collector.WindowStats)` pairs -> one `LiveSignal` each, all on the same signal: verifier
    success when every window has outcomes, else ratings mapped from [-1, 1] to a share of successes."""
    if all(w.with_outcome for _, w in windows):
        return [LiveSignal(v, "success", int(w.successes), int(w.with_outcome)) for v, w in windows]
    out = []
    for v, w in windows:
        mean = w.mean_feedback
        n = int(w.with_feedback) if mean is not None else 0
        out.append(LiveSignal(v, "feedback", round((mean + 1) / 2 * n) if mean is not None and n else 0, n))
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
    threshold = log_threshold(config.alpha)
    figures: dict[str, Any] = {
        "test": "always-valid e-value", "signal": candidate.signal, "serving": serving.version,
        "candidate_successes": candidate.successes, "candidate_n": candidate.n, "candidate_rate": candidate.rate,
        "serving_successes": serving.successes, "serving_n": serving.n, "serving_rate": serving.rate,
        "alpha": config.alpha, "threshold": 1 / config.alpha, "min_samples": config.min_samples,
        "max_samples": config.max_samples,
    }
    live = (f"live {candidate.signal} {_pct(candidate.rate)} of {candidate.n} vs {_pct(serving.rate)} of {serving.n} "
            f"on {serving.version}")
    if n_min < config.min_samples:
        return Verdict("wait", candidate.version, f"{live}: waiting for {config.min_samples} episodes per side", figures)
    better = log_e_greater(candidate.successes, candidate.n, serving.successes, serving.n)
    worse = log_e_greater(serving.successes, serving.n, candidate.successes, candidate.n)
    figures |= {"e_better": e_figure(better), "e_worse": e_figure(worse),
                "p_better": p_figure(better), "p_worse": p_figure(worse)}
    tested = (f"{live}, E(better)={e_figure(better):.3g} E(worse)={e_figure(worse):.3g} (decides at "
              f"{1 / config.alpha:g}, always-valid)")
    if better >= threshold:
        return Verdict("promote", candidate.version, f"canary better: {tested}", figures)
    if worse >= threshold:
        return Verdict("drop", candidate.version, f"canary worse: {tested}", figures)
    if n_min >= config.max_samples:
        return Verdict("drop", candidate.version,
                       f"canary not better after {config.max_samples} episodes per side: {tested}", figures)
    return Verdict("wait", candidate.version, f"undecided: {tested}", figures)


def judge_watch(live: LiveSignal, reference: LiveSignal, config: CanaryConfig = CanaryConfig()) -> Verdict:
    """Roll back or keep a promoted version: its live signal since the promotion (`live`) against the
    replaced version's before it (`reference`, same signal), by the module docstring's rule."""
    watch = config.watch
    margin = exact_margin(watch.tolerance)
    within = reference.n == 0 or live.n == 0 or (
        Fraction(live.successes, live.n) >= Fraction(reference.successes, reference.n) - margin)
    figures: dict[str, Any] = {
        "test": "always-valid e-value", "signal": live.signal, "live_successes": live.successes, "live_n": live.n,
        "live_rate": live.rate, "reference": reference.version, "reference_successes": reference.successes,
        "reference_n": reference.n, "reference_rate": reference.rate, "baseline": reference.rate,
        "baseline_from": f"{reference.version} live before the promotion", "tolerance": watch.tolerance,
        "floor": None if reference.rate is None else float(Fraction(reference.successes, reference.n) - margin),
        "within_tolerance": within, "alpha": config.alpha, "threshold": 1 / config.alpha,
        "min_samples": watch.min_samples,
    }
    what = (f"live {live.signal} {_pct(live.rate)} of {live.n} since the promotion vs {_pct(reference.rate)} of "
            f"{reference.n} on {reference.version} before it (tolerance {watch.tolerance:g})")
    if reference.n == 0:
        return Verdict("wait", live.version, f"{what}: no live episodes of {reference.version} before the promotion "
                                             f"to compare with", figures)
    if live.n < watch.min_samples:
        return Verdict("wait", live.version, f"{what}: waiting for {watch.min_samples} episodes", figures)
    fell = log_e_greater(reference.successes, reference.n, live.successes, live.n, margin)
    figures |= {"e_fell": e_figure(fell), "p_fell": p_figure(fell)}
    tested = f"{what}, E(fell)={e_figure(fell):.3g} (decides at {1 / config.alpha:g}, always-valid)"
    if fell >= log_threshold(config.alpha):
        return Verdict("rollback", live.version, f"watch: {tested}", figures)
    return Verdict("wait", live.version, f"holding: {tested}", figures)


class CanaryWatch:
    """The decision loop (see the module docstring) against one gateway and one collector database."""

    def __init__(self, db_url: str, admin: Callable[[], AdminClient], *, app: Optional[str] = None,
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
        self._store: Optional[Store] = None
        self._last_wait = ""

    @classmethod
    def for_job(cls, job: "JobConfig", config: CanaryConfig, status: Optional[Status] = None) -> "CanaryWatch":
        """The watch beside a retrain job: its collector database, gateway, admin token, app and run history."""
        from ._job import _admin

        return cls(job.collector_db, lambda: _admin(job), app=job.app, runs_dir=job.runs_dir, config=config,
                   status=status)

    def _window(self, version: str, since: datetime, until: Optional[datetime] = None) -> WindowStats:
        if self._store is None:
            from collector import open_store

            self._store = open_store(self.db_url)
        return self._store.window_stats(app=self.app, served_version=version, since=since, until=until)

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

    def _judge_running(self, view: CanaryView) -> Verdict:
        c = view.canary
        assert c is not None  # `tick` judges a running canary only
        cand, serv = live_signals((c.version, self._window(c.version, c.started_at)),
                                  (view.serving, self._window(view.serving, c.started_at)))
        verdict = judge_canary(cand, serv, self.config)
        verdict.figures["fraction"] = c.fraction
        return verdict

    def _judge_promotion(self, admin: AdminClient, view: CanaryView) -> Optional[Verdict]:
        history = admin.versions().history
        flip = next((h for h in reversed(history) if h.action in ("promote", "rollback", "restore")), None)
        if flip is None or flip.action != "promote" or flip.version != view.serving:
            return None
        if self._now() - flip.at > timedelta(seconds=self.config.watch.window_s):
            return None  # the watch window is over
        if flip.previous is None:
            return None  # nothing a rollback could restore
        reference_window = timedelta(seconds=self.config.watch.window_s)
        live, reference = live_signals((view.serving, self._window(view.serving, flip.at)),
                                       (flip.previous, self._window(flip.previous, flip.at - reference_window, flip.at)))
        verdict = judge_watch(live, reference, self.config)
        verdict.figures["promoted_at"] = flip.at.isoformat()
        measured = measured_success(self.runs_dir, view.serving)  # shown, not decided on: another population
        verdict.figures["gate_success"] = None if measured is None else measured[0]
        return verdict

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
