"""Does a lower reader gain more? The errors-in-variables analysis beyond the correlation (ragscale 5.1,
A.4).

- the corrected slope M*12 / M*11 of gain on raw score, with its family-by-row interval;
- the headroom-scaled gain (5.1: "scaling each gain by the reader's remaining accuracy headroom"):
  each reader's paired gains divided by 1 - its raw mean, correlated with raw score by the same
  EIV estimator, its interval recomputing the headroom in every draw;
- the disjoint-row diagnostic: raw means on one row half, gain means on the other, so the two share
  no row noise and a plain cross-reader Pearson correlation needs no correction.

Each estimate is the one M* (:func:`kvx.aggregate.stats.eiv.corrected_moments`) over the family-by-row
draws (:func:`kvx.aggregate.stats.releases.family_row_draws`), so with the same seed every draw is
:func:`~kvx.aggregate.stats.eiv.eiv_bootstrap`'s.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from kvx.aggregate.stats.eiv import corrected_moments, correlations
from kvx.aggregate.stats.intervals import percentile_interval
from kvx.aggregate.stats.releases import family_row_draws, split_halves

__all__ = [
    "DisjointRows",
    "SlopeAndHeadroom",
    "disjoint_rows",
    "slope_and_headroom",
    "headroom_scale",
]


def headroom_scale(raw_means: np.ndarray) -> np.ndarray:
    """1 / (1 - raw mean) per reader; NaN where a reader has no headroom (raw mean 1)."""
    with np.errstate(divide="ignore"):
        return np.where(raw_means < 1.0, 1.0 / (1.0 - raw_means), np.nan)


def _slopes(m: np.ndarray) -> np.ndarray:
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where(m[:, 0, 0] > 0, m[:, 0, 1] / m[:, 0, 0], np.nan)


def _value(v: float) -> float | None:
    return float(v) if np.isfinite(v) else None


@dataclass(frozen=True)
class SlopeAndHeadroom:
    """Corrected slope and headroom-scaled correlation with family-by-row intervals.

    ``slope`` = M*12 / M*11 (None when M*11 <= 0); ``headroom_r`` the clipped EIV correlation of raw
    score with headroom-scaled gain (None when a reader has no headroom or a corrected variance is
    not positive). Intervals use the finite draws; the others are counted."""

    slope: float | None
    slope_low: float | None
    slope_high: float | None
    slope_undefined_draws: int
    headroom_r: float | None
    headroom_low: float | None
    headroom_high: float | None
    headroom_nonfinite_draws: int


def slope_and_headroom(
    raw: np.ndarray, comp: np.ndarray, families: Sequence[str], n_boot: int = 2000, seed: int = 0
) -> SlopeAndHeadroom:
    """The slope and the headroom-scaled correlation of one panel, recomputed in every draw."""
    x, gain = np.asarray(raw, float), np.asarray(comp, float) - np.asarray(raw, float)
    m, n = x.shape
    ones_rows, ones_readers = np.ones((1, n)), np.ones((1, m))
    point = corrected_moments(x, gain, ones_rows, ones_readers)
    room = headroom_scale(x.mean(axis=1))[None, :]
    point_h = corrected_moments(x, gain, ones_rows, ones_readers, room)
    slopes, heads = [], []
    for rows, readers in family_row_draws(n, families, n_boot, seed):
        slopes.append(_slopes(corrected_moments(x, gain, rows, readers)))
        scale = headroom_scale(rows @ x.T / n)  # NaN for a drawn reader without headroom: NaN draw
        heads.append(correlations(corrected_moments(x, gain, rows, readers, scale)))
    slope, head = np.concatenate(slopes), np.concatenate(heads)
    head_point = correlations(point_h)[0]
    s_low, s_high = percentile_interval(slope[np.isfinite(slope)])
    h_low, h_high = percentile_interval(np.clip(head[np.isfinite(head)], -1.0, 1.0))
    return SlopeAndHeadroom(
        slope=_value(_slopes(point)[0]),
        slope_low=s_low,
        slope_high=s_high,
        slope_undefined_draws=int((~np.isfinite(slope)).sum()),
        headroom_r=None if not np.isfinite(head_point) else float(np.clip(head_point, -1.0, 1.0)),
        headroom_low=h_low,
        headroom_high=h_high,
        headroom_nonfinite_draws=int((~np.isfinite(head)).sum()),
    )


@dataclass(frozen=True)
class DisjointRows:
    """Median and 2.5-97.5 percentiles of the disjoint-row correlation over splits; splits where a
    half leaves no spread across readers have no correlation and are counted."""

    median: float | None
    low: float | None
    high: float | None
    n_undefined: int


def disjoint_rows(raw: np.ndarray, comp: np.ndarray, n_splits: int = 5000, seed: int = 0) -> DisjointRows:
    """Pearson correlation across readers of raw means on a split's first half with gain means on its
    second (A.4's disjoint-row diagnostic; the release's split rule)."""
    x = np.asarray(raw, float)
    gain = np.asarray(comp, float) - x
    values = []
    for first, second in split_halves(x.shape[1], n_splits, seed):
        a = x @ first.T / first[0].sum()
        b = gain @ second.T / second[0].sum()
        a, b = a - a.mean(axis=0), b - b.mean(axis=0)
        denom = np.sqrt((a * a).sum(axis=0) * (b * b).sum(axis=0))
        with np.errstate(divide="ignore", invalid="ignore"):
            values.append(np.where(denom > 0, (a * b).sum(axis=0) / denom, np.nan))
    r = np.concatenate(values)
    finite = r[np.isfinite(r)]
    low, high = percentile_interval(finite)
    return DisjointRows(
        median=float(np.median(finite)) if finite.size else None,
        low=low,
        high=high,
        n_undefined=int(r.size - finite.size),
    )
