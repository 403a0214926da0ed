"""The three-reader screen and its minimum-audit validation against the broader panel (ragscale A.7,
Table 7).

The paper fixes the triplet choice and the four expansion triggers; kvx fixes what it leaves open
(docs/rag-audit-controls.md): every statistic of a split is computed on its scoring half for the
readers and pair orientations chosen on its selection half; "admissible" means |raw scoring-half
upgrade| >= the minimum gap; a triplet's missing endpoint retention or a split with no eligible
pair is a missing required estimate (expand). Pure numpy; undefined values are ``None``.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass

import numpy as np

from kvx.aggregate.ragscale.splits import pair_index
from kvx.aggregate.stats.releases import split_halves


def choose_triplet(means: np.ndarray, families: list[str]) -> tuple[int, int, int]:
    """(low, middle, high): the lowest and highest raw readers (ties: lower index) and the reader
    closest to their midpoint, preferring one whose family differs from both endpoints' families
    (ties: lower index). ``means`` are raw means; compressed scores never enter."""
    lows, highs, mids = triplets(means[:, None], families)
    return int(lows[0]), int(mids[0]), int(highs[0])


def triplets(means: np.ndarray, families: list[str]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """:func:`choose_triplet` for each column of ``means`` (readers x splits)."""
    m = means.shape[0]
    if m < 3:
        raise ValueError(f"a three-reader screen needs at least 3 readers, got {m}")
    low, high = np.argmin(means, axis=0), np.argmax(means, axis=0)
    cols = np.arange(means.shape[1])
    mid_value = (means[low, cols] + means[high, cols]) / 2
    distance = np.abs(means - mid_value)
    index = np.arange(m)[:, None]
    candidate = (index != low) & (index != high)
    codes = np.unique(np.asarray(families), return_inverse=True)[1][:, None]
    other = candidate & (codes != codes[low].T) & (codes != codes[high].T)
    preferred = np.where(other, distance, np.inf)
    fallback = np.where(candidate, distance, np.inf)
    mid = np.where(other.any(axis=0), np.argmin(preferred, axis=0), np.argmin(fallback, axis=0))
    return low, high, mid


@dataclass(frozen=True)
class ScreenValidation:
    """Per held-out split: does the triplet screen expand, does the broader panel?"""

    primary: tuple[int, int, int]  # the triplet chosen on all rows
    n_splits: int
    screen_expand_share: float
    panel_expand_share: float
    false_reassurance_share: float  # screen negative while the panel expands, over all splits
    false_reassurance_given_expand: float | None  # the same over splits where the panel expands
    n_triplets: int  # distinct ordered (low, middle, high) identities chosen
    false_triplets: int  # identities with at least one falsely reassuring split
    modal_triplet: tuple[int, int, int]
    modal_share: float
    n_panel_reversals: int  # broader-panel compressed reversals over all splits
    visible_share: float | None  # of those, the share whose two readers are both in the split's triplet


def _retention_fails(
    raw_up: np.ndarray, comp_up: np.ndarray, gap: float, floor: float
) -> tuple[np.ndarray, np.ndarray]:
    """(admissible, retention below ``floor``) of oriented upgrades; retention = comp / raw."""
    admissible = np.abs(raw_up) >= gap
    with np.errstate(divide="ignore", invalid="ignore"):
        low = admissible & (comp_up / raw_up < floor)
    return admissible, low


def validate_screen(
    raw: np.ndarray,
    comp: np.ndarray,
    families: list[str],
    n_splits: int,
    seed: int,
    min_gap: float = 0.05,
    retention_floor: float = 0.75,
    excess_limit: float = 0.05,
) -> ScreenValidation:
    """Run the three-reader screen and the same rule over every reader on each held-out split.

    A rule expands when endpoint retention or an admissible adjacent-pair retention (pairs
    consecutive in selection-half raw order; the triplet's two) is below ``retention_floor``, the
    split's excess flips (compressed minus raw reversal rate over its eligible pairs) exceed
    ``excess_limit``, an eligible pair reverses under compression, or a required estimate is
    missing (endpoint retention inadmissible, or no eligible pair)."""
    m, n = raw.shape
    first, second = pair_index(m)
    primary = choose_triplet(raw.mean(axis=1), families)
    half = n // 2
    screen_all, panel_all, identities, reversals, visible = [], [], [], 0, 0
    for select, _ in split_halves(n, n_splits, seed):
        s = select.shape[0]
        cols = np.arange(s)
        sums = raw @ select.T  # readers x splits
        sel = sums / half
        rs, cs = raw @ (1.0 - select).T / (n - half), comp @ (1.0 - select).T / (n - half)
        low, high, mid = triplets(sel, families)
        # every pair's orientation, eligibility and reversals on this split
        gap = sums[second] - sums[first]  # sums, not means: the same eligibility as excess_flips
        sign = np.sign(gap)
        eligible = np.abs(gap) / half >= min_gap
        raw_rev = eligible & (sign * (rs[second] - rs[first]) < 0)
        comp_rev = eligible & (sign * (cs[second] - cs[first]) < 0)
        in_trip = np.zeros((m, s), dtype=bool)
        in_trip[low, cols] = in_trip[mid, cols] = in_trip[high, cols] = True
        trip_pair = in_trip[first] & in_trip[second]
        verdicts = []
        for pairs_mask, adjacent in ((trip_pair, _triplet_adjacent(low, mid, high)), (None, _ordered(sel))):
            chosen = eligible if pairs_mask is None else eligible & pairs_mask
            k = chosen.sum(axis=0)
            comp_k = (comp_rev & chosen).sum(axis=0)
            raw_k = (raw_rev & chosen).sum(axis=0)
            with np.errstate(divide="ignore", invalid="ignore"):
                excess = (comp_k - raw_k) / k
            end_adm, end_low = _retention_fails(
                rs[high, cols] - rs[low, cols], cs[high, cols] - cs[low, cols], min_gap, retention_floor
            )
            adj_low = np.zeros(s, dtype=bool)
            for a, b in adjacent:
                _, fails = _retention_fails(
                    rs[b, cols] - rs[a, cols], cs[b, cols] - cs[a, cols], min_gap, retention_floor
                )
                adj_low |= fails
            missing = ~end_adm | (k == 0)
            verdicts.append(
                end_low | adj_low | (comp_k > 0) | (np.nan_to_num(excess, nan=0.0) > excess_limit) | missing
            )
        screen, panel = verdicts
        screen_all.append(screen)
        panel_all.append(panel)
        identities += list(zip(low.tolist(), mid.tolist(), high.tolist(), strict=True))
        reversals += int(comp_rev.sum())
        visible += int((comp_rev & trip_pair).sum())
    screen, panel = np.concatenate(screen_all), np.concatenate(panel_all)
    false = ~screen & panel
    counts = Counter(identities)
    modal, modal_n = counts.most_common(1)[0]
    false_ids = {identities[i] for i in np.flatnonzero(false)}
    return ScreenValidation(
        primary=primary,
        n_splits=int(screen.size),
        screen_expand_share=float(screen.mean()),
        panel_expand_share=float(panel.mean()),
        false_reassurance_share=float(false.mean()),
        false_reassurance_given_expand=float(false.sum() / panel.sum()) if panel.any() else None,
        n_triplets=len(counts),
        false_triplets=len(false_ids),
        modal_triplet=modal,
        modal_share=modal_n / len(identities),
        n_panel_reversals=reversals,
        visible_share=visible / reversals if reversals else None,
    )


def _triplet_adjacent(
    low: np.ndarray, mid: np.ndarray, high: np.ndarray
) -> list[tuple[np.ndarray, np.ndarray]]:
    """The triplet's adjacent pairs in raw order: low -> middle, middle -> high."""
    return [(low, mid), (mid, high)]


def _ordered(sel: np.ndarray) -> list[tuple[np.ndarray, np.ndarray]]:
    """Every reader's adjacent pairs in selection-half raw order (stable: ties by index)."""
    order = np.argsort(sel, axis=0, kind="stable")
    return [(order[i], order[i + 1]) for i in range(order.shape[0] - 1)]
