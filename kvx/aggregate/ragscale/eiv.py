"""More of the paired errors-in-variables analysis (ragscale 5.1 and A.4).

- the corrected slope M*12 / M*11 of gain on raw score, with its family-by-row interval;
- the headroom-scaled gain (5.1: "scaling each gain by the reader's remaining accuracy headroom"):
  each reader's paired gains divided by 1 - its raw mean, correlated with raw score by the same
  EIV estimator, its interval recomputing the headroom in every draw;
- the disjoint-row diagnostic: raw means on one row half, gain means on the other, so the two share
  no row noise and a plain cross-reader Pearson correlation needs no correction.

The bootstrap works on draw counts (:mod:`kvx.aggregate.stats.resampling`), so a draw with a reader
twice and rows repeated is one weighted sum, not a copied panel: M* of a draw equals
:func:`kvx.aggregate.stats.estimators.eiv_correlation` of the panel the draw describes, and with the
same seed the draws are :func:`~kvx.aggregate.stats.estimators.eiv_bootstrap`'s.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from kvx.aggregate.stats.resampling import family_row_draws, interval, split_halves

__all__ = [
    "DisjointRows",
    "EIVExtra",
    "corrected_moments",
    "disjoint_rows",
    "eiv_extra",
    "headroom_scale",
]


def headroom_scale(raw_means: np.ndarray) -> np.ndarray:
    """1 / (1 - raw mean) per reader; NaN where a reader has no headroom (raw mean 1)."""
    with np.errstate(divide="ignore"):
        return np.where(raw_means < 1.0, 1.0 / (1.0 - raw_means), np.nan)


def corrected_moments(
    x: np.ndarray, y: np.ndarray, rows: np.ndarray, readers: np.ndarray, scale: np.ndarray | None = None
) -> np.ndarray:
    """M* (draws x 2 x 2) of raw ``x`` and gain ``y`` (readers x rows) for draws given as counts.

    ``rows`` (draws x rows) and ``readers`` (draws x readers) count each row and reader in a draw;
    ``scale`` (draws x readers) multiplies each reader's gains in that draw. Per draw, with m the
    drawn readers and n the rows: M = covariance of the reader means over the m readers, and each
    sampling moment tr(H Sigma) / (m - 1) with Sigma = A_c B_c^T / (n (n - 1)) (A.4), summed as
    sum_r w_r (sum_i k_i a_ri b_ri - n a_r b_r) and sum_i k_i u_i v_i - n U V for the reader-weighted
    row totals u, v (A.4's trace identity, without copying the drawn panel)."""
    n = x.shape[1]
    k, w = rows.astype(float), readers.astype(float)
    s = np.ones_like(w) if scale is None else np.where(w > 0, scale, 0.0)
    m = w.sum(axis=1)
    means = {"x": k @ x.T / n, "y": s * (k @ y.T) / n}
    cross = {
        ("x", "x"): k @ (x * x).T,
        ("y", "y"): s * s * (k @ (y * y).T),
        ("x", "y"): s * (k @ (x * y).T),
    }
    totals = {"x": w @ x, "y": (w * s) @ y}  # draws x rows: the reader-weighted row totals
    out = np.empty((k.shape[0], 2, 2))
    index = {"x": 0, "y": 1}
    with np.errstate(divide="ignore", invalid="ignore"):  # one drawn reader: no variance (counted)
        centre = {v: (w * means[v]).sum(axis=1) / m for v in ("x", "y")}
        for a, b in (("x", "x"), ("y", "y"), ("x", "y")):
            spread = (w * (means[a] - centre[a][:, None]) * (means[b] - centre[b][:, None])).sum(axis=1)
            trace = (w * (cross[a, b] - n * means[a] * means[b])).sum(axis=1)
            total = (k * totals[a] * totals[b]).sum(axis=1) - n * (m * centre[a]) * (m * centre[b])
            sampling = (trace - total / m) / (n * (n - 1) * (m - 1))
            out[:, index[a], index[b]] = out[:, index[b], index[a]] = spread / (m - 1) - sampling
    return out


def _correlations(m: np.ndarray) -> np.ndarray:
    m11, m22, m12 = m[:, 0, 0], m[:, 1, 1], m[:, 0, 1]
    ok = (m11 > 0) & (m22 > 0)
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where(ok, m12 / np.sqrt(np.where(ok, m11 * m22, 1.0)), np.nan)


def _slopes(m: np.ndarray) -> np.ndarray:
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where(m[:, 0, 0] > 0, m[:, 0, 1] / m[:, 0, 0], np.nan)


def _value(v: float) -> float | None:
    return float(v) if np.isfinite(v) else None


@dataclass(frozen=True)
class EIVExtra:
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


def eiv_extra(
    raw: np.ndarray, comp: np.ndarray, families: Sequence[str], n_boot: int = 2000, seed: int = 0
) -> EIVExtra:
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
        heads.append(_correlations(corrected_moments(x, gain, rows, readers, scale)))
    slope, head = np.concatenate(slopes), np.concatenate(heads)
    head_point = _correlations(point_h)[0]
    s_low, s_high = interval(slope[np.isfinite(slope)])
    h_low, h_high = interval(np.clip(head[np.isfinite(head)], -1.0, 1.0))
    return EIVExtra(
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
    low, high = interval(finite)
    return DisjointRows(
        median=float(np.median(finite)) if finite.size else None,
        low=low,
        high=high,
        n_undefined=int(r.size - finite.size),
    )
