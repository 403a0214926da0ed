"""Resolution retention and resolution cost of compressed evidence (ragscale A.6 "Resolution cost",
Table 6): how many raw-resolved reader comparisons stay resolved at the same question count, and
how many more questions (and prompt tokens) the compressed comparison would need.

Pure numpy over (readers x rows) raw and compressed score matrices; undefined values are ``None``.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from kvx.aggregate.ragscale.nulls import Spread, spread
from kvx.aggregate.ragscale.splits import pair_index
from kvx.aggregate.stats.paired_tests import mcnemar_cutoffs, mcnemar_significant
from kvx.aggregate.stats.releases import split_halves


@dataclass(frozen=True)
class ResolutionRetention:
    """Per half: among raw-significant pairs, the share significant the same / opposite way."""

    same: Spread
    opposite: Spread
    median_raw_significant: float | None
    n_splits_empty: int  # halves with no raw-significant pair (omitted)


def resolution_retention(
    raw: np.ndarray, comp: np.ndarray, n_splits: int, seed: int, alpha: float = 0.05
) -> ResolutionRetention:
    """Exact McNemar p < ``alpha`` for every reader pair on each split's selection half (n // 2
    rows) under raw and under compressed evidence; per half, the share of raw-significant pairs that
    are compressed-significant with the same sign of b - c, and with the opposite sign. Median and
    2.5-97.5 percentiles over halves. Binary scores only."""
    if not (np.isin(raw, (0.0, 1.0)).all() and np.isin(comp, (0.0, 1.0)).all()):
        raise ValueError("exact McNemar needs binary scores")
    first, second = pair_index(raw.shape[0])
    cutoffs = mcnemar_cutoffs(raw.shape[1] // 2, alpha)
    both_raw, both_comp = raw[first] * raw[second], comp[first] * comp[second]
    same, opposite, counts, empty = [], [], [], 0
    for select, _ in split_halves(raw.shape[1], n_splits, seed):
        verdicts = []
        for panel, both in ((raw, both_raw), (comp, both_comp)):
            sums, joint = panel @ select.T, both @ select.T
            b, c = sums[first] - joint, sums[second] - joint  # discordant counts, pairs x splits
            b, c = np.rint(b).astype(np.int64), np.rint(c).astype(np.int64)
            verdicts.append((mcnemar_significant(b, c, cutoffs), np.sign(c - b)))
        (raw_sig, raw_dir), (comp_sig, comp_dir) = verdicts
        k = raw_sig.sum(axis=0)
        used = k > 0
        empty += int((~used).sum())
        kept = raw_sig & comp_sig
        same.append((kept & (raw_dir == comp_dir)).sum(axis=0)[used] / k[used])
        opposite.append((kept & (raw_dir == -comp_dir)).sum(axis=0)[used] / k[used])
        counts.append(k)
    k_all = np.concatenate(counts)
    return ResolutionRetention(
        spread(np.concatenate(same)), spread(np.concatenate(opposite)), float(np.median(k_all)), empty
    )


def _n_ratio(d_raw: np.ndarray, d_comp: np.ndarray, weights: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Var(D_comp) / Var(D_raw) / rho^2 per (pair, split) over the rows ``weights`` marks (sample
    variances, ddof = 1) and rho = mean(D_comp) / mean(D_raw); also the non-positive-rho mask.
    ``d_*`` are (pairs x rows), ``weights`` (splits x rows) 0/1."""
    n = weights.sum(axis=1)  # splits
    mean_r, mean_c = d_raw @ weights.T / n, d_comp @ weights.T / n
    var_r = ((d_raw**2) @ weights.T - n * mean_r**2) / (n - 1)
    var_c = ((d_comp**2) @ weights.T - n * mean_c**2) / (n - 1)
    with np.errstate(divide="ignore", invalid="ignore"):
        rho = mean_c / mean_r
        ratio = var_c / var_r / rho**2
    nonpositive = np.isfinite(rho) & (rho <= 0)
    ratio[~np.isfinite(ratio) | (rho <= 0) | ~(var_r > 1e-12)] = np.nan
    return ratio, nonpositive


@dataclass(frozen=True)
class ResolutionCost:
    """n ratio = Var(D_comp) / Var(D_raw) / rho^2 per raw-separated pair, and its token cost."""

    n_ratio_median: float | None  # full sample, over pairs with a finite ratio
    n_pairs: int  # pairs with |raw upgrade| >= min_gap
    n_nonpositive: int  # of those, pairs with rho <= 0 (excluded)
    n_undefined: int  # of those, other pairs without a finite ratio (raw D without variance)
    crossfit: Spread  # per-split median over pairs selected on the other half
    n_crossfit_nonpositive: int  # (pair, split) estimates excluded for rho <= 0
    pair_ratios: list[tuple[int, int, float]]  # (a, b, n ratio) of the pairs with a finite ratio


def resolution_cost(
    raw: np.ndarray, comp: np.ndarray, n_splits: int, seed: int, min_gap: float = 0.05
) -> ResolutionCost:
    """The question-count multiplier that restores each pair's raw signal-to-noise ratio.

    D is the per-row difference b - a of a pair's scores, rho its retention mean(D_comp) /
    mean(D_raw). Full sample: every pair with |raw upgrade| >= ``min_gap``. Cross-fit: per split,
    pairs with |raw selection-half upgrade| >= ``min_gap``, the ratio estimated on the scoring half;
    the per-split median over pairs with a finite ratio. rho <= 0 has no finite ratio: excluded and
    counted (ragscale A.6)."""
    first, second = pair_index(raw.shape[0])
    d_raw, d_comp = raw[second] - raw[first], comp[second] - comp[first]
    n = raw.shape[1]
    full = np.ones((1, n))
    separated = np.abs(d_raw.sum(axis=1)) / n >= min_gap
    ratio, nonpositive = _n_ratio(d_raw[separated], d_comp[separated], full)
    ratio, nonpositive = ratio[:, 0], nonpositive[:, 0]
    finite = np.isfinite(ratio)
    pairs = [
        (int(a), int(b), float(r))
        for a, b, r, ok in zip(first[separated], second[separated], ratio, finite, strict=True)
        if ok
    ]
    half = n // 2
    medians, crossfit_nonpositive = [], 0
    for select, _ in split_halves(n, n_splits, seed):
        chosen = np.abs(d_raw @ select.T) / half >= min_gap  # pairs x splits
        held, nonpos = _n_ratio(d_raw, d_comp, 1.0 - select)
        crossfit_nonpositive += int((nonpos & chosen).sum())
        held = np.where(chosen, held, np.nan)
        has = np.isfinite(held).any(axis=0)
        if has.any():
            medians.append(np.nanmedian(held[:, has], axis=0))
    return ResolutionCost(
        n_ratio_median=float(np.median(ratio[finite])) if finite.any() else None,
        n_pairs=int(separated.sum()),
        n_nonpositive=int(nonpositive.sum()),
        n_undefined=int((~finite & ~nonpositive).sum()),
        crossfit=spread(np.concatenate(medians) if medians else np.array([])),
        n_crossfit_nonpositive=crossfit_nonpositive,
        pair_ratios=pairs,
    )


@dataclass(frozen=True)
class TokenCost:
    """Token-cost ratio = n ratio x the pair's mean compressed-to-raw prompt-token ratio."""

    token_ratio: float | None  # panel mean of per-cell compressed / raw prompt tokens
    median: float | None
    q25: float | None
    q75: float | None
    n_pairs: int


def token_cost(
    pair_ratios: list[tuple[int, int, float]], raw_tokens: np.ndarray, comp_tokens: np.ndarray
) -> TokenCost:
    """Per pair: its n ratio times the mean over both readers' rows of comp / raw prompt tokens;
    the median and interquartile range over pairs. Token matrices are (readers x rows); a cell
    without a positive raw and a finite compressed count leaves the mean (never imputed)."""
    with np.errstate(divide="ignore", invalid="ignore"):
        cell = np.where(raw_tokens > 0, comp_tokens / raw_tokens, np.nan)
    if not np.isfinite(cell).any():
        return TokenCost(None, None, None, None, 0)
    costs = []
    for a, b, ratio in pair_ratios:
        cells = cell[[a, b]]
        if np.isfinite(cells).any():
            costs.append(ratio * float(np.nanmean(cells)))
    panel = float(np.nanmean(cell))
    if not costs:
        return TokenCost(panel, None, None, None, 0)
    q25, med, q75 = np.percentile(costs, [25, 50, 75])
    return TokenCost(panel, float(med), float(q25), float(q75), len(costs))
