"""Seeded row halves and the per-split pair replay shared by ragscale's audit controls (A.5-A.7).

Split ``k`` is the ``k``-th ``rng.permutation(n_rows)`` of ``np.random.default_rng(seed)``; its first
``n_rows // 2`` entries are the selection half and the rest the scoring half. This is the release's
rule (aimsresearchlab/ragscale ``replay.py``) and the one ``stats.excess_flips`` uses, so a control run
with the primary seed sees the same halves as the excess-flip replay.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


def pair_index(n_readers: int) -> tuple[np.ndarray, np.ndarray]:
    """(first, second) reader indices of every unordered pair, first < second."""
    return np.triu_indices(n_readers, k=1)


@dataclass(frozen=True)
class SplitReplay:
    """Per-split rates over raw-separated pairs (splits without one are dropped: ``used``)."""

    raw_rate: np.ndarray  # raw scoring-half reversals / eligible
    comp_rate: np.ndarray  # compressed scoring-half reversals / eligible
    both_rate: np.ndarray  # compressed reversals on BOTH halves / eligible
    eligible: np.ndarray  # eligible pairs per used split


def replay(raw: np.ndarray, comp: np.ndarray, select: np.ndarray, min_gap: float) -> SplitReplay:
    """Reversal rates of raw-separated pairs on each split of ``select`` (splits x rows).

    ``comp`` is (readers x rows) or a stack (draws x readers x rows) of compressed panels sharing the
    raw panel; rates then have shape (draws x used splits). A pair is eligible when its raw
    selection-half mean difference is at least ``min_gap`` in magnitude; oriented by that sign, it
    reverses on a half when the difference there has the opposite strict sign (a tie is not a
    reversal). Both-halves: the compressed difference opposes the raw orientation on the selection
    AND the scoring half (ragscale A.6). Sums, not means, are compared, as ``stats.excess_flips`` does.
    """
    first, second = pair_index(raw.shape[0])
    half = raw.shape[1] // 2
    score = 1.0 - select
    sel_sums = raw @ select.T  # readers x splits
    gap = sel_sums[second] - sel_sums[first]  # pairs x splits
    eligible = np.abs(gap) / half >= min_gap
    sign = np.sign(gap)
    raw_score = raw @ score.T
    raw_rev = eligible & (sign * (raw_score[second] - raw_score[first]) < 0)
    k = eligible.sum(axis=0)
    used = k > 0
    stack = comp[None] if comp.ndim == 2 else comp
    comp_sel, comp_score = stack @ select.T, stack @ score.T  # draws x readers x splits
    comp_rev = eligible & (sign * (comp_score[:, second] - comp_score[:, first]) < 0)
    both = comp_rev & (sign * (comp_sel[:, second] - comp_sel[:, first]) < 0)
    rates = SplitReplay(
        raw_rate=np.broadcast_to(raw_rev.sum(axis=0)[used] / k[used], (stack.shape[0], int(used.sum()))),
        comp_rate=comp_rev.sum(axis=1)[:, used] / k[used],
        both_rate=both.sum(axis=1)[:, used] / k[used],
        eligible=k[used],
    )
    if comp.ndim == 2:
        return SplitReplay(rates.raw_rate[0], rates.comp_rate[0], rates.both_rate[0], rates.eligible)
    return rates
