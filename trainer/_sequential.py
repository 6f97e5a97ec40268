"""An always-valid one-sided comparison of two success rates from cumulative counts, for the canary and
its rollback watch (`trainer._canary`): the e-value may be recomputed after every episode and acted on the
first time it crosses `1/alpha`, and the chance of ever crossing under the null stays <= alpha.

The data are two Bernoulli streams: x1 successes of n1 episodes at rate p1, x2 of n2 at rate p2, arriving
interleaved in any order (the order may even depend on the past; it must not depend on the outcomes of
episodes not yet seen). `log_e_greater(x1, n1, x2, n2, margin)` is log E for evidence that p1 > p2 + margin,
against the composite null H0: p1 <= p2 + margin, with

    E = Q / sup_{(a, b) in H0} L(a, b),    L(a, b) = a^x1 (1-a)^(n1-x1) b^x2 (1-b)^(n2-x2),
    Q = integral of L(a, b) over the prior pi = uniform on the half square {a > b} (density 2).

Why it is valid (universal inference, Wasserman, Ramdas & Balakrishnan 2020): for the true (p1, p2) in H0,
M_t = Q_t / L_t(p1, p2) is a non-negative martingale with M_0 = 1 (Q is the marginal likelihood of a prior
fixed in advance; each new episode multiplies both by its probability under the side it came from, and
the expected ratio of the two is 1), so Ville's inequality gives P(exists t: M_t >= 1/alpha) <= alpha. The
denominator of E is a supremum that includes (p1, p2), so E_t <= M_t at every t: E crosses 1/alpha with
probability <= alpha at any cadence of looks, from any first look (`min_samples`), with any rule for
stopping. The guarantee needs each side's episodes to be independent with a rate that is constant while
the test runs; it does not need equal sides, a known traffic fraction, or a fixed number of looks.

Closed forms (all from integer counts):

* Q = 2 B(x1+1, n1-x1+1) B(x2+1, n2-x2+1) P(A > B) with A ~ Beta(x1+1, n1-x1+1), B ~ Beta(x2+1, n2-x2+1)
  independent (the uniform prior restricted to a > b). B(x+1, n-x+1) = 1 / ((n+1) C(n, x)), and with
  integer parameters P(A > B) is a hypergeometric tail: A and B are order statistics of n1+1 and n2+1
  uniforms, and A > B exactly when at least x2+1 of the first x1+x2+1 of all n1+n2+2 uniforms (merged
  and sorted) come from B's set; so P(A > B) = `sdk.fisher_p(x2+1, n2+1, x1, n1+1)`, the exact integer
  arithmetic the gate already uses.
* sup over H0: the unconstrained maximum (each side at its own rate x/n) when x1/n1 <= x2/n2 + margin,
  compared exactly (fractions: `margin` is a `Fraction`, so 24/30 against 21/30 + 1/10 is a tie, not
  float noise); else the maximum on the boundary a = b + margin (the log-likelihood is concave and H0 is
  convex): the pooled rate (x1+x2)/(n1+n2) for margin 0, a bisection on the derivative for margin > 0.

When the MLE is inside H0, E <= 1 (Q <= sup L, as the prior has mass 1), so the e-values for "p1 greater"
and "p2 greater" are never both above 1. `1/E` is an anytime-valid p-value: P(1/E_tau <= alpha) <= alpha at
any stopping time tau, which is what the canary's figures report as `p_better` / `p_worse`.

The price of validity at every look is power: the mixture pays for not knowing the common rate and the
effect size (about log n nats), so a difference the fixed-n Fisher test sees at n = 400 per side is often
not shown here (bench/canary_sim.py measures both rules). Floats enter only at the end (log of exact
integers, the boundary maximum); an e-value within ~1e-12 (relative) of 1/alpha may fall on either side,
which moves the guarantee by as much. Deliberately left out: priors tuned to an expected effect or to the
serving version's history (more power, more assumptions), and stateful (paired, per-poll) e-processes
that the counts-only collector windows cannot feed.
"""

from __future__ import annotations

import math
from fractions import Fraction
from typing import Union

from sdk import fisher_p

Margin = Union[Fraction, int]


def _check(x: int, n: int) -> None:
    if not 0 <= x <= n:
        raise ValueError(f"successes must be within 0..n, got {x}/{n}")


def _loglik(x: int, n: int, p: float) -> float:
    """x log p + (n-x) log(1-p), with 0 log 0 = 0 (-inf where a count is impossible at p)."""
    out = 0.0
    if x:
        out += x * math.log(p) if p > 0 else -math.inf
    if n - x:
        out += (n - x) * math.log1p(-p) if p < 1 else -math.inf
    return out


def _loglik_max(x: int, n: int) -> float:
    """The log-likelihood at the side's own rate x/n."""
    return _loglik(x, n, x / n) if n else 0.0


def log_mixture(x1: int, n1: int, x2: int, n2: int) -> float:
    """log Q: the likelihood of the counts integrated over the uniform prior on {p1 > p2} (exact integers,
    then logs; -inf when the hypergeometric tail underflows, i.e. the data say p1 < p2 beyond doubt)."""
    _check(x1, n1)
    _check(x2, n2)
    tail = fisher_p(x2 + 1, n2 + 1, x1, n1 + 1)  # P(A > B)
    if tail <= 0.0:
        return -math.inf
    return (math.log(2) - math.log((n1 + 1) * math.comb(n1, x1)) - math.log((n2 + 1) * math.comb(n2, x2))
            + math.log(tail))


def log_null_max(x1: int, n1: int, x2: int, n2: int, margin: Margin = 0) -> float:
    """log sup of the likelihood over H0: p1 <= p2 + margin (module docstring)."""
    _check(x1, n1)
    _check(x2, n2)
    m = Fraction(margin)
    if not 0 <= m < 1:
        raise ValueError(f"margin must be in [0, 1), got {margin}")
    if n1 == 0 or n2 == 0 or Fraction(x1, n1) <= Fraction(x2, n2) + m:
        return _loglik_max(x1, n1) + _loglik_max(x2, n2)
    if m == 0:
        return _loglik_max(x1 + x2, n1 + n2)
    # The boundary p1 = b + m, b in [0, 1 - m]: g(b) is concave, so bisect on the sign of g'(b).
    mf = float(m)

    def slope(b: float) -> float:
        a = b + mf
        return ((x1 / a if x1 else 0.0) - ((n1 - x1) / (1 - a) if n1 - x1 else 0.0)
                + (x2 / b if x2 else 0.0) - ((n2 - x2) / (1 - b) if n2 - x2 else 0.0))

    lo, hi = 0.0, 1.0 - mf
    for _ in range(200):  # far below a float's resolution; stops earlier when the interval cannot shrink
        mid = (lo + hi) / 2
        if mid <= lo or mid >= hi:
            break
        if slope(mid) > 0:
            lo = mid
        else:
            hi = mid
    return max(_loglik(x1, n1, b + mf) + _loglik(x2, n2, b) for b in (lo, hi))


def log_e_greater(x1: int, n1: int, x2: int, n2: int, margin: Margin = 0) -> float:
    """log E: evidence that p1 > p2 + margin, against H0: p1 <= p2 + margin (the module docstring's rule).
    Decide with `log_e >= log_threshold(alpha)`; 0.0 (E = 1) before any episode."""
    return log_mixture(x1, n1, x2, n2) - log_null_max(x1, n1, x2, n2, margin)


def log_threshold(alpha: float) -> float:
    """log(1/alpha): the e-value an always-valid test at level alpha must reach."""
    if not 0.0 < alpha < 1.0:
        raise ValueError(f"alpha must be in (0, 1), got {alpha}")
    return -math.log(alpha)


def exact_margin(tolerance: float) -> Fraction:
    """A tolerance as the decimal it was written as (0.1 -> 1/10, not the binary float just above it)."""
    return Fraction(repr(float(tolerance)))


def e_figure(log_e: float) -> float:
    """An e-value for the figures: finite (capped at 1e300) so that it stays valid JSON."""
    return math.exp(min(log_e, 690.0)) if log_e > -math.inf else 0.0


def p_figure(log_e: float) -> float:
    """The anytime-valid p-value min(1, 1/E)."""
    return 1.0 if log_e <= 0 else math.exp(-log_e)
