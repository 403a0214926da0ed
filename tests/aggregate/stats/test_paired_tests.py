"""Exact McNemar (KVDiagnosis section 5.3; ragscale A.5-A.6): the paper value and hand cases, and scipy's
binomial against the integer computation it replaced, for every b + c < 400."""

from __future__ import annotations

from fractions import Fraction
from math import comb

import numpy as np
import pytest
from scipy.stats import binomtest

from kvx.aggregate.stats.paired_tests import (
    exact_mcnemar,
    mcnemar_cutoffs,
    mcnemar_p,
    mcnemar_significant,
    pair_mcnemar,
)


def integer_mcnemar(b: int, c: int) -> float:
    """The hand version scipy replaced (kvx.diagnostics.stats.exact_mcnemar): integers, rounded once."""
    n = b + c
    if n == 0:
        return 1.0
    tail = Fraction(sum(comb(n, i) for i in range(min(b, c) + 1)), 2**n)
    return float(min(Fraction(1), 2 * tail))


def integer_cutoffs(n_max: int, alpha: float) -> np.ndarray:
    """The hand version of the cutoffs (kvx.aggregate.ragscale.resolution.mcnemar_cutoffs)."""
    out = np.full(n_max + 1, -1, dtype=np.int64)
    for n in range(1, n_max + 1):
        tail, k = 0, -1
        for i in range(n // 2 + 1):
            tail += comb(n, i)
            if float(min(Fraction(1), Fraction(2 * tail, 2**n))) < alpha:
                k = i
            else:
                break
        out[n] = k
    return out


# ----------------------------------------------------------------------------- by hand


def test_paper_value() -> None:
    # 23 evidence-only vs 1 sham-only repair: 2 * (C(24,0) + C(24,1)) / 2^24 = 50 / 16777216
    p = exact_mcnemar(23, 1)
    assert p == pytest.approx(50 / 2**24, rel=1e-12)
    assert f"{p:.2e}" == "2.98e-06"


def test_symmetric() -> None:
    assert exact_mcnemar(23, 1) == exact_mcnemar(1, 23)
    assert exact_mcnemar(7, 2) == exact_mcnemar(2, 7)


def test_no_discordant_pairs() -> None:
    assert exact_mcnemar(0, 0) == 1.0


def test_small_hand_case() -> None:
    assert exact_mcnemar(0, 3) == pytest.approx(0.25, abs=1e-15)  # 2 * (1/8)
    # b = 2, c = 7: 2 * (1 + 9 + 36) / 512 = 92 / 512 = 0.1796875
    assert exact_mcnemar(2, 7) == pytest.approx(92 / 512, abs=1e-15)


def test_capped_at_one() -> None:
    assert exact_mcnemar(5, 5) == 1.0  # 2 * P[X <= 5] > 1 for n = 10
    assert exact_mcnemar(1, 2) == 1.0  # 2 * (1 + 3) / 8 = 1.0


@pytest.mark.parametrize("b, c", [(-1, 2), (1.0, 2), (True, 2)])
def test_bad_counts(b, c) -> None:
    with pytest.raises(ValueError):
        exact_mcnemar(b, c)


def test_matches_scipy_binomtest() -> None:
    for b, c in [(23, 1), (0, 3), (2, 7), (10, 30), (40, 41)]:
        ref = binomtest(min(b, c), b + c, 0.5, alternative="two-sided").pvalue
        assert exact_mcnemar(b, c) == pytest.approx(ref, rel=1e-9)


def test_mcnemar_p_is_elementwise_by_hand() -> None:
    # (0, 4): 2/16; (1, 4): 2 * 6/32; (3, 4) and (2, 2): |b - c| <= 1 -> exactly 1
    p = mcnemar_p(np.array([0, 1, 3, 2]), np.array([4, 4, 4, 2]))
    assert p.tolist() == [0.125, 0.375, 1.0, 1.0]


def test_cutoffs_by_hand() -> None:
    # alpha .05: n = 5 at min 0 gives 2/32 = .0625 (not below); n = 6 gives 2/64 = .03125, and
    # min 1 gives 2 * 7/64 = .21875: k = -1 up to 5, then 0
    assert mcnemar_cutoffs(6, 0.05).tolist() == [-1, -1, -1, -1, -1, -1, 0]
    # a p equal to alpha is not below it: n = 4, min 0 gives exactly 2/16 = .125
    assert mcnemar_cutoffs(4, 0.125)[4] == -1 and mcnemar_cutoffs(4, 0.13)[4] == 0
    cutoffs = mcnemar_cutoffs(6, 0.05)
    b, c = np.array([0, 6, 1, 0]), np.array([6, 0, 5, 5])
    assert mcnemar_significant(b, c, cutoffs).tolist() == [True, True, False, False]


def test_pair_mcnemar_counts_by_hand() -> None:
    x = np.array([1, 1, 1, 0, 0, 1], dtype=bool)
    y = np.array([0, 0, 1, 1, 0, 1], dtype=bool)
    # b = x right & y wrong = rows 0, 1; c = x wrong & y right = row 3: p = 2 * (1 + 3) / 8 = 1
    assert pair_mcnemar(x, y) == (2, 1, 1.0)


# ----------------------------------------------------------------------------- scipy against integers


def test_scipy_p_equals_the_integer_p_for_every_count_below_400() -> None:
    worst_abs = worst_rel = 0.0
    for n in range(400):
        low = np.arange(n // 2 + 1)
        got = mcnemar_p(low, n - low)
        ref = np.array([integer_mcnemar(int(i), n - int(i)) for i in low])
        worst_abs = max(worst_abs, float(np.abs(got - ref).max()))
        worst_rel = max(worst_rel, float((np.abs(got - ref) / ref).max()))
        assert (got[np.abs(2 * low - n) <= 1] == 1.0).all()  # the integer boundary is exact
    assert worst_abs <= 1e-12 and worst_rel <= 1e-12, (worst_abs, worst_rel)


@pytest.mark.parametrize("alpha", [0.05, 0.01, 0.1, 0.25, 0.125, 1 / 3])
def test_scipy_cutoffs_equal_the_integer_cutoffs(alpha: float) -> None:
    assert mcnemar_cutoffs(399, alpha).tolist() == integer_cutoffs(399, alpha).tolist()


def test_cutoffs_decide_as_the_p_value() -> None:
    k = mcnemar_cutoffs(40, 0.05)
    for n in range(41):
        for low in range(n // 2 + 1):
            assert (low <= k[n]) == (exact_mcnemar(low, n - low) < 0.05)
