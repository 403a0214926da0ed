"""Aggregation statistics (ragscale 3, 6, 7, A.4, A.5; KVDiagnosis 3.3, 5.3) against hand values."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy.stats import binomtest, rankdata

from kvx.aggregate.stats.eiv import eiv_bootstrap, eiv_correlation
from kvx.aggregate.stats.overlap import jaccard
from kvx.aggregate.stats.paired_tests import exact_mcnemar, pair_mcnemar
from kvx.aggregate.stats.ranks import auroc, mann_whitney_u, stratified_auroc
from kvx.aggregate.stats.releases import upgrade_interval
from kvx.aggregate.stats.resampling import paired_bootstrap_difference, stratified_auroc_interval
from kvx.aggregate.stats.upgrades import (
    endpoints,
    excess_flips,
    rescue_damage,
    rescue_damage_per_reader,
    retention,
)

# ----------------------------------------------------------------------------- AUROC


def brute_u(pos, neg) -> float:
    return sum(1.0 if p > n else 0.5 if p == n else 0.0 for p in pos for n in neg)


def test_auroc_hand_case_with_ties() -> None:
    # pairs (pos, neg): 3>1, 3>2, 3>2 | 2>1, 2=2 (1/2), 2=2 (1/2) -> U = 5, 6 pairs
    assert auroc(np.array([3.0, 2.0]), np.array([1.0, 2.0, 2.0])) == pytest.approx(5 / 6)


@pytest.mark.parametrize("seed", range(5))
def test_auroc_matches_brute_force(seed: int) -> None:
    rng = np.random.default_rng(seed)
    pos, neg = rng.integers(0, 4, 7).astype(float), rng.integers(0, 4, 9).astype(float)  # many ties
    assert auroc(pos, neg) == pytest.approx(brute_u(pos, neg) / 63, abs=1e-12)


def test_mann_whitney_u_equals_midrank_u_exactly() -> None:
    # U from midranks (what separation.csv reported before) and from counts over sorted negatives agree
    # to the last bit, ties and unequal class sizes included, so no AUROC of a table moves
    rng = np.random.default_rng(7)
    pos, neg = rng.integers(0, 30, 401).astype(float) / 7, rng.integers(0, 30, 1203).astype(float) / 7
    ranks = rankdata(np.concatenate([pos, neg]))
    assert mann_whitney_u(pos, neg) == float(ranks[: pos.size].sum() - pos.size * (pos.size + 1) / 2)


def test_auroc_empty_class_is_undefined() -> None:
    assert auroc(np.array([]), np.array([1.0])) is None
    assert auroc(np.array([1.0]), np.array([])) is None


def test_auroc_rejects_nan() -> None:
    with pytest.raises(ValueError):
        auroc(np.array([np.nan]), np.array([1.0]))


def test_stratified_auroc_never_pools_across_strata() -> None:
    # Stratum A: pos 1 vs neg 0; stratum B: pos 3 vs neg 2. Within each, the positive wins: 2/2 = 1.
    # Pooling all rows would also compare pos 1 with neg 2 (a loss): 3/4.
    strata = [(np.array([1.0]), np.array([0.0])), (np.array([3.0]), np.array([2.0]))]
    assert auroc(np.array([1.0, 3.0]), np.array([0.0, 2.0])) == 0.75
    assert stratified_auroc(strata) == (1.0, 2)


def test_stratified_auroc_pools_pairs_not_stratum_means() -> None:
    # A: U = 1 of 1 pair; B: pos [1, 2] vs neg [2, 3, 3] -> U = 0.5 of 6 pairs. Pooled: 1.5 / 7.
    # (The mean of per-stratum AUROCs would be (1 + 1/12) / 2 instead.)
    strata = [
        (np.array([5.0]), np.array([4.0])),
        (np.array([1.0, 2.0]), np.array([2.0, 3.0, 3.0])),
    ]
    auc, n_mixed = stratified_auroc(strata)
    assert auc == pytest.approx(1.5 / 7)
    assert n_mixed == 2


def test_stratified_auroc_ignores_non_mixed_strata() -> None:
    mixed = (np.array([2.0]), np.array([1.0]))
    only_pos = (np.array([0.0, 0.0]), np.array([]))
    only_neg = (np.array([]), np.array([9.0]))
    assert stratified_auroc([mixed, only_pos, only_neg]) == (1.0, 1)
    assert stratified_auroc([only_pos, only_neg]) == (None, 0)
    assert stratified_auroc_interval([only_pos, only_neg]) == (None, None)


def test_stratified_interval_perfect_separation() -> None:
    strata = [(np.array([5.0, 6.0, 7.0]), np.array([1.0, 2.0])), (np.array([9.0]), np.array([0.0, 3.0]))]
    assert stratified_auroc_interval(strata, n_boot=200, seed=3) == (1.0, 1.0)


def test_stratified_interval_matches_naive_bootstrap() -> None:
    rng = np.random.default_rng(11)
    strata = []
    for size in (12, 20, 9):
        y = np.arange(size) % 3 == 0
        x = rng.integers(0, 6, size) + y
        strata.append((x[y].astype(float), x[~y].astype(float)))
    naive_rng = np.random.default_rng(99)
    draws = []
    for _ in range(3000):
        u = pairs = 0.0
        for pos, neg in strata:
            p, n = naive_rng.choice(pos, pos.size), naive_rng.choice(neg, neg.size)
            u, pairs = u + brute_u(p, n), pairs + p.size * n.size
        draws.append(u / pairs)
    naive = np.percentile(draws, [2.5, 97.5])
    low, high = stratified_auroc_interval(strata, n_boot=3000, seed=5)
    assert low == pytest.approx(naive[0], abs=0.03)
    assert high == pytest.approx(naive[1], abs=0.03)
    assert low < stratified_auroc(strata)[0] < high
    assert stratified_auroc_interval(strata, n_boot=3000, seed=5) == (low, high)


# ----------------------------------------------------------------------------- Jaccard, retention, endpoints


def test_jaccard() -> None:
    assert jaccard({1, 2, 3}, {2, 3, 4, 5}) == pytest.approx(2 / 5)
    assert jaccard({"a"}, {"a"}) == 1.0
    assert jaccard({1}, set()) == 0.0
    assert jaccard(set(), set()) is None


def test_retention_hotpotqa_example() -> None:
    # ragscale 5.1: the endpoint upgrade falls from 31.8 pp to 7.8 pp, leaving 24.5%.
    assert round(retention(0.318, 0.078), 3) == 0.245


def test_retention_floor_boundary() -> None:
    assert retention(0.05, 0.01) == pytest.approx(0.2)  # exactly 5 pp counts
    assert retention(0.0499, 0.01) is None
    assert retention(-0.0499, 0.01) is None
    assert retention(-0.10, 0.05) == pytest.approx(-0.5)
    assert retention(0.02, 0.01, floor=0.02) == pytest.approx(0.5)


def test_endpoints_ties_go_to_lowest_index() -> None:
    assert endpoints(np.array([0.4, 0.2, 0.9, 0.2, 0.9])) == (1, 2)
    assert endpoints(np.array([0.5, 0.5])) == (0, 0)
    with pytest.raises(ValueError):
        endpoints(np.array([]))


# ----------------------------------------------------------------------------- excess flips


def slow_excess_flips(raw, comp, n_splits, seed, min_gap=0.05, mcnemar_alpha=None):
    """A.5 by explicit loops; split k is the k-th rng.permutation(n), first n // 2 = selection."""
    rng = np.random.default_rng(seed)
    m, n = raw.shape
    half = n // 2
    excess, raw_rates, comp_rates, counts = [], [], [], []
    for _ in range(n_splits):
        perm = rng.permutation(n)
        sel, sco = perm[:half], perm[half:]
        eligible = raw_rev = comp_rev = 0
        for i in range(m):
            for j in range(i + 1, m):
                gap = raw[j, sel].mean() - raw[i, sel].mean()
                if abs(gap) < min_gap:
                    continue
                if mcnemar_alpha is not None:
                    b = sum(raw[i, k] == 1 and raw[j, k] == 0 for k in sel)
                    c = sum(raw[i, k] == 0 and raw[j, k] == 1 for k in sel)
                    if exact_mcnemar(int(b), int(c)) >= mcnemar_alpha:
                        continue
                eligible += 1
                orient = 1 if gap > 0 else -1
                raw_rev += orient * (raw[j, sco].mean() - raw[i, sco].mean()) < 0
                comp_rev += orient * (comp[j, sco].mean() - comp[i, sco].mean()) < 0
        if eligible:
            raw_rates.append(raw_rev / eligible)
            comp_rates.append(comp_rev / eligible)
            excess.append(comp_rev / eligible - raw_rev / eligible)
            counts.append(eligible)
    return excess, raw_rates, comp_rates, counts


def assert_matches_slow(result, slow) -> None:
    excess, raw_rates, comp_rates, counts = slow
    assert result.n_splits_used == len(excess)
    assert result.median == pytest.approx(np.median(excess), abs=1e-12)
    assert result.low == pytest.approx(np.percentile(excess, 2.5), abs=1e-12)
    assert result.high == pytest.approx(np.percentile(excess, 97.5), abs=1e-12)
    assert result.raw_rate == pytest.approx(np.median(raw_rates), abs=1e-12)
    assert result.comp_rate == pytest.approx(np.median(comp_rates), abs=1e-12)
    assert result.median_eligible_pairs == np.median(counts)


TINY_RAW = np.array(
    [
        [1, 0, 1, 1, 0, 1],
        [0, 0, 1, 0, 0, 1],
        [1, 1, 1, 1, 0, 1],
    ],
    dtype=float,
)
TINY_COMP = np.array(
    [
        [1, 1, 1, 1, 0, 1],
        [1, 1, 1, 1, 1, 1],
        [1, 0, 1, 0, 0, 1],
    ],
    dtype=float,
)


def test_excess_flips_tiny_panel_matches_slow_loops() -> None:
    result = excess_flips(TINY_RAW, TINY_COMP, n_splits=300, seed=7)
    assert_matches_slow(result, slow_excess_flips(TINY_RAW, TINY_COMP, 300, 7))
    assert 0 < result.n_splits_used <= 300


def test_excess_flips_continuous_and_mcnemar_match_slow_loops() -> None:
    rng = np.random.default_rng(4)
    cont_raw, cont_comp = rng.random((4, 9)), rng.random((4, 9))
    assert_matches_slow(
        excess_flips(cont_raw, cont_comp, n_splits=200, seed=1, min_gap=0.1),
        slow_excess_flips(cont_raw, cont_comp, 200, 1, min_gap=0.1),
    )
    skill = np.array([0.2, 0.5, 0.8, 0.9])[:, None]
    raw = (rng.random((4, 40)) < skill).astype(float)
    comp = (rng.random((4, 40)) < 0.6).astype(float)
    result = excess_flips(raw, comp, n_splits=200, seed=2, mcnemar_alpha=0.05)
    assert result.n_splits_used > 0
    assert_matches_slow(result, slow_excess_flips(raw, comp, 200, 2, mcnemar_alpha=0.05))
    unfiltered = excess_flips(raw, comp, n_splits=200, seed=2)
    assert result.median_eligible_pairs < unfiltered.median_eligible_pairs


def test_excess_flips_every_pair_reversed() -> None:
    # Raw: reader 0 scores 0, reader 1 scores 0.5, reader 2 scores 1 on every row, so every split
    # orients all three pairs upward and no raw reversal occurs; compression inverts the order.
    raw = np.repeat([[0.0], [0.5], [1.0]], 6, axis=1)
    comp = raw[::-1].copy()
    result = excess_flips(raw, comp, n_splits=50, seed=0)
    assert result.raw_rate == 0.0
    assert result.comp_rate == 1.0
    assert result.median == result.low == result.high == 1.0 - result.raw_rate
    assert result.n_splits_used == 50
    assert result.median_eligible_pairs == 3.0


def test_excess_flips_scoring_tie_is_not_reversal() -> None:
    raw = np.repeat([[0.0], [0.5], [1.0]], 6, axis=1)
    comp = np.full_like(raw, 0.7)  # every scoring-half difference is exactly 0
    result = excess_flips(raw, comp, n_splits=50, seed=0)
    assert result.comp_rate == 0.0
    assert result.median == 0.0


def test_excess_flips_gap_boundary_is_exact() -> None:
    # Reader 1 equals reader 0 except row 0: the selection gap is exactly 1/20 = 0.05 when row 0 is
    # selected, else 0. Computing means first could round (s+1)/20 - s/20 below 0.05.
    rng = np.random.default_rng(8)
    base = (rng.random(40) < 0.5).astype(float)
    base[0] = 0.0
    raw = np.stack([base, base])
    raw[1, 0] = 1.0
    perms = np.random.default_rng(3)
    expected = sum(0 in perms.permutation(40)[:20] for _ in range(100))
    assert excess_flips(raw, raw, n_splits=100, seed=3).n_splits_used == expected
    assert excess_flips(raw, raw, n_splits=100, seed=3, min_gap=0.0501).n_splits_used == 0


def test_excess_flips_no_eligible_pair() -> None:
    raw = np.ones((3, 8))
    result = excess_flips(raw, raw, n_splits=20, seed=0)
    assert result.n_splits_used == 0
    assert result.median is None and result.low is None and result.raw_rate is None
    assert result.median_eligible_pairs is None


def test_excess_flips_input_checks() -> None:
    with pytest.raises(ValueError):
        excess_flips(np.zeros((2, 4)), np.zeros((2, 5)))
    with pytest.raises(ValueError):
        excess_flips(np.full((2, 4), 0.5), np.zeros((2, 4)), mcnemar_alpha=0.05)
    with pytest.raises(ValueError):
        excess_flips(np.zeros((2, 4)), np.zeros((2, 4)), min_gap=0.0)


def test_excess_flips_deterministic() -> None:
    a = excess_flips(TINY_RAW, TINY_COMP, n_splits=100, seed=5)
    assert a == excess_flips(TINY_RAW, TINY_COMP, n_splits=100, seed=5)


# ----------------------------------------------------------------------------- rescue / damage


def test_rescue_damage_hand_case() -> None:
    raw = np.array([[1, 1, 0, 0], [1, 0, 1, 0]], dtype=bool)
    comp = np.array([[1, 0, 1, 0], [1, 1, 1, 1]], dtype=bool)
    # reader 0: rescues row 2, damages row 1; reader 1: rescues rows 1 and 3, damages nothing.
    result = rescue_damage(raw, comp)
    assert (result.n_pairs, result.n_rescued, result.n_raw_correct, result.n_damaged) == (8, 3, 4, 1)
    assert result.rescue == pytest.approx(3 / 8)
    assert result.damage == pytest.approx(1 / 4)
    per = rescue_damage_per_reader(raw, comp)
    assert [(r.rescue, r.damage) for r in per] == [(0.25, 0.5), (0.5, 0.0)]


def test_rescue_damage_undefined_damage() -> None:
    result = rescue_damage(np.zeros((2, 3), dtype=int), np.ones((2, 3), dtype=int))
    assert result.rescue == 1.0
    assert result.damage is None
    with pytest.raises(ValueError):
        rescue_damage(np.full((1, 2), 0.5), np.ones((1, 2)))


# ----------------------------------------------------------------------------- paired tests


@pytest.mark.parametrize("b, c", [(23, 1), (0, 3), (2, 7), (10, 30), (5, 5), (0, 0)])
def test_pair_mcnemar_matches_binomtest(b: int, c: int) -> None:
    x = np.array([True] * b + [False] * c + [True] * 4 + [False] * 3)
    y = np.array([False] * b + [True] * c + [True] * 4 + [False] * 3)
    nb, nc, p = pair_mcnemar(x, y)
    assert (nb, nc) == (b, c)
    ref = binomtest(min(b, c), b + c, 0.5).pvalue if b + c else 1.0
    assert p == pytest.approx(ref, rel=1e-9)


def test_paired_bootstrap_identical_outcomes() -> None:
    x = np.array([1, 0, 1, 1, 0], dtype=bool)
    assert paired_bootstrap_difference(x, x, n_boot=100) == (0.0, 0.0, 0.0)


def test_paired_bootstrap_kvdiagnosis_repair_example() -> None:
    # 96 low-EAR rows: 5 repaired by both, 23 evidence-only, 1 sham-only -> 28/96 vs 6/96.
    x = np.array([1] * 5 + [1] * 23 + [0] * 1 + [0] * 67, dtype=bool)
    y = np.array([1] * 5 + [0] * 23 + [1] * 1 + [0] * 67, dtype=bool)
    diff, low, high = paired_bootstrap_difference(x, y, seed=1)
    assert diff == pytest.approx(22 / 96)  # 22.9 pp
    # Paper: 95% paired-bootstrap CI 14.6-32.3 pp; same estimand, different draws.
    assert low == pytest.approx(0.146, abs=0.015)
    assert high == pytest.approx(0.323, abs=0.015)
    # Same distribution as resampling row indices directly.
    rng = np.random.default_rng(2)
    d = x.astype(int) - y.astype(int)
    naive = d[rng.integers(0, 96, (4000, 96))].mean(axis=1)
    assert low == pytest.approx(np.percentile(naive, 2.5), abs=0.011)
    assert high == pytest.approx(np.percentile(naive, 97.5), abs=0.011)
    assert pair_mcnemar(x, y)[:2] == (23, 1)


def test_paired_bootstrap_empty_raises() -> None:
    with pytest.raises(ValueError):
        paired_bootstrap_difference(np.array([], dtype=bool), np.array([], dtype=bool))


# ----------------------------------------------------------------------------- EIV (ragscale A.4)


def direct_eiv(R: np.ndarray, D: np.ndarray) -> dict[str, float]:
    """A.4 literally, by explicit loops: Sigma matrices, H = I - 11^T/m, tr(H Sigma) / (m - 1)."""
    m, n = R.shape
    rbar = [sum(R[i, k] for k in range(n)) / n for i in range(m)]
    dbar = [sum(D[i, k] for k in range(n)) / n for i in range(m)]
    gr, gd = sum(rbar) / m, sum(dbar) / m
    big_m11 = sum((rbar[i] - gr) ** 2 for i in range(m)) / (m - 1)
    big_m22 = sum((dbar[i] - gd) ** 2 for i in range(m)) / (m - 1)
    big_m12 = sum((rbar[i] - gr) * (dbar[i] - gd) for i in range(m)) / (m - 1)
    H = [[(1.0 if i == j else 0.0) - 1 / m for j in range(m)] for i in range(m)]

    def moment(A, abar, B, bbar) -> float:
        sigma = [
            [
                sum((A[i, k] - abar[i]) * (B[j, k] - bbar[j]) for k in range(n)) / (n * (n - 1))
                for j in range(m)
            ]
            for i in range(m)
        ]
        trace_h_sigma = sum(H[i][j] * sigma[j][i] for i in range(m) for j in range(m))
        return trace_h_sigma / (m - 1)

    m11 = big_m11 - moment(R, rbar, R, rbar)
    m22 = big_m22 - moment(D, dbar, D, dbar)
    m12 = big_m12 - moment(R, rbar, D, dbar)
    min_eig = (m11 + m22) / 2 - math.sqrt(((m11 - m22) / 2) ** 2 + m12**2)
    return {
        "M11": big_m11,
        "M22": big_m22,
        "M12": big_m12,
        "m11": m11,
        "m22": m22,
        "m12": m12,
        "min_eig": min_eig,
    }


# Raw scores and compressed scores for 3 readers x 4 rows; D = comp - raw.
HAND_R = np.array([[1, 1, 0, 0], [1, 0, 1, 1], [0, 0, 0, 1]], dtype=float)
HAND_D = np.array([[1, 1, 1, 0], [1, 0, 1, 1], [1, 0, 1, 1]], dtype=float) - HAND_R


def test_eiv_hand_case_non_psd_flags() -> None:
    # By hand. Reader means: raw (.5, .75, .25), gain D = [[0,0,1,0],[0,0,0,0],[1,0,1,0]] -> (.25, 0, .5).
    # M11 = (0 + .0625 + .0625) / 2 = 9/144; M22 = 9/144; M12 = (0 - .0625 - .0625) / 2 = -9/144.
    # Row-centred raw: [.5,.5,-.5,-.5], [.25,-.75,.25,.25], [-.25,-.25,-.25,.75]; n(n-1) = 12.
    #   tr(Rc Rc^T) = 1 + .75 + .75 = 2.5; column sums (.5,-.5,-.5,.5) -> 1^T Rc Rc^T 1 = 1.
    #   s_R = (2.5 - 1/3) / 12 / 2 = 13/144.
    # Row-centred gain: [-.25,-.25,.75,-.25], 0, [.5,-.5,.5,-.5]: trace 1.75; column sums
    #   (.25,-.75,1.25,-.75) -> 2.75; s_D = (1.75 - 2.75/3) / 24 = 5/144.
    # Cross: tr(Rc Dc^T) = -.5 + 0 - .5 = -1; sum of column-sum products = -.5;
    #   s_RD = (-1 + .5/3) / 24 = -5/144.
    # M* = [[9-13, -9+5], [-9+5, 9-5]] / 144 = [[-4, -4], [-4, 4]] / 144: eigenvalues +-sqrt(32)/144.
    direct = direct_eiv(HAND_R, HAND_D)
    assert (direct["M11"], direct["M22"], direct["M12"]) == pytest.approx((9 / 144, 9 / 144, -9 / 144))
    e = eiv_correlation(HAND_R, HAND_D)
    assert (e.m11, e.m22, e.m12) == pytest.approx((-4 / 144, 4 / 144, -4 / 144), abs=1e-15)
    assert (e.m11, e.m22, e.m12) == pytest.approx((direct["m11"], direct["m22"], direct["m12"]), abs=1e-15)
    assert e.min_eigenvalue == pytest.approx(-math.sqrt(32) / 144, abs=1e-15)
    assert e.nonpositive_variance and e.non_psd and e.nonfinite
    assert not e.outside_unit
    assert e.r_unbounded is None and e.r_clipped is None and e.slope is None
    assert e.r_psd == pytest.approx(-1.0)  # one positive eigenvalue left: rank one, |r| = 1


def test_eiv_outside_unit_interval() -> None:
    R = np.array([[0, 0, 0, 1], [0, 0, 0, 0], [1, 1, 0, 1]], dtype=float)
    comp = np.array([[1, 1, 0, 0], [1, 1, 0, 0], [0, 1, 0, 1]], dtype=float)
    e = eiv_correlation(R, comp - R)
    direct = direct_eiv(R, comp - R)
    assert (e.m11, e.m22, e.m12) == pytest.approx((direct["m11"], direct["m22"], direct["m12"]), abs=1e-15)
    assert e.r_unbounded == pytest.approx(direct["m12"] / math.sqrt(direct["m11"] * direct["m22"]))
    assert e.r_unbounded < -1
    assert e.r_clipped == -1.0
    assert e.outside_unit and e.non_psd
    assert not e.nonpositive_variance and not e.nonfinite
    assert e.r_psd == pytest.approx(-1.0)


def test_eiv_admissible_case_matches_direct_loops() -> None:
    # Readers differ in skill; gain falls with skill plus a reader-specific offset and row noise.
    rng = np.random.default_rng(0)
    skill = np.array([0.2, 0.4, 0.6, 0.9])[:, None]
    R = skill + 0.2 * rng.random((4, 7))
    D = 0.3 * rng.random((4, 7)) - 0.5 * skill + np.array([0.1, -0.1, 0.05, 0.0])[:, None]
    e = eiv_correlation(R, D)
    direct = direct_eiv(R, D)
    assert (e.m11, e.m22, e.m12) == pytest.approx((direct["m11"], direct["m22"], direct["m12"]), rel=1e-12)
    assert e.min_eigenvalue == pytest.approx(direct["min_eig"], rel=1e-9)
    assert e.min_eigenvalue > 0 and not e.non_psd
    r = direct["m12"] / math.sqrt(direct["m11"] * direct["m22"])
    assert e.r_unbounded == pytest.approx(r, rel=1e-12)
    assert e.r_clipped == e.r_unbounded == e.r_psd
    assert e.slope == pytest.approx(direct["m12"] / direct["m11"], rel=1e-12)
    assert not (e.nonpositive_variance or e.nonfinite or e.outside_unit)


def test_eiv_bootstrap_reproduces_draw_by_draw() -> None:
    R = np.array([[0, 0, 0, 1], [0, 0, 0, 0], [1, 1, 0, 1]], dtype=float)
    D = np.array([[1, 1, 0, 0], [1, 1, 0, 0], [0, 1, 0, 1]], dtype=float) - R
    boot = eiv_bootstrap(R, D, n_boot=300, seed=4)
    assert boot == eiv_bootstrap(R, D, n_boot=300, seed=4)
    rng = np.random.default_rng(4)
    draws = [eiv_correlation(R[:, cols], D[:, cols]) for cols in (rng.integers(0, 4, 4) for _ in range(300))]
    finite = [d.r_clipped for d in draws if d.r_clipped is not None]
    assert boot.n_draws == 300
    assert boot.n_finite == len(finite)
    assert boot.n_nonfinite == sum(d.nonfinite for d in draws)
    assert boot.n_nonpositive_variance == sum(d.nonpositive_variance for d in draws)
    assert boot.n_non_psd == sum(d.non_psd for d in draws)
    assert boot.n_outside_unit == sum(d.outside_unit for d in draws)
    assert (boot.low, boot.high) == (np.percentile(finite, 2.5), np.percentile(finite, 97.5))
    # Consistency: every draw is finite or counted; |r| > 1 needs a negative eigenvalue.
    assert boot.n_finite + boot.n_nonfinite == boot.n_draws
    assert boot.n_nonpositive_variance <= boot.n_nonfinite
    assert boot.n_outside_unit <= boot.n_non_psd
    assert boot.n_nonfinite > 0 and boot.n_outside_unit > 0  # this tiny panel hits the boundaries
    assert -1.0 <= boot.low <= boot.high <= 1.0


def test_eiv_input_checks() -> None:
    with pytest.raises(ValueError):
        eiv_correlation(np.zeros((1, 4)), np.zeros((1, 4)))
    with pytest.raises(ValueError):
        eiv_correlation(np.zeros((3, 4)), np.zeros((3, 5)))


def test_bootstrap_arguments_checked_up_front() -> None:
    strata = [(np.array([1.0]), np.array([0.0]))]
    x = np.array([True, False])
    for bad in ({"n_boot": 0}, {"level": 1.0}, {"level": 0.0}):
        with pytest.raises(ValueError):
            stratified_auroc_interval(strata, **bad)
        with pytest.raises(ValueError):
            paired_bootstrap_difference(x, x, **bad)
        with pytest.raises(ValueError):
            eiv_bootstrap(HAND_R, HAND_D, **bad)


# ----------------------------------------------------------------------------- upgrade intervals


def test_upgrade_interval_constant_rows_and_floor() -> None:
    raw = np.array([[0, 0, 0, 0], [1, 1, 1, 1]], dtype=float)  # b - a = 1 on every row
    comp = np.array([[0, 0, 0, 0], [0.5, 0.5, 0.5, 0.5]])  # b - a = 0.5 on every row
    boot = upgrade_interval(raw, comp, n_boot=50, seed=3)
    assert boot.raw == (1.0, 1.0) and boot.comp == (0.5, 0.5) and boot.retention == (0.5, 0.5)
    assert boot.n_undefined == 0
    flat = upgrade_interval(np.zeros((2, 4)), comp, n_boot=50, seed=3)  # raw upgrade 0 < 5 pp
    assert flat.retention == (None, None) and flat.n_undefined == 50


def test_upgrade_interval_reproduces_ragscales_row_resampling() -> None:
    """ragscale release analysis.bootstrap_pair: one rng.integers(0, n, size=n) draw of rows per resample."""
    rng = np.random.default_rng(0)
    raw, comp = rng.integers(0, 2, (2, 30)).astype(float), rng.integers(0, 2, (2, 30)).astype(float)
    boot = upgrade_interval(raw, comp, n_boot=400, seed=9)
    draw = np.random.default_rng(9)
    picks = np.stack([draw.integers(0, 30, size=30) for _ in range(400)])
    up_raw, up_comp = (raw[1] - raw[0])[picks].mean(axis=1), (comp[1] - comp[0])[picks].mean(axis=1)
    assert boot.raw == pytest.approx(tuple(np.percentile(up_raw, [2.5, 97.5])))
    keep = np.abs(up_raw) >= 0.05
    assert boot.n_undefined == int((~keep).sum())
    assert boot.retention == pytest.approx(tuple(np.percentile(up_comp[keep] / up_raw[keep], [2.5, 97.5])))
