"""The reader-upgrade estimators (ragscale sections 3, 6 and 7, Appendix A.5): how much of a raw
reader upgrade survives compression, which pair is the headline upgrade, reversals beyond the raw
row-sampling floor, and the answers compression fixes and breaks."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from kvx.aggregate.stats.inputs import binary, check_count, finite, paired_panels
from kvx.aggregate.stats.intervals import percentile_interval
from kvx.aggregate.stats.paired_tests import mcnemar_cutoffs, mcnemar_significant
from kvx.aggregate.stats.releases import split_halves

__all__ = [
    "TIE_RULES",
    "ExcessFlips",
    "RescueDamage",
    "endpoints",
    "excess_flips",
    "rescue_damage",
    "rescue_damage_per_reader",
    "retention",
]


# ----------------------------------------------------------------------------- upgrade retention (ragscale 3)


def retention(raw_upgrade: float, comp_upgrade: float, floor: float = 0.05) -> float | None:
    """Share of the raw reader upgrade still visible under compression (ragscale eq. 3).

    None when |raw upgrade| < ``floor`` (5 pp): the ratio is unstable for small upgrades.
    """
    if abs(raw_upgrade) < floor:
        return None
    return comp_upgrade / raw_upgrade


def endpoints(raw_means: np.ndarray) -> tuple[int, int]:
    """(lowest, highest) raw-scoring reader: the headline upgrade pair; ties go to the lower index."""
    means = finite(raw_means, "raw_means", 1)
    if means.size == 0:
        raise ValueError("raw_means is empty")
    return int(np.argmin(means)), int(np.argmax(means))


# ----------------------------------------------------------------------------- excess flips (ragscale 6, A.5)

#: how a scoring-half tie counts (A.5): not a reversal (the paper's rule), excluded, or a raw reversal
TIE_RULES = ("not-reversal", "exclude", "adverse")


@dataclass(frozen=True)
class ExcessFlips:
    """Split replay summary; values are None and counts 0 when no split had an eligible pair."""

    median: float | None
    low: float | None
    high: float | None
    raw_rate: float | None
    comp_rate: float | None
    n_splits_used: int
    median_eligible_pairs: float | None


def excess_flips(
    raw: np.ndarray,
    comp: np.ndarray,
    n_splits: int = 5000,
    seed: int = 0,
    min_gap: float = 0.05,
    mcnemar_alpha: float | None = None,
    ties: str = "not-reversal",
) -> ExcessFlips:
    """Reversals under compression beyond the raw row-sampling floor (ragscale A.5).

    ``raw``/``comp`` are (readers x rows) scores, split by the release's rule
    (:func:`kvx.aggregate.stats.releases.split_halves`: the ``k``-th ``rng.permutation(n_rows)``, its
    first ``n_rows // 2`` entries the selection half). A pair is eligible when its raw selection-half mean
    difference is at least ``min_gap`` in magnitude (and, with ``mcnemar_alpha``, its exact McNemar p <
    alpha on that half; binary scores only). Oriented by that sign, it reverses when the scoring-half
    difference has the opposite strict sign (``ties``: a scoring-half tie is not a reversal; ``"exclude"``
    drops a pair tied under raw or compressed evidence from that split's eligible pairs; ``"adverse"``
    counts a raw tie as a raw reversal: A.5's tie sensitivity). Per split, excess = comp rate - raw rate
    over eligible pairs; splits without eligible pairs are omitted.
    """
    r, c = paired_panels(raw, comp, ("raw", "comp"))
    check_count(n_splits, "n_splits")
    m, n = r.shape
    if min_gap <= 0:
        raise ValueError("min_gap must be positive: a pair tied on the selection half has no orientation")
    if ties not in TIE_RULES:
        raise ValueError(f"ties must be one of {TIE_RULES}, got {ties!r}")
    if mcnemar_alpha is not None and not np.isin(r, (0.0, 1.0)).all():
        raise ValueError("the McNemar filter needs binary raw scores")
    half = n // 2
    first, second = np.triu_indices(m, k=1)
    # pairs x rows; with the selection sums it gives each pair's McNemar discordant counts
    both_right = r[first] * r[second] if mcnemar_alpha is not None else None
    cutoffs = mcnemar_cutoffs(half, mcnemar_alpha) if mcnemar_alpha is not None else None
    excess, raw_rates, comp_rates, eligible_counts = [], [], [], []
    for select, score in split_halves(n, n_splits, seed):
        # Sums, not means, so binary gaps compare exactly (one rounding in the division).
        sel_sums = r @ select.T  # readers x splits
        gap = sel_sums[second] - sel_sums[first]  # pairs x splits
        eligible = np.abs(gap) / half >= min_gap
        if both_right is not None:
            both = both_right @ select.T
            b, cc = np.rint(sel_sums[first] - both), np.rint(sel_sums[second] - both)
            eligible &= mcnemar_significant(b, cc, cutoffs)
        sign = np.sign(gap)
        raw_score, comp_score = r @ score.T, c @ score.T
        raw_diff = sign * (raw_score[second] - raw_score[first])
        comp_diff = sign * (comp_score[second] - comp_score[first])
        if ties == "exclude":
            eligible &= (raw_diff != 0) & (comp_diff != 0)
        raw_rev = eligible & ((raw_diff <= 0) if ties == "adverse" else (raw_diff < 0))
        comp_rev = eligible & (comp_diff < 0)
        k = eligible.sum(axis=0)
        used = k > 0
        raw_rate = raw_rev.sum(axis=0)[used] / k[used]
        comp_rate = comp_rev.sum(axis=0)[used] / k[used]
        raw_rates.append(raw_rate)
        comp_rates.append(comp_rate)
        excess.append(comp_rate - raw_rate)
        eligible_counts.append(k[used])
    ex = np.concatenate(excess)
    if ex.size == 0:
        return ExcessFlips(None, None, None, None, None, 0, None)
    low, high = percentile_interval(ex)
    return ExcessFlips(
        median=float(np.median(ex)),
        low=low,
        high=high,
        raw_rate=float(np.median(np.concatenate(raw_rates))),
        comp_rate=float(np.median(np.concatenate(comp_rates))),
        n_splits_used=int(ex.size),
        median_eligible_pairs=float(np.median(np.concatenate(eligible_counts))),
    )


# ----------------------------------------------------------------------------- rescue and damage (ragscale 7)


@dataclass(frozen=True)
class RescueDamage:
    """Rescue is a share of ALL reader-row pairs, damage a share of raw-correct pairs.

    The denominators differ, so rescue - damage is not the accuracy change.
    """

    rescue: float | None
    damage: float | None
    n_pairs: int
    n_rescued: int
    n_raw_correct: int
    n_damaged: int


def rescue_damage(raw_correct: np.ndarray, comp_correct: np.ndarray) -> RescueDamage:
    """Answers compression fixes (raw wrong, comp right) and breaks (raw right, comp wrong)."""
    raw, comp = binary(raw_correct, "raw_correct"), binary(comp_correct, "comp_correct")
    if raw.shape != comp.shape:
        raise ValueError(f"raw_correct and comp_correct differ in shape: {raw.shape} vs {comp.shape}")
    n_pairs, n_raw_correct = int(raw.size), int(raw.sum())
    n_rescued, n_damaged = int((~raw & comp).sum()), int((raw & ~comp).sum())
    return RescueDamage(
        rescue=n_rescued / n_pairs if n_pairs else None,
        damage=n_damaged / n_raw_correct if n_raw_correct else None,
        n_pairs=n_pairs,
        n_rescued=n_rescued,
        n_raw_correct=n_raw_correct,
        n_damaged=n_damaged,
    )


def rescue_damage_per_reader(raw_correct: np.ndarray, comp_correct: np.ndarray) -> list[RescueDamage]:
    """:func:`rescue_damage` for each reader (row): readers reach similar averages by different paths."""
    raw, comp = np.asarray(raw_correct), np.asarray(comp_correct)
    if raw.ndim != 2 or raw.shape != comp.shape:
        raise ValueError(f"need two same-shape (readers x rows) matrices, got {raw.shape} and {comp.shape}")
    return [rescue_damage(raw[i], comp[i]) for i in range(raw.shape[0])]
