"""kvx's own seeded resampling streams: paired row bootstraps, the stratified AUROC bootstrap and the
cluster bootstrap. (The streams that follow a paper's release are in :mod:`.releases`.)

Every function takes ``seed`` and draws from ``np.random.default_rng(seed)`` in the order its
docstring states, so an interval is reproducible from its inputs; intervals are
:func:`~kvx.aggregate.stats.intervals.percentile_interval`.
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd

from kvx.aggregate.read import text
from kvx.aggregate.stats.inputs import BLOCK_CELLS, check_bootstrap, finite, outcome_pair
from kvx.aggregate.stats.intervals import percentile_interval
from kvx.aggregate.stats.ranks import mixed_strata

__all__ = [
    "CLUSTER_DRAWS",
    "cluster_interval",
    "mean_interval",
    "paired_bootstrap_difference",
    "stratified_auroc_interval",
]

#: how :func:`cluster_interval` draws the clusters of a resample
CLUSTER_DRAWS = ("multinomial", "indices")


# ----------------------------------------------------------------------------- paired rows (KVDiagnosis 5.3)


def paired_bootstrap_difference(
    x: np.ndarray, y: np.ndarray, n_boot: int = 2000, seed: int = 0, level: float = 0.95
) -> tuple[float, float, float]:
    """(mean(x) - mean(y), low, high), resampling rows jointly so the pairing is kept.

    Outcomes are binary, so a resample's difference depends only on how many rows it draws of
    each kind (x - y in {-1, 0, 1}); drawing those counts from a multinomial is exactly row
    resampling with replacement, in O(1) per draw: ``rng.multinomial(n, shares, size=n_boot)``.
    """
    xs, ys = outcome_pair(x, y)
    if xs.size == 0:
        raise ValueError("no rows: the paired difference is undefined")
    check_bootstrap(n_boot, level)
    d = xs.astype(int) - ys.astype(int)
    shares = np.array([(d == -1).mean(), (d == 0).mean(), (d == 1).mean()])
    counts = np.random.default_rng(seed).multinomial(d.size, shares, size=n_boot)
    low, high = percentile_interval((counts[:, 2] - counts[:, 0]) / d.size, level)
    return float(d.mean()), low, high


def mean_interval(
    values: np.ndarray, n_boot: int = 2000, seed: int = 0, level: float = 0.95
) -> tuple[float, float, float]:
    """(mean, low, high) of ``values`` resampled with replacement: for paired data pass the per-row
    differences, so the pairing is kept. A resample's mean depends only on how many rows it draws of
    each distinct value; drawing those counts from a multinomial is exactly row resampling (the binary
    case is :func:`paired_bootstrap_difference`'s draw, value for value)."""
    arr = finite(values, "values", 1)
    if arr.size == 0:
        raise ValueError("no rows: the mean is undefined")
    check_bootstrap(n_boot, level)
    distinct, counts = np.unique(arr, return_counts=True)
    draws = np.random.default_rng(seed).multinomial(arr.size, counts / arr.size, size=n_boot)
    low, high = percentile_interval(draws @ distinct / arr.size, level)
    return float(arr.mean()), low, high


# ----------------------------------------------------------------------------- stratified AUROC (Figure 6)


def _bootstrap_u(pos: np.ndarray, neg: np.ndarray, n_boot: int, rng: np.random.Generator) -> np.ndarray:
    """U of ``n_boot`` resamples (with replacement, within the stratum) in O(n) per draw.

    Per block of draws: the negatives ``rng.integers(0, n_neg, size=(draws, n_neg))``, then the
    positives ``rng.integers(0, n_pos, size=(draws, n_pos))``. Resampled negatives are counted over the
    sorted originals, so the number of them below (or tied with) a value is a cumulative count; each
    resampled positive then adds its credit. The counts of a block of draws are one flat cumulative sum
    (row ``r`` from ``r * width``), read only where the resampled positives fall: integers throughout,
    so each U is exact (:func:`~kvx.aggregate.stats.ranks.mann_whitney_u` of the drawn samples).
    """
    neg_sorted = np.sort(neg)
    below = np.searchsorted(neg_sorted, pos, side="left")
    upto = np.searchsorted(neg_sorted, pos, side="right")
    block = max(1, BLOCK_CELLS // max(pos.size, neg.size))
    width = neg.size + 1
    out = np.empty(n_boot)
    for start in range(0, n_boot, block):
        size = min(block, n_boot - start)
        rows = np.arange(0, size * width, width)[:, None]
        draws = rng.integers(0, neg.size, size=(size, neg.size))
        draws += rows + 1  # a draw of negative i counts from column i + 1 of its row on
        cum = np.cumsum(np.bincount(draws.ravel(), minlength=size * width), dtype=np.int32)
        picks = rng.integers(0, pos.size, size=(size, pos.size))
        start_of_row = cum[rows]  # every draw of the rows before
        twice_credit = (cum[rows + below[picks]] - start_of_row).sum(axis=1)  # below + ties / 2, x 2
        twice_credit += (cum[rows + upto[picks]] - start_of_row).sum(axis=1)
        out[start : start + size] = 0.5 * twice_credit
    return out


def stratified_auroc_interval(
    strata: list[tuple[np.ndarray, np.ndarray]], n_boot: int = 2000, seed: int = 0, level: float = 0.95
) -> tuple[float | None, float | None]:
    """Percentile interval of the stratified AUROC (:func:`~kvx.aggregate.stats.ranks.stratified_auroc`),
    resampling each class within each mixed stratum, stratum after stratum from one generator.

    Descriptive only: sources recur across strata, so draws are not independent replications
    (KVDiagnosis Figure 6). (None, None) when no stratum is mixed.
    """
    check_bootstrap(n_boot, level)
    mixed = mixed_strata(strata)
    if not mixed:
        return None, None
    rng = np.random.default_rng(seed)
    u = sum(_bootstrap_u(p, n, n_boot, rng) for p, n in mixed)
    pairs = sum(p.size * n.size for p, n in mixed)
    return percentile_interval(u / pairs, level)


# ----------------------------------------------------------------------------- clusters


def cluster_interval(
    values: np.ndarray | pd.Series,
    clusters: np.ndarray | pd.Series,
    n_boot: int = 2000,
    seed: int = 0,
    level: float = 0.95,
    draw: str = "multinomial",
) -> tuple[float, float]:
    """Percentile interval of a mean when whole clusters are resampled with replacement.

    Values of one cluster (a dialogue's slots, the cells of one task) are not independent, so the
    cluster is the resampling unit. A resample's mean is the drawn clusters' summed values over their
    summed sizes. Clusters are numbered in the order the values first name them (ids that differ only
    after a NUL stay apart), and the clusters of the resamples are drawn (``draw``)

    - ``"multinomial"``: as counts, ``rng.multinomial(n_clusters, uniform, size=draws)`` for a block of
      draws at a time (TPBench's dialogue-clustered accuracy interval, §6.2.1, pooled across seeds);
    - ``"indices"``: as ``rng.integers(0, n_clusters, n_clusters)``, one call per draw (the
      predictive audit's task-clustered interval).

    NaN values are left out; (nan, nan) with none.
    """
    if draw not in CLUSTER_DRAWS:
        raise ValueError(f"draw must be one of {CLUSTER_DRAWS}, got {draw!r}")
    check_bootstrap(n_boot, level)
    v = np.asarray(values, dtype=float)
    keep = np.isfinite(v)
    codes, uniques = text.factorize(np.asarray(clusters, dtype=object)[keep])
    if uniques.size == 0:
        return math.nan, math.nan
    k = uniques.size
    sums = np.bincount(codes, weights=v[keep], minlength=k)
    counts = np.bincount(codes, minlength=k).astype(float)
    rng = np.random.default_rng(seed)
    draws = np.empty(n_boot)
    block = max(1, BLOCK_CELLS // k)
    for start in range(0, n_boot, block):
        size = min(block, n_boot - start)
        if draw == "multinomial":
            weights = rng.multinomial(k, np.full(k, 1.0 / k), size=size)
        else:
            weights = np.stack([np.bincount(rng.integers(0, k, k), minlength=k) for _ in range(size)])
        draws[start : start + size] = (weights @ sums) / (weights @ counts)
    low, high = percentile_interval(draws, level)
    return float(low), float(high)
