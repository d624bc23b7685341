"""The Clopper-Pearson bound and luck probability against known values."""

from __future__ import annotations

import math

import pytest

from runner.inside import stats

# One-sided 95% lower bounds, i.e. the 0.05 quantile of Beta(k, n - k + 1), as tabulated by
# scipy.stats.beta.ppf(0.05, k, n - k + 1).
KNOWN = [
    (6, 15, 0.1908646861741716),
    (13, 15, 0.6365582344585979),
    (14, 15, 0.7206038063871234),
    (6, 7, 0.47929702640869287),
    (1, 7, 0.007300831979014702),
    (2, 7, 0.05337550047023718),
    (5, 7, 0.341261436155336),
    (3, 10, 0.08726443391415033),
    (50, 63, 0.692081037680822),
    (1, 63, 0.0008138479219794288),
]


@pytest.mark.parametrize(("k", "n", "expected"), KNOWN)
def test_lower_bound_matches_the_beta_quantile(k: int, n: int, expected: float) -> None:
    assert stats.clopper_pearson_lower(k, n) == pytest.approx(expected, rel=1e-9)


@pytest.mark.parametrize("n", [1, 7, 15, 63, 500])
def test_closed_forms_at_the_ends(n: int) -> None:
    assert stats.clopper_pearson_lower(0, n) == 0.0
    assert stats.clopper_pearson_lower(n, n) == pytest.approx(0.05 ** (1 / n), rel=1e-12)
    # one success: P(X >= 1) = 1 - (1 - p)^n = alpha
    assert stats.clopper_pearson_lower(1, n) == pytest.approx(1 - 0.95 ** (1 / n), rel=1e-9)


def test_bound_is_the_point_where_the_tail_is_alpha() -> None:
    p = stats.clopper_pearson_lower(9, 40)
    assert stats.binomial_tail(9, 40, p) == pytest.approx(0.05, rel=1e-9)
    assert stats.clopper_pearson_lower(9, 40) < 9 / 40


def test_binomial_tail_edges_and_a_direct_sum() -> None:
    assert stats.binomial_tail(0, 10, 0.3) == 1.0
    assert stats.binomial_tail(11, 10, 0.3) == 0.0
    direct = sum(math.comb(10, i) * 0.3**i * 0.7 ** (10 - i) for i in range(4, 11))
    assert stats.binomial_tail(4, 10, 0.3) == pytest.approx(direct, rel=1e-12)


def test_bad_arguments_are_refused() -> None:
    with pytest.raises(ValueError):
        stats.clopper_pearson_lower(8, 7)
    with pytest.raises(ValueError):
        stats.clopper_pearson_lower(1, 7, confidence=1.0)
    with pytest.raises(ValueError):
        stats.luck_probability(0.5, -1)


def test_luck_and_the_comparisons_it_takes() -> None:
    # the seed's strong control: 7 of 7 varied
    p_lo = stats.clopper_pearson_lower(7, 7)
    m = stats.comparisons_needed(p_lo, 1e-3)
    assert m == 7
    assert stats.luck_probability(p_lo, m) < 1e-3 <= stats.luck_probability(p_lo, m - 1)
    # the seed's weak control: 6 of 15 needs many more
    weak = stats.clopper_pearson_lower(6, 15)
    assert stats.comparisons_needed(weak, 1e-3) == 33
    # a control that never varied certifies nothing, however long the other arm runs
    assert stats.comparisons_needed(0.0, 1e-3) is None
    assert stats.luck_probability(0.0, 1000) == 1.0
