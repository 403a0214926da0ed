"""Exact McNemar test (KVDiagnosis section 5.3)."""

from __future__ import annotations

import pytest

from kvx.diagnostics.stats import exact_mcnemar


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
    stats = pytest.importorskip("scipy.stats")
    for b, c in [(23, 1), (0, 3), (2, 7), (10, 30), (40, 41)]:
        ref = stats.binomtest(min(b, c), b + c, 0.5, alternative="two-sided").pvalue
        assert exact_mcnemar(b, c) == pytest.approx(ref, rel=1e-9)
