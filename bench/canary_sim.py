"""The canary's decision rules under simulation: error rates, power and time to decision, for the always-valid
rule (`trainer._sequential`, `trainer._canary`) and, measured in the same run as the baseline, the rule it
replaced (a one-sided exact Fisher test at alpha re-run on cumulative counts at every look).

    .venv/bin/python bench/canary_sim.py [--runs 4000] [--seed 0] [--fraction 0.5] [--every 1] [--out FILE]

The canary: each episode goes to the candidate with probability `fraction`, else to the serving version;
the rule looks after every `every` episodes (1: after every episode, the worst case for a rule that is not
sequentially valid), waits for `min_samples` (30) per side, and stops at `max_samples` (400) per side.
Rows per base rate p (0.2, 0.5, 0.8): false promotion and false drop-as-worse with both sides at p, power
(promotions) with the candidate at p + 0.10 and p + 0.20, and the median of all episodes (both sides) at
the decision. The rollback watch: a reference of `n_ref` (200) episodes of the replaced version at p, then
the promoted version's live episodes at p_live, looked at after each from the 30th to the 400th; false
rollbacks with p_live = p (no fall) and p_live = p - tolerance (a fall of exactly the tolerance, the worst
case the guarantee covers), power at falls of tolerance + 0.10 and + 0.20. The old watch's baseline is the
true reference rate (the gate measuring exactly the live rate: its best case).

The e-values are computed vectorised here (`log_e_greater_np`, the same formulas as
`trainer._sequential.log_e_greater`; tests/test_canary_sim.py checks the two agree and runs a smaller
version of this simulation as a test). Writes bench/results/canary_sim.json.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from fractions import Fraction
from pathlib import Path
from typing import Any, Callable

import numpy as np
from numpy.typing import NDArray

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from scipy.special import gammaln  # noqa: E402  (after the path: bench scripts run from anywhere)

RESULTS = ROOT / "bench" / "results" / "canary_sim.json"
Ints = NDArray[np.int64]
Floats = NDArray[np.float64]
Bools = NDArray[np.bool_]


# ---- the arithmetic, vectorised ----------------------------------------------------------------------
_TABLE = 1 << 14  # counts up to here are looked up: log k! and k log k
_LOG_FACT: Floats = gammaln(np.arange(_TABLE) + 1.0)
_K_LOG_K: Floats = np.arange(_TABLE) * np.log(np.maximum(np.arange(_TABLE), 1))


def _logfact(n: Ints) -> Floats:
    out: Floats = _LOG_FACT[n] if n.size == 0 or n.max() < _TABLE else gammaln(n + 1.0)
    return out


def _logcomb(n: Ints, k: Ints) -> Floats:
    out: Floats = _logfact(n) - _logfact(k) - _logfact(n - k)
    return out


def _loglik(x: Ints, n: Ints, p: Floats) -> Floats:
    """x log p + (n-x) log(1-p) with 0 log 0 = 0 (as `_sequential._loglik`)."""
    with np.errstate(divide="ignore", invalid="ignore"):
        a = np.where(x > 0, x * np.log(np.where(x > 0, p, 1.0)), 0.0)
        b = np.where(n - x > 0, (n - x) * np.log1p(-np.where(n - x > 0, p, 0.0)), 0.0)
    out: Floats = a + b
    return out


def _loglik_max(x: Ints, n: Ints) -> Floats:
    """x log(x/n) + (n-x) log((n-x)/n) = x log x + (n-x) log(n-x) - n log n (0 log 0 = 0)."""
    if n.size and n.max() < _TABLE:
        out: Floats = _K_LOG_K[x] + _K_LOG_K[n - x] - _K_LOG_K[n]
        return out
    return np.where(n > 0, _loglik(x, n, x / np.maximum(n, 1)), 0.0)


def log_hyper_tail(x: Ints, draws: Ints, k_total: Ints, n_total: Ints) -> Floats:
    """log P(X >= x) for X ~ Hypergeometric(population n_total, k_total successes, `draws` draws): summed from
    x up when x is above the mean, else 1 - the sum from x - 1 down (each sum by the pmf's ratio recurrence,
    to 1e-17 of its total). scipy's hypergeom.sf costs ~10 us per element; this is ~50x cheaper here."""
    x, draws, k_total, n_total = (np.asarray(a, dtype=np.int64) for a in (x, draws, k_total, n_total))
    lo_k = np.maximum(0, draws - (n_total - k_total))
    hi_k = np.minimum(k_total, draws)
    out = np.zeros(x.shape)
    out[x > hi_k] = -np.inf
    upper = (x > lo_k) & (x <= hi_k) & (x * n_total > draws * k_total)
    lower = (x > lo_k) & (x <= hi_k) & ~upper
    for mask, start, step in ((upper, x, 1), (lower, x - 1, -1)):
        if not mask.any():
            continue
        k0, n, kk, nn = start[mask], draws[mask], k_total[mask], n_total[mask]
        log_pmf = _logcomb(kk, k0) + _logcomb(nn - kk, n - k0) - _logcomb(nn, n)
        total, term, k = np.ones(k0.shape), np.ones(k0.shape), k0.copy()
        live = np.ones(k0.shape, dtype=bool)
        end = np.minimum(kk, n) if step == 1 else np.maximum(0, n - (nn - kk))
        while live.any():
            if step == 1:
                ratio = (kk - k) * (n - k) / ((k + 1.0) * (nn - kk - n + k + 1.0))
            else:
                ratio = k * (nn - kk - n + k) / ((kk - k + 1.0) * (n - k + 1.0))
            live &= k != end
            term = np.where(live, term * ratio, 0.0)
            total += term
            k = k + step
            live &= term > 1e-17 * total
        log_sum = log_pmf + np.log(total)
        out[mask] = log_sum if step == 1 else np.log1p(-np.minimum(np.exp(log_sum), 1.0))
    return out


def _log_null_max(x1: Ints, n1: Ints, x2: Ints, n2: Ints, margin: Fraction) -> Floats:
    """`_sequential.log_null_max`: in-null check in exact integers, the boundary by pooling or bisection."""
    p, q = margin.numerator, margin.denominator
    inside = (n1 == 0) | (n2 == 0) | (x1 * n2 * q <= x2 * n1 * q + p * n1 * n2)
    out = _loglik_max(x1, n1) + _loglik_max(x2, n2)
    out_side = ~inside
    if not out_side.any():
        return out
    a1, b1, a2, b2 = x1[out_side], n1[out_side], x2[out_side], n2[out_side]
    if margin == 0:
        out[out_side] = _loglik_max(a1 + a2, b1 + b2)
        return out
    m = float(margin)
    lo, hi = np.zeros(a1.shape), np.full(a1.shape, 1.0 - m)
    with np.errstate(divide="ignore", invalid="ignore"):
        for _ in range(80):
            mid = (lo + hi) / 2
            a = mid + m
            slope = (np.where(a1 > 0, a1 / a, 0.0) - np.where(b1 - a1 > 0, (b1 - a1) / (1 - a), 0.0)
                     + np.where(a2 > 0, a2 / mid, 0.0) - np.where(b2 - a2 > 0, (b2 - a2) / (1 - mid), 0.0))
            lo, hi = np.where(slope > 0, mid, lo), np.where(slope > 0, hi, mid)
    out[out_side] = np.maximum(_loglik(a1, b1, lo + m) + _loglik(a2, b2, lo), _loglik(a1, b1, hi + m) + _loglik(a2, b2, hi))
    return out


def _log_mixture_bound(x1: Ints, n1: Ints, x2: Ints, n2: Ints) -> Floats:
    """log of 2 B(x1+1, n1-x1+1) B(x2+1, n2-x2+1): the mixture without its factor P(A > B) <= 1."""
    out: Floats = (math.log(2) - np.log(n1 + 1.0) - _logcomb(n1, x1) - np.log(n2 + 1.0) - _logcomb(n2, x2))
    return out


def log_e_greater_np(x1: Any, n1: Any, x2: Any, n2: Any, margin: Fraction = Fraction(0)) -> Floats:
    """`trainer._sequential.log_e_greater`, vectorised."""
    x1, n1, x2, n2 = np.broadcast_arrays(*(np.asarray(a, dtype=np.int64) for a in (x1, n1, x2, n2)))
    tail = log_hyper_tail(x2 + 1, n2 + 1, x1 + x2 + 1, n1 + n2 + 2)  # P(A > B)
    out: Floats = _log_mixture_bound(x1, n1, x2, n2) + tail - _log_null_max(x1, n1, x2, n2, margin)
    return out


def crosses(x1: Ints, n1: Ints, x2: Ints, n2: Ints, threshold: float, margin: Fraction = Fraction(0)) -> Bools:
    """log_e_greater >= threshold, computing the full e-value only where an upper bound can reach it: the
    mixture without its factor P(A > B) <= 1, over the likelihood at one point of the null (the boundary
    p1 = p2 + margin at about the pooled rate), which is at most the null's maximum."""
    m = float(margin)
    p2 = np.clip((x1 + x2 - m * n1) / np.maximum(n1 + n2, 1), 0.0, 1.0 - m)
    bound = _log_mixture_bound(x1, n1, x2, n2) - (_loglik(x1, n1, p2 + m) + _loglik(x2, n2, p2))
    out = np.zeros(x1.shape, dtype=bool)
    near = bound >= threshold - 1e-9
    if near.any():
        out[near] = log_e_greater_np(x1[near], n1[near], x2[near], n2[near], margin) >= threshold
    return out


def e_decisions(x1: Ints, n1: Ints, x2: Ints, n2: Ints, alpha: float) -> tuple[Bools, Bools]:
    """(E(better) >= 1/alpha, E(worse) >= 1/alpha) for the canary (`trainer._canary.judge_canary`). Each can
    exceed 1 only where the data favour its side (elsewhere the null holds the rates' own maximum), and there
    the null's maximum is at the pooled rate: both share one cheap bound."""
    threshold = math.log(1 / alpha)
    bound = _log_mixture_bound(x1, n1, x2, n2) - _loglik_max(x1 + x2, n1 + n2)
    out = []
    for favoured, args in ((x1 * n2 > x2 * n1, (x1, n1, x2, n2)), (x2 * n1 > x1 * n2, (x2, n2, x1, n1))):
        hit = np.zeros(x1.shape, dtype=bool)
        near = favoured & (bound >= threshold - 1e-9)
        if near.any():
            a, b, c, d = (v[near] for v in args)
            hit[near] = log_e_greater_np(a, b, c, d) >= threshold
        out.append(hit)
    return out[0], out[1]


def fisher_below(x1: Ints, n1: Ints, x2: Ints, n2: Ints, alpha: float) -> Bools:
    """The old rule: one-sided exact Fisher p = P(X1 >= x1) <= alpha (`sdk.fisher_p`, vectorised). A count at
    or below the hypergeometric mean has p >= 1/2 (the median is within 1 of the mean): not computed."""
    out = np.zeros(x1.shape, dtype=bool)
    above = (x1 * (n1 + n2) > n1 * (x1 + x2)) & (n1 > 0) & (n2 > 0)
    if above.any():
        out[above] = log_hyper_tail(x1[above], n1[above], (x1 + x2)[above], (n1 + n2)[above]) <= math.log(alpha)
    return out


# ---- the simulations ---------------------------------------------------------------------------------
Rule = Callable[[Ints, Ints, Ints, Ints], tuple[Bools, Bools]]


def canary_rules(alpha: float) -> dict[str, Rule]:
    """name -> (candidate shown better, candidate shown worse) on cumulative counts."""
    return {
        "always-valid": lambda x1, n1, x2, n2: e_decisions(x1, n1, x2, n2, alpha),
        "repeated Fisher (old)": lambda x1, n1, x2, n2: (fisher_below(x1, n1, x2, n2, alpha),
                                                        fisher_below(x2, n2, x1, n1, alpha)),
    }


def simulate_canary(rule: Rule, p_serving: float, p_candidate: float, runs: int, *, seed: int,
                    fraction: float = 0.5, every: int = 1, min_samples: int = 30, max_samples: int = 400,
                    block: int = 64) -> dict[str, Any]:
    """Runs of one canary each: the share promoted, dropped as worse, dropped at max_samples, and the
    median of all episodes (both sides) at the decision. Episodes are drawn for all runs at once; the rule
    is applied `block` steps at a time to the runs still undecided."""
    rng = np.random.default_rng(seed)
    small = min(fraction, 1 - fraction)
    steps = int(max_samples / small + 8 * math.sqrt(max_samples * (1 - small)) / small) + every
    side = rng.random((runs, steps)) < fraction
    success = rng.random((runs, steps)) < np.where(side, p_candidate, p_serving)
    t = np.arange(1, steps + 1)
    n1 = np.cumsum(side, axis=1)
    x1 = np.cumsum(side & success, axis=1)
    x2 = np.cumsum(~side & success, axis=1)
    n2 = t - n1
    decided = np.zeros(runs, dtype=np.int8)  # 1 promote, 2 drop as worse, 3 drop at max_samples
    episodes = np.zeros(runs, dtype=np.int64)
    for lo in range(0, steps, block):
        open_runs = np.nonzero(decided == 0)[0]
        if not open_runs.size:
            break
        cols = np.arange(lo, min(lo + block, steps))
        n_min = np.minimum(n1[np.ix_(open_runs, cols)], n2[np.ix_(open_runs, cols)])
        look = (t[cols] % every == 0) & (n_min >= min_samples)
        r_i, c_i = np.nonzero(look)
        rows, at = open_runs[r_i], cols[c_i]
        better, worse = rule(x1[rows, at], n1[rows, at], x2[rows, at], n2[rows, at])
        kind = np.where(better, 1, np.where(worse, 2, np.where(n_min[r_i, c_i] >= max_samples, 3, 0))).astype(np.int8)
        hit = kind > 0
        first = np.full(runs, steps, dtype=np.int64)
        np.minimum.at(first, rows[hit], at[hit])
        now = hit & (at == first[rows])  # each run's first decision in this block (at most one per run)
        decided[rows[now]], episodes[rows[now]] = kind[now], at[now] + 1
    if (decided == 0).any():
        raise RuntimeError("a run reached the end of its steps undecided: raise `steps`")
    return {"runs": runs, "promote": float(np.mean(decided == 1)), "drop_worse": float(np.mean(decided == 2)),
            "drop_max": float(np.mean(decided == 3)), "median_episodes": float(np.median(episodes))}


def simulate_watch(rule: str, p_reference: float, p_live: float, runs: int, *, seed: int, alpha: float = 0.05,
                   tolerance: float = 0.1, n_reference: int = 200, max_live: int = 400, min_samples: int = 30,
                   every: int = 1, block: int = 64) -> dict[str, Any]:
    """Runs of one rollback watch each: the share rolled back and the median live episodes at the rollback.
    `rule`: "always-valid" (`trainer._canary.judge_watch`) or "old" (live rate < p_reference - tolerance)."""
    rng = np.random.default_rng(seed)
    margin = Fraction(repr(tolerance))
    threshold = math.log(1 / alpha)
    x_ref = rng.binomial(n_reference, p_reference, size=runs)
    x_live = np.cumsum(rng.random((runs, max_live)) < p_live, axis=1)
    t = np.arange(1, max_live + 1)
    first = np.full(runs, max_live, dtype=np.int64)
    for lo in range(min_samples - 1, max_live, block):
        open_runs = np.nonzero(first == max_live)[0]
        cols = np.arange(lo, min(lo + block, max_live))
        cols = cols[t[cols] % every == 0]
        if not open_runs.size or not cols.size:
            continue
        rows, at = np.repeat(open_runs, cols.size), np.tile(cols, open_runs.size)
        c, d = x_live[rows, at], t[at]
        if rule == "always-valid":
            fell = crosses(x_ref[rows], np.full(rows.shape, n_reference), c, d, threshold, margin)
        else:  # the old watch: the live rate below a point baseline minus the tolerance, in floats
            fell = c / d < p_reference - tolerance
        np.minimum.at(first, rows[fell], at[fell])
    rolled = first < max_live
    return {"runs": runs, "rollback": float(rolled.mean()),
            "median_live_episodes": float(np.median(first[rolled] + 1)) if rolled.any() else None}


# ---- the table ---------------------------------------------------------------------------------------
def _se(p: float, n: int) -> float:
    return math.sqrt(max(p * (1 - p), 1e-12) / n)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--runs", type=int, default=4000, help="simulated canaries (and watches) per row")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--fraction", type=float, default=0.5, help="the canary's share of traffic")
    ap.add_argument("--every", type=int, default=1, help="look after every N episodes (1: after each)")
    ap.add_argument("--alpha", type=float, default=0.05)
    ap.add_argument("--out", type=Path, default=RESULTS, help="where the JSON goes")
    args = ap.parse_args()
    t0 = time.perf_counter()
    rows: list[dict[str, Any]] = []
    rules = canary_rules(args.alpha)
    for base in (0.2, 0.5, 0.8):
        for name, rule in rules.items():
            sims = {d: simulate_canary(rule, base, base + d, args.runs, seed=args.seed + int(100 * base) + int(1000 * d),
                                       fraction=args.fraction, every=args.every) for d in (0.0, 0.1, 0.2)}
            rows.append({"rule": name, "base": base, "false_promote": sims[0.0]["promote"],
                         "false_drop": sims[0.0]["drop_worse"], "power_10": sims[0.1]["promote"],
                         "power_20": sims[0.2]["promote"],
                         "median_episodes": {f"+{round(100 * d)}": s["median_episodes"] for d, s in sims.items()}})
    print(f"canary: {args.runs} runs per cell, candidate share {args.fraction}, a look every {args.every} episode(s), "
          f"alpha {args.alpha}, min 30 / max 400 per side; +-x: 3 standard errors")
    print(f"{'rule':<22} {'base':>4} {'false promote':>15} {'false drop':>13} {'power +10':>10} {'power +20':>10} "
          f"{'median episodes (=, +10, +20)':>30}")
    for r in rows:
        m = r["median_episodes"]
        print(f"{r['rule']:<22} {r['base']:>4} {r['false_promote']:>8.4f}±{3 * _se(r['false_promote'], args.runs):.3f} "
              f"{r['false_drop']:>6.4f}±{3 * _se(r['false_drop'], args.runs):.3f} {r['power_10']:>10.3f} "
              f"{r['power_20']:>10.3f} {m['+0']:>10.0f} {m['+10']:>8.0f} {m['+20']:>8.0f}")
    print("ratios, always-valid / old, per base rate (false promotion, power +10, power +20, median episodes at +20):")
    for base in (0.2, 0.5, 0.8):
        new, old = (next(r for r in rows if r["base"] == base and r["rule"] == n) for n in rules)
        ratio = [new[k] / old[k] if old[k] else float("nan") for k in ("false_promote", "power_10", "power_20")]
        ratio.append(new["median_episodes"]["+20"] / old["median_episodes"]["+20"])
        print(f"  {base}: " + "  ".join(f"{x:.3g}" for x in ratio))

    watch_rows: list[dict[str, Any]] = []
    tol = 0.1
    falls = {"fall 0": 0.0, "fall 10 (= tolerance)": tol, "fall 20": 0.2, "fall 30": 0.3}
    for base in (0.2, 0.5, 0.8):
        for name in ("always-valid", "old"):
            row: dict[str, Any] = {"rule": name, "base": base}
            for label, fall in falls.items():
                p_live = round(base - fall, 10)
                row[label] = (simulate_watch(name, base, p_live, args.runs, seed=args.seed + int(100 * base) + int(1000 * fall),
                                             alpha=args.alpha, tolerance=tol, every=args.every)
                              if p_live >= 0 else None)
            watch_rows.append(row)
    print(f"\nrollback watch: the share rolled back; reference 200 episodes of the replaced version at the base rate, "
          f"live episodes 30..400 at base - fall, tolerance {tol}, a look every {args.every}; old: live rate < the "
          f"true base rate - tolerance (in floats)")
    print(f"{'rule':<13} {'base':>4} " + " ".join(f"{k:>21}" for k in falls) + "  median live episodes to rollback")
    for r in watch_rows:
        shown = [f"{r[k]['rollback']:.4f}" if r[k] else "n/a" for k in falls]
        med = [f"{r[k]['median_live_episodes']:.0f}" if r[k] and r[k]["median_live_episodes"] else "-" for k in falls]
        print(f"{r['rule']:<13} {r['base']:>4} " + " ".join(f"{x:>21}" for x in shown) + "  " + " / ".join(med))
    seconds = time.perf_counter() - t0
    print(f"\n{seconds:.0f} s")
    out: Path = args.out.resolve()
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps({
        "command": "python bench/canary_sim.py " + " ".join(sys.argv[1:]), "runs": args.runs, "seed": args.seed,
        "fraction": args.fraction, "every": args.every, "alpha": args.alpha, "min_samples": 30, "max_samples": 400,
        "watch": {"reference_n": 200, "max_live": 400, "tolerance": tol}, "canary": rows, "rollback_watch": watch_rows,
        "seconds": round(seconds, 1)}, indent=2) + "\n")
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
