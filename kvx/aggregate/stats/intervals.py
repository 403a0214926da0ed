"""The aggregate's one percentile interval, with the releases' exact rule."""

from __future__ import annotations

import numpy as np

__all__ = ["percentile_interval"]


def percentile_interval(values: np.ndarray, level: float = 0.95) -> tuple[float | None, float | None]:
    """The central percentile interval holding ``level`` of ``values`` (numpy's linear interpolation);
    (None, None) with no value.

    At level 0.95 the percentiles are exactly 2.5 and 97.5, as in ragscale's ``analysis.bootstrap_pair``
    (``np.percentile(v, 2.5)``) and TPBench's ``score_answers.py`` (``np.quantile(v, [.025, .975])``),
    which are the same numbers: ``50 * (1 - 0.95)`` is 2.500000000000002 in floating point and would
    move the interpolation off theirs, so the low percentile is rounded to 12 decimals and the high one
    is 100 minus it."""
    v = np.asarray(values, dtype=float)
    if v.size == 0:
        return None, None
    low_q = round(50.0 * (1.0 - level), 12)
    low, high = np.percentile(v, [low_q, 100.0 - low_q])
    return float(low), float(high)
