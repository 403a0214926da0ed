"""Exact McNemar tests of paired binary outcomes (KVDiagnosis 5.3; ragscale A.5-A.6), from scipy's
binomial distribution.

With ``b`` and ``c`` the discordant counts (x right and y wrong, x wrong and y right), each discordant
pair falls either way with probability 1/2 under H0, so with ``X ~ Bin(b + c, 1/2)`` the two-sided
p-value is ``min(1, 2 P[X <= min(b, c)])`` (no continuity or mid-p adjustment), 1 when ``b + c = 0``.
"""

from __future__ import annotations

from fractions import Fraction
from functools import lru_cache
from math import comb

import numpy as np
from scipy.stats import binom

from kvx.aggregate.stats.inputs import outcome_pair

__all__ = ["exact_mcnemar", "mcnemar_cutoffs", "mcnemar_p", "mcnemar_significant", "pair_mcnemar"]

#: a p-value this close (relative) to alpha is compared exactly, on the rational p
_EXACT_BAND = 1e-9


def mcnemar_p(b: np.ndarray, c: np.ndarray) -> np.ndarray:
    """Elementwise exact two-sided McNemar p of discordant counts: ``min(1, 2 P[X <= min(b, c)])`` with
    scipy's binomial cdf, and exactly 1 where ``|b - c| <= 1`` (there ``P[X <= min(b, c)] >= 1/2``: an
    integer boundary, kept exact rather than left to the cdf's rounding; it includes ``b + c = 0``)."""
    b, c = np.asarray(b, dtype=np.int64), np.asarray(c, dtype=np.int64)
    tail = binom.cdf(np.minimum(b, c), b + c, 0.5)
    return np.where(np.abs(b - c) <= 1, 1.0, np.minimum(1.0, 2.0 * tail))


def exact_mcnemar(b: int, c: int) -> float:
    """The two-sided exact McNemar p-value of the discordant counts ``b`` and ``c`` (:func:`mcnemar_p`);
    e.g. 23 vs 1 gives 2 (1 + 24) / 2^24 = 50 / 2^24 ~ 2.98e-6."""
    for name, value in (("b", b), ("c", c)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            raise ValueError(f"{name} must be a nonnegative int, got {value!r}")
    return float(mcnemar_p(b, c))


def _rational_p(low: int, n: int) -> float:
    """The p of ``min(b, c) = low`` at ``b + c = n`` from integers, rounded once to float."""
    tail = sum(comb(n, i) for i in range(low + 1))
    return float(min(Fraction(1), Fraction(2 * tail, 2**n)))


@lru_cache(maxsize=32)
def mcnemar_cutoffs(n_max: int, alpha: float) -> np.ndarray:
    """``k[n]`` for ``n = 0 .. n_max``: the largest ``min(b, c)`` whose exact McNemar p is below ``alpha``
    when ``b + c = n`` (-1: none). p rises with ``min(b, c)``, so the test is the integer comparison
    ``min(b, c) <= k[b + c]`` (:func:`mcnemar_significant`). p comes from :func:`mcnemar_p`; one within
    1e-9 (relative) of ``alpha`` is decided on the rational p instead, so the cdf's rounding cannot move
    a cutoff."""
    out = np.full(n_max + 1, -1, dtype=np.int64)
    for n in range(1, n_max + 1):
        low = np.arange(n // 2 + 1)
        p = mcnemar_p(low, n - low)
        below = p < alpha
        for i in np.flatnonzero(np.abs(p - alpha) <= _EXACT_BAND * alpha):
            below[i] = _rational_p(int(i), n) < alpha
        stop = np.flatnonzero(~below)
        out[n] = (stop[0] if stop.size else below.size) - 1
    out.flags.writeable = False  # cached: shared by every caller
    return out


def mcnemar_significant(b: np.ndarray, c: np.ndarray, cutoffs: np.ndarray) -> np.ndarray:
    """Elementwise exact McNemar p < alpha for integer discordant counts, from :func:`mcnemar_cutoffs`
    (which must reach ``max(b + c)``)."""
    b, c = np.asarray(b, dtype=np.int64), np.asarray(c, dtype=np.int64)
    return np.minimum(b, c) <= cutoffs[b + c]


def pair_mcnemar(x: np.ndarray, y: np.ndarray) -> tuple[int, int, float]:
    """(b, c, p): b = x right & y wrong, c = x wrong & y right, p = exact two-sided McNemar."""
    xs, ys = outcome_pair(x, y)
    b, c = int((xs & ~ys).sum()), int((~xs & ys).sum())
    return b, c, exact_mcnemar(b, c)
