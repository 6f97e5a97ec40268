"""Exact one-sided tests on success counts, shared by the offline gate (`trainer._gate`) and the live canary
(`trainer._canary`), so both decide with one copy of the arithmetic.

* `mcnemar_p(b, c)`: paired outcomes (same tasks, same seeds). Only the discordant pairs count: b the
  candidate won, c it lost. Under "no difference" b ~ Binomial(b + c, 1/2), and
  p = P(X >= b) = sum_{k=b}^{b+c} C(b+c, k) / 2^(b+c).
* `fisher_p(x1, n1, x2, n2)`: two independent groups (live traffic: each episode was served by one
  version only). Given the margins, X1 (successes in group 1) is hypergeometric, and the one-sided
  p-value that group 1 is *better* is P(X1 >= x1) = sum_k C(K, k) C(N-K, n1-k) / C(N, n1) with
  K = x1 + x2, N = n1 + n2. `fisher_p(x2, n2, x1, n1)` is the other side (group 1 *worse*).

Both are exact integer arithmetic (math.comb) with one division at the end, so no scipy is needed and
the figures are reproducible to the last digit. Deliberately left out: two-sided variants (every caller
asks a one-sided question: "is the candidate better?", "is it worse?") and approximations (z-tests).
"""

from __future__ import annotations

import math


def mcnemar_p(b: int, c: int) -> float:
    """One-sided exact McNemar p-value: P(X >= b) for X ~ Binomial(b + c, 1/2); 1.0 with no discordant pair."""
    if b < 0 or c < 0:
        raise ValueError(f"discordant counts must be >= 0, got b={b} c={c}")
    n = b + c
    if n == 0:
        return 1.0
    # Exact integers, then one correctly rounded division (fine for any n a suite can have).
    tail: int = sum(math.comb(n, k) for k in range(b, n + 1))
    return tail / (1 << n)


def fisher_p(x1: int, n1: int, x2: int, n2: int) -> float:
    """One-sided exact Fisher p-value that group 1 (x1 successes of n1) has a higher success rate than
    group 2 (x2 of n2): P(X1 >= x1) under the hypergeometric null. 1.0 when either group is empty."""
    if not (0 <= x1 <= n1 and 0 <= x2 <= n2):
        raise ValueError(f"successes must be within 0..n, got {x1}/{n1} and {x2}/{n2}")
    if n1 == 0 or n2 == 0:
        return 1.0
    k_total, n_total = x1 + x2, n1 + n2
    hi = min(k_total, n1)
    tail: int = sum(math.comb(k_total, k) * math.comb(n_total - k_total, n1 - k) for k in range(x1, hi + 1))
    return tail / math.comb(n_total, n1)
