"""The resampling streams that must give a paper's release to the last bit.

Each function follows one function of a public release, named in its docstring, and a test pins it
to the bit (``tests/aggregate/stats/test_stats_releases.py``, ``test_ragscale_release.py``,
``test_tpbench_gaps.py``); change none of them without a pin that still passes.

- ragscale (``github.com/aimsresearchlab/ragscale``, commit 5c65b09): :func:`split_halves` is the
  split rule of ``src/ragscale/replay.py`` ``replay_audit``; :func:`upgrade_interval` is
  ``src/ragscale/analysis.py`` ``bootstrap_pair``; :func:`family_row_draws` is the paper's
  family-by-row resampling (section 4, "Scores and uncertainty"), which the release's code does not
  implement (it draws rows only), so its draw order is kvx's and pinned here.
- TPBench (``github.com/kentech-sail/TPBench``, commit 1e16964): :func:`seed_weighted_interval` is
  ``scripts/reader_evaluation/score_answers.py`` ``cluster_interval``.
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from functools import lru_cache

import numpy as np
import pandas as pd

from kvx.aggregate.stats.inputs import BLOCK_CELLS, check_bootstrap, paired_panels
from kvx.aggregate.stats.intervals import percentile_interval

__all__ = [
    "CHUNK",
    "KEPT_CELLS",
    "TPBENCH_BOOT_SEED",
    "TPBENCH_N_BOOT",
    "UpgradeInterval",
    "family_row_draws",
    "seed_weighted_interval",
    "spans_families",
    "split_halves",
    "upgrade_interval",
]

#: draws or splits per vectorized block (memory: CHUNK x rows floats per array)
CHUNK = 512
#: the largest draw set kept for the next interval: 64 MiB of int32 row counts (5,000 draws x 3,355 rows)
KEPT_CELLS = 1 << 24
#: TPBench's paired dialogue bootstrap (``score_answers.py``, ``audit_p3_segments.py``): draws and seed
TPBENCH_N_BOOT = 5000
TPBENCH_BOOT_SEED = 20260928


# ----------------------------------------------------------------------------- ragscale: row splits


def split_halves(n_rows: int, n_splits: int, seed: int) -> Iterator[tuple[np.ndarray, np.ndarray]]:
    """Blocks of (first-half, second-half) 0/1 row masks (splits x rows), ragscale's split rule.

    Release: ``src/ragscale/replay.py`` ``replay_audit``. ``rng = np.random.default_rng(seed)``; split
    ``k`` is the ``k``-th ``rng.permutation(n_rows)``, its first ``n_rows // 2`` entries the selection
    half and the rest the scoring half. Every split-based estimate of the audit (excess flips, nulls,
    resolution, held-out endpoints, disjoint rows) sees these splits in this order."""
    if n_splits < 1:
        raise ValueError(f"n_splits must be >= 1, got {n_splits}")
    if n_rows < 2:
        raise ValueError(f"need at least 2 rows to split, got {n_rows}")
    rng = np.random.default_rng(seed)
    half = n_rows // 2
    for start in range(0, n_splits, CHUNK):
        size = min(CHUNK, n_splits - start)
        perms = np.stack([rng.permutation(n_rows) for _ in range(size)])
        first = np.zeros((size, n_rows))
        np.put_along_axis(first, perms[:, :half], 1.0, axis=1)
        yield first, 1.0 - first


# ----------------------------------------------------------------------------- ragscale: family-by-row draws


def spans_families(families: Sequence[str]) -> bool:
    """Whether family resampling applies: with one family it is the identity and only rows are drawn."""
    return len(set(families)) > 1


def family_row_draws(
    n_rows: int, families: Sequence[str], n_boot: int, seed: int
) -> Iterator[tuple[np.ndarray, np.ndarray]]:
    """Blocks of (row counts (draws x rows), reader counts (draws x readers)) for ``n_boot`` draws.

    The ragscale paper's family-by-row interval (section 4, "Scores and uncertainty"): a draw resamples
    rows (questions) with replacement and, when the panel spans several families, reader families with
    replacement too; a drawn family brings all of its readers, so a family drawn twice puts each of its
    readers in the draw twice. ``rng = np.random.default_rng(seed)``; draw ``k`` calls
    ``rng.integers(0, n_rows, n_rows)`` and then, with several families,
    ``rng.integers(0, n_families, n_families)`` over the sorted family labels. With a single family
    every reader is in every draw once (rows only, the stream of ``bootstrap_pair``'s row draws), so
    every family-by-row interval of a panel (retention, EIV, slope, headroom) sees the same resamples.

    Draws are returned as counts, so estimators stay vectorized: ``rows[k, i]`` is how often row ``i``
    is in draw ``k`` and ``readers[k, r]`` how often reader ``r`` is. The blocks of the last request up
    to ``KEPT_CELLS`` row counts are kept (read-only), so the several intervals of one panel draw once."""
    if n_boot < 1:
        raise ValueError(f"n_boot must be >= 1, got {n_boot}")
    # one family draws rows only, whatever its name: one cache entry for every such panel of a size
    key = tuple(families) if spans_families(families) else ("",) * len(families)
    if n_boot * n_rows > KEPT_CELLS:
        yield from _draws.__wrapped__(n_rows, key, n_boot, seed)
    else:
        yield from _draws(n_rows, key, n_boot, seed)


@lru_cache(maxsize=1)
def _draws(
    n_rows: int, families: tuple[str, ...], n_boot: int, seed: int
) -> list[tuple[np.ndarray, np.ndarray]]:
    labels = np.asarray(families)
    rng = np.random.default_rng(seed)
    by_family = spans_families(families)
    names = sorted(set(families))
    family_of = np.searchsorted(names, labels)  # each reader's family index
    blocks = []
    for start in range(0, n_boot, CHUNK):
        size = min(CHUNK, n_boot - start)
        rows = np.empty((size, n_rows), dtype=np.int32)
        readers = np.ones((size, labels.size), dtype=np.int32)
        for k in range(size):
            rows[k] = np.bincount(rng.integers(0, n_rows, n_rows), minlength=n_rows)
            if by_family:
                drawn = np.bincount(rng.integers(0, len(names), len(names)), minlength=len(names))
                readers[k] = drawn[family_of]
        rows.flags.writeable = readers.flags.writeable = False
        blocks.append((rows, readers))
    return blocks


# ----------------------------------------------------------------------------- ragscale: bootstrap_pair


@dataclass(frozen=True)
class UpgradeInterval:
    """Row-bootstrap intervals of a reader pair's raw and compressed upgrade and its retention."""

    raw: tuple[float, float]
    comp: tuple[float, float]
    retention: tuple[float | None, float | None]
    n_undefined: int  # draws whose raw upgrade fell below the floor: retention undefined, not replaced


def upgrade_interval(
    raw: np.ndarray,
    comp: np.ndarray,
    n_boot: int = 2000,
    seed: int = 0,
    level: float = 0.95,
    floor: float = 0.05,
) -> UpgradeInterval:
    """Resample rows jointly for a pair's (2 x rows) raw and compressed scores, reader a then b.

    Release: ``src/ragscale/analysis.py`` ``bootstrap_pair``. ``rng = default_rng(seed)``, then for
    each draw ``rng.integers(0, n, size=n)`` row indices, one call per draw (a single call for all
    draws would consume the stream differently); the upgrades are the mean of b - a over the drawn
    rows; retention uses only draws with |raw upgrade| >= ``floor``; percentiles 2.5 and 97.5
    (:func:`~kvx.aggregate.stats.intervals.percentile_interval`). The same seed gives the release's
    intervals to the bit.
    """
    r, c = paired_panels(raw, comp, ("raw", "comp"))
    if r.shape[0] != 2:
        raise ValueError(f"an upgrade needs exactly 2 readers, got {r.shape[0]}")
    check_bootstrap(n_boot, level)
    n = r.shape[1]
    rng = np.random.default_rng(seed)
    d_raw, d_comp = r[1] - r[0], c[1] - c[0]
    up_raw, up_comp = np.empty(n_boot), np.empty(n_boot)
    block = max(1, BLOCK_CELLS // n)
    for start in range(0, n_boot, block):
        size = min(block, n_boot - start)
        picks = np.stack([rng.integers(0, n, size=n) for _ in range(size)])
        # a row mean over the contiguous axis sums as np.mean of one draw does (pairwise)
        up_raw[start : start + size] = d_raw[picks].mean(axis=1)
        up_comp[start : start + size] = d_comp[picks].mean(axis=1)
    defined = np.abs(up_raw) >= floor
    ratio = up_comp[defined] / up_raw[defined]
    return UpgradeInterval(
        raw=percentile_interval(up_raw, level),
        comp=percentile_interval(up_comp, level),
        retention=percentile_interval(ratio, level),
        n_undefined=int((~defined).sum()),
    )


# ----------------------------------------------------------------------------- TPBench: cluster_interval


def seed_weighted_interval(
    values: np.ndarray | pd.Series,
    seeds: np.ndarray | pd.Series,
    clusters: np.ndarray | pd.Series,
    n_boot: int = TPBENCH_N_BOOT,
    seed: int = TPBENCH_BOOT_SEED,
    level: float = 0.95,
) -> tuple[float, float, float]:
    """(estimate, low, high): the mean of the per-seed means and its percentile interval from
    resampling clusters (dialogues) with replacement.

    Release: ``scripts/reader_evaluation/score_answers.py`` ``cluster_interval``. Each value weighs
    1/(values of its seed), a cluster carries its weighted sum and its weight, and a resample's estimate
    is the ratio of the drawn sums; the clusters are drawn as
    ``default_rng(20260928).integers(K, size=(5000, K))`` and the interval is
    ``np.quantile(boot, [.025, .975])``. The release indexes clusters in the order its rows first name
    them, kvx in sorted order (an interval that does not depend on row order): on rows sorted by
    cluster the two are the same to the bit. NaN values are left out; NaNs with none.
    """
    check_bootstrap(n_boot, level)
    v = np.asarray(values, dtype=float)
    keep = np.isfinite(v)
    if not keep.any():
        return math.nan, math.nan, math.nan
    frame = pd.DataFrame(
        {
            "v": v[keep],
            "seed": np.asarray(seeds, dtype=object)[keep],
            "cluster": np.asarray(clusters, dtype=object)[keep].astype(str),
        }
    )
    w = (1.0 / frame.groupby("seed")["v"].transform("size")).to_numpy()
    # each cluster's sums added up row by row (the release's ``+=``; pandas' group sums are compensated,
    # which differs in the last bits), over the rows in cluster order: the result does not depend on
    # the order the rows came in
    order = np.argsort(frame["cluster"].to_numpy(), kind="stable")
    names, codes = np.unique(frame["cluster"].to_numpy()[order], return_inverse=True)
    sums, weights = np.zeros(len(names)), np.zeros(len(names))
    np.add.at(sums, codes, w[order] * frame["v"].to_numpy()[order])
    np.add.at(weights, codes, w[order])
    draws = np.random.default_rng(seed).integers(len(names), size=(n_boot, len(names)))
    # (K, 2) summed over the drawn axis, as the release does: numpy adds a strided axis row by row, a
    # contiguous one pairwise, and the two differ in the last bits
    drawn = np.stack([sums, weights], axis=1)[draws].sum(axis=1)
    low, high = percentile_interval(drawn[:, 0] / drawn[:, 1], level)
    return float(sums.sum() / weights.sum()), low, high
