"""A judge's agreement with human labels and its question-clustered bootstrap (TPBench §6.1.1), on
hand-counted miniatures."""

from __future__ import annotations

import numpy as np
import pytest

from kvx.aggregate.stats.agreement import Confusion, agreement_intervals, cluster_count_draws, confusion


def test_ties_leave_and_uncertain_decisions_stay_without_credit():
    labels = [True, True, True, False, False, None]
    decisions = [True, None, False, False, True, True]
    c = confusion(labels, decisions)
    assert c == Confusion(tp=1, tn=1, fp=1, fn=1, uncertain_positive=1, uncertain_negative=0)
    assert c.resolved == 5  # the tie is out, the uncertain decision is in
    assert c.accuracy == pytest.approx(2 / 5)
    assert c.balanced_accuracy == pytest.approx((1 / 3 + 1 / 2) / 2)  # positives: tp + fn + uncertain
    assert c.uncertainty_rate == pytest.approx(1 / 5)


def test_balanced_accuracy_needs_both_classes():
    assert confusion([True, True], [True, False]).balanced_accuracy is None
    with pytest.raises(ValueError, match="2 labels but 1 decisions"):
        confusion([True, False], [True])


def test_clusters_are_drawn_as_the_release_draws_them():
    """``default_rng(seed).integers(K, size=(n_boot, K))``, each resample the drawn rows' column sums."""
    counts = np.array([[1, 0], [0, 1], [2, 2]])
    picks = np.random.default_rng(7).integers(3, size=(5, 3))
    expected = np.array([[sum(counts[i, c] for i in row) for c in range(2)] for row in picks])
    assert (cluster_count_draws(counts, n_boot=5, seed=7) == expected).all()
    with pytest.raises(ValueError, match="non-empty clusters x columns"):
        cluster_count_draws(np.zeros((0, 3)))


def test_identical_clusters_give_a_point_interval():
    # every question: one pair the judge gets right, one it gets wrong -> accuracy 0.5 in every resample
    labels = [True, False] * 4
    judge = [True, True] * 4
    out = agreement_intervals(labels, {"judge": judge}, list("aabbccdd"), n_boot=200, seed=1)
    assert out["judge"]["accuracy"] == pytest.approx((0.5, 0.5))
    assert out["judge"]["balanced_accuracy"] == pytest.approx((0.5, 0.5))


def test_the_paired_gain_resamples_both_methods_together():
    """Question A: the judge is right and the baseline wrong; B: both right. A resample's gain is 1 (A
    twice), 0.5 (one each) or 0 (B twice), each end with probability 1/4: the 2.5th and 97.5th
    percentiles of 2,000 resamples are 0 and 1, and the judge's accuracy is 1 in every one."""
    out = agreement_intervals(
        [True, True], {"judge": [True, True], "baseline": [False, True]}, ["A", "B"], n_boot=2000, seed=3
    )
    assert out["judge"]["accuracy"] == pytest.approx((1.0, 1.0))
    assert out["baseline"]["gain"] == pytest.approx((0.0, 1.0))
    assert "gain" not in out["judge"]
    # a resample without a negative has no balanced accuracy: left out, not a NaN interval
    assert out["baseline"]["balanced_accuracy"] == (None, None)


def test_no_resolved_label_is_an_error():
    with pytest.raises(ValueError, match="no resolved label"):
        agreement_intervals([None], {"judge": [True]}, ["q"])
