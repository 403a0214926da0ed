"""Pearson's chi-square test of homogeneity (ragscale A.6: are rescue and damage the same for every
reader?), scipy's."""

from __future__ import annotations

import numpy as np
from scipy.stats import chi2_contingency

__all__ = ["chi2_homogeneity"]


def chi2_homogeneity(table: np.ndarray) -> tuple[float, int, float]:
    """(statistic, degrees of freedom, p) of Pearson's chi-square for an r x k table of counts, without
    continuity correction (``scipy.stats.chi2_contingency(table, correction=False)``)."""
    result = chi2_contingency(np.asarray(table), correction=False)
    return float(result.statistic), int(result.dof), float(result.pvalue)
