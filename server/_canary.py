"""Canary and automatic rollback: versions judged on their live traffic, decisions recorded with figures.

After the offline gate, a candidate can take a fraction of the alias's traffic (`POST /admin/canary
{"version", "fraction"}`; the routing is the registry's `CanaryRoute`). `CanaryController` then reads the
live signal of both versions from the collector (`GET /v1/live`: the trajectories each served since the
canary started, with their verifier outcomes and user ratings) every `poll_s`, and decides:

- once both sides have `min_episodes` with a signal: **drop** the canary if it is worse than the serving
  version with confidence (one-sided two-proportion z-test, p < `alpha`), else **promote** it;
- after `max_s` without enough signal: **drop** it (nothing shows it is safe; an operator can still promote).

After any promotion (a canary's, or `POST /admin/promote`), it **watches** the new version for `watch_s`:
the promoted version's live signal since the flip against the previous version's over the day before the
flip. Worse with confidence -> **automatic rollback** (history action `auto_rollback`); the watch ending
without that keeps the version (recorded too).

The signal is the verifier success rate when both sides have `min_episodes` outcomes, else the share of
positively rated trajectories when both have that many ratings (black-box apps report through feedback).
Every decision is a history event (`canary` / `auto_rollback`) with its figures, and is listed by
`GET /admin/canary`. The test, written out: with k/n successes per side, pooled p = (k_c+k_s)/(n_c+n_s),
z = (k_c/n_c - k_s/n_s) / sqrt(p (1-p) (1/n_c + 1/n_s)), p-value = Phi(z). With 30 episodes a side it
detects a ~30-point fall at alpha 0.05; raise `min_episodes` for a finer guard.

Deliberately not here: the routing (`_registry`), the offline gate (`trainer`), surviving a restart (a
restart forgets a canary and a watch: the serving version keeps serving), per-slice live comparisons.
"""

from __future__ import annotations

import asyncio
import logging
import math
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from typing import Any, Callable, Optional

from pydantic import BaseModel, Field

from ._collector_link import CollectorLink, CollectorUnavailable
from ._registry import Registry
from ._settings import CanaryConfig

log = logging.getLogger("looplift.server.canary")

#: How far back the watch looks for the previous version's baseline.
BASELINE_S = 86_400.0


class Decision(BaseModel):
    """One canary or watch decision."""

    at: datetime
    kind: str = Field(description="canary | watch")
    action: str = Field(description="promote | drop | rollback | keep")
    version: str = Field(description="the canary or the watched (promoted) version")
    against: str = Field(description="the version it was compared with")
    reason: str
    figures: dict[str, Any] = Field(default_factory=dict)


class CanaryView(BaseModel):
    """`GET /admin/canary`: the running canary, the running watch, and the decisions so far."""

    canary: Optional[dict[str, Any]] = None
    watch: Optional[dict[str, Any]] = None
    decisions: list[Decision] = Field(default_factory=list)


class CanaryRequest(BaseModel):
    """`POST /admin/canary` body."""

    version: str = Field(min_length=1)
    fraction: float = Field(gt=0, lt=1, description="share of the alias's requests the canary answers")


def compare(cand: dict[str, Any], base: dict[str, Any], min_episodes: int) -> Optional[dict[str, Any]]:
    """The one-sided test "`cand` is worse than `base`" on the live counts of `/v1/live`, or None while either
    side has fewer than `min_episodes` episodes with a signal (see the module docstring)."""
    if cand["with_outcome"] >= min_episodes and base["with_outcome"] >= min_episodes:
        signal, kc, nc, ks, ns = "success", cand["successes"], cand["with_outcome"], base["successes"], base["with_outcome"]
    elif cand["with_feedback"] >= min_episodes and base["with_feedback"] >= min_episodes:
        signal = "positive feedback"
        kc, nc, ks, ns = cand["positive_feedback"], cand["with_feedback"], base["positive_feedback"], base["with_feedback"]
    else:
        return None
    pc, ps = kc / nc, ks / ns
    pooled = (kc + ks) / (nc + ns)
    se = math.sqrt(pooled * (1 - pooled) * (1 / nc + 1 / ns))
    if se == 0:
        p_value = 1.0 if pc >= ps else 0.0
        z = 0.0
    else:
        z = (pc - ps) / se
        p_value = 0.5 * math.erfc(-z / math.sqrt(2))  # P(Z <= z): small when the candidate is clearly lower
    return {"signal": signal, "candidate": {"k": kc, "n": nc, "rate": round(pc, 4)},
            "baseline": {"k": ks, "n": ns, "rate": round(ps, 4)}, "z": round(z, 3), "p_value": p_value}


def _words(c: dict[str, Any], alpha: float) -> str:
    return (f"{c['signal']} {c['candidate']['rate']:.0%} (n={c['candidate']['n']}) vs {c['baseline']['rate']:.0%} "
            f"(n={c['baseline']['n']}), one-sided p={c['p_value']:.3g} (alpha {alpha})")


@dataclass
class _Watch:
    version: str
    previous: str
    since: datetime


def _now() -> datetime:
    return datetime.now(timezone.utc)


class CanaryController:
    """Polls the live signal and decides canaries and watches (see the module docstring). Lives on the
    gateway's event loop: `start()` in the lifespan, `stop()` at shutdown."""

    def __init__(self, registry: Registry, link: Callable[[], Optional[CollectorLink]], config: CanaryConfig) -> None:
        self.registry, self._link, self.config = registry, link, config
        self.watch: Optional[_Watch] = None
        self.decisions: list[Decision] = []
        self._task: Optional[asyncio.Task[None]] = None
        self._wake = asyncio.Event()
        registry.flip_listeners.append(self._flipped)

    def _flipped(self, action: str, serving: str, previous: str) -> None:
        if action == "promote" and self.config.watch_s > 0:
            self.watch = _Watch(serving, previous, _now())
        elif self.watch is not None and serving != self.watch.version:
            self.watch = None  # rolled back (by hand or by us) or promoted past: nothing left to watch

    def view(self) -> CanaryView:
        """What `GET /admin/canary` shows."""
        c = self.registry.canary
        canary = None if c is None else {"version": c.version, "fraction": c.fraction, "serving": c.serving,
                                         "started_at": c.started_at}
        w = self.watch
        watch = None if w is None else {"version": w.version, "previous": w.previous, "since": w.since,
                                        "until": w.since + timedelta(seconds=self.config.watch_s)}
        return CanaryView(canary=canary, watch=watch, decisions=list(self.decisions))

    # ---- the loop ------------------------------------------------------------------------------
    def start(self) -> None:
        """Start polling (idempotent)."""
        if self._task is None:
            self._task = asyncio.get_running_loop().create_task(self._run(), name="canary")

    def poke(self) -> None:
        """Look again now (a canary just started)."""
        self._wake.set()

    async def stop(self) -> None:
        """Stop polling."""
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
            self._task = None

    async def _run(self) -> None:
        while True:
            try:
                await self.tick()
            except CollectorUnavailable as e:
                log.warning("canary: live signal unavailable (%s); will retry", e)
            except Exception:
                log.exception("canary: unexpected error; will retry")
            self._wake.clear()
            try:
                await asyncio.wait_for(self._wake.wait(), self.config.poll_s)
            except asyncio.TimeoutError:
                pass

    async def tick(self) -> None:
        """Read the live signal once and take any decision that is due."""
        link = self._link()
        if link is None:
            return
        if self.registry.canary is not None:
            await self._judge_canary(link)
        if self.watch is not None:
            await self._judge_watch(link)

    # ---- decisions -----------------------------------------------------------------------------
    def _record(self, kind: str, action: str, version: str, against: str, reason: str, figures: dict[str, Any]) -> None:
        self.decisions.append(Decision(at=_now(), kind=kind, action=action, version=version, against=against,
                                       reason=reason, figures=figures))
        del self.decisions[:-200]
        log.warning("%s decision: %s %s (vs %s): %s", kind, action, version, against, reason)

    async def _judge_canary(self, link: CollectorLink) -> None:
        c = self.registry.canary
        assert c is not None
        cfg = self.config
        cand = await link.live(c.version, since=c.started_at, app=cfg.app)
        base = await link.live(c.serving, since=c.started_at, app=cfg.app)
        result = compare(cand, base, cfg.min_episodes)
        if result is None:
            if _now() - c.started_at < timedelta(seconds=cfg.max_s):
                return
            figures = {"candidate": cand, "baseline": base, "min_episodes": cfg.min_episodes}
            reason = (f"not enough live signal after {cfg.max_s:.0f} s (candidate {cand['with_outcome']} outcomes / "
                      f"{cand['with_feedback']} rated, serving {base['with_outcome']} / {base['with_feedback']}; "
                      f"{cfg.min_episodes} needed on each side)")
            self._record("canary", "drop", c.version, c.serving, reason, _jsonable(figures))
            await self.registry.end_canary(False, reason, _jsonable(figures))
            return
        worse = result["p_value"] < cfg.alpha
        reason = ("worse than the serving version: " if worse else "not worse than the serving version: ") \
            + _words(result, cfg.alpha)
        figures = _jsonable(result | {"alpha": cfg.alpha, "fraction": c.fraction})
        self._record("canary", "drop" if worse else "promote", c.version, c.serving, reason, figures)
        await self.registry.end_canary(not worse, reason, figures)

    async def _judge_watch(self, link: CollectorLink) -> None:
        w = self.watch
        assert w is not None
        cfg = self.config
        if self.registry.serving != w.version:
            self.watch = None
            return
        cand = await link.live(w.version, since=w.since, app=cfg.app)
        base = await link.live(w.previous, since=w.since - timedelta(seconds=BASELINE_S), until=w.since, app=cfg.app)
        result = compare(cand, base, cfg.min_episodes)
        if result is not None and result["p_value"] < cfg.alpha:
            reason = f"live signal fell after the promotion: {_words(result, cfg.alpha)}"
            figures = _jsonable(result | {"alpha": cfg.alpha})
            self._record("watch", "rollback", w.version, w.previous, reason, figures)
            self.watch = None
            await self.registry.rollback(automatic=True, detail=reason, figures=figures)
            return
        if _now() - w.since >= timedelta(seconds=cfg.watch_s):
            reason = ("kept: " + _words(result, cfg.alpha)) if result is not None else \
                f"kept: too little live signal in {cfg.watch_s:.0f} s to judge"
            self._record("watch", "keep", w.version, w.previous, reason,
                         _jsonable({"comparison": result, "candidate": cand, "baseline": base}))
            self.watch = None


def _jsonable(d: dict[str, Any]) -> dict[str, Any]:
    def conv(v: Any) -> Any:
        if isinstance(v, datetime):
            return v.isoformat()
        if isinstance(v, dict):
            return {k: conv(x) for k, x in v.items()}
        if isinstance(v, list):
            return [conv(x) for x in v]
        return v

    return {k: conv(v) for k, v in d.items()}
