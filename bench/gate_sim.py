"""The gate's false-promotion rate over repeated retrains, and its power, by simulation (no vLLM; seconds).

Run: `.venv/bin/python bench/gate_sim.py [--histories 2000] [--seed 0] [--json-out bench/results/gate_sim.json]`

The model. One *history* is one app's retrains against one serving version:

  - a suite of 100 tasks (the demo's size); task i has a true success probability p_i ~ U(0.1, 0.7)
    (mean 40%), the same for every version of the history: the candidates are *equal* to the serving version;
  - the serving version is evaluated once per history (the job caches that evaluation, so every gate of
    the history compares against the same draw: the gates are dependent, as they are in production);
    each retrain's candidate is a fresh draw from the same p_i (new weights, fresh sampling noise);
  - K = 20 retrains; a history *falsely promotes* when any of its first K gates promotes.

Power: a candidate 20 points better on every task (p_i + 0.2, mean 60%) against the history's serving
draw, as the app's k-th gate, for k = 1, 2, 5, 10, 20.

Policies, on the same draws in the same run:

  old         the gate before this change: fixed alpha 0.05 on all 100 tasks, every retrain
  new         `trainer._gate`: the k-th gate tests at alpha * 6/(pi^2 k^2) on the selection split
              (report_fraction 0.3: the tasks whose id hashes into the report split never decide)
  new 50/50   the same with report_fraction 0.5 (what a larger report split costs in power)

Decisions use the real code: `sdk.mcnemar_p` (tabulated), `trainer._gate.spending_level` and
`in_report_split`; for the first `--check` histories every decision of the new policy is also made by
`trainer.gate()` itself, and the two must agree. A rate's standard error is sqrt(r(1 - r)/histories); the
guarantee holds when the new policy's K = 20 rate is <= alpha + 3 standard errors of a rate of alpha.
"""

from __future__ import annotations

import argparse
import json
import math
import platform
import sys
import time
from pathlib import Path
from typing import Any

# Run as a script: the repository root holds the packages, and bench/ itself must not be on the path
# (bench/collector.py would shadow the `collector` package).
_ROOT = Path(__file__).resolve().parent.parent
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != _ROOT / "bench"]
sys.path.insert(0, str(_ROOT))

import numpy as np  # noqa: E402

from sdk import mcnemar_p  # noqa: E402
from trainer import GateConfig, gate  # noqa: E402
from trainer._gate import in_report_split, spending_level  # noqa: E402

TASKS = 100
K = 20
ALPHA = 0.05
P_LOW, P_HIGH = 0.1, 0.7
LIFT = 0.2
FALSE_AT = (1, 5, 20)
POWER_AT = (1, 2, 5, 10, 20)
TASK_IDS = [f"task-{i}" for i in range(TASKS)]


def _p_table(n: int) -> Any:
    """mcnemar_p(b, c) for every b + c <= n."""
    table = np.ones((n + 1, n + 1))
    for b in range(n + 1):
        for c in range(n + 1 - b):
            table[b, c] = mcnemar_p(b, c)
    return table


def _policies() -> list[dict[str, Any]]:
    all_tasks = np.ones(TASKS, dtype=bool)
    out: list[dict[str, Any]] = [{"name": "old: fixed alpha 0.05, all tasks", "selection": all_tasks,
                                  "level": lambda k: ALPHA, "report_fraction": 0.0}]
    for name, fraction in (("new: alpha spending, 70/30 split (default)", GateConfig().report_fraction),
                           ("new: alpha spending, 50/50 split", 0.5)):
        mask = np.array([not in_report_split(t, fraction) for t in TASK_IDS])
        out.append({"name": name, "selection": mask, "level": lambda k: spending_level(ALPHA, k),
                    "report_fraction": fraction})
    return out


def _decide(cand: Any, serv: Any, mask: Any, level: float, table: Any) -> Any:
    """The gate's rule, vectorized over histories: promote iff b > c and p <= level, on the masked tasks."""
    b = (cand & ~serv & mask).sum(axis=1)
    c = (~cand & serv & mask).sum(axis=1)
    return (b > c) & (table[b, c] <= level)


def simulate(histories: int = 2000, seed: int = 0, check: int = 50) -> dict[str, Any]:
    """Run the model of the module docstring; returns the figures (and `checked`: decisions compared with `gate()`)."""
    rng = np.random.default_rng(seed)
    table = _p_table(TASKS)
    p = rng.uniform(P_LOW, P_HIGH, size=(histories, TASKS))
    serving = rng.random((histories, TASKS)) < p  # one cached draw per history
    nulls = [rng.random((histories, TASKS)) < p for _ in range(K)]  # equal candidates, fresh noise each
    better = [rng.random((histories, TASKS)) < p + LIFT for _ in range(K)]
    policies = _policies()
    results: list[dict[str, Any]] = []
    checked = 0
    for pol in policies:
        promoted_by = np.zeros(histories, dtype=bool)
        false_at: dict[str, float] = {}
        power: dict[str, float] = {}
        for k in range(1, K + 1):
            level = pol["level"](k)
            promoted_by |= _decide(nulls[k - 1], serving, pol["selection"], level, table)
            if k in FALSE_AT:
                false_at[str(k)] = float(promoted_by.mean())
            if k in POWER_AT:
                power[str(k)] = float(_decide(better[k - 1], serving, pol["selection"], level, table).mean())
        results.append({"policy": pol["name"], "report_fraction": pol["report_fraction"],
                        "selection_tasks": int(pol["selection"].sum()), "false_promotion": false_at,
                        "false_promotion_se": {k: math.sqrt(r * (1 - r) / histories) for k, r in false_at.items()},
                        "power_plus20": power})
    # The vectorized rule against the gate itself, decision by decision (default split).
    cfg = GateConfig(alpha=ALPHA)
    mask = policies[1]["selection"]
    for h in range(min(check, histories)):
        serv = {t: bool(v) for t, v in zip(TASK_IDS, serving[h])}
        for k in range(1, K + 1):
            for draws in (nulls, better):
                cand = {t: bool(v) for t, v in zip(TASK_IDS, draws[k - 1][h])}
                fast = bool(_decide(draws[k - 1][h:h + 1], serving[h:h + 1], mask, spending_level(ALPHA, k), table)[0])
                real = gate(cand, serv, config=cfg, k=k)
                if real.promote != fast:
                    raise AssertionError(f"history {h}, gate {k}: gate() says {real.promote}, the simulation {fast} "
                                         f"({real.reason})")
                checked += 1
    bound = ALPHA + 3 * math.sqrt(ALPHA * (1 - ALPHA) / histories)
    new = results[1]["false_promotion"][str(K)]
    return {"model": {"tasks": TASKS, "p_i": f"U({P_LOW}, {P_HIGH})", "retrains": K, "lift": LIFT, "alpha": ALPHA,
                      "serving": "one draw per history (cached evaluation)", "candidates": "a fresh draw per retrain"},
            "histories": histories, "seed": seed, "policies": results, "checked_against_gate": checked,
            "guarantee": {"k": K, "new_false_promotion": new, "bound_alpha_plus_3se": bound, "holds": new <= bound}}


def table_lines(res: dict[str, Any]) -> list[str]:
    """The result as a plain-text table."""
    head = (f"{'policy':<46} {'sel':>4}  " + "  ".join(f"false K={k:<2}" for k in FALSE_AT) + "   "
            + "  ".join(f"pow k={k:<2}" for k in POWER_AT))
    lines = [head, "-" * len(head)]
    for r in res["policies"]:
        fp = "  ".join(f"{r['false_promotion'][str(k)]:>6.1%}±{r['false_promotion_se'][str(k)]:.1%}"
                       for k in FALSE_AT)
        pw = "  ".join(f"{r['power_plus20'][str(k)]:>8.1%}" for k in POWER_AT)
        lines.append(f"{r['policy']:<46} {r['selection_tasks']:>4}  {fp}   {pw}")
    g = res["guarantee"]
    lines.append(f"{res['histories']} histories, seed {res['seed']}: new policy's false promotion over K={g['k']} "
                 f"retrains {g['new_false_promotion']:.2%} <= alpha + 3 SE = {g['bound_alpha_plus_3se']:.2%}: "
                 f"{'holds' if g['holds'] else 'VIOLATED'}; {res['checked_against_gate']} decisions checked against "
                 f"trainer.gate()")
    return lines


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--histories", type=int, default=2000)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--check", type=int, default=50, help="histories whose decisions are also made by trainer.gate()")
    ap.add_argument("--json-out", type=Path, default=_ROOT / "bench" / "results" / "gate_sim.json")
    args = ap.parse_args()
    t0 = time.perf_counter()
    res = simulate(args.histories, args.seed, args.check)
    res["command"] = f"python bench/gate_sim.py --histories {args.histories} --seed {args.seed}"
    res["seconds"] = round(time.perf_counter() - t0, 2)
    res["python"], res["numpy"] = platform.python_version(), np.__version__
    print("\n".join(table_lines(res)))
    args.json_out.parent.mkdir(parents=True, exist_ok=True)
    args.json_out.write_text(json.dumps(res, indent=2) + "\n")
    print(f"wrote {args.json_out}")
    if not res["guarantee"]["holds"]:
        sys.exit(1)


if __name__ == "__main__":
    main()
