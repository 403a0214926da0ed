"""Order-preserving nulls, both-half reversals and transition homogeneity (ragscale A.6, Table 5).

Pure numpy over (readers x rows) raw and compressed score matrices. Undefined values are
``None`` with the reason beside them, never NaN or 0.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from kvx.aggregate.ragscale.splits import replay
from kvx.aggregate.stats.contingency import chi2_homogeneity
from kvx.aggregate.stats.intervals import percentile_interval
from kvx.aggregate.stats.releases import split_halves

#: cells (draws x pairs x splits) of the null draws replayed together, to bound memory
_CHUNK_CELLS = 1 << 19


@dataclass(frozen=True)
class Spread:
    """Median and 2.5-97.5 percentiles of a sample; ``n`` values entered (0: all None)."""

    median: float | None
    low: float | None
    high: float | None
    n: int


def spread(values: np.ndarray) -> Spread:
    """The median and middle 95% of the finite ``values``."""
    v = np.asarray(values, dtype=float)
    v = v[np.isfinite(v)]
    if v.size == 0:
        return Spread(None, None, None, 0)
    low, high = percentile_interval(v)
    return Spread(float(np.median(v)), low, high, int(v.size))


@dataclass(frozen=True)
class BothHalves:
    """Observed split replay: excess flips and both-half reversal rates over the same splits."""

    excess: Spread
    both: Spread
    median_eligible_pairs: float | None


def both_half_reversals(
    raw: np.ndarray, comp: np.ndarray, n_splits: int, seed: int, min_gap: float = 0.05
) -> BothHalves:
    """Share of raw-separated pairs whose compressed order opposes the raw order on both halves.

    Per split: eligible = |raw selection-half difference| >= ``min_gap``; a pair counts when the
    compressed difference has the strictly opposite sign on the selection and on the scoring half.
    The rate is over eligible pairs; splits without one are omitted (ragscale A.5/A.6).
    """
    excess, both, eligible = [], [], []
    for select, _ in split_halves(raw.shape[1], n_splits, seed):
        r = replay(raw, comp, select, min_gap)
        excess.append(r.comp_rate - r.raw_rate)
        both.append(r.both_rate)
        eligible.append(r.eligible)
    k = np.concatenate(eligible)
    return BothHalves(
        spread(np.concatenate(excess)),
        spread(np.concatenate(both)),
        float(np.median(k)) if k.size else None,
    )


def _binary(raw: np.ndarray, comp: np.ndarray) -> bool:
    return bool(np.isin(raw, (0.0, 1.0)).all() and np.isin(comp, (0.0, 1.0)).all())


def independent_uniform(
    raw: np.ndarray, comp: np.ndarray, n_draws: int, rng: np.random.Generator
) -> np.ndarray:
    """Null compressed panels (draws x readers x rows) with one pooled rescue and damage rate.

    Raw outcomes are kept; each raw-wrong cell is rescued with probability (rescued / raw-wrong
    cells) and each raw-correct cell damaged with probability (damaged / raw-correct cells), both
    pooled over the panel, independently across cells. Binary (EM) scores only.
    """
    if not _binary(raw, comp):
        raise ValueError("the independent-uniform null is defined for binary (EM) scores only")
    right = raw == 1.0
    wrong = ~right
    rescue = float((wrong & (comp == 1.0)).sum() / wrong.sum()) if wrong.any() else 0.0
    damage = float((right & (comp == 0.0)).sum() / right.sum()) if right.any() else 0.0
    u = rng.random((n_draws, *raw.shape))
    return np.where(right, u >= damage, u < rescue).astype(float)


def row_exchangeable(raw: np.ndarray, comp: np.ndarray, n_draws: int, rng: np.random.Generator) -> np.ndarray:
    """Null compressed panels: within each row, compressed scores permuted among readers sharing
    the same raw score (for EM: raw right / raw wrong). Each row keeps its rescue and damage counts;
    any reader-specific response is removed."""
    m, n = raw.shape
    rank = np.unique(raw, return_inverse=True)[1].reshape(m, n).astype(float)  # raw value groups
    fixed = np.argsort(rank, axis=0, kind="stable")  # readers grouped by raw value, index order
    source = np.take_along_axis(comp, fixed, axis=0)  # compressed scores in that grouped order
    shuffled = np.argsort(rank[None] + rng.random((n_draws, m, n)) * 0.5, axis=1)  # random within groups
    out = np.empty((n_draws, m, n))
    np.put_along_axis(out, shuffled, np.broadcast_to(source, (n_draws, m, n)), axis=1)
    return out


NULLS = {"independent_uniform": independent_uniform, "row_exchangeable": row_exchangeable}


@dataclass(frozen=True)
class NullReplay:
    """One null: its per-draw median excess flips and both-half rates, summarized over draws."""

    excess: Spread
    both: Spread
    share_exceeded: float | None  # share of draws whose both-half rate the observed rate exceeds


def null_replay(
    raw: np.ndarray,
    comp: np.ndarray,
    kind: str,
    observed_both: float | None,
    n_draws: int,
    n_splits: int,
    split_seed: int,
    draw_seed: int,
    min_gap: float = 0.05,
) -> NullReplay:
    """Draw the null ``kind`` ``n_draws`` times and replay each over the first ``n_splits`` splits
    of ``split_seed`` (the same splits for every draw). Per draw: the median over splits of the
    excess flips and of the both-half rate; then their median and 2.5-97.5 percentiles over draws,
    and the share of draws whose both-half rate is strictly below ``observed_both``."""
    if kind not in NULLS:
        raise ValueError(f"unknown null {kind!r}: one of {sorted(NULLS)}")
    if n_draws < 1:
        raise ValueError(f"n_draws must be a positive integer, got {n_draws}")
    rng = np.random.default_rng(draw_seed)
    selects = [select for select, _ in split_halves(raw.shape[1], n_splits, split_seed)]
    excess, both = [], []
    m = raw.shape[0]
    chunk = max(1, _CHUNK_CELLS // max(1, m * (m - 1) // 2 * n_splits))
    for start in range(0, n_draws, chunk):
        stack = NULLS[kind](raw, comp, min(chunk, n_draws - start), rng)
        ex, bo = [], []
        for select in selects:
            r = replay(raw, stack, select, min_gap)
            ex.append(r.comp_rate - r.raw_rate)
            bo.append(r.both_rate)
        ex_all, bo_all = np.concatenate(ex, axis=1), np.concatenate(bo, axis=1)
        if ex_all.shape[1] == 0:  # no split had an eligible pair
            excess.append(np.full(stack.shape[0], np.nan))
            both.append(np.full(stack.shape[0], np.nan))
            continue
        excess.append(np.median(ex_all, axis=1))
        both.append(np.median(bo_all, axis=1))
    ex_draws, both_draws = np.concatenate(excess), np.concatenate(both)
    finite = both_draws[np.isfinite(both_draws)]
    share = None
    if observed_both is not None and finite.size:
        share = float(np.mean(observed_both > finite))
    return NullReplay(spread(ex_draws), spread(both_draws), share)


@dataclass(frozen=True)
class Transitions:
    """Per-reader rescue (of raw-wrong cells) and damage (of raw-correct cells) and their spread."""

    rescue: list[float | None]
    damage: list[float | None]
    rescue_sd: float | None
    damage_sd: float | None
    rescue_chi2: float | None
    rescue_dof: int | None
    rescue_p: float | None
    damage_chi2: float | None
    damage_dof: int | None
    damage_p: float | None
    reason: str  # why a test is undefined; "" when both are


def _homogeneity(
    events: np.ndarray, totals: np.ndarray, what: str
) -> tuple[float | None, int | None, float | None, str]:
    """Pearson chi-square of readers x {event, no event} (no continuity correction)."""
    keep = totals > 0
    table = np.stack([events[keep], totals[keep] - events[keep]], axis=1)
    if keep.sum() < 2:
        return None, None, None, f"{what}: fewer than 2 readers with eligible cells"
    if (table.sum(axis=0) == 0).any():
        return None, None, None, f"{what}: every reader has the same outcome on every eligible cell"
    return (*chi2_homogeneity(table), "")


def _sd(rates: list[float | None]) -> float | None:
    values = [r for r in rates if r is not None]
    return float(np.std(values, ddof=1)) if len(values) >= 2 else None


def transition_homogeneity(raw: np.ndarray, comp: np.ndarray) -> Transitions:
    """Are rescue and damage the same for every reader? (ragscale A.6: the uniform null's premise.)

    Rescue rate = rescued / raw-wrong cells, damage rate = damaged / raw-correct cells, per reader;
    the cross-reader SD uses ddof=1 over readers with eligible cells; each chi-square tests
    homogeneity of readers x {event, not} among their eligible cells. Binary scores only.
    """
    if not _binary(raw, comp):
        raise ValueError("rescue and damage need binary (EM) scores")
    right, comp_right = raw == 1.0, comp == 1.0
    wrong_n, right_n = (~right).sum(axis=1), right.sum(axis=1)
    rescued, damaged = (~right & comp_right).sum(axis=1), (right & ~comp_right).sum(axis=1)
    rescue = [float(e / t) if t else None for e, t in zip(rescued, wrong_n, strict=True)]
    damage = [float(e / t) if t else None for e, t in zip(damaged, right_n, strict=True)]
    rc, rd, rp, why_r = _homogeneity(rescued, wrong_n, "rescue")
    dc, dd, dp, why_d = _homogeneity(damaged, right_n, "damage")
    return Transitions(
        rescue,
        damage,
        _sd(rescue),
        _sd(damage),
        rc,
        rd,
        rp,
        dc,
        dd,
        dp,
        "; ".join(w for w in (why_r, why_d) if w),
    )
