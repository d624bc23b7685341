"""The statistics of the determinism verdict: a Clopper-Pearson bound and the luck probability.

Standard library only (this runs inside a candidate's environment). From the control arm's ``k``
varying runs out of ``n`` comparisons, ``clopper_pearson_lower`` is the one-sided lower bound
``p_lo`` on the per-run variation rate: the ``p`` at which seeing ``k`` or more varying runs has
probability ``1 - confidence``. A kernel that varied that often would match every one of ``m``
comparisons of the deterministic arm with probability ``(1 - p_lo) ** m``: the luck probability.
"""

from __future__ import annotations

import math


def binomial_tail(k: int, n: int, p: float) -> float:
    """P(X >= k) for X ~ Binomial(n, p), summed in log space so large ``n`` cannot overflow."""
    if k <= 0:
        return 1.0
    if k > n:
        return 0.0
    if p <= 0.0:
        return 0.0
    if p >= 1.0:
        return 1.0
    log_p, log_q = math.log(p), math.log1p(-p)
    terms = [
        math.lgamma(n + 1)
        - math.lgamma(i + 1)
        - math.lgamma(n - i + 1)
        + i * log_p
        + (n - i) * log_q
        for i in range(k, n + 1)
    ]
    top = max(terms)
    return min(1.0, math.exp(top) * math.fsum(math.exp(t - top) for t in terms))


def clopper_pearson_lower(k: int, n: int, confidence: float = 0.95) -> float:
    """One-sided lower confidence bound on a binomial rate from ``k`` successes in ``n`` trials.

    Exact (Clopper-Pearson): the ``p`` with ``P(X >= k | p) = 1 - confidence``, found by bisection
    on the binomial tail, which rises monotonically in ``p``. ``k == 0`` gives 0.
    """
    if n < 0 or k < 0 or k > n:
        raise ValueError(f"need 0 <= k <= n, got k={k} n={n}")
    if not 0.0 < confidence < 1.0:
        raise ValueError(f"confidence must be in (0, 1), got {confidence}")
    if k == 0:
        return 0.0
    alpha = 1.0 - confidence
    if k == n:  # closed form: p ** n = alpha
        return alpha ** (1.0 / n)
    lo, hi = 0.0, 1.0
    for _ in range(200):
        mid = (lo + hi) / 2.0
        if binomial_tail(k, n, mid) < alpha:
            lo = mid
        else:
            hi = mid
        if hi - lo < 1e-15:
            break
    return (lo + hi) / 2.0


def luck_probability(p_lo: float, comparisons: int) -> float:
    """Chance that a kernel varying at rate ``p_lo`` matches run 0 in all ``comparisons``."""
    if comparisons < 0:
        raise ValueError("comparisons must be >= 0")
    return (1.0 - p_lo) ** comparisons


def comparisons_needed(p_lo: float, target: float) -> int | None:
    """The fewest comparisons whose luck probability is below ``target``; None if none can be."""
    if p_lo <= 0.0:
        return None
    if p_lo >= 1.0:
        return 1
    m = math.ceil(math.log(target) / math.log1p(-p_lo))
    while luck_probability(p_lo, m) >= target:  # guard the rounding at the boundary
        m += 1
    return max(m, 1)
