"""The paired errors-in-variables correlation of raw score and compression gain (ragscale A.4).

Gain contains the raw score, so the covariance of reader means carries the row-sampling noise of
both; A.4 subtracts the projected sampling moments to give the corrected moments M*. There is one M*
here (:func:`corrected_moments`), written for draws given as counts, so a draw with a reader twice
and rows repeated is one weighted sum, not a copied panel; the point estimate is the draw that holds
every reader and every row once.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from kvx.aggregate.stats.inputs import check_bootstrap, paired_panels
from kvx.aggregate.stats.intervals import percentile_interval
from kvx.aggregate.stats.releases import family_row_draws

__all__ = [
    "EIV",
    "ROUNDOFF",
    "EIVBootstrap",
    "corrected_moments",
    "correlations",
    "eiv_bootstrap",
    "eiv_correlation",
]

#: an entry of M* within this share of the terms it is the difference of is round-off, and is 0
ROUNDOFF = 1e-10


def corrected_moments(
    x: np.ndarray, y: np.ndarray, rows: np.ndarray, readers: np.ndarray, scale: np.ndarray | None = None
) -> np.ndarray:
    """M* (draws x 2 x 2) of raw ``x`` and gain ``y`` (readers x rows) for draws given as counts.

    ``rows`` (draws x rows) and ``readers`` (draws x readers) count each row and reader in a draw;
    ``scale`` (draws x readers) multiplies each reader's gains in that draw. Per draw, with m the
    drawn readers and n the rows: M = covariance of the reader means over the m readers, and each
    sampling moment tr(H Sigma) / (m - 1) with Sigma = A_c B_c^T / (n (n - 1)) (A.4), summed as
    sum_r w_r (sum_i k_i a_ri b_ri - n a_r b_r) and sum_i k_i u_i v_i - n U V for the reader-weighted
    row totals u, v (A.4's trace identity, without copying the drawn panel). An entry within
    ``ROUNDOFF`` of the terms it subtracts is 0, so whether a degenerate draw (one distinct reader drawn
    several times) has a positive variance does not depend on the order of floating-point sums; a draw
    of one reader once has no covariance: its M* is not finite."""
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
            value = spread / (m - 1) - sampling
            # round-off is not a sign: M* within ROUNDOFF of the terms it subtracts is 0 (a draw of one
            # distinct reader, or of readers whose drawn scores agree, has M* = 0 exactly, which the
            # subtraction leaves as +-1e-18 either way)
            # the size of the terms each difference above is taken between (not of the differences)
            sizes = (
                (
                    w
                    * (np.abs(means[a]) + np.abs(centre[a][:, None]))
                    * (np.abs(means[b]) + np.abs(centre[b][:, None]))
                ).sum(axis=1)
                / (m - 1),
                (w * (np.abs(cross[a, b]) + n * np.abs(means[a] * means[b]))).sum(axis=1),
                (k * np.abs(totals[a] * totals[b])).sum(axis=1) + n * np.abs(m * centre[a] * m * centre[b]),
            )
            scale = sizes[0] + (sizes[1] + sizes[2] / m) / (n * (n - 1) * (m - 1))
            value = np.where(np.abs(value) <= ROUNDOFF * scale, 0.0, value)
            out[:, index[a], index[b]] = out[:, index[b], index[a]] = value
    return out


def correlations(m: np.ndarray) -> np.ndarray:
    """M*12 / sqrt(M*11 M*22) per draw of a (draws x 2 x 2) stack; NaN where a variance is not positive."""
    m11, m22, m12 = m[:, 0, 0], m[:, 1, 1], m[:, 0, 1]
    ok = (m11 > 0) & (m22 > 0)
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where(ok, m12 / np.sqrt(np.where(ok, m11 * m22, 1.0)), np.nan)


@dataclass(frozen=True)
class EIV:
    """Corrected moments M* and every derived estimate, with flags for each boundary case."""

    m11: float
    m22: float
    m12: float
    min_eigenvalue: float
    r_unbounded: float | None
    r_clipped: float | None
    r_psd: float | None
    slope: float | None
    nonpositive_variance: bool
    non_psd: bool
    nonfinite: bool
    outside_unit: bool


def _correlation(cov: np.ndarray) -> float | None:
    """cov12 / sqrt(cov11 cov22), or None when a variance is not positive or the value is nonfinite."""
    r = correlations(cov[None])[0]
    return float(r) if np.isfinite(r) else None


def eiv_correlation(R: np.ndarray, D: np.ndarray) -> EIV:
    """Cross-reader correlation of raw score and compression gain, minus shared row noise (A.4).

    ``R`` holds raw scores and ``D`` paired gains (comp - raw), readers x rows: M* is
    :func:`corrected_moments` of the whole panel. ``nonfinite`` means no finite unbounded correlation
    exists (this includes every nonpositive-variance case); ``r_psd`` is the correlation of M* with its
    negative eigenvalue set to 0.
    """
    r, d = paired_panels(R, D, ("R", "D"))
    corrected = corrected_moments(r, d, np.ones((1, r.shape[1])), np.ones((1, r.shape[0])))[0]
    eigenvalues, eigenvectors = np.linalg.eigh(corrected)
    min_eigenvalue = float(eigenvalues[0])
    non_psd = min_eigenvalue < 0
    psd = (eigenvectors * np.maximum(eigenvalues, 0.0)) @ eigenvectors.T if non_psd else corrected
    r_unbounded = _correlation(corrected)
    m11, m22, m12 = float(corrected[0, 0]), float(corrected[1, 1]), float(corrected[0, 1])
    return EIV(
        m11=m11,
        m22=m22,
        m12=m12,
        min_eigenvalue=min_eigenvalue,
        r_unbounded=r_unbounded,
        r_clipped=None if r_unbounded is None else min(1.0, max(-1.0, r_unbounded)),
        r_psd=_correlation(psd),
        slope=m12 / m11 if m11 > 0 else None,
        nonpositive_variance=m11 <= 0 or m22 <= 0,
        non_psd=bool(non_psd),
        nonfinite=r_unbounded is None,
        outside_unit=r_unbounded is not None and abs(r_unbounded) > 1,
    )


@dataclass(frozen=True)
class EIVBootstrap:
    """Percentile interval of the clipped correlation, plus every boundary count (none hidden)."""

    low: float | None
    high: float | None
    n_draws: int
    n_finite: int
    n_nonpositive_variance: int
    n_non_psd: int
    n_nonfinite: int
    n_outside_unit: int


def eiv_bootstrap(
    R: np.ndarray,
    D: np.ndarray,
    n_boot: int = 2000,
    seed: int = 0,
    level: float = 0.95,
    families: Sequence[str] | None = None,
) -> EIVBootstrap:
    """Row bootstrap of :func:`eiv_correlation`, recomputing the full nonlinear estimate per draw.

    The draws are :func:`~kvx.aggregate.stats.releases.family_row_draws`: draw ``k`` takes rows
    ``rng.integers(0, n_rows, n_rows)`` and, with ``families`` (one label per reader) spanning several
    families, reader families with replacement, every reader of a drawn family entering once per draw
    of it (ragscale's family-by-row interval: questions and the represented reader families are both
    samples). The interval uses the draws with a finite correlation; draws without one are counted,
    not replaced.
    """
    r, d = paired_panels(R, D, ("R", "D"))
    check_bootstrap(n_boot, level)
    if families is not None and len(families) != r.shape[0]:
        raise ValueError(f"families has {len(families)} labels for {r.shape[0]} readers")
    labels = [""] * r.shape[0] if families is None else list(families)
    m = np.concatenate(
        [
            corrected_moments(r, d, rows, readers)
            for rows, readers in family_row_draws(r.shape[1], labels, n_boot, seed)
        ]
    )
    nonpositive = (m[:, 0, 0] <= 0) | (m[:, 1, 1] <= 0)
    corr = correlations(m)
    is_finite = np.isfinite(corr)
    low, high = percentile_interval(np.clip(corr[is_finite], -1.0, 1.0), level)
    return EIVBootstrap(
        low=low,
        high=high,
        n_draws=n_boot,
        n_finite=int(is_finite.sum()),
        n_nonpositive_variance=int(nonpositive.sum()),
        n_non_psd=int((np.linalg.eigh(m[np.isfinite(m).all(axis=(1, 2))])[0][:, 0] < 0).sum()),
        n_nonfinite=int((~is_finite).sum()),
        n_outside_unit=int((np.abs(corr[is_finite]) > 1).sum()),
    )
