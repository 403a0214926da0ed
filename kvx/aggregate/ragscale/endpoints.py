"""Endpoint estimators of the reader-upgrade audit (ragscale Tables 2, 3, 8, 9 and 15; B.1, B.5).

The endpoint pair is the lowest and the highest raw-scoring reader; ties go to the reader whose
name sorts first (the release's ``replay_audit``: ``min`` over ``(mean, name)`` and ``(-mean, name)``),
which is the lower index here because panels hold readers in name order. An upgrade's ratio needs a
raw upgrade of at least ``min_gap`` (5 pp): ``raw >= min_gap`` on the selected pair, as the release's
``raw_span >= minimum_raw_gap``. Upgrades are compared as differences of row sums divided once by the
row count, so a binary gap of exactly 5 pp is not rounded below it.

Inputs are (readers x rows) score matrices; ``families`` has one label per reader.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from kvx.aggregate.stats.intervals import percentile_interval
from kvx.aggregate.stats.releases import family_row_draws, spans_families, split_halves

__all__ = [
    "EndpointBootstrap",
    "HeldOutEndpoints",
    "SwapDifference",
    "endpoint_bootstrap",
    "held_out_endpoints",
    "interval_label",
    "panel_floor",
    "swap_difference",
]


def _pick(means: np.ndarray, present: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
    """(lowest, highest) reader per column of ``means`` (readers x draws) among the present readers.

    np.argmin/argmax return the first index of a tie: the reader whose name sorts first."""
    if present is None:
        return np.argmin(means, axis=0), np.argmax(means, axis=0)
    low = np.argmin(np.where(present, means, np.inf), axis=0)
    high = np.argmax(np.where(present, means, -np.inf), axis=0)
    return low, high


def _at(values: np.ndarray, index: np.ndarray) -> np.ndarray:
    """values[index[k], k] for a (readers x draws) matrix."""
    return np.take_along_axis(values, index[None, :], axis=0)[0]


def interval_label(families: Sequence[str], fixed_pair: bool = False) -> str:
    """What an upgrade interval resampled, as the audit tables say it (column ``interval``)."""
    if fixed_pair:
        return "rows, fixed pair"
    if spans_families(families):
        return "family-by-row, endpoints re-selected"
    return "rows, endpoints re-selected (one family)"


# ----------------------------------------------------------------------------- Tables 2-3 (B.1)


@dataclass(frozen=True)
class EndpointBootstrap:
    """Intervals of the re-selected endpoint pair's raw and compressed upgrade and retention.

    Raw and compressed upgrade intervals use every draw; retention only draws whose raw upgrade
    reaches the gap. ``n_undefined`` counts the discarded draws (B.1: "discards one of 5,000")."""

    raw: tuple[float | None, float | None]
    comp: tuple[float | None, float | None]
    retention: tuple[float | None, float | None]
    n_undefined: int
    n_draws: int
    label: str


def _draw_sums(scores: np.ndarray, rows: np.ndarray) -> np.ndarray:
    """Row sums of every reader in every draw: (readers x draws)."""
    return scores @ rows.T


def endpoint_bootstrap(
    raw: np.ndarray,
    comp: np.ndarray,
    families: Sequence[str],
    n_boot: int = 2000,
    seed: int = 0,
    min_gap: float = 0.05,
) -> EndpointBootstrap:
    """Family-by-row bootstrap of the endpoint upgrade, re-selecting the endpoints inside each draw.

    A draw resamples families and rows (:func:`~kvx.aggregate.stats.releases.family_row_draws`),
    then picks the lowest and highest raw reader among the readers it holds, on its rows. A reader
    drawn twice (its family drawn twice) is one candidate: its copies have the same mean, so the
    extremes are the same readers and only distinct readers can pair; a draw holding one distinct
    reader has no pair, a raw upgrade of 0 and is discarded. With one family this is a row bootstrap
    with re-selection (``label`` says which)."""
    r, c = np.asarray(raw, dtype=float), np.asarray(comp, dtype=float)
    n = r.shape[1]
    ups_raw, ups_comp = [], []
    for rows, readers in family_row_draws(n, families, n_boot, seed):
        sums_raw = _draw_sums(r, rows)
        low, high = _pick(sums_raw, readers.T > 0)
        ups_raw.append((_at(sums_raw, high) - _at(sums_raw, low)) / n)
        sums_comp = _draw_sums(c, rows)
        ups_comp.append((_at(sums_comp, high) - _at(sums_comp, low)) / n)
    up_raw, up_comp = np.concatenate(ups_raw), np.concatenate(ups_comp)
    defined = up_raw >= min_gap
    return EndpointBootstrap(
        raw=percentile_interval(up_raw),
        comp=percentile_interval(up_comp),
        retention=percentile_interval(up_comp[defined] / up_raw[defined]),
        n_undefined=int((~defined).sum()),
        n_draws=int(up_raw.size),
        label=interval_label(families),
    )


# ----------------------------------------------------------------------------- Table 8 (B.1)


@dataclass(frozen=True)
class HeldOutEndpoints:
    """Endpoints chosen on one row half, scored on the other, both orientations of every split.

    ``retention`` is the median held-out retention over valid orientations (held-out raw upgrade
    >= gap) with its 2.5-97.5 percentile range; ``valid_share`` = valid / orientations;
    ``n_pairs`` distinct (low, high) pairs selected; ``modal_pair`` (reader indices) the most
    often selected one (ties: the first in (low, high) order) and ``modal_share`` its share of all
    orientations."""

    retention: float | None
    low: float | None
    high: float | None
    n_orientations: int
    n_valid: int
    valid_share: float
    n_pairs: int
    modal_pair: tuple[int, int] | None
    modal_share: float | None


def held_out_endpoints(
    raw: np.ndarray, comp: np.ndarray, n_splits: int = 5000, seed: int = 0, min_gap: float = 0.05
) -> HeldOutEndpoints:
    """Selection-sensitivity of the endpoint retention (B.1, Table 8): split rows in halves (the
    release's split rule), choose the raw endpoints on one half and score that pair on the other,
    then the other way round. A selection half on which every reader ties gives no pair (invalid).
    These are split-sensitivity ranges of the fixed panel, not population intervals."""
    r, c = np.asarray(raw, dtype=float), np.asarray(comp, dtype=float)
    n = r.shape[1]
    ratios, pairs, n_valid, total = [], Counter[tuple[int, int]](), 0, 0
    for first, second in split_halves(n, n_splits, seed):
        for select, score in ((first, second), (second, first)):
            low, high = _pick(r @ select.T)
            size = score[0].sum()
            sums_raw, sums_comp = r @ score.T, c @ score.T
            up_raw = (_at(sums_raw, high) - _at(sums_raw, low)) / size
            up_comp = (_at(sums_comp, high) - _at(sums_comp, low)) / size
            valid = (up_raw >= min_gap) & (low != high)
            ratios.append(up_comp[valid] / up_raw[valid])
            n_valid += int(valid.sum())
            total += low.size
            paired = low != high
            pairs.update(zip(low[paired].tolist(), high[paired].tolist(), strict=True))
    values = np.concatenate(ratios)
    low_q, high_q = percentile_interval(values)
    modal = min(pairs.items(), key=lambda item: (-item[1], item[0])) if pairs else None
    return HeldOutEndpoints(
        retention=float(np.median(values)) if values.size else None,
        low=low_q,
        high=high_q,
        n_orientations=total,
        n_valid=n_valid,
        valid_share=n_valid / total,
        n_pairs=len(pairs),
        modal_pair=modal[0] if modal else None,
        modal_share=modal[1] / total if modal else None,
    )


# ----------------------------------------------------------------------------- Table 9 (B.1)


def panel_floor(raw: np.ndarray, comp: np.ndarray) -> dict[str, float]:
    """Unweighted panel means (the mean of the reader means) and the full reader range (highest minus
    lowest reader mean) under raw and compressed evidence (Table 9). The compressed range is taken
    over all readers, whoever is highest: it is not the endpoint pair's compressed upgrade."""
    raw_means, comp_means = np.asarray(raw, float).mean(axis=1), np.asarray(comp, float).mean(axis=1)
    return {
        "raw_mean": float(raw_means.mean()),
        "comp_mean": float(comp_means.mean()),
        "raw_range": float(raw_means.max() - raw_means.min()),
        "comp_range": float(comp_means.max() - comp_means.min()),
    }


# ----------------------------------------------------------------------------- Table 15 (B.5)


@dataclass(frozen=True)
class SwapDifference:
    """Retention of an evidence swap minus that of a compression, both from one shared reference.

    Point values use the reference endpoints on all rows; ``low``/``high`` the percentile interval of
    the difference over draws whose reference upgrade reaches the gap (``n_undefined`` the others)."""

    swap_retention: float | None
    comp_retention: float | None
    difference: float | None
    low: float | None
    high: float | None
    n_undefined: int
    n_draws: int
    label: str


def swap_difference(
    reference: np.ndarray,
    swap: np.ndarray,
    comp: np.ndarray,
    families: Sequence[str],
    n_boot: int = 2000,
    seed: int = 0,
    min_gap: float = 0.05,
) -> SwapDifference:
    """Paired family-by-row bootstrap of retention(swap) - retention(compression) (B.5, Table 15).

    Both interventions start from the same ``reference`` scores (readers x rows: in the paper BM25
    raw evidence, which the retriever swap replaces by dense retrieval and SIEVE compresses). Each
    draw resamples families and rows once, selects the endpoints once on the reference, and divides
    both interventions' upgrades of that pair by its reference upgrade: the difference is
    (swap upgrade - compressed upgrade) / reference upgrade."""
    ref, sw, cp = (np.asarray(m, dtype=float) for m in (reference, swap, comp))
    n = ref.shape[1]
    low, high = _pick(ref.sum(axis=1)[:, None])
    up_ref = float(ref[high[0]].sum() - ref[low[0]].sum()) / n
    defined = up_ref >= min_gap
    ret_swap = float(sw[high[0]].mean() - sw[low[0]].mean()) / up_ref if defined else None
    ret_comp = float(cp[high[0]].mean() - cp[low[0]].mean()) / up_ref if defined else None
    diffs, undefined = [], 0
    for rows, readers in family_row_draws(n, families, n_boot, seed):
        sums = ref @ rows.T
        lo, hi = _pick(sums, readers.T > 0)
        up = (_at(sums, hi) - _at(sums, lo)) / n
        ok = up >= min_gap
        undefined += int((~ok).sum())
        sums_swap, sums_comp = sw @ rows.T, cp @ rows.T
        up_swap = (_at(sums_swap, hi) - _at(sums_swap, lo)) / n
        up_comp = (_at(sums_comp, hi) - _at(sums_comp, lo)) / n
        diffs.append((up_swap[ok] - up_comp[ok]) / up[ok])
    d_low, d_high = percentile_interval(np.concatenate(diffs))
    return SwapDifference(
        swap_retention=ret_swap,
        comp_retention=ret_comp,
        difference=None if ret_swap is None or ret_comp is None else ret_swap - ret_comp,
        low=d_low,
        high=d_high,
        n_undefined=undefined,
        n_draws=n_boot,
        label=interval_label(families),
    )
