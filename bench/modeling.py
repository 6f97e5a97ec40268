"""Modeling family: every reference policy on the held-out split, with Blender time vs grading time.

Run: `flock /tmp/looplift-heavy.lock .venv/bin/python bench/modeling.py [--n 68] [--json-out bench/results/modeling.json]`

Needs the 3D sandbox image (`looplift sandbox build-image --3d`). For each policy (oracle, noop, every
cheat) it runs `--n` held-out tasks through `sdk.run(..., policy=)` with the family's budget and
verifier, `--concurrency` at once, and reports success rate, mean reward, steps per episode, seconds of
episode (the Blender steps) and of grading (replay + trusted export + checks) per episode, and the
failures of policies that should not fail (the oracle) or should (every other one). Not measured here:
a real model.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import time
from pathlib import Path

# Run as a script: the repository root must come before bench/ (whose sandboxes.py would shadow the package).
_ROOT = Path(__file__).resolve().parent.parent
sys.path[:] = [str(_ROOT)] + [p for p in sys.path if Path(p or ".").resolve() != _ROOT / "bench"]

from rich.console import Console  # noqa: E402
from rich.table import Table  # noqa: E402

import sdk  # noqa: E402
from envs._modeling import family, tasks  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--n", type=int, default=68, help="held-out tasks per policy (max 68)")
    ap.add_argument("--policies", default="", help="comma-separated subset (default: all)")
    ap.add_argument("--concurrency", type=int, default=2)
    ap.add_argument("--json-out", type=Path, default=None)
    args = ap.parse_args()
    console = Console(width=120)
    fam = family(backend="docker", pool_size=args.concurrency)
    names = [p for p in args.policies.split(",") if p] or ["oracle", "noop", *fam.cheats()]
    sample = tasks("held_out", args.n, 0)
    rows = []
    load_before = os.getloadavg()  # the machine is shared: say how busy it was
    try:
        for name in names:
            t0 = time.monotonic()
            with console.status(f"{name}: {len(sample)} episodes"):
                trajs = sdk.run(sample, fam.env_factory, verifier=fam.verifier, budget=fam.budget,
                                policy=fam.policies[name], concurrency=args.concurrency,
                                system_prompt=fam.system_prompt)
            rows.append(_row(name, trajs, time.monotonic() - t0))
            console.print(f"{name}: success {rows[-1]['success_rate']:.3f}, reward {rows[-1]['mean_reward']:.3f} "
                          f"({rows[-1]['wall_s']:.0f} s)")
    finally:
        assert fam.close is not None
        fam.close()
    table = Table("policy", "episodes", "success", "mean reward", "steps/ep", "episode s", "grading s", "wall s",
                  title=f"modeling, held-out ({len(sample)} tasks)")
    for r in rows:
        table.add_row(r["policy"], str(r["episodes"]), f"{r['success_rate']:.3f}", f"{r['mean_reward']:.3f}",
                      f"{r['steps_mean']:.1f}", f"{r['episode_s_mean']:.2f}", f"{r['grading_s_mean']:.2f}",
                      f"{r['wall_s']:.0f}")
    console.print(table)
    for r in rows:
        for task_id, why in r["unexpected"][:5]:
            console.print(f"[red]{r['policy']} {task_id}[/red]: {why}")
    result = {"machine": {"python": platform.python_version(), "cpus": os.cpu_count() or 0,
                          "load_avg_before": [round(x, 2) for x in load_before],
                          "load_avg_after": [round(x, 2) for x in os.getloadavg()]},
              "n": len(sample), "concurrency": args.concurrency, "rows": rows}
    if args.json_out:
        args.json_out.write_text(json.dumps(result, indent=2) + "\n")
        console.print(f"wrote {args.json_out}")


def _row(name: str, trajs: list[sdk.Trajectory], wall: float) -> dict[str, object]:
    n = len(trajs)
    ok = [bool(t.outcome and t.outcome.success) for t in trajs]
    grading = [float(t.outcome.details.get("seconds", 0.0)) for t in trajs if t.outcome]
    episode = [sum(s.execute_seconds for s in t.steps) for t in trajs]
    expect = name == "oracle"
    unexpected = [(t.task_id, (t.outcome.error or "; ".join(t.outcome.details.get("failed", [])[:3])) if t.outcome
                   else "no outcome") for t, good in zip(trajs, ok) if good != expect]
    return {"policy": name, "episodes": n, "success_rate": round(sum(ok) / n, 4),
            "mean_reward": round(sum(t.outcome.reward for t in trajs if t.outcome) / n, 4),
            "steps_mean": round(statistics.mean(len(t.steps) for t in trajs), 2),
            "episode_s_mean": round(statistics.mean(episode), 3), "grading_s_mean": round(statistics.mean(grading), 3),
            "wall_s": round(wall, 1), "end_reasons": sorted({str(t.end_reason) for t in trajs}),
            "unexpected": unexpected}


if __name__ == "__main__":
    main()
