"""Task-family benchmark: episodes per second with the oracle, 1 and 8 at a time, and where the time goes.

Run: `.venv/bin/python bench/families.py [--episodes 24] [--sandbox docker|local|both] [--json-out bench/results/envs.json]`
(on a shared machine under `flock /tmp/looplift-heavy.lock`).

For every family in `sandboxes.env_families()` (arithmetic, coding, and the others once they are in
this install) and each sandbox backend asked for, the family's oracle runs the same held-out tasks
through the ordinary loop (`sdk.run` with `policy=`: tools, budget, verifier), once with concurrency 1
and once with 8 (the family's pool holds 8 sandboxes then, `$LOOPLIFT_SANDBOX_POOL`). Reported per run:

  episodes/s        episodes / wall time of the whole run (after an unmeasured warm-up pass over the same tasks)
  sandbox s/ep      environment time per episode: the sum of its steps' `execute_seconds` (commands, file
                    edits, the workdir record), as the trajectories store it
  verifier s/ep     time in `verifier.verify` per episode (measured around the family's verifier)
  success           the oracle's success rate on these tasks (it must stay ~1.0 under load)

A family that cannot load here (a missing optional dependency) is reported with the reason and skipped.
Not measured here: model generation (a policy answers instantly), sandbox start-up (pools are warmed).
"""

from __future__ import annotations

import argparse
import datetime as dt
import os
import platform
import sys
import threading
import time
from pathlib import Path
from typing import Any

# The repository root goes first on sys.path: bench/ (the script's own directory, put first by Python)
# holds bench/sandboxes.py, which would shadow the `sandboxes` package.
_ROOT = Path(__file__).resolve().parent.parent
sys.path[:] = [str(_ROOT)] + [p for p in sys.path if Path(p or ".").resolve() != _ROOT]

from rich.console import Console  # noqa: E402
from rich.table import Table  # noqa: E402

import sdk  # noqa: E402
from envs import env_families  # noqa: E402
from sandboxes import choose_backend  # noqa: E402
from sdk.infra import atomic_write_json  # noqa: E402

PARALLEL = (1, 8)


class TimedVerifier:
    """Wraps a verifier and adds up the seconds spent in `verify` (thread-safe)."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self.seconds: list[float] = []
        self._lock = threading.Lock()

    def verify(self, task: sdk.Task, trajectory: sdk.Trajectory) -> sdk.Outcome:
        t0 = time.perf_counter()
        try:
            out: sdk.Outcome = self.inner.verify(task, trajectory)
            return out
        finally:
            with self._lock:
                self.seconds.append(time.perf_counter() - t0)


def run_family(load: Any, backend: str, episodes: int, parallel: int) -> dict[str, Any]:
    os.environ["LOOPLIFT_SANDBOX"] = backend
    os.environ["LOOPLIFT_SANDBOX_POOL"] = str(parallel)
    fam = load()
    try:
        tasks = fam.tasks("held_out", episodes, 0)
        oracle = fam.policies["oracle"]
        kw = dict(policy=oracle, budget=fam.budget, system_prompt=fam.system_prompt, tool_choice=fam.tool_choice)
        # Warm-up, unmeasured: the same tasks once, so pool start-up and first-use work (extraction builds and
        # caches each report's PDF) stay out of the measured window; coding and arithmetic keep no caches.
        sdk.run(tasks, fam.env_factory, verifier=fam.verifier, concurrency=parallel, **kw)
        timed = TimedVerifier(fam.verifier)
        t0 = time.perf_counter()
        trajs = sdk.run(tasks, fam.env_factory, verifier=timed, concurrency=parallel, **kw)
        wall = time.perf_counter() - t0
    finally:
        if fam.close is not None:
            fam.close()
    n = len(trajs)
    sandbox_s = sum(s.execute_seconds for t in trajs for s in t.steps)
    return {
        "backend": backend, "parallel": parallel, "episodes": n, "wall_s": round(wall, 3),
        "episodes_per_s": round(n / wall, 3),
        "sandbox_s_per_episode": round(sandbox_s / n, 4),
        "verifier_s_per_episode": round(sum(timed.seconds) / n, 4),
        "steps_per_episode": round(sum(len(t.steps) for t in trajs) / n, 2),
        "success_rate": round(sum(1 for t in trajs if t.outcome and t.outcome.success) / n, 4),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--episodes", type=int, default=24, help="held-out tasks per run")
    ap.add_argument("--sandbox", default="both", choices=["docker", "local", "both"])
    ap.add_argument("--families", default=None, help="comma-separated subset (default: every registered family)")
    ap.add_argument("--json-out", type=Path, default=_ROOT / "bench/results/envs.json")
    args = ap.parse_args()
    console = Console(width=150)
    backends = ["docker", "local"] if args.sandbox == "both" else [args.sandbox]
    if "docker" in backends and choose_backend(None).backend != "docker":
        console.print(f"[yellow]no Docker sandbox ({choose_backend(None).reason}); local only[/yellow]")
        backends = ["local"]
    wanted = set(args.families.split(",")) if args.families else None
    results: dict[str, Any] = {}
    for name, load in env_families().items():
        if wanted is not None and name not in wanted:
            continue
        try:
            probe = load()  # starts nothing: the families make their sandbox pools on first use
        except Exception as e:  # noqa: BLE001 - a family missing its optional deps is reported, not fatal
            results[name] = {"skipped": f"{type(e).__name__}: {e}"}
            continue
        if probe.close is not None:
            probe.close()
        rows = []
        for backend in backends:
            for parallel in PARALLEL:
                console.print(f"{name}: oracle, {backend}, {parallel} at a time ...")
                rows.append(run_family(load, backend, args.episodes, parallel))
        results[name] = {"runs": rows}
    table = Table("family", "backend", "parallel", "episodes/s", "sandbox s/ep", "verifier s/ep", "steps/ep", "success",
                  title="oracle episodes (held-out tasks)")
    for name, res in results.items():
        for r in res.get("runs", []):
            table.add_row(name, r["backend"], str(r["parallel"]), f"{r['episodes_per_s']:.2f}",
                          f"{r['sandbox_s_per_episode']:.3f}", f"{r['verifier_s_per_episode']:.3f}",
                          f"{r['steps_per_episode']:.1f}", f"{r['success_rate']:.0%}")
        if "skipped" in res:
            table.add_row(name, "-", "-", "-", "-", "-", "-", f"skipped: {res['skipped'][:60]}")
    console.print(table)
    out = {"when": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
           "machine": {"cpus": os.cpu_count(), "python": platform.python_version(), "platform": platform.platform()},
           "episodes_per_run": args.episodes, "families": results}
    atomic_write_json(args.json_out, out, indent=1)
    console.print(f"wrote {args.json_out}")


if __name__ == "__main__":
    main()
