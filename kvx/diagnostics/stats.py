"""Paired significance tests for intervention results (KVDiagnosis section 5.3)."""

from __future__ import annotations

from fractions import Fraction
from math import comb

__all__ = ["exact_mcnemar"]


def exact_mcnemar(b: int, c: int) -> float:
    """Two-sided exact McNemar p-value from the discordant pair counts ``b`` and ``c``.

    Under H0 each discordant pair falls either way with probability 1/2, so with
    ``X ~ Bin(b + c, 1/2)``: ``p = min(1, 2 P[X <= min(b, c)])``, and 1.0 when ``b + c = 0``.
    Computed exactly with integers (no scipy); e.g. 23 vs 1 gives 50 / 2^24 ≈ 2.98e-6.
    """
    for name, value in (("b", b), ("c", c)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            raise ValueError(f"{name} must be a nonnegative int, got {value!r}")
    n = b + c
    if n == 0:
        return 1.0
    tail = Fraction(sum(comb(n, i) for i in range(min(b, c) + 1)), 2**n)
    return float(min(Fraction(1), 2 * tail))
