"""kvx.aggregate.stats where a library computes the quantity, by hand and against the hand code the
library replaced; the one percentile interval; the one M*; the one cluster bootstrap."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy.stats import spearmanr

from kvx.aggregate.stats.contingency import chi2_homogeneity
from kvx.aggregate.stats.eiv import corrected_moments, correlations, eiv_correlation
from kvx.aggregate.stats.inputs import binary, check_bootstrap, finite, outcome_pair, paired_panels
from kvx.aggregate.stats.intervals import percentile_interval
from kvx.aggregate.stats.ranks import auroc, mann_whitney_u, mixed_strata, spearman, stratified_auroc
from kvx.aggregate.stats.resampling import cluster_interval

# ----------------------------------------------------------------------------- Mann-Whitney U (scipy)


def counted_u(pos: np.ndarray, neg: np.ndarray) -> float:
    """The hand U scipy replaced: pairs below plus ties, counted over the sorted negatives."""
    neg_sorted = np.sort(neg)
    below = np.searchsorted(neg_sorted, pos, side="left")
    upto = np.searchsorted(neg_sorted, pos, side="right")
    return float(int(below.sum()) + int(upto.sum())) / 2


def test_mann_whitney_u_by_hand() -> None:
    # pos (3, 2) vs neg (1, 2, 2): 3 beats all three; 2 beats 1 and ties 2, 2 -> U = 3 + 1 + 1/2 + 1/2
    assert mann_whitney_u(np.array([3.0, 2.0]), np.array([1.0, 2.0, 2.0])) == 5.0
    assert mann_whitney_u(np.array([0.0]), np.array([1.0])) == 0.0


def test_scipy_u_equals_the_counted_u_exactly() -> None:
    rng = np.random.default_rng(0)
    for _ in range(500):
        pos = rng.integers(0, 6, rng.integers(1, 40)) / rng.choice([1.0, 3.0, 7.0])
        neg = rng.integers(0, 6, rng.integers(1, 40)) / rng.choice([1.0, 3.0])
        assert mann_whitney_u(pos, neg) == counted_u(pos, neg)
        assert auroc(pos, neg) == counted_u(pos, neg) / (pos.size * neg.size)


def test_strata_by_hand() -> None:
    strata = [
        (np.array([2.0]), np.array([1.0])),
        (np.array([]), np.array([5.0])),
        (np.array([0.0]), np.array([1.0])),
    ]
    assert len(mixed_strata(strata)) == 2  # the stratum without a positive gives no pair
    assert stratified_auroc(strata) == (0.5, 2)  # one pair won, one lost
    with pytest.raises(ValueError):
        mixed_strata([(np.array([np.nan]), np.array([1.0]))])


# ----------------------------------------------------------------------------- Spearman, chi-square (scipy)


def test_spearman_by_hand() -> None:
    # d = (0, 1, 1): 1 - 6 * 2 / (3 * 8) = 0.5
    rho, p = spearman(np.array([1.0, 2.0, 3.0]), np.array([1.0, 3.0, 2.0]))
    assert rho == pytest.approx(0.5) and p == spearmanr([1, 2, 3], [1, 3, 2]).pvalue
    # ties at average ranks: (1.5, 1.5, 3) against (1, 2, 3): 1.5 / sqrt(1.5 * 2)
    assert spearman(np.array([1.0, 1.0, 2.0]), np.array([1.0, 2.0, 3.0]))[0] == pytest.approx(math.sqrt(0.75))


def test_chi2_homogeneity_by_hand() -> None:
    # rows (10, 10), (20, 0); expected 15, 5 in both rows: 2 * (25 / 15 + 25 / 5) = 40 / 3, one dof
    statistic, dof, p = chi2_homogeneity(np.array([[10, 10], [20, 0]]))
    assert statistic == pytest.approx(40 / 3) and dof == 1
    assert p == pytest.approx(math.erfc(math.sqrt(40 / 3 / 2)))  # chi2(1) tail


# ----------------------------------------------------------------------------- the percentile interval


def test_percentile_interval_by_hand() -> None:
    assert percentile_interval(np.arange(101.0)) == (2.5, 97.5)
    assert percentile_interval(np.array([0.0, 1.0]), level=0.5) == (0.25, 0.75)
    assert percentile_interval(np.array([0.0, 1.0]), level=0.9) == pytest.approx((0.05, 0.95))
    assert percentile_interval(np.array([])) == (None, None)


def test_percentile_interval_is_the_releases_rule_to_the_bit() -> None:
    """ragscale's ``np.percentile(v, 2.5)`` and TPBench's ``np.quantile(v, [.025, .975])``: the same
    numbers, and not those of ``50 * (1 - 0.95)`` = 2.500000000000002, which the old helpers used."""
    rng = np.random.default_rng(3)
    off = 0
    for _ in range(200):
        v = rng.normal(size=int(rng.integers(2, 3000)))
        got = percentile_interval(v)
        assert got == (float(np.percentile(v, 2.5)), float(np.percentile(v, 97.5)))
        assert got == tuple(float(q) for q in np.quantile(v, [0.025, 0.975]))
        off += got[0] != float(np.percentile(v, 50.0 * (1.0 - 0.95)))
    assert off > 0  # the old rule was not bit-exact


# ----------------------------------------------------------------------------- the one M* (A.4)


def stacked_moments(r: np.ndarray, d: np.ndarray) -> np.ndarray:
    """The second M* the aggregate had (``stats.eiv_bootstrap``'s), on a (draws, m, n) stack of panels."""
    _, m, n = r.shape

    def sampling(a_c: np.ndarray, b_c: np.ndarray) -> np.ndarray:
        trace = np.sum(a_c * b_c, axis=(1, 2))
        total = np.sum(a_c.sum(axis=1) * b_c.sum(axis=1), axis=1)
        return (trace - total / m) / (n * (n - 1) * (m - 1))

    r_means, d_means = r.mean(axis=2), d.mean(axis=2)
    r_dev = r_means - r_means.mean(axis=1, keepdims=True)
    d_dev = d_means - d_means.mean(axis=1, keepdims=True)
    r_c, d_c = r - r_means[..., None], d - d_means[..., None]
    out = np.empty((r.shape[0], 2, 2))
    out[:, 0, 0] = np.sum(r_dev * r_dev, axis=1) / (m - 1) - sampling(r_c, r_c)
    out[:, 1, 1] = np.sum(d_dev * d_dev, axis=1) / (m - 1) - sampling(d_c, d_c)
    out[:, 0, 1] = out[:, 1, 0] = np.sum(r_dev * d_dev, axis=1) / (m - 1) - sampling(r_c, d_c)
    return out


def test_the_one_m_star_equals_the_stacked_m_star() -> None:
    rng = np.random.default_rng(5)
    for _ in range(50):
        m, n = int(rng.integers(3, 9)), int(rng.integers(2, 60))
        r = (rng.random((m, n)) < rng.random((m, 1))).astype(float)
        d = (rng.random((m, n)) < 0.5).astype(float) - r
        point = corrected_moments(r, d, np.ones((1, n)), np.ones((1, m)))
        assert point == pytest.approx(stacked_moments(r[None], d[None]), rel=1e-12, abs=1e-15)
        cols = rng.integers(0, n, n)  # a row draw as counts and as a copied panel
        drawn = corrected_moments(r, d, np.bincount(cols, minlength=n)[None], np.ones((1, m)))
        assert drawn == pytest.approx(
            stacked_moments(r[:, cols][None], d[:, cols][None]), rel=1e-12, abs=1e-15
        )


def test_a_draw_of_one_distinct_reader_has_m_star_exactly_zero_in_any_order() -> None:
    """One reader drawn three times (or readers whose scores agree): every reader mean is the same and
    every centred score is 0, so M* is 0 exactly. The subtraction alone leaves +-1e-18 whose sign
    depended on the order of the sums (and so did whether the draw counted as nonpositive or non-PSD)."""
    rng = np.random.default_rng(11)
    for _ in range(200):
        m, n = int(rng.integers(3, 7)), int(rng.integers(5, 40))
        r = (rng.random((m, n)) < rng.random((m, 1))).astype(float)
        d = (rng.random((m, n)) < 0.5).astype(float) - r
        rows = rng.multinomial(n, np.ones(n) / n, size=4)
        one = np.zeros((4, m))
        one[np.arange(4), rng.integers(0, m, 4)] = 3  # each draw: one reader, three times
        assert (corrected_moments(r, d, rows, one) == 0.0).all()
        same = np.repeat(r[:1], m, axis=0), np.repeat(d[:1], m, axis=0)  # readers that agree
        assert (corrected_moments(*same, rows, np.ones((4, m))) == 0.0).all()
    two = np.array([[1, 0, 1, 1], [0, 0, 1, 0], [1, 1, 1, 1]], float)
    gain = np.array([[0, 1, 0, 0], [1, 0, 0, 1], [0, 0, 0, -1]], float)
    kept = corrected_moments(two, gain, np.ones((1, 4)), np.ones((1, 3)))
    assert kept == pytest.approx(stacked_moments(two[None], gain[None]), rel=1e-12)  # a real M*: untouched
    assert (kept != 0).any()


def test_correlations_by_hand() -> None:
    m = np.array([[[4.0, 2.0], [2.0, 1.0]], [[4.0, -1.0], [-1.0, 4.0]], [[-1.0, 0.0], [0.0, 1.0]]])
    r = correlations(m)
    assert r[:2].tolist() == [1.0, -0.25] and math.isnan(r[2])  # 2 / sqrt(4); -1 / 4; no variance
    # the point estimate: a panel whose readers differ only by a constant has gain var 0: undefined
    e = eiv_correlation(np.array([[0.0, 1.0], [0.5, 1.0], [1.0, 1.0]]), np.zeros((3, 2)))
    assert e.r_clipped is None and e.nonpositive_variance


# ----------------------------------------------------------------------------- the one cluster bootstrap


def concatenated_interval(
    diff: np.ndarray, clusters: np.ndarray, n_boot: int, seed: int
) -> tuple[float, float]:
    """The task-clustered bootstrap the predictive audit had: the mean of the concatenated clusters."""
    groups = [diff[clusters == g] for g in np.unique(clusters)]
    rng = np.random.default_rng(seed)
    means = [
        np.concatenate([groups[i] for i in rng.integers(0, len(groups), len(groups))]).mean()
        for _ in range(n_boot)
    ]
    low, high = np.percentile(means, [2.5, 97.5])
    return float(low), float(high)


def test_cluster_interval_by_hand() -> None:
    # two clusters, a = (1, 1) and b = (0, 0): a resample's mean is the share of a among its draws
    values, clusters = np.array([1.0, 1.0, 0.0, 0.0]), np.array(["a", "a", "b", "b"])
    rng = np.random.default_rng(4)
    shares = [np.mean(rng.integers(0, 2, 2) == 0) for _ in range(40)]
    assert cluster_interval(values, clusters, 40, 4, draw="indices") == tuple(
        np.percentile(shares, [2.5, 97.5])
    )
    assert cluster_interval([0.5, 0.5], ["t", "t"], 20, 0, draw="indices") == (0.5, 0.5)
    assert all(math.isnan(v) for v in cluster_interval([math.nan], ["a"], 10, 0))
    with pytest.raises(ValueError, match="draw must be one of"):
        cluster_interval(values, clusters, 10, 0, draw="rows")


def test_cluster_interval_indices_is_the_concatenated_bootstrap() -> None:
    rng = np.random.default_rng(8)
    for _ in range(20):
        n = int(rng.integers(3, 40))
        clusters = rng.choice(["t0", "t1", "t2", "t3", "t4"], n)
        diff = rng.normal(size=n)
        order = np.argsort(clusters, kind="stable")  # clusters numbered in sorted order
        got = cluster_interval(diff[order], clusters[order], 300, 11, draw="indices")
        assert got == pytest.approx(concatenated_interval(diff, clusters, 300, 11), rel=1e-12, abs=1e-15)


# ----------------------------------------------------------------------------- input checks


def test_input_checks() -> None:
    assert finite([1, 2], "x", 1).dtype == float
    assert binary(np.array([0, 1]), "x").tolist() == [False, True]
    assert [v.tolist() for v in outcome_pair([1, 0], [0, 0])] == [[True, False], [False, False]]
    with pytest.raises(ValueError, match="non-finite"):
        finite([1.0, math.inf], "x", 1)
    with pytest.raises(ValueError, match="2-D"):
        finite([1.0], "x", 2)
    with pytest.raises(ValueError, match="boolean or 0/1"):
        binary(np.array([0.5]), "x")
    with pytest.raises(ValueError, match="at least 2 readers"):
        paired_panels(np.zeros((1, 3)), np.zeros((1, 3)), ("a", "b"))
    with pytest.raises(ValueError, match="differ in shape"):
        paired_panels(np.zeros((2, 3)), np.zeros((2, 4)), ("a", "b"))
    for n_boot, level in ((0, 0.95), (10, 1.0), (10, 0.0)):
        with pytest.raises(ValueError):
            check_bootstrap(n_boot, level)
