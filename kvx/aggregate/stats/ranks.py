"""Rank statistics, scipy's: the Mann-Whitney U and the AUROC it gives (KVDiagnosis 5.3, Figure 6),
the stratified AUROC, and Spearman's rho."""

from __future__ import annotations

import numpy as np
from scipy.stats import mannwhitneyu, spearmanr

from kvx.aggregate.stats.inputs import finite

__all__ = ["auroc", "mann_whitney_u", "mixed_strata", "spearman", "stratified_auroc"]


def mann_whitney_u(pos: np.ndarray, neg: np.ndarray) -> float:
    """U of ``pos`` against ``neg``: the pairs with pos > neg plus half the ties
    (``scipy.stats.mannwhitneyu``'s statistic for its first sample; from midranks, so exact while the
    rank sums are below 2**53). Both samples must be non-empty."""
    return float(mannwhitneyu(pos, neg, alternative="two-sided", method="asymptotic").statistic)


def auroc(pos: np.ndarray, neg: np.ndarray) -> float | None:
    """P(random positive scores above random negative), ties 1/2; None if a class is empty.

    Positives are C->W rows, negatives C->C rows, scores oriented so larger means more risk.
    """
    p, n = finite(pos, "pos", 1), finite(neg, "neg", 1)
    if p.size == 0 or n.size == 0:
        return None
    return mann_whitney_u(p, n) / (p.size * n.size)


def mixed_strata(strata: list[tuple[np.ndarray, np.ndarray]]) -> list[tuple[np.ndarray, np.ndarray]]:
    """The (positives, negatives) strata with both classes present, checked finite and 1-D; the others
    contribute no within-stratum pair."""
    checked = [(finite(p, "pos", 1), finite(n, "neg", 1)) for p, n in strata]
    return [(p, n) for p, n in checked if p.size and n.size]


def stratified_auroc(strata: list[tuple[np.ndarray, np.ndarray]]) -> tuple[float | None, int]:
    """Within-stratum AUROC pooled over pairs: sum of U_s over sum of n_pos_s * n_neg_s.

    Positives are never compared with negatives of another stratum, so differences in base
    score between strata (e.g. workloads) cannot masquerade as separation. Returns
    (auc, number of mixed strata); auc is None when no stratum has both classes.
    """
    mixed = mixed_strata(strata)
    if not mixed:
        return None, 0
    u = sum(mann_whitney_u(p, n) for p, n in mixed)
    pairs = sum(p.size * n.size for p, n in mixed)
    return u / pairs, len(mixed)


def spearman(a: np.ndarray, b: np.ndarray) -> tuple[float, float]:
    """(rho, two-sided p) of Spearman's rank correlation, ties at their average rank
    (``scipy.stats.spearmanr``); NaN when a sample is constant."""
    result = spearmanr(a, b)
    return float(result.statistic), float(result.pvalue)
